#include "cli/simulate_command.h"
#include "cli/console.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/machine_file.h"
#include "config/trial_work.h"
#include "report/campaign.h"
#include "report/ranking.h"
#include "search/algorithms.h"
#include "simulate/simulate.h"
#include "trainers/function_trainer.h"
#include "trainers/trainer_settings.h"
#include "workflow/stages.h"

namespace hpctune::cli {
namespace {

// The simulated trainer: what the `function` trainer would report for this assign (its own code,
// trainers::function_curve), or the error it would fail with.
simulate::SimulatedTrial function_trial(const protocol::Assign& a) {
  nlohmann::json settings = a.trainer.is_object() ? a.trainer : nlohmann::json::object();
  for (auto it = a.params.begin(); it != a.params.end(); ++it) settings[it.key()] = it.value();
  settings.erase("kind");
  simulate::SimulatedTrial t;
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


std::optional<std::string> self_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  return std::filesystem::path(std::string(buf, static_cast<std::size_t>(n))).parent_path().string();
}

// The machine file: --machine, else this machine's under the current directory or above the binary's.
Result<config::MachineModel> load_machine(const std::string& given) {
  if (!given.empty()) return config::load_machine_file(given);
  std::vector<std::string> places = {"configs/machines/this-machine.yaml"};
  if (auto d = self_dir()) places.push_back(*d + "/../configs/machines/this-machine.yaml");
  for (const auto& p : places) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return config::load_machine_file(p);
  }
  config::MachineModel m;
  m.name = "built-in";
  return m;
}

struct Split {
  int64_t groups = 1, data = 1, model = 1;
  int64_t nodes() const { return groups * data * model; }
};

// What one simulation reports (the JSON contract of `hpctune simulate --format json`).
struct SimReport {
  Split split;
  simulate::SimulationOutcome out;
  std::string db;
  std::optional<int64_t> global_batch;
  std::optional<int64_t> generations;
};

// The trial model priced by the cost model: `outcomes`' metrics (the function trainer's), each step
// costing what the trial's work costs on data x model ranks of the machine. `batch_per_rank` > 0 (a
// plan): the minibatch is that many images per data rank, as Cray keeps it.
simulate::TrialModel priced_model(simulate::TrialModel outcomes, const config::MachineModel& machine, Split split,
                                   double batch_per_rank) {
  return [outcomes = std::move(outcomes), machine, split, batch_per_rank](const protocol::Assign& a) {
    simulate::SimulatedTrial t = outcomes(a);
    if (!t.error.empty()) return t;
    nlohmann::json trainer = a.trainer.is_object() ? a.trainer : nlohmann::json::object();
    for (auto it = a.params.begin(); it != a.params.end(); ++it) trainer[it.key()] = it.value();
    auto work = config::trial_work(trainer);
    if (work.ok() && batch_per_rank > 0 && work->has_network) {
      const double images = work->steps_per_report * work->images_per_step;
      work->images_per_step = batch_per_rank * static_cast<double>(split.data);
      work->steps_per_report = std::ceil(images / work->images_per_step);
    }
    if (!work.ok()) {
      t.error = work.error().to_string();
      return t;
    }
    auto cost = simulate::step_cost(machine, *work, split.data, split.model);
    if (!cost.ok()) {
      t.error = cost.error().to_string();
      return t;
    }
    // On ranks of their own: the simulator slows a step by the sharing of the machine's cores
    // (rank_slots) at its start.
    t.step_cost = *cost;
    t.seconds_per_step = std::max(cost->total(), 1e-6);
    t.setup_seconds = machine.trial_setup_s;
    return t;
  };
}

Result<SimReport> simulate_split(const SimulateArgs& args, const config::CampaignConfig& cfg, const config::MachineModel& machine,
                                 const simulate::OutcomeSource& source, Split split, const std::string& db,
                                 double batch_per_rank) {
  simulate::SimulateOptions o;
  o.master.db_path = db;
  o.master.config = cfg;
  o.master.config->resources.ranks_data = split.data;
  o.master.config->resources.ranks_model = split.model;
  o.master.groups = split.groups;
  o.master.seed = args.seed;
  o.master.make_stage = workflow::make_stage;
  o.interrupt = args.interrupt;
  o.model = priced_model(source.model, machine, split, batch_per_rank);
  o.outcomes = source.detail;
  o.machine = args.step_seconds > 0 ? std::string() : machine.name;  // --step-seconds: a fixed cost, no machine
  o.step_seconds = args.step_seconds;
  o.startup_seconds = args.startup_seconds >= 0 ? args.startup_seconds : simulate::startup_seconds(machine, split.data * split.model);
  o.load_seconds = args.step_seconds > 0 ? 0 : machine.load_s;
  for (const auto& [g, at] : args.silence) {  // before anything is recorded
    if (g >= split.groups)
      return err(Errc::kUsage, "--silence: group " + std::to_string(g) + " is not one of the campaign's " +
                                   std::to_string(split.groups) + " groups (0.." + std::to_string(split.groups - 1) + ")");
  }
  o.silence = args.silence;
  o.ranks_per_group = split.data * split.model;
  o.rank_slots = config::rank_slots(machine);
  o.count_decision_time = args.count_decision_time;
  if (args.target) {
    const search::Objective& obj = cfg.objectives.at(0);
    o.target = simulate::SimulationTarget{obj.metric, *args.target, obj.maximize};
  }
  // Trials finished so far: redrawn on a terminal; elsewhere a line every 10 s of wall time, but
  // for --format json, whose reader is a program (and may read both streams as one).
  Console console;
  const bool lines = args.format != "json";
  o.master.progress = [&console, lines](const Progress& p, double wall_s) {
    if (lines || console.on_terminal()) console.progress(p, wall_s, 10.0);
  };
  SimReport r;
  r.split = split;
  r.db = db;
  auto simulated = simulate::simulate_campaign(o);
  console.finish();
  HPCTUNE_ASSIGN(r.out, std::move(simulated));
  auto work = config::trial_work(cfg.trainer);
  if (work.ok() && work->has_network) {
    r.global_batch = batch_per_rank > 0 ? static_cast<int64_t>(batch_per_rank) * split.data : work->batch_size;
  }
  // A population search: its generations are the trials (to the target) over the population (of all islands).
  if (const auto pop = search::population_trials(cfg.algorithm, cfg.search_settings)) {
    const int64_t runs = r.out.runs_to_target.value_or(r.out.finished_trials);
    r.generations = (runs + *pop - 1) / *pop;
  }
  return r;
}

nlohmann::json or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }
nlohmann::json or_null(const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

double utilization(const SimReport& r) {
  const double denom = static_cast<double>(r.split.nodes()) * r.out.simulated_s;
  return denom > 0 ? std::clamp(r.out.busy_node_seconds / denom, 0.0, 1.0) : 0.0;
}

// The time a report is ranked and compared by: to the target when reached, else the whole campaign.
double ranking_seconds(const SimReport& r, bool with_target) {
  if (with_target) return r.out.target_reached_s.value_or(INFINITY);
  return r.out.simulated_s;
}

nlohmann::json report_json(const SimReport& r, const SimulateArgs& args, const config::CampaignConfig& cfg,
                           const config::MachineModel& machine, std::optional<double> baseline_s) {
  const Progress& p = r.out.campaign.progress;
  nlohmann::json target;
  if (args.target) target = {{"metric", cfg.objectives.at(0).metric}, {"value", *args.target}};
  std::optional<double> speedup;
  const double mine = ranking_seconds(r, args.target.has_value());
  if (baseline_s && std::isfinite(*baseline_s) && std::isfinite(mine) && mine > 0) speedup = *baseline_s / mine;
  return {{"simulated", true},
          {"db", r.db},
          {"campaign", r.out.campaign.name},
          {"nodes", r.split.nodes()},
          {"groups", r.split.groups},
          {"data", r.split.data},
          {"model", r.split.model},
          {"global_batch", or_null(r.global_batch)},
          {"trials", {{"done", p.done}, {"pruned", p.pruned}, {"failed", p.failed}, {"created", p.created}}},
          {"best", p.best ? nlohmann::json(*p.best) : nlohmann::json()},
          {"best_trial", p.best_trial},
          {"simulated_seconds", r.out.simulated_s},
          {"wall_seconds", r.out.wall_s},
          {"target", target},
          {"time_to_target_seconds", or_null(r.out.target_reached_s)},
          {"runs_to_target", or_null(r.out.runs_to_target)},
          {"generations", or_null(r.generations)},
          {"node_utilization", utilization(r)},
          {"speedup", or_null(speedup)},
          {"machine", machine.name},
          {"extrapolated", r.split.nodes() > machine.calibrated_nodes},
          {"cost",
           {{"compute_s", r.out.cost.compute_s},
            {"allreduce_s", r.out.cost.allreduce_s},
            {"bubble_s", r.out.cost.bubble_s},
            {"startup_s", r.out.startup_s},
            {"trial_setup_s", r.out.setup_s},
            {"checkpoint_s", r.out.cost.checkpoint_s},
            {"decision_s", r.out.decision_s}}},
          {"master_turns", r.out.turns},
          {"group_launches", r.out.launches},
          {"frames", {{"to_master", r.out.frames_to_master}, {"to_groups", r.out.frames_to_groups}}},
          {"lost_attempts", r.out.campaign.counters.lost_attempts},
          {"failed_stages", r.out.campaign.failed_stages}};
}

std::string seconds_text(const std::optional<double>& s) {
  if (!s) return "not reached";
  return fixed(*s, 1) + " s (" + fixed(*s / 3600, 2) + " h)";
}

std::string report_table(const nlohmann::json& j, const SimReport& r, int64_t calibrated) {
  std::string t = "simulated campaign '" + j["campaign"].get<std::string>() + "' recorded in " + r.db + "\n";
  t += "  nodes              " + std::to_string(r.split.nodes()) + " = " + std::to_string(r.split.groups) + " groups x " +
       std::to_string(r.split.data) + " data x " + std::to_string(r.split.model) + " model" +
       " (machine " + j["machine"].get<std::string>() +
       (j["extrapolated"].get<bool>() ? ", extrapolated beyond its " + std::to_string(calibrated) + " calibrated nodes)\n" : ")\n");
  if (r.global_batch) t += "  global batch       " + std::to_string(*r.global_batch) + "\n";
  const Progress& p = r.out.campaign.progress;
  t += "  trials             " + std::to_string(p.done) + " done, " + std::to_string(p.pruned) + " pruned, " +
       std::to_string(p.failed) + " failed\n";
  if (p.best) t += "  best               " + fixed(*p.best, 6) + " (trial " + std::to_string(p.best_trial) + ")\n";
  t += "  simulated time     " + seconds_text(r.out.simulated_s) + "\n";
  if (!j["target"].is_null()) {
    t += "  time to target     " + seconds_text(r.out.target_reached_s) + " (" + j["target"]["metric"].get<std::string>() +
         " " + fixed(j["target"]["value"].get<double>(), 4) + ")\n";
    if (r.out.runs_to_target) t += "  runs to target     " + std::to_string(*r.out.runs_to_target) + "\n";
  }
  if (r.generations) t += "  generations        " + std::to_string(*r.generations) + "\n";
  t += "  node utilization   " + fixed(100 * j["node_utilization"].get<double>(), 1) + "%\n";
  if (!j["speedup"].is_null()) t += "  speed-up           " + fixed(j["speedup"].get<double>(), 2) + "x over the baseline\n";
  const auto& c = j["cost"];
  t += "  cost (s)           compute " + fixed(c["compute_s"].get<double>(), 1) + ", allreduce " + fixed(c["allreduce_s"].get<double>(), 1) +
       ", bubble " + fixed(c["bubble_s"].get<double>(), 1) + ", start-up " + fixed(c["startup_s"].get<double>(), 1) +
       ", trial setup " + fixed(c["trial_setup_s"].get<double>(), 1) + ", checkpoint " + fixed(c["checkpoint_s"].get<double>(), 1) + ", master " + fixed(c["decision_s"].get<double>(), 3) + "\n";
  t += "  wall time          " + fixed(r.out.wall_s, 2) + " s\n";
  if (r.out.campaign.counters.lost_attempts > 0) {
    t += "  lost attempts      " + std::to_string(r.out.campaign.counters.lost_attempts) + "\n";
  }
  if (!r.out.campaign.failed_stages.empty()) t += "  failed stages      " + r.out.campaign.failed_stages + "\n";
  return t;
}

// The exit of a simulated campaign, as `run`'s (cli/commands.cpp): a failure (exit 1, with why)
// when search.max_failures stopped it, when no trial succeeded, or when a stage failed.
Status campaign_verdict(const SimReport& r) {
  const scheduler::CampaignOutcome& o = r.out.campaign;
  std::string first;
  if (auto view = report::open_campaign(r.db); view.ok()) {
    if (auto f = report::first_failure(view->trials)) {
      std::string error = f->error;
      while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
      first = "\nthe first failure, trial " + std::to_string(f->id) + ": " + error;
    }
  }
  const std::string see = "\n`hpctune trials " + r.db + " --format json` shows every error";
  if (!o.gave_up.empty()) return err(Errc::kFailed, "simulated campaign '" + o.name + "' stopped: " + o.gave_up + first + see);
  if (o.progress.done + o.progress.pruned == 0) {
    // The stages that failed first, each with why (as `run` says them).
    const std::string stages =
        o.failed_stages.empty() ? "" : "simulated campaign '" + o.name + "' failed: " + o.failed_stages + "\n";
    return err(Errc::kFailed, stages + "no trial succeeded in simulated campaign '" + o.name + "' (" +
                                  std::to_string(o.progress.failed) + " failed)" + first + see);
  }
  if (!o.failed_stages.empty()) {
    return err(Errc::kFailed, "simulated campaign '" + o.name + "' failed: " + o.failed_stages + "\n`hpctune status " + r.db +
                                  "` shows every stage");
  }
  return {};
}

// A temporary directory for the databases of a plan's or a baseline's simulations, removed after.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "hpctune-simulate-XXXXXX").string();
    if (::mkdtemp(templ.data()) != nullptr) path = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

Status run_plan(const SimulateArgs& args, const config::CampaignConfig& cfg, const config::MachineModel& machine,
                const simulate::OutcomeSource& source, int64_t nodes) {
  auto work = config::trial_work(cfg.trainer);
  if (!work.ok()) return err(Errc::kUsage, args.config + ": --plan: " + work.error().message());
  const int64_t own_data = cfg.resources.ranks_data, own_model = cfg.resources.ranks_model;
  const double batch_per_rank =
      work->has_network ? std::max(1.0, std::floor(static_cast<double>(work->batch_size) / static_cast<double>(own_data))) : 0;
  const double batch_limit = work->has_network ? static_cast<double>(work->batch_size) : INFINITY;
  ScratchDir scratch;
  if (scratch.path.empty()) return err(Errc::kIo, "--plan: cannot create a temporary directory");
  std::vector<SimReport> plans;
  int index = 0;
  for (int64_t model = 1; model <= nodes; model *= 2) {
    if (model > work->layers) break;
    for (int64_t data = 1; data * model <= nodes; data *= 2) {
      if (static_cast<double>(data) > batch_limit || nodes % (data * model) != 0) continue;
      Split split{nodes / (data * model), data, model};
      const std::string db = scratch.path + "/plan" + std::to_string(index++) + ".db";
      HPCTUNE_ASSIGN(SimReport r, simulate_split(args, cfg, machine, source, split, db, batch_per_rank));
      plans.push_back(std::move(r));
    }
  }
  const bool with_target = args.target.has_value();
  std::stable_sort(plans.begin(), plans.end(), [&](const SimReport& a, const SimReport& b) {
    return ranking_seconds(a, with_target) < ranking_seconds(b, with_target);
  });
  auto is_own = [&](const SimReport& r) { return r.split.data == own_data && r.split.model == own_model; };
  if (args.format == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : plans) {
      nlohmann::json j = report_json(r, args, cfg, machine, std::nullopt);
      j.erase("db");
      j["config_split"] = is_own(r);
      arr.push_back(std::move(j));
    }
    nlohmann::json out = {{"nodes", nodes}, {"machine", machine.name}, {"extrapolated", nodes > machine.calibrated_nodes},
                          {"ranked_by", with_target ? "time_to_target_seconds" : "simulated_seconds"}, {"plans", arr}};
    return print(out.dump(2) + "\n");
  }
  std::string t = "plans for " + std::to_string(nodes) + " nodes on " + machine.name +
                  (nodes > machine.calibrated_nodes ? " (extrapolated beyond " + std::to_string(machine.calibrated_nodes) + " calibrated nodes)" : "") +
                  ", best first, ranked by " + (with_target ? "time to target" : "simulated time") + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-4s %6s %5s %5s %8s %16s %16s %6s\n", "rank", "groups", "data", "model", "batch",
                with_target ? "to target (s)" : "", "simulated (s)", "util");
  t += line;
  int rank = 0;
  for (const auto& r : plans) {
    const std::string target = with_target ? (r.out.target_reached_s ? fixed(*r.out.target_reached_s, 1) : "not reached") : "";
    std::snprintf(line, sizeof line, "  %-4d %6lld %5lld %5lld %8s %16s %16s %5.1f%%%s\n", ++rank, static_cast<long long>(r.split.groups),
                  static_cast<long long>(r.split.data), static_cast<long long>(r.split.model),
                  r.global_batch ? std::to_string(*r.global_batch).c_str() : "-", target.c_str(), fixed(r.out.simulated_s, 1).c_str(),
                  100 * utilization(r), is_own(r) ? "  <- the config's split" : "");
    t += line;
  }
  return print(t);
}

}  // namespace

Status cmd_simulate(const SimulateArgs& args) {
  if (args.calibrate) return cmd_simulate_calibrate(args);
  if (args.format != "table" && args.format != "json") {
    return err(Errc::kUsage, "--format: '" + args.format + "' is not one of table, json");
  }
  if (args.step_seconds != -1 && !(args.step_seconds > 0 && args.step_seconds <= 86400 * 365.0)) {
    return err(Errc::kUsage, "--step-seconds: must be a number of seconds in (0, 31536000]");
  }
  HPCTUNE_ASSIGN(auto cfg, config::load_config(args.config, {.local_files = false}));
  int64_t trials = cfg.stages.empty() ? cfg.max_trials : 0;
  for (const auto& st : cfg.stages) trials += st.own ? st.own->max_trials : 0;
  if (trials > args.max_trials)
    return err(Errc::kUsage, args.config + ": the campaign asks for " + std::to_string(trials) +
                                 " trials, more than --max-trials " + std::to_string(args.max_trials) +
                                 " (a simulation's time and memory grow with its trials: a million took 415 s and "
                                 "1.43 GB here); give --max-trials " + std::to_string(trials) + " to simulate it all the same");
  const std::string kind = cfg.trainer.value("kind", std::string());
  const trainers::TrainerCapabilities* can = trainers::trainer_capabilities(kind);
  const bool computed = args.outcomes.empty() || args.outcomes == simulate::kComputedOutcomes;
  if (computed && (!can || can->params != trainers::TrainerParams::kTestFunctionArgs)) {
    return err(Errc::kUsage, args.config + ": trainer.kind '" + kind +
                                 "': hpctune simulate computes only a test-function trainer's outcomes for now "
                                 "(trainer kind `function`); --outcomes replay:DB or surrogate:DB takes them from a recorded campaign");
  }
  HPCTUNE_ASSIGN(const config::MachineModel machine, load_machine(args.machine));
  const int64_t ranks = cfg.resources.ranks_data * cfg.resources.ranks_model;
  const int64_t nodes = args.nodes.value_or(cfg.resources.groups * ranks);
  // Where outcomes come from, read once for every split a plan simulates.
  HPCTUNE_ASSIGN(const simulate::OutcomeSource source,
                 simulate::outcome_source(args.outcomes, cfg.space, cfg.objectives.front().metric, function_trial));
  if (args.plan) return run_plan(args, cfg, machine, source, nodes);
  if (nodes % ranks != 0) {
    return err(Errc::kUsage, "--nodes: " + std::to_string(nodes) + " nodes do not split into groups of " + std::to_string(ranks) +
                                 " ranks (resources.ranks data " + std::to_string(cfg.resources.ranks_data) + " x model " +
                                 std::to_string(cfg.resources.ranks_model) + ", one rank per node)");
  }
  const std::string db = args.db.empty() ? cfg.name + ".sim.db" : args.db;
  if (std::filesystem::exists(db)) {
    return err(Errc::kUsage, "--db: " + db + " exists; a simulation writes a new database");
  }
  std::optional<double> baseline_s;
  if (!args.baseline.empty()) {
    HPCTUNE_ASSIGN(auto base_cfg, config::load_config(args.baseline, {.local_files = false}));
    const std::string base_kind = base_cfg.trainer.value("kind", std::string());
    const trainers::TrainerCapabilities* base_can = trainers::trainer_capabilities(base_kind);
    if (computed && (!base_can || base_can->params != trainers::TrainerParams::kTestFunctionArgs)) {
      return err(Errc::kUsage, "--baseline: " + args.baseline + ": trainer.kind '" + base_kind +
                                   "' cannot be simulated without --outcomes (computed outcomes are the `function` trainer's)");
    }
    HPCTUNE_ASSIGN(const simulate::OutcomeSource base_source,
                   simulate::outcome_source(args.outcomes, base_cfg.space, base_cfg.objectives.front().metric, function_trial));
    ScratchDir scratch;
    if (scratch.path.empty()) return err(Errc::kIo, "--baseline: cannot create a temporary directory");
    const Split base{base_cfg.resources.groups, base_cfg.resources.ranks_data, base_cfg.resources.ranks_model};
    SimulateArgs base_args = args;
    base_args.silence.clear();
    HPCTUNE_ASSIGN(SimReport b, simulate_split(base_args, base_cfg, machine, base_source, base, scratch.path + "/baseline.db", 0));
    baseline_s = ranking_seconds(b, args.target.has_value());
  }
  const Split split{nodes / ranks, cfg.resources.ranks_data, cfg.resources.ranks_model};
  // What `run` would warn of on these groups (a generation that leaves some waiting): in the JSON, or
  // on standard error beside the table.
  const std::vector<std::string> warnings = config::idle_group_warnings(cfg, split.groups);
  if (args.format != "json")
    for (const auto& text : warnings) std::fprintf(stderr, "hpctune simulate: warning: %s\n", text.c_str());
  HPCTUNE_ASSIGN(SimReport r, simulate_split(args, cfg, machine, source, split, db, 0));
  nlohmann::json j = report_json(r, args, cfg, machine, baseline_s);
  j["outcomes"] = source.detail;
  j["warnings"] = warnings;
  HPCTUNE_TRY(print(args.format == "json" ? j.dump(2) + "\n" : report_table(j, r, machine.calibrated_nodes)));
  return campaign_verdict(r);
}

}  // namespace hpctune::cli
