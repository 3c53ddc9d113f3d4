// The subcommands that read a campaign or a config: status, schedule, trials, trial, export and
// validate (cli/subcommands.h).
#include <cstdio>
#include <limits>
#include <utility>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/subcommand_support.h"
#include "cli/subcommands.h"
#include "config/config.h"

namespace hpctune::cli {
namespace {

class StatusCommand final : public Subcommand {
 public:
  explicit StatusCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("status",
                                      "The campaign, its stages, its trials by state, and the best trial; a campaign "
                                      "whose master is gone (killed: its lock free, its heartbeat old) is shown "
                                      "interrupted, with the `hpctune resume` to run"),
                   true) {
    command().add_option("db", db_, "The campaign's database")->required();
    command().add_option("--format", format_, "table or json")->check(CLI::IsMember({"table", "json"}));
  }

  int run() override { return report(cmd_status(db_, format_), "status"); }

 private:
  std::string db_, format_ = "table";
};

class ScheduleCommand final : public Subcommand {
 public:
  explicit ScheduleCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("schedule", "The schedule of hyperparameters of a pbt stage's best member: the "
                                                  "params of each interval of steps"),
                   true) {
    command().add_option("db", db_, "The campaign's database")->required();
    command()
        .add_option("--stage", stage_, "The pbt stage (default: the campaign's only pbt stage)")
        ->type_name("NAME")
        ->check(not_empty("take the campaign's only pbt stage"));
    command()
        .add_option("--format", format_,
                    "table (for reading), json (for scripts) or yaml (a YAML list of intervals, "
                    "{from_step, to_step, params}, every digit: to keep beside the config or to replay "
                    "the schedule, each interval trained from the weights the one before ended with)")
        ->check(CLI::IsMember({"table", "json", "yaml"}));
  }

  int run() override { return report(cmd_schedule(db_, stage_, format_), "schedule"); }

 private:
  std::string db_, stage_, format_ = "table";
};

class TrialsCommand final : public Subcommand {
 public:
  explicit TrialsCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("trials", "List trials, best first: stage, state, objective, searched "
                                                "parameters, the trial each started from"),
                   true) {
    command().add_option("db", db_, "The campaign's database")->required();
    top_opt_ = command().add_option("--top", top_text_, "Only the best K trials (K >= 1; default: all)")->type_name("INT");
    command()
        .add_option("--format", format_, "table, csv or json (csv and json add each trial's lineage and run settings)")
        ->check(CLI::IsMember({"table", "csv", "json"}));
    command()
        .add_option("--stage", stage_, "Only the trials of this workflow stage (its name)")
        ->type_name("NAME")
        ->check(not_empty("list the trials of every stage"));
  }

  int run() override {
    int64_t top = 0;  // all
    if (*top_opt_) {
      auto k = parse_integer<int64_t>("--top", top_text_, 1, std::numeric_limits<int64_t>::max());
      if (!k.ok()) return report(std::move(k).error(), "trials");
      top = *k;
    }
    return report(cmd_trials(db_, top, format_, stage_), "trials");
  }

 private:
  std::string db_, format_ = "table", top_text_, stage_;
  CLI::Option* top_opt_;
};

class TrialCommand final : public Subcommand {
 public:
  explicit TrialCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("trial", "One trial: its stage, parameters, lineage and run settings, metrics by "
                                               "step, attempts, events, artifacts and the tail of its logs"),
                   true) {
    command().add_option("db", db_, "The campaign's database")->required();
    command()
        .add_option("id", id_text_, "The trial's id (the `trial` column of `hpctune trials`)")
        ->required()
        ->type_name("INT");
    command().add_option("--format", format_, "table or json")->check(CLI::IsMember({"table", "json"}));
    command().add_option("--lines", lines_text_, "Lines of each log to show (0..10000, default 20)")->type_name("INT");
  }

  int run() override {
    auto id = parse_integer<int64_t>("id", id_text_, 1, std::numeric_limits<int64_t>::max());
    if (!id.ok()) return report(std::move(id).error(), "trial");
    auto lines = parse_integer<int64_t>("--lines", lines_text_, 0, 10000);
    if (!lines.ok()) return report(std::move(lines).error(), "trial");
    return report(cmd_trial(db_, *id, format_, *lines), "trial");
  }

 private:
  std::string db_, id_text_, format_ = "table", lines_text_ = "20";
};

class ExportCommand final : public Subcommand {
 public:
  explicit ExportCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("export", "Export every trial with its stage, parameters, lineage, run settings, "
                                                "metrics and events"),
                   true) {
    command().add_option("db", db_, "The campaign's database")->required();
    command()
        .add_option("--format", format_, "csv or json (default: from the -o file's extension)")
        ->check(CLI::IsMember({"csv", "json"}));
    command()
        .add_option("-o,--output", output_, "Write to this file instead of standard output")
        ->check(not_empty("write to standard output"));
  }

  int run() override { return report(cmd_export(db_, format_, output_), "export"); }

 private:
  std::string db_, format_, output_;
};

class ValidateCommand final : public Subcommand {
 public:
  explicit ValidateCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("validate", "Parse and check a config without running it: each stage and its "
                                                  "trials, splits the trainer cannot make, idle groups"),
                   true) {
    command().add_option("config", config_, "The sweep config (YAML)");
    command().add_flag("--json", json_, "Print the config with every default filled in, as JSON");
    command().add_flag("--print-reference", print_reference_,
                       "Print the commented reference of every key (takes no CONFIG)");
  }

  int run() override {
    if (print_reference_) {
      if (!config_.empty() || json_) {
        std::fprintf(stderr, "hpctune validate: error: --print-reference takes no CONFIG and no --json; "
                             "it prints the reference of every key (run `hpctune validate CONFIG` to check a config)\n");
        return kExitUsage;
      }
      std::fputs(config::reference_yaml().c_str(), stdout);
      return kExitOk;
    }
    if (config_.empty()) {
      std::fprintf(stderr, "hpctune validate: error: a config file is required\n");
      return kExitUsage;
    }
    return report(cmd_validate(config_, json_), "validate");
  }

 private:
  std::string config_;
  bool json_ = false, print_reference_ = false;
};

}  // namespace

std::unique_ptr<Subcommand> add_status(CLI::App& app) { return std::make_unique<StatusCommand>(app); }
std::unique_ptr<Subcommand> add_schedule(CLI::App& app) { return std::make_unique<ScheduleCommand>(app); }
std::unique_ptr<Subcommand> add_trials(CLI::App& app) { return std::make_unique<TrialsCommand>(app); }
std::unique_ptr<Subcommand> add_trial(CLI::App& app) { return std::make_unique<TrialCommand>(app); }
std::unique_ptr<Subcommand> add_export(CLI::App& app) { return std::make_unique<ExportCommand>(app); }
std::unique_ptr<Subcommand> add_validate(CLI::App& app) { return std::make_unique<ValidateCommand>(app); }

}  // namespace hpctune::cli
