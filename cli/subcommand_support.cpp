#include "cli/subcommand_support.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/subcommands.h"
#include "common/endpoint.h"
#include "report/format.h"

namespace hpctune::cli {
namespace {

std::atomic<int> g_interrupts{0};
std::atomic<int> g_first_signal{0};  // the signal that interrupted us: SIGINT or SIGTERM

// First Ctrl-C (or SIGTERM): the master stops dispatch, records running trials as interrupted and
// exits 130 (143 after SIGTERM: 128 + the signal, the shell's convention). A second Ctrl-C exits
// at once; the groups die with us (PR_SET_PDEATHSIG).
void on_signal(int sig) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  if (g_interrupts.fetch_add(1) >= 1 && sig == SIGINT) _exit(kExitInterrupted);
}

// SIGUSR1: SLURM's warning before pre-emption or the time limit (the batch script asks for it
// with --signal=B:USR1@<signal_before>). `run` and `resume` stop dispatching, record running trials
// as interrupted and, when resources.slurm.requeue, requeue the job (MasterOptions::preempt).
std::atomic<int> g_preempt{0};
void on_preempt(int) { g_preempt.store(1); }

}  // namespace

bool Subcommand::chosen() const { return static_cast<bool>(*command_); }

CLI::Validator not_empty(const std::string& instead) {
  return CLI::Validator(
      [instead](std::string& value) {
        return value.empty() ? "the value is empty (leave the option out to " + instead + ")" : std::string();
      },
      "");
}

Result<int64_t> dashboard_port(const std::string& text) {
  if (text.empty()) return int64_t{8080};
  return parse_integer<int64_t>("--dashboard-port", text, 0, 65535);
}

Status check_bind(const std::string& address) {
  if (auto problem = endpoint_problem(address)) return err(Errc::kUsage, "--bind: " + *problem);
  return Status::Ok();
}

Status check_master_address(const std::string& address) {
  const std::string forms = "expected tcp://HOST:PORT (PORT 1..65535) or ipc://PATH";
  if (address.empty()) return err(Errc::kUsage, "--master: the address is empty; " + forms);
  for (char c : address) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return err(Errc::kUsage, "--master: '" + address + "' holds a control character; " + forms);
    }
  }
  if (address.rfind("ipc://", 0) == 0) {
    if (address.size() == 6 || address == "ipc://*") {
      return err(Errc::kUsage, "--master: '" + address + "' names no socket; " + forms);
    }
    return {};
  }
  if (address.rfind("tcp://", 0) != 0) {
    return err(Errc::kUsage, "--master: '" + address + "' is not a tcp:// or ipc:// address; " + forms);
  }
  const std::string rest = address.substr(6);
  const size_t colon = rest.rfind(':');
  const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
  if (host.empty() || host == "*") return err(Errc::kUsage, "--master: '" + address + "' names no host; " + forms);
  const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return err(Errc::kUsage, "--master: port '" + port + "' of '" + address + "' is not 1..65535; " + forms);
  }
  return {};
}

Status check_db_path(const std::string& option, const std::string& path) {
  if (path.empty()) return err(Errc::kUsage, option + ": the database path is empty");
  if (path == ":memory:" || path.rfind("file:", 0) == 0 || path.find("://") != std::string::npos) {
    return err(Errc::kUsage, option + ": '" + path + "' is not a file path; the campaign must be kept in a file");
  }
  if (path.back() == '/') return err(Errc::kUsage, option + ": '" + path + "' names a directory, not a database file");
  return {};
}

Result<double> parse_seconds(const char* flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v >= 0) || v > 365.0 * 86400) {
    return err(Errc::kUsage, std::string(flag) + ": '" + text + "' is not a number of seconds in [0, 31536000]");
  }
  return v;
}

int report(const Status& status, const char* what) {
  if (status.ok()) return kExitOk;
  std::fflush(stdout);
  // An error may quote a trainer's output (the first failure, a group's log tail): escaped.
  std::fprintf(stderr, "hpctune %s: error: %s\n", what, hpctune::report::terminal_safe(status.error().to_string()).c_str());
  return exit_code_for(status.error());
}

std::atomic<int>& interrupts() { return g_interrupts; }
const std::atomic<int>& preempt_requested() { return g_preempt; }

int interrupted_exit_code() { return g_first_signal.load() == SIGTERM ? kExitTerminated : kExitInterrupted; }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction usr1 {};
  usr1.sa_handler = on_preempt;
  sigemptyset(&usr1.sa_mask);
  sigaction(SIGUSR1, &usr1, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace hpctune::cli
