// The subcommands that run a campaign: run, resume and simulate (cli/subcommands.h).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/simulate_command.h"
#include "cli/subcommand_support.h"
#include "cli/subcommands.h"

namespace hpctune::cli {

namespace {

const char* const kBindHelp =
    "The master's address for its trainer groups, tcp://HOST:PORT or ipc://PATH (overrides "
    "resources.bind; default ipc://*, a socket in a private directory that only this user can reach)";
const char* const kDashboardHelp =
    "Serve the dashboard over this campaign on 127.0.0.1 while it runs (its URL, with a generated token, is printed)";
const char* const kDashboardPortHelp = "The dashboard's port (default 8080; 0 = a free one, printed)";

// The exit code of `run` or `resume`: interrupted (130, or 143 after SIGTERM) when the campaign
// ended on a signal.
int campaign_exit_code(const Status& status, const char* what, bool interrupted) {
  const int rc = report(status, what);
  if (rc == kExitInterrupted) return interrupted_exit_code();
  return rc == kExitOk && interrupted ? interrupted_exit_code() : rc;
}

// `hpctune run CONFIG`. Numbers are taken as text and checked by parse_integer() after parsing.
class RunCommand final : public Subcommand {
 public:
  explicit RunCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("run", "Run a campaign described by a YAML sweep config"), false) {
    CLI::App& cmd = command();
    cmd.add_option("config", args_.config, "The sweep config (YAML)")->required()->check(CLI::ExistingFile);
    db_opt_ = cmd.add_option("--db", args_.db, "The SQLite database (default: the config's `storage`)");
    groups_opt_ = cmd.add_option("--groups", groups_text_, "Number of trainer groups, 1..4096 (overrides resources.groups)")
                      ->type_name("INT");
    seed_opt_ = cmd.add_option("--seed", seed_text_, "Campaign seed, 0..2^64-1 (overrides `seed`)")->type_name("INT");
    bind_opt_ = cmd.add_option("--bind", bind_, kBindHelp)->type_name("ADDRESS");
    cmd.add_flag("--dashboard", dashboard_, kDashboardHelp);
    dashboard_port_opt_ = cmd.add_option("--dashboard-port", dashboard_port_, kDashboardPortHelp)
                              ->type_name("PORT")
                              ->check(not_empty("serve on port 8080"));
    cmd.add_option("--failpoint", args_.failpoint, "Test only: SIGKILL the master at a named point")->group("");
    cmd.add_option("--failpoint-hit", args_.failpoint_hit, "Test only: on the n-th pass")->group("");
  }

  int run() override {
    if (*db_opt_) {
      if (auto s = check_db_path("--db", args_.db); !s.ok()) return report(s, "run");
    }
    if (*groups_opt_) {
      auto g = parse_integer<int64_t>("--groups", groups_text_, 1, 4096);
      if (!g.ok()) return report(std::move(g).error(), "run");
      args_.groups = *g;
    }
    if (*seed_opt_) {
      auto v = parse_integer<uint64_t>("--seed", seed_text_, 0, std::numeric_limits<uint64_t>::max());
      if (!v.ok()) return report(std::move(v).error(), "run");
      args_.seed = *v;
    }
    if (*bind_opt_) {
      if (auto s = check_bind(bind_); !s.ok()) return report(s, "run");
      args_.bind = bind_;
    }
    if (dashboard_ || *dashboard_port_opt_) {
      auto p = dashboard_port(dashboard_port_);
      if (!p.ok()) return report(std::move(p).error(), "run");
      args_.dashboard_port = *p;
    }
    args_.preempt = &preempt_requested();
    bool interrupted = false;
    const Status status = cmd_run(args_, interrupts(), interrupted);
    return campaign_exit_code(status, "run", interrupted);
  }

 private:
  RunArgs args_;
  std::string groups_text_, seed_text_, bind_, dashboard_port_;
  bool dashboard_ = false;
  CLI::Option *db_opt_, *groups_opt_, *seed_opt_, *bind_opt_, *dashboard_port_opt_;
};

// `hpctune resume DB`.
class ResumeCommand final : public Subcommand {
 public:
  explicit ResumeCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("resume", "Continue an interrupted campaign, or extend a finished one"), false) {
    CLI::App& cmd = command();
    cmd.add_option("db", args_.db, "The campaign's database")->required();
    groups_opt_ = cmd.add_option("--groups", groups_text_, "Number of trainer groups, 1..4096")->type_name("INT");
    max_trials_opt_ =
        cmd.add_option("--max-trials", max_trials_text_,
                       "A new budget: more trials than the campaign has so far (extends a completed campaign too)")
            ->type_name("INT");
    bind_opt_ = cmd.add_option("--bind", bind_, kBindHelp)->type_name("ADDRESS");
    cmd.add_flag("--dashboard", dashboard_, kDashboardHelp);
    dashboard_port_opt_ = cmd.add_option("--dashboard-port", dashboard_port_, kDashboardPortHelp)
                              ->type_name("PORT")
                              ->check(not_empty("serve on port 8080"));
    cmd.add_option("--failpoint", args_.failpoint, "Test only")->group("");
    cmd.add_option("--failpoint-hit", args_.failpoint_hit, "Test only")->group("");
  }

  int run() override {
    if (auto s = check_db_path("db", args_.db); !s.ok()) return report(s, "resume");
    if (*groups_opt_) {
      auto g = parse_integer<int64_t>("--groups", groups_text_, 1, 4096);
      if (!g.ok()) return report(std::move(g).error(), "resume");
      args_.groups = *g;
    }
    if (*max_trials_opt_) {
      auto n = parse_integer<int64_t>("--max-trials", max_trials_text_, 1, std::numeric_limits<int64_t>::max());
      if (!n.ok()) return report(std::move(n).error(), "resume");
      args_.max_trials = *n;
    }
    if (*bind_opt_) {
      if (auto s = check_bind(bind_); !s.ok()) return report(s, "resume");
      args_.bind = bind_;
    }
    if (dashboard_ || *dashboard_port_opt_) {
      auto p = dashboard_port(dashboard_port_);
      if (!p.ok()) return report(std::move(p).error(), "resume");
      args_.dashboard_port = *p;
    }
    args_.preempt = &preempt_requested();
    bool interrupted = false;
    const Status status = cmd_resume(args_, interrupts(), interrupted);
    return campaign_exit_code(status, "resume", interrupted);
  }

 private:
  ResumeArgs args_;
  std::string groups_text_, max_trials_text_, bind_, dashboard_port_;
  bool dashboard_ = false;
  CLI::Option *groups_opt_, *max_trials_opt_, *bind_opt_, *dashboard_port_opt_;
};

// `hpctune simulate [CONFIG]`.
class SimulateCommand final : public Subcommand {
 public:
  explicit SimulateCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("simulate",
                                      "Run a campaign's real master on simulated time, with simulated trainer groups; "
                                      "exits 1 as `run` does when the simulated campaign failed (no trial succeeded, "
                                      "search.max_failures, a failed stage)"),
                   false) {
    CLI::App& cmd = command();
    cmd.add_option("config", args_.config,
                   "The sweep config (YAML); its trainer must be `function` unless --outcomes replays or models a "
                   "recorded campaign (not with --calibrate)")
        ->check(CLI::ExistingFile);
    db_opt_ = cmd.add_option("--db", args_.db,
                             "The new database the simulated campaign is recorded in (default <name>.sim.db)");
    nodes_opt_ = cmd.add_option("--nodes", nodes_text_,
                                "Nodes, one trainer group each, 1..4096 (overrides resources.groups)")
                     ->type_name("INT");
    seed_opt_ = cmd.add_option("--seed", seed_text_, "Campaign seed (overrides `seed`)")->type_name("INT");
    step_opt_ = cmd.add_option("--step-seconds", step_text_,
                               "Simulated seconds per training step (default: the trainer's seconds_per_step)")
                    ->type_name("SECONDS");
    startup_opt_ = cmd.add_option("--startup-seconds", startup_text_,
                                  "Simulated seconds from a group's launch to its hello (default 1)")
                       ->type_name("SECONDS");
    cmd.add_option("--format", args_.format, "table or json")->check(CLI::IsMember({"table", "json"}));
    cmd.add_option("--machine", args_.machine,
                   "The machine file of the cost model (default configs/machines/this-machine.yaml)")
        ->check(not_empty("use configs/machines/this-machine.yaml"));
    target_opt_ = cmd.add_option("--target", target_text_, "Target value of the objective metric (time and runs to it)")
                      ->type_name("VALUE");
    cmd.add_option("--baseline", args_.baseline, "A config whose simulated time to target the speed-up is over")
        ->check(CLI::ExistingFile);
    cmd.add_flag("--plan", args_.plan, "Rank the splits of --nodes into groups x data x model by predicted time");
    cmd.add_option("--max-trials", max_trials_text_,
                   "Simulate a campaign of at most this many trials (default 100000; more is refused: time and "
                   "memory grow with the trials)")
        ->type_name("INT")
        ->check(not_empty("allow 100000"));
    cmd.add_flag("--count-decision-time", args_.count_decision_time,
                 "Add the master's measured decision time (its step() calls) to the simulated clock, as Syne Tune does");
    cmd.add_flag("--calibrate", args_.calibrate, "Fit the machine file from small real campaigns on this machine");
    cmd.add_option("--machine-out", args_.machine_out,
                   "Where --calibrate writes (default configs/machines/this-machine.yaml)")
        ->check(not_empty("write configs/machines/this-machine.yaml"));
    cmd.add_option("--outcomes", args_.outcomes,
                   "Where trial outcomes come from: function (the function trainer's, default), replay:DB (the curves "
                   "a recorded campaign's trials reported, the nearest one's for a new configuration) or surrogate:DB "
                   "(a nearest-neighbour model fitted over DB's trials)")
        ->type_name("SOURCE")
        ->check(not_empty("take them from the function trainer"));
    cmd.add_option("--silence", silence_, "Test only: GROUP@SECONDS, the group goes silent then")->group("");
  }

  int run() override {
    if (Status s = check(); !s.ok()) return report(s, "simulate");
    args_.interrupt = &interrupts();
    const int rc = report(cmd_simulate(args_), "simulate");
    return rc == kExitInterrupted ? interrupted_exit_code() : rc;
  }

 private:
  // The options' checks, in the order a command line with several bad ones reports the first.
  Status check() {
    if (*db_opt_) HPCTUNE_TRY(check_db_path("--db", args_.db));
    if (*nodes_opt_) {
      HPCTUNE_ASSIGN(args_.nodes, parse_integer<int64_t>("--nodes", nodes_text_, 1, 4096));
    }
    if (*seed_opt_) {
      HPCTUNE_ASSIGN(args_.seed, parse_integer<uint64_t>("--seed", seed_text_, 0, std::numeric_limits<uint64_t>::max()));
    }
    if (*step_opt_) {
      HPCTUNE_ASSIGN(args_.step_seconds, parse_seconds("--step-seconds", step_text_));
      if (args_.step_seconds == 0) return err(Errc::kUsage, "--step-seconds: must be > 0");
    }
    if (*startup_opt_) {
      HPCTUNE_ASSIGN(args_.startup_seconds, parse_seconds("--startup-seconds", startup_text_));
    }
    if (args_.config.empty() && !args_.calibrate) {
      return err(Errc::kUsage, "simulate: a CONFIG is required (except with --calibrate)");
    }
    if (*target_opt_) {
      char* end = nullptr;
      const double v = std::strtod(target_text_.c_str(), &end);
      if (target_text_.empty() || end != target_text_.c_str() + target_text_.size() || !std::isfinite(v)) {
        return err(Errc::kUsage, "--target: '" + target_text_ + "' is not a number");
      }
      args_.target = v;
    }
    for (const std::string& item : silence_) {
      const auto at = item.find('@');
      auto g = parse_integer<int64_t>("--silence", item.substr(0, at), 0, 4095);
      if (at == std::string::npos || !g.ok()) return err(Errc::kUsage, "--silence: '" + item + "' is not GROUP@SECONDS");
      HPCTUNE_ASSIGN(const double seconds, parse_seconds("--silence", item.substr(at + 1)));
      args_.silence.emplace_back(*g, seconds);
    }
    if (!max_trials_text_.empty()) {
      HPCTUNE_ASSIGN(args_.max_trials,
                     parse_integer<int64_t>("--max-trials", max_trials_text_, 1, std::numeric_limits<int64_t>::max()));
    }
    return Status::Ok();
  }

  SimulateArgs args_;
  std::string nodes_text_, seed_text_, step_text_, startup_text_, target_text_, max_trials_text_;
  std::vector<std::string> silence_;
  CLI::Option *db_opt_, *nodes_opt_, *seed_opt_, *step_opt_, *startup_opt_, *target_opt_;
};

}  // namespace

std::unique_ptr<Subcommand> add_run(CLI::App& app) { return std::make_unique<RunCommand>(app); }
std::unique_ptr<Subcommand> add_resume(CLI::App& app) { return std::make_unique<ResumeCommand>(app); }
std::unique_ptr<Subcommand> add_simulate(CLI::App& app) { return std::make_unique<SimulateCommand>(app); }

}  // namespace hpctune::cli
