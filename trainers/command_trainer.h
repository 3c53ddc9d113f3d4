// The `command` trainer: runs a user's program for each trial and relays what it reports.
//
// Protocol (documented for users in README.md, "Bring your own training script"):
//   - The command line is a template. `{name}` is replaced by the trial's parameter `name` (then,
//     for names that are not parameters, by trial_id, trial_dir, attempt, seed or ranks); strings
//     as they are, numbers in JSON notation, lists and objects as compact JSON. A value with
//     characters outside [A-Za-z0-9_.,:/=+@%-] is single-quoted for the shell. `{{` and `}}` are
//     literal braces. An unknown name or a malformed placeholder is kInvalidArgument naming it.
//     A placeholder where the shell would read its value again (inside quotes, backticks or $(...),
//     in a comment or a here-document, in the code of eval, sh -c, python -c, ...) is refused by
//     parse_command_settings and by the config check (common/shell_template.h).
//   - The result runs under `/bin/sh -c` (pipes, `&&`, `cd dir && ...` work). A simple command
//     (no shell operators, no leading VAR=value) is prefixed with `exec`, so that the program is
//     the shell's replacement: it is then the direct child, gets SIGTERM itself and dies with the
//     worker (PR_SET_PDEATHSIG) even if the worker is SIGKILLed. Split argv was rejected because
//     users write shell command lines, and the shell quoting of every value keeps them safe.
//   - Environment: the worker's, plus HPCTUNE_PARAMS (the parameters as a JSON object),
//     HPCTUNE_TRIAL_ID, HPCTUNE_TRIAL_DIR, HPCTUNE_ATTEMPT, HPCTUNE_SEED, HPCTUNE_THREADS (ctx.threads,
//     also OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS where the worker's environment
//     does not set them), then `env` (which wins). The checkpoint side (checkpoint_env in
//     command_trainer.cpp): HPCTUNE_CHECKPOINT_DIR (<trial dir>/checkpoint, kept across the trial's
//     attempts), HPCTUNE_RESUME_FROM (that directory when an earlier attempt left something in it,
//     else the snapshot a pbt stage chose, else unset) and HPCTUNE_MAX_STEP (the setting max_step,
//     when > 0; a pbt stage sets it per interval; left out of HPCTUNE_PARAMS). {max_step} and
//     {checkpoint_dir} are placeholders too. A program saves its checkpoint for a step before it
//     reports that step: a pbt stage pauses the trial on the report (SIGTERM).
//     The working directory is `workdir` ("" = the worker's).
//   - A line on standard output that ends with `hpctune-report {json}` (from its last prefix; what
//     comes before is other output, such as a progress bar left without a line end) is a report: a
//     JSON object whose "step" (an integer >= 0; absent = the previous step + 1) is the step and
//     whose other members are the metrics, all numbers. It reaches ctx.report(). A malformed report line (bad JSON, not an
//     object, a non-numeric metric, no metric) is written to the trial's stdout.log after a
//     "hpctune: warning" line and otherwise ignored. Every other line goes to stdout.log, and
//     standard error to stderr.log, both in <trial dir>/attempt-<n>/ (HPCTUNE_ATTEMPT_DIR; the
//     trial directory is a temporary one, removed at the end, when ctx.trial_dir is ""). Each log
//     keeps at most `log_limit` bytes: the first half, a line saying how many bytes were cut, and
//     the last half.
//   - End: exit code 0 completes the trial with the last report's metrics plus `train_seconds`.
//     Any other exit is kFailed "command failed: exit code 3" with the last kStderrTailLines lines
//     of standard error. A stop request sends SIGTERM to the process group, SIGKILL after `grace`
//     seconds, and returns stopped = true with the last metrics. Past `timeout` seconds the same
//     termination happens and the result is kTimeout naming the timeout.
//   - ctx.ranks > 1: the command runs as `mpirun -np <ranks> --bind-to none --oversubscribe
//     --tag-output [--allow-run-as-root] /bin/sh -c <command>`; only report lines tagged as rank 0
//     count, and the ranks' other lines are logged with their tags. A build without MPI (or without
//     mpirun) answers kUnavailable. Every rank (and a single one) gets MASTER_ADDR, MASTER_PORT,
//     WORLD_SIZE, RANK, LOCAL_RANK and LOCAL_WORLD_SIZE (rank_environment.h): under mpirun a
//     fixed sh script runs first in each rank (mpirun ... /bin/sh -c <script> hpctune-rank
//     /bin/sh -c <command>).
//   - trainer.persistent: one program serves the group's successive trials (per worker process:
//     CommandPrograms, kept in TrainerServices), so that its start (Python, `import torch`) is paid
//     once. The template then holds only values fixed for the program's life ({ranks}). The
//     program is started with the first trial's environment, plus HPCTUNE_CONTROL (a Unix socket
//     in a fresh 0700 directory of this user's) and HPCTUNE_CONTROL_TOKEN; each rank's helper
//     (tools/python/hpctune_report.py, hp.trials()) connects and sends {"token", "rank"}; a
//     connection without the token, or from another user (SO_PEERCRED), is closed. Each trial is a
//     line {"trial", "attempt", "env", "unset"} on every connection (the trial's HPCTUNE_*
//     variables); each rank ends it with a line `hpctune-trial-end {"trial", "attempt"}` on
//     standard output after its reports, and the next trial is sent once every rank has. A stop is a line {"stop", "attempt"} and SIGUSR1 to each
//     connected process (its handler only sets a flag); past `grace` the program is killed. A
//     program that never connected is stopped with SIGTERM and ends its trial by exiting, as
//     without persistent. A program killed by a signal during a trial (not by hpctune) is replaced
//     and the attempt runs again, once. Each trial's lines go to its attempt's logs. A trial's
//     attempt fence (launch/attempt_fence.h) records the program while the trial runs and is
//     removed when it ends, so that no finished trial's fence reaches the program later.
// Output pipes are read with poll() in slices of at most kSliceMs, so stop requests, the timeout
// and the grace period are all honoured without blocking on the program; ctx.stop_fd, when set,
// wakes the poll at once on a stop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

inline constexpr int64_t kDefaultLogLimit = 10'000'000;  // 10 MB per log

struct CommandSettings {
  std::string command;                     // the template (the list form: its items as JSON, for messages)
  std::vector<std::string> argv;           // the list form: each item one argument, no shell; empty: a string
  double timeout = 0.0;                    // seconds, 0 = none
  std::string workdir;                     // "" = the worker's
  std::map<std::string, std::string> env;  // added to the environment, last
  double grace = 5.0;                      // seconds between SIGTERM and SIGKILL
  int64_t log_limit = kDefaultLogLimit;    // bytes kept of each log (head and tail halves), 0 = all
  bool persistent = false;                 // one program serves the trials (see the top of this file)
};

// The fixed settings are declared in command_settings.cpp.
// Reads the fixed settings (ctx.trainer, not the searched parameters: those may have any name and
// are never settings for this kind). kInvalidArgument naming the setting on a bad or unknown key.
Result<CommandSettings> parse_command_settings(const nlohmann::json& trainer);

// Single-quotes `text` for /bin/sh unless every character is in [A-Za-z0-9_.,:/=+@%-].
std::string shell_quote(std::string_view text);
// The text a value is substituted as (before quoting): a string unquoted, anything else as JSON.
std::string template_text(const nlohmann::json& value);
// Substitutes every `{name}` of `tmpl` from `values` (an object), each value shell-quoted.
// kInvalidArgument naming an unknown name (and listing the known ones) or a malformed placeholder.
Result<std::string> render_command(std::string_view tmpl, const nlohmann::json& values);
// The same for one item of the list form: every value as its text, unquoted (no shell reads it).
Result<std::string> render_argument(std::string_view tmpl, const nlohmann::json& values);
// `exec ` + command for a simple command (see the header comment); the command otherwise.
std::string exec_prefixed(const std::string& command);

// One report line, decoded.
struct ReportLine {
  std::optional<int64_t> step;
  protocol::Metrics metrics;
};
inline constexpr std::string_view kReportPrefix = "hpctune-report";
// A persistent program's line that ends a trial (after its reports): `hpctune-trial-end {json}`.
inline constexpr std::string_view kTrialEndPrefix = "hpctune-trial-end";
// nullopt when `line` is not a report line (does not start with kReportPrefix followed by a blank
// or the end); kInvalidArgument saying what is wrong with a malformed one.
std::optional<Result<ReportLine>> parse_report_line(std::string_view line);

// The mpirun argv prefix for `ranks` ranks; kUnavailable when this build or machine has no mpirun.
Result<std::vector<std::string>> mpirun_prefix(int ranks);

// The persistent program of one worker process (trainer.persistent), shared by the trainers it
// makes (TrainerServices::commands). One trial at a time uses it (mu). Its destructor ends the
// program (ChildProcess kills its tree).
class CommandPrograms {
 public:
  struct Program;  // command_trainer.cpp
  CommandPrograms();
  ~CommandPrograms();
  CommandPrograms(const CommandPrograms&) = delete;
  CommandPrograms& operator=(const CommandPrograms&) = delete;
  // The live program's pid, 0 when none (for tests).
  int pid();

  std::mutex mu;
  std::unique_ptr<Program> live;
};

class CommandTrainer final : public Trainer {
 public:
  // `programs`: where a persistent program lives between trials; null = this trainer's own.
  explicit CommandTrainer(std::shared_ptr<CommandPrograms> programs = nullptr) : programs_(std::move(programs)) {}
  static constexpr int kSliceMs = 20;
  static constexpr std::size_t kStderrTailLines = 20;
  static constexpr std::size_t kMaxLineBytes = 1 << 20;  // longer lines are logged, never parsed

  std::string kind() const override { return "command"; }
  Result<TrialResult> run(const TrialContext& ctx) override;

 private:
  std::shared_ptr<CommandPrograms> programs_;
};

}  // namespace hpctune::trainers
