#include "cli/simulate_command.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "scheduler/simulated_outcomes.h"
#include "scheduler/simulator.h"
#include "trainers/function_trainer.h"
#include "trainers/trainer_settings.h"
#include "workflow/stages.h"

namespace hpctune::cli {
namespace {

// The simulated trainer: what the `function` trainer would report for this assign (its own code,
// trainers::function_curve), or the error it would fail with.
scheduler::SimulatedTrial function_trial(const protocol::Assign& a) {
  nlohmann::json settings = a.trainer.is_object() ? a.trainer : nlohmann::json::object();
  for (auto it = a.params.begin(); it != a.params.end(); ++it) settings[it.key()] = it.value();
  settings.erase("kind");
  scheduler::SimulatedTrial t;
  auto curve = trainers::function_curve(settings, a.seed);
  if (!curve.ok()) {
    t.error = curve.error().to_string();
    return t;
  }
  t.reports = std::move(curve->reports);
  t.final_metrics = std::move(curve->final_metrics);
  t.seconds_per_step = curve->seconds_per_step;
  return t;
}

Status print(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return err(Errc::kIo, std::string("cannot write to standard output: ") + std::strerror(errno));
  }
  return {};
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Status cmd_simulate(const SimulateArgs& args) {
  if (args.format != "table" && args.format != "json") {
    return err(Errc::kUsage, "--format: '" + args.format + "' is not one of table, json");
  }
  if (args.step_seconds != -1 && !(args.step_seconds > 0 && args.step_seconds <= 86400 * 365.0)) {
    return err(Errc::kUsage, "--step-seconds: must be a number of seconds in (0, 31536000]");
  }
  HPCTUNE_ASSIGN(auto cfg, config::load_config(args.config));
  const std::string kind = cfg.trainer.value("kind", std::string());
  const trainers::TrainerCapabilities* can = trainers::trainer_capabilities(kind);
  const bool computed = args.outcomes.empty() || args.outcomes == scheduler::kComputedOutcomes;
  if (computed && (!can || can->params != trainers::TrainerParams::kTestFunctionArgs)) {
    return err(Errc::kUsage, args.config + ": trainer.kind '" + kind +
                                 "': hpctune simulate computes only a test-function trainer's outcomes for now "
                                 "(trainer kind `function`); --outcomes replay:DB or surrogate:DB takes them from a recorded campaign");
  }
  scheduler::SimulateOptions o;
  o.master.db_path = args.db.empty() ? cfg.name + ".sim.db" : args.db;
  if (std::filesystem::exists(o.master.db_path)) {
    return err(Errc::kUsage, "--db: " + o.master.db_path + " exists; a simulation writes a new database");
  }
  o.master.config = std::move(cfg);
  o.master.groups = args.nodes;
  o.master.seed = args.seed;
  o.master.make_stage = workflow::make_stage;
  HPCTUNE_ASSIGN(scheduler::OutcomeSource source,
                 scheduler::outcome_source(args.outcomes, o.master.config->space, o.master.config->objectives.front().metric,
                                           function_trial));
  o.model = std::move(source.model);
  o.outcomes = std::move(source.detail);
  o.step_seconds = args.step_seconds;
  o.startup_seconds = args.startup_seconds;
  o.silence = args.silence;
  HPCTUNE_ASSIGN(scheduler::SimulationOutcome out, scheduler::simulate_campaign(o));
  const Progress& p = out.campaign.progress;
  if (args.format == "json") {
    nlohmann::json j = {{"simulated", true},
                        {"db", o.master.db_path},
                        {"campaign", out.campaign.name},
                        {"nodes", o.master.groups.value_or(o.master.config->resources.groups)},
                        {"trials", {{"done", p.done}, {"pruned", p.pruned}, {"failed", p.failed}, {"created", p.created}}},
                        {"best", p.best ? nlohmann::json(*p.best) : nlohmann::json()},
                        {"best_trial", p.best_trial},
                        {"simulated_seconds", out.simulated_s},
                        {"wall_seconds", out.wall_s},
                        {"master_turns", out.turns},
                        {"group_launches", out.launches},
                        {"lost_attempts", out.campaign.counters.lost_attempts},
                        {"failed_stages", out.campaign.failed_stages}};
    return print(j.dump(2) + "\n");
  }
  std::string t = "simulated campaign '" + out.campaign.name + "' recorded in " + o.master.db_path + "\n";
  t += "  nodes (groups)     " + std::to_string(o.master.groups.value_or(o.master.config->resources.groups)) + "\n";
  t += "  trials             " + std::to_string(p.done) + " done, " + std::to_string(p.pruned) + " pruned, " +
       std::to_string(p.failed) + " failed\n";
  if (p.best) t += "  best               " + fixed(*p.best, 6) + " (trial " + std::to_string(p.best_trial) + ")\n";
  t += "  simulated time     " + fixed(out.simulated_s, 1) + " s (" + fixed(out.simulated_s / 3600, 2) + " h)\n";
  t += "  wall time          " + fixed(out.wall_s, 2) + " s\n";
  if (out.campaign.counters.lost_attempts > 0) {
    t += "  lost attempts      " + std::to_string(out.campaign.counters.lost_attempts) + "\n";
  }
  if (!out.campaign.failed_stages.empty()) t += "  failed stages      " + out.campaign.failed_stages + "\n";
  return print(t);
}

}  // namespace hpctune::cli
