// The hpctune subcommands. Each returns a Status; main.cpp (the edge) turns it into an exit code:
// 0 success, 2 usage or config error, 1 failure at run time (a campaign in which no trial
// succeeded included), 130 after Ctrl-C, 143 after SIGTERM.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "protocol/transport.h"

namespace hpctune::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT
inline constexpr int kExitTerminated = 143;   // 128 + SIGTERM

int exit_code_for(const Error& error);

struct RunArgs {
  std::string config;
  std::string db;
  std::optional<int64_t> groups;
  std::optional<uint64_t> seed;
  std::optional<std::string> bind;  // --bind (checked by main); else resources.bind
  const std::atomic<int>* preempt = nullptr;  // SIGUSR1 seen (main's handler): MasterOptions::preempt
  // --dashboard [--dashboard-port P]: the dashboard's API over this campaign on 127.0.0.1:P (0: a
  // free port) while it runs; nullopt: none.
  std::optional<int64_t> dashboard_port;
  std::string failpoint;  // test-only
  int64_t failpoint_hit = 1;
};

struct ResumeArgs {
  std::string db;
  std::optional<int64_t> groups;
  std::optional<int64_t> max_trials;  // a new budget (extends a completed campaign)
  std::optional<std::string> bind;     // --bind; else the campaign's resources.bind
  const std::atomic<int>* preempt = nullptr;  // as RunArgs
  std::optional<int64_t> dashboard_port;       // as RunArgs
  std::string failpoint;  // test-only
  int64_t failpoint_hit = 1;
};

// `run` and `resume` set *interrupted when the campaign ended on Ctrl-C (exit 130). A campaign in
// which no trial succeeded (every one failed, or search.max_failures stopped it) is kFailed.
Status cmd_run(const RunArgs& args, const std::atomic<int>& interrupt, bool& interrupted);
Status cmd_resume(const ResumeArgs& args, const std::atomic<int>& interrupt, bool& interrupted);
// format "table" (for people) or "json" (for scripts: see status_json in report/status.h).
Status cmd_status(const std::string& db, const std::string& format);
// The schedule of hyperparameters of a pbt stage's best member (`stage` "" = the campaign's only
// pbt stage); format "table", "json" or "yaml" (report/stages.h: schedule_text). kNotFound (exit
// 2) for a missing database or no such stage, kUnavailable (exit 1) while the stage has not
// completed.
Status cmd_schedule(const std::string& db, const std::string& stage, const std::string& format);
// The trials, best first (the best `top`; 0 = all) as a table, CSV or JSON, each with its stage; only
// those of stage `stage` when it is not "" (an unknown stage: kUsage naming the campaign's stages).
Status cmd_trials(const std::string& db, int64_t top, const std::string& format, const std::string& stage = "");
// One trial: parameters, metrics by step, attempts, events, artifacts and the last `log_lines`
// lines of each of its logs; format "table" or "json".
Status cmd_trial(const std::string& db, int64_t trial_id, const std::string& format, int64_t log_lines);
// format "" is inferred from `output`'s extension (.csv, .json); kUsage when it cannot be.
Status cmd_export(const std::string& db, const std::string& format, const std::string& output);
Status cmd_validate(const std::string& config, bool print_json);
// `hpctune slurm submit` (cli/slurm_submit.cpp): the sbatch script of a campaign, printed with
// dry_run, else written to <db>.slurm/job.sh and submitted with `sbatch --parsable` (the job id
// on stdout). kUsage (exit 2) for too few nodes, a bad --time or option value.
struct SlurmSubmitArgs {
  std::string config;
  std::string db;  // "" = the config's `storage`
  int64_t nodes = 1;
  std::string time;
  std::optional<std::string> partition, account, qos;  // override resources.slurm.*
  std::string program;  // the hpctune the job runs; "" = this binary
  bool dry_run = false;
};
Status cmd_slurm_submit(const SlurmSubmitArgs& args);

// Writes `text` to `path` whole or not at all (a temporary file renamed over it); a FIFO or a path
// under /dev or /proc is written directly. kIo with the reason.
Status write_file_atomically(const std::string& path, const std::string& text);

// `hpctune dashboard` (cli/dashboard_command.cpp): serves the databases (a directory: its *.db)
// with the dashboard's read-only API until `interrupt` is set (Ctrl-C). A non-loopback host
// without --token gets a random one, printed with the URL. kUsage for bad arguments.
struct DashboardArgs {
  std::vector<std::string> databases;
  std::string host = "127.0.0.1";
  int64_t port = 8080;
  std::string token;                // "" = generated and printed (shown in `ps`: a warning)
  std::string token_file;           // the token from this 0600 file instead
  bool allow_other_owners = false;  // serve databases other users own
};
// The environment variable `hpctune dashboard` reads its token from (taken out of the environment).
inline constexpr const char* kDashboardTokenEnv = "HPCTUNE_DASHBOARD_TOKEN";
Status cmd_dashboard(const DashboardArgs& args, const std::atomic<int>& interrupt);

// `transport`: kCurve with the keys the launcher put in the environment (worker::take_worker_curve_keys).
// `slots` > 1: a packed group (launch/launcher.h): groups [group, group + slots) in this process, a
// master connection per slot, the credentials in `secret` a comma between them, and the process's
// pack engine on (trainers/packed_engine.h).
Status cmd_worker(const std::string& master, int64_t group, int threads, const std::string& secret,
                  const protocol::TransportOptions& transport, const std::atomic<int>& terminate, int64_t slots = 1);

}  // namespace hpctune::cli
