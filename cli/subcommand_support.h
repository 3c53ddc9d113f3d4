// What the subcommands of cli/subcommands_*.cpp share (internal to cli/): the checks of option
// values CLI11 cannot make, the exit code and message of a Status, and the state main's signal
// handlers set.
#pragma once

#include <atomic>
#include <charconv>
#include <cstdint>
#include <string>

#include "common/result.h"

namespace CLI {
class Validator;
}

namespace hpctune::cli {

// For an option whose value "" would read as "not given" (its default: a generated token, standard
// output, this program, ...): an explicitly empty value is refused, a usage error (exit 2) naming
// the option, with `instead` (what leaving the option out does). `cmd.add_option(...)->check(not_empty("..."))`.
CLI::Validator not_empty(const std::string& instead);

// A count or seed given on the command line: decimal digits only (no sign, exponent, hex or
// spaces), within [min, max]. CLI11's own conversion takes "-1", "2^64" or "1e23" for an unsigned
// option and wraps them, so numbers are read as text and checked here.
template <typename T>
Result<T> parse_integer(const std::string& option, const std::string& text, T min, T max) {
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  T value{};
  const char* end = text.data() + text.size();
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) return err(Errc::kUsage, option + ": '" + text + "' is not a decimal integer (expected " + range + ")");
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < min || value > max) {
    return err(Errc::kUsage, option + ": " + text + " is out of range (expected " + range + ")");
  }
  return value;
}

// --dashboard-port: 0..65535 ("" = 8080), else a usage error.
Result<int64_t> dashboard_port(const std::string& text);

// --bind: an address the master can listen on (common/endpoint.h), else a usage error.
Status check_bind(const std::string& address);

// worker --master: an address a worker can connect to, tcp://HOST:PORT (PORT 1..65535; no * for the
// host or port, which only a bind takes) or ipc://PATH, else a usage error. The host is left to the
// resolver (the master hands over what its socket reports, IPv6 zones included).
Status check_master_address(const std::string& address);

// A database path for `run` and `resume`: a file. ":memory:" would run the whole campaign and
// throw it away, and SQLite URIs ("file:...?mode=...") would bypass the lock next to the file.
Status check_db_path(const std::string& option, const std::string& path);

// A number of seconds in [0, 365 days] given to `flag` (`simulate`'s times), else a usage error.
Result<double> parse_seconds(const char* flag, const std::string& text);

// The exit code of `status` (exit_code_for); when it is an error, its message on stderr first:
// "hpctune <what>: error: ...".
int report(const Status& status, const char* what);

// Ctrl-C, SIGTERM (SIGINT/SIGTERM: their count) and SIGUSR1 (SLURM's warning before pre-emption),
// as main's handlers (install_signal_handlers) record them.
std::atomic<int>& interrupts();
const std::atomic<int>& preempt_requested();
// The exit code of a run that ended because we were interrupted: 130 after SIGINT, 143 after SIGTERM.
int interrupted_exit_code();
void install_signal_handlers();

}  // namespace hpctune::cli
