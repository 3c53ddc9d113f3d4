// End to end through the hpctune binary: workflows of stages (search -> ensemble -> transfer, and
// PBT) on a slice of the default data. What the store records of a whole run (stage results,
// lineage, the seeds of baseline twins), SIGKILL of the master at a stage boundary, in the middle
// of the ensemble's retraining and in the middle of a PBT interval followed by `resume` (nothing
// finished is recomputed, nothing is lost), and a PBT exploit checked against a replay of the
// trainer: the target's next interval is exactly what training the source's snapshot with the new
// values gives.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/rng.h"
#include "nn/checkpoint.h"
#include "tests/campaign_fixture.h"
#include "trainers/trainer_factory.h"

using namespace hpctune;
using namespace hpctune::testing;
using store::TrialState;

namespace {

// --- configs ---------------------------------------------------------------------------------

const char* const kTrainer =
    "trainer: {kind: mlp, epochs: 2, max_train_samples: 1500, max_test_samples: 500, hidden: 32}\n";

// search (stop_when) -> ensemble (retrain top 2 under `seeds` seeds) [-> transfer with baseline].
std::string workflow_config(int max_trials, const std::string& stop_when, int retrain_seeds, bool transfer) {
  std::string y = "name: wf\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n";
  y += kTrainer;
  y += "resources: {groups: 2}\nstages:\n";
  y += "  - name: tune\n    kind: search\n    search: {algorithm: random, max_trials: " + std::to_string(max_trials) +
       (stop_when.empty() ? "" : ", stop_when: " + stop_when) + "}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  y += "    trainer: {classes: [0, 1, 2, 3, 4]}\n";
  y += "  - {name: blend, kind: ensemble, from: tune, method: greedy, retrain: {top: 2, seeds: " +
       std::to_string(retrain_seeds) + "}}\n";
  if (transfer) {
    y += "  - {name: move, kind: transfer, from: [tune], classes: [5, 6, 7, 8, 9], max_train_samples: 500, freeze: 1, "
         "baseline: true}\n";
  }
  return y;
}

std::string pbt_config(int seed) {
  return "name: pbt\nseed: " + std::to_string(seed) +
         "\nobjective: {metric: val_accuracy, mode: max}\n"
         "trainer: {kind: mlp, epochs: 6, max_train_samples: 1000, max_test_samples: 500, hidden: 32, "
         "lr_schedule: constant}\n"
         "resources: {groups: 2}\n"
         "stages:\n"
         "  - {name: pop, kind: pbt, population: 4, ready: 2, steps: 6, quantile: 0.5, space: {lr: {type: float, "
         "low: 0.001, high: 0.5, log: true}, momentum: {type: float, low: 0.0, high: 0.99}}}\n";
}

// --- reading the store -----------------------------------------------------------------------

struct Snapshot {
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;
  std::vector<store::TrialRow> trials;
  std::vector<store::EventRow> events;
  std::map<int64_t, std::vector<store::LineageRow>> lineage;  // by child
  std::map<int64_t, std::vector<store::MetricRow>> metrics;   // by trial

  const store::StageRow& stage(const std::string& name) const {
    for (const auto& s : stages) {
      if (s.name == name) return s;
    }
    FAIL("no stage " << name);
    return stages.front();
  }
  std::vector<store::TrialRow> trials_of(int64_t stage_id) const {
    std::vector<store::TrialRow> out;
    for (const auto& t : trials) {
      if (t.stage_id == stage_id) out.push_back(t);
    }
    return out;
  }
  const store::TrialRow* trial(int64_t id) const {
    for (const auto& t : trials) {
      if (t.id == id) return &t;
    }
    return nullptr;
  }
  std::vector<store::EventRow> events_of(const std::string& kind) const {
    std::vector<store::EventRow> out;
    for (const auto& e : events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
  bool has_lineage(int64_t child, int64_t parent, const std::string& relation) const {
    auto it = lineage.find(child);
    if (it == lineage.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](const store::LineageRow& r) {
      return r.parent_trial_id == parent && r.relation == relation;
    });
  }
  // The value of metric `name` that (trial, attempt) reported at `step`, if any.
  std::optional<double> metric(int64_t trial, int64_t attempt, int64_t step, const std::string& name) const {
    auto it = metrics.find(trial);
    if (it == metrics.end()) return std::nullopt;
    for (const auto& m : it->second) {
      if (m.attempt == attempt && m.step == step && m.name == name) return m.value;
    }
    return std::nullopt;
  }
};

// A path an event records under the campaign's trial directory: relative to <db>.trials (a moved
// campaign resumes), absolute as older versions wrote it. Absolute here, for comparisons.
std::string recorded_path(const std::string& db, const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  return db + ".trials/" + path;
}

Snapshot read_db(const std::string& db) {
  Snapshot s;
  auto st = store::Store::open_readonly(db);
  REQUIRE(st.ok());
  auto c = (*st)->load_campaign();
  REQUIRE((c.ok() && *c));
  s.campaign = **c;
  auto stages = (*st)->stages(s.campaign.id);
  REQUIRE(stages.ok());
  s.stages = *stages;
  auto trials = (*st)->trials(s.campaign.id);
  REQUIRE(trials.ok());
  s.trials = *trials;
  auto events = (*st)->events(s.campaign.id, 0);
  REQUIRE(events.ok());
  s.events = *events;
  for (auto& e : s.events) {
    if (!e.detail.is_object()) continue;
    for (const char* key : {"snapshot", "resume_from", "checkpoint"}) {
      if (e.detail.contains(key) && e.detail[key].is_string())
        e.detail[key] = recorded_path(db, e.detail[key].get<std::string>());
    }
  }
  for (const auto& t : s.trials) {
    auto l = (*st)->lineage(t.id);
    REQUIRE(l.ok());
    s.lineage[t.id] = *l;
    auto m = (*st)->metrics(t.id);
    REQUIRE(m.ok());
    s.metrics[t.id] = *m;
  }
  return s;
}

// Exactly one stage_completed event per stage, naming it.
void check_each_stage_completed_once(const Snapshot& s) {
  std::map<std::string, int> completed;
  for (const auto& e : s.events_of("stage_completed")) completed[e.detail.value("stage", "")]++;
  for (const auto& st : s.stages) {
    CAPTURE(st.name);
    CHECK(st.state == "completed");
    CHECK(completed[st.name] == 1);
    CHECK(st.result.is_object());
    if (st.kind != "search") CHECK(!st.result.empty());  // a search stage records only runs to threshold
  }
  CHECK(completed.size() == s.stages.size());
}

// The trials of `before` that were final there are unchanged in `after`: same id, stage, seq,
// attempt, params, metrics and objective, and the same metric rows.
void check_final_trials_kept(const Snapshot& before, const Snapshot& after) {
  for (const auto& b : before.trials) {
    if (!store::is_final(b.state)) continue;
    CAPTURE(b.id);
    const store::TrialRow* a = after.trial(b.id);
    REQUIRE(a != nullptr);
    CHECK(a->state == b.state);
    CHECK(a->stage_id == b.stage_id);
    CHECK(a->seq == b.seq);
    CHECK(a->attempt == b.attempt);
    CHECK(a->params == b.params);
    CHECK(a->metrics == b.metrics);
    CHECK(a->objective == b.objective);
    CHECK(a->finished_at == b.finished_at);
    CHECK(after.metrics.at(b.id).size() == before.metrics.at(b.id).size());
  }
}

// No (stage, seq) twice and every trial final and done.
// `mv <db>* moved/`: the database and everything beside it named after it (its .trials, its keys)
// into dir/moved, as a user moves a campaign whole; that directory.
std::string move_campaign(const TempDir& dir, const std::string& db_name) {
  const std::string moved = dir.file("moved");
  std::filesystem::create_directory(moved);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(db_name, 0) == 0) std::filesystem::rename(entry.path(), moved + "/" + name);
  }
  return moved;
}

void check_all_done_no_twins(const Snapshot& s) {
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const auto& t : s.trials) {
    CAPTURE(t.id);
    CHECK(t.state == TrialState::kDone);
    CHECK(seen.insert({t.stage_id, t.seq}).second);
  }
}

std::string trial_dir_of(const std::string& db, int64_t trial) { return db + ".trials/" + std::to_string(trial); }

void run_ok(const std::vector<std::string>& args, const std::string& log) {
  auto status = run_hpctune(args, log);
  REQUIRE_MESSAGE(status.success(), read_file(log));
}

void run_killed(const std::vector<std::string>& args, const std::string& log, const std::string& db) {
  auto status = run_hpctune(args, log);
  REQUIRE_MESSAGE(status.signaled, read_file(log));
  CHECK(status.signal == SIGKILL);
  check_no_orphans(db);
}

// --- PBT: following a member's weights back -------------------------------------------------

// The pbt_* decision events (exploit and continue: they carry the ordinal and the snapshot).
std::vector<store::EventRow> pbt_decisions(const Snapshot& s) {
  std::vector<store::EventRow> out;
  for (const auto& e : s.events) {
    if (e.kind == "pbt_exploit" || e.kind == "pbt_continue") out.push_back(e);
  }
  return out;
}

// Where (trial, attempt) started: the resume_from of the trial's latest pause before `attempt`
// ("" = a fresh start at step 0). A lost attempt does not move it, so its retry starts there too.
std::string start_of(const Snapshot& s, int64_t trial, int64_t attempt) {
  std::string from;
  for (const auto& e : s.events) {
    if (e.kind == "trial_paused" && e.trial_id == trial && e.attempt < attempt) from = e.detail.value("resume_from", "");
  }
  return from;
}

// Every step 1..steps of the weights member `t` ended with was trained and reported: walks back
// from its last attempt through the snapshots each attempt started from (its own, or an exploited
// source's), checking that each interval on the way has a report of every one of its steps.
void check_steps_add_up(const Snapshot& s, const store::TrialRow& t, int64_t steps) {
  CAPTURE(t.id);
  int64_t trial = t.id, attempt = t.attempt, end = steps;
  for (int hops = 0; end > 0; ++hops) {
    REQUIRE(hops < 50);
    const std::string from = start_of(s, trial, attempt);
    int64_t start = 0;
    std::optional<store::EventRow> maker;
    if (!from.empty()) {
      for (const auto& e : pbt_decisions(s)) {
        if (e.detail.value("snapshot", "") == from) maker = e;
      }
      REQUIRE_MESSAGE(maker.has_value(), "no decision made the snapshot " << from);
      start = maker->detail.at("step").get<int64_t>();
    }
    CAPTURE(trial);
    CAPTURE(attempt);
    REQUIRE(start < end);
    // A step is reported by this attempt, or by an earlier one of the same interval (same start)
    // that was lost with the master after training it: the retry resumes from the checkpoint
    // that attempt left in the trial's directory and trains only what is left.
    for (int64_t k = start + 1; k <= end; ++k) {
      CAPTURE(k);
      bool reported = false;
      for (int64_t a = attempt; a >= 1 && !reported && start_of(s, trial, a) == from; --a) {
        reported = s.metric(trial, a, k, "val_accuracy").has_value();
      }
      CHECK(reported);
    }
    if (!maker) break;
    trial = maker->trial_id;
    attempt = maker->attempt;
    end = start;
  }
}

// What an exploit's replay reports: (step, metrics) per epoch trained.
using Reports = std::vector<std::pair<int64_t, protocol::Metrics>>;

// Runs the trainer of `trainer_settings` in this process on `params`, from the checkpoint
// `resume_from`, as the worker would run the trial (seed and identity included).
Reports replay(const nlohmann::json& trainer_settings, const nlohmann::json& params, const std::string& resume_from,
               int64_t trial_id, int64_t attempt, uint64_t seed) {
  TempDir dir;
  Reports reports;
  trainers::TrialContext ctx;
  ctx.trial_id = trial_id;
  ctx.attempt = attempt;
  ctx.seed = seed;
  ctx.params = params;
  ctx.trainer = trainer_settings;
  ctx.trial_dir = dir.path;
  ctx.resume_from = resume_from;
  ctx.report = [&](int64_t step, const protocol::Metrics& m) {
    if (!m.empty()) reports.emplace_back(step, m);
  };
  auto trainer = trainers::make_trainer(trainer_settings.at("kind").get<std::string>());
  REQUIRE(trainer.ok());
  auto r = (*trainer)->run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return reports;
}

// `resume` after a kill: it succeeds, leaves no orphan process, ends the campaign completed with
// each stage completed once. The store after it, for the case's own checks.
Snapshot resume_completes(const std::string& db, const std::string& log) {
  run_ok({"resume", db}, log);
  check_no_orphans(db);
  Snapshot after = read_db(db);
  CHECK(after.campaign.state == "completed");
  check_each_stage_completed_once(after);
  return after;
}

std::string file_bytes(const std::string& path) { return read_file(path); }

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("workflow: search (stop_when) -> ensemble (retrain) -> transfer (baseline), uninterrupted: results and lineage") {
  TempDir dir;
  const std::string cfg = dir.write("w.yaml", workflow_config(4, "{metric: val_accuracy, reaches: 0.6}", 1, true));
  const std::string db = dir.file("w.db");
  run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  CHECK(s.campaign.state == "completed");
  REQUIRE(s.stages.size() == 3);
  check_each_stage_completed_once(s);
  check_all_done_no_twins(s);

  // The search stage ended on its threshold, by a trial of its own that reached it.
  const auto& tune = s.stage("tune");
  const auto tune_trials = s.trials_of(tune.id);
  REQUIRE(!tune_trials.empty());
  CHECK(tune_trials.size() < 4);
  const nlohmann::json& sw = tune.result.at("stop_when");
  CHECK(sw.at("reached") == true);
  const store::TrialRow* reacher = s.trial(sw.at("trial").get<int64_t>());
  REQUIRE(reacher != nullptr);
  CHECK(reacher->stage_id == tune.id);
  CHECK(*reacher->objective >= 0.6);
  CHECK(sw.at("finished_trials").get<int64_t>() >= 1);
  CHECK(sw.at("finished_trials").get<int64_t>() <= static_cast<int64_t>(tune_trials.size()));

  // The ensemble retrained the top 2 configurations of the search under one new seed each: each
  // retrained member has its retrain_of parent, a done search trial with the same params.
  const auto& blend = s.stage("blend");
  const auto retrained = s.trials_of(blend.id);
  CHECK(retrained.size() == std::min<std::size_t>(2, tune_trials.size()));
  CHECK(blend.result.at("retrained").get<std::size_t>() == retrained.size());
  std::set<int64_t> retrain_parents;
  for (const auto& r : retrained) {
    CAPTURE(r.id);
    REQUIRE(r.meta.contains("lineage"));
    const int64_t parent = r.meta["lineage"][0].at("trial").get<int64_t>();
    CHECK(r.meta["lineage"][0].at("relation") == "retrain_of");
    CHECK(s.has_lineage(r.id, parent, "retrain_of"));
    const store::TrialRow* p = s.trial(parent);
    REQUIRE(p != nullptr);
    CHECK(p->stage_id == tune.id);
    CHECK(p->params == r.params);
    CHECK(r.meta.contains("seed"));
    retrain_parents.insert(parent);
  }
  CHECK(retrain_parents.size() == retrained.size());  // top 2 distinct configurations
  // Its members are trials of the campaign (search or retrained), with positive weights summing to 1.
  double weights = 0;
  REQUIRE(!blend.result.at("members").empty());
  for (const auto& m : blend.result.at("members")) {
    const store::TrialRow* t = s.trial(m.at("trial").get<int64_t>());
    REQUIRE(t != nullptr);
    CHECK((t->stage_id == tune.id || t->stage_id == blend.id));
    CHECK(m.at("weight").get<double>() > 0);
    weights += m.at("weight").get<double>();
    if (m.contains("retrain_of")) CHECK(s.has_lineage(t->id, m["retrain_of"].get<int64_t>(), "retrain_of"));
  }
  CHECK(weights == doctest::Approx(1.0));
  for (const char* k : {"val_accuracy", "val_log_loss", "test_accuracy", "test_log_loss"}) {
    CHECK(blend.result.at(k).is_number());
    CHECK(blend.result.at("best_single").at(k).is_number());
  }
  CHECK(s.trial(blend.result.at("best_single").at("trial").get<int64_t>()) != nullptr);

  // The transfer stage: every target has its transfer_source parent (a source of the result, a
  // done search trial whose directory it starts from); every baseline twin has its target's seed.
  const auto& move = s.stage("move");
  const auto moved = s.trials_of(move.id);
  std::set<int64_t> sources;
  for (const auto& id : move.result.at("sources")) sources.insert(id.get<int64_t>());
  REQUIRE(!sources.empty());
  int targets = 0, baselines = 0;
  for (const auto& t : moved) {
    CAPTURE(t.id);
    const std::string role = t.meta.value("role", "");
    if (role == "target") {
      ++targets;
      const int64_t source = t.meta["lineage"][0].at("trial").get<int64_t>();
      CHECK(t.meta["lineage"][0].at("relation") == "transfer_source");
      CHECK(sources.count(source) == 1);
      CHECK(s.has_lineage(t.id, source, "transfer_source"));
      REQUIRE(s.trial(source) != nullptr);
      CHECK(s.trial(source)->stage_id == tune.id);
      CHECK(t.params.at("init_from") == trial_dir_of(db, source));
      CHECK(t.params.at("freeze") == 1);
    } else {
      REQUIRE(role == "baseline");
      ++baselines;
      CHECK(s.lineage.at(t.id).empty());
      CHECK(!t.params.contains("init_from"));
      CHECK(t.params.at("freeze") == 0);
      const int64_t twin_seq = t.meta.at("baseline_of").get<int64_t>();
      const auto twin = std::find_if(moved.begin(), moved.end(), [&](const auto& o) { return o.seq == twin_seq; });
      REQUIRE(twin != moved.end());
      CHECK(twin->meta.at("role") == "target");
      CHECK(t.meta.at("seed") == twin->meta.at("seed"));
      CHECK(t.params.at("lr") == twin->params.at("lr"));
    }
  }
  CHECK(targets >= 1);
  CHECK(baselines == targets);
  CHECK(move.result.at("target").at("trial").is_number());
  CHECK(move.result.at("baseline").at("test_accuracy").is_number());
}

TEST_CASE("workflow: SIGKILL at a stage boundary (result written, not committed), then resume") {
  // hit 1: the search stage's completion; hit 2: the first of ensemble and transfer to complete
  // while the other may still run.
  for (int hit : {1, 2}) {
    CAPTURE(hit);
    TempDir dir;
    const std::string cfg = dir.write("w.yaml", workflow_config(4, "{metric: val_accuracy, reaches: 0.6}", 1, true));
    const std::string db = dir.file("w.db");
    const std::string killed_log = dir.file("killed.log");
    run_killed({"run", cfg, "--db", db, "--failpoint", "stage-completed", "--failpoint-hit", std::to_string(hit)},
               killed_log, db);
    // The stage being completed logged it before its commit died with the master.
    const std::string log = read_file(killed_log);
    const std::regex completed_line("stage '(\\w+)' \\(\\w+\\) completed");
    std::string killed_stage;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), completed_line);
         it != std::sregex_iterator(); ++it) {
      killed_stage = (*it)[1];
    }
    REQUIRE_MESSAGE(!killed_stage.empty(), log);
    if (hit == 1) CHECK(killed_stage == "tune");
    const Snapshot before = read_db(db);
    CHECK(before.campaign.state == "running");
    CHECK(before.stage(killed_stage).state == "running");  // not committed
    CHECK(before.stage(killed_stage).result.empty());
    const int64_t killed_id = before.stage(killed_stage).id;
    const std::size_t killed_trials = before.trials_of(killed_id).size();

    const Snapshot after = resume_completes(db, dir.file("resume.log"));
    check_all_done_no_twins(after);
    check_final_trials_kept(before, after);
    // The killed stage had all its trials: none is created again. It was resumed, not started anew.
    CHECK(after.trials_of(killed_id).size() == killed_trials);
    std::map<std::string, int> started, resumed;
    for (const auto& e : after.events_of("stage_started")) started[e.detail.value("stage", "")]++;
    for (const auto& e : after.events_of("stage_resumed")) resumed[e.detail.value("stage", "")]++;
    CHECK(started[killed_stage] == 1);
    CHECK(resumed[killed_stage] == 1);
    // Stages completed before the kill keep their result and time; their trial count is unchanged.
    for (const auto& st : before.stages) {
      if (st.state != "completed") continue;
      CAPTURE(st.name);
      CHECK(after.stage(st.name).result == st.result);
      CHECK(after.stage(st.name).finished_at == st.finished_at);
      CHECK(after.trials_of(st.id).size() == before.trials_of(st.id).size());
    }
    // The transfer and retrain stages recorded their work whole.
    CHECK(after.stage("blend").result.at("retrained").get<std::size_t>() == after.trials_of(after.stage("blend").id).size());
    CHECK(after.stage("move").result.at("target").at("test_accuracy").is_number());
  }
}

TEST_CASE("workflow: a campaign moved while stopped at a stage boundary resumes: the next stages read the artifacts") {
  // Before: the artifacts (the trials' predictions and checkpoints, which the ensemble and transfer
  // stages read) were recorded with absolute paths; moved, they were outside the trial directories
  // and the ensemble stage refused every member.
  TempDir dir;
  const std::string cfg = dir.write("w.yaml", workflow_config(4, "", 1, true));
  const std::string db = dir.file("w.db");
  run_killed({"run", cfg, "--db", db, "--failpoint", "stage-completed", "--failpoint-hit", "1"}, dir.file("killed.log"),
             db);
  const Snapshot before = read_db(db);
  REQUIRE(before.stage("tune").state == "running");
  const std::string moved = move_campaign(dir, "w.db");
  const Snapshot after = resume_completes(moved + "/w.db", dir.file("resume.log"));
  check_all_done_no_twins(after);
  check_final_trials_kept(before, after);
  CHECK(after.stage("blend").result.at("test_accuracy").is_number());
  CHECK(after.stage("move").result.is_object());
  {
    auto st = store::Store::open_readonly(moved + "/w.db");
    REQUIRE(st.ok());
    for (const auto& t : after.trials) {
      auto artifacts = (*st)->artifacts(t.id);
      REQUIRE(artifacts.ok());
      for (const auto& a : *artifacts) {
        CAPTURE(a.path);
        CHECK(a.path.find(dir.path + "/w.db.trials") == std::string::npos);
      }
    }
  }
}

TEST_CASE("workflow: a campaign moved in the middle of its transfer stage resumes: every target starts from its source") {
  // Before: a target recorded before the move named its source's checkpoint by its absolute path in
  // trials.params; resumed in the new place, its attempt looked for the old one and failed.
  TempDir dir;
  const std::string cfg = dir.write("w.yaml", workflow_config(4, "", 1, true));
  const std::string db = dir.file("w.db");
  // 4 searched and 2 retrained trials end first: the 7th result is the transfer's first.
  run_killed({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "7"}, dir.file("killed.log"), db);
  const Snapshot before = read_db(db);
  REQUIRE(before.stage("move").state == "running");
  // The targets still running lose what they trained: as if killed before their first epoch ended,
  // their next attempt starts from the source's checkpoint (init_from) again.
  int restarted = 0;
  for (const auto& t : before.trials_of(before.stage("move").id)) {
    if (store::is_final(t.state)) continue;
    ++restarted;  // a target still queued (the kill came before its start: a busy machine) has no directory yet
    const std::string trial_dir = db + ".trials/" + std::to_string(t.id);
    if (!std::filesystem::exists(trial_dir)) continue;
    for (const auto& f : std::filesystem::directory_iterator(trial_dir))
      if (f.path().filename().string().rfind("checkpoint-stage", 0) == 0) std::filesystem::remove(f.path());
  }
  REQUIRE(restarted > 0);
  const std::string moved = move_campaign(dir, "w.db");
  const Snapshot after = resume_completes(moved + "/w.db", dir.file("resume.log"));
  check_all_done_no_twins(after);
  check_final_trials_kept(before, after);
  const auto targets = after.trials_of(after.stage("move").id);
  CHECK(targets.size() >= before.trials_of(before.stage("move").id).size());
  for (const auto& t : targets) {
    CAPTURE(t.id);
    CHECK(t.state == TrialState::kDone);
  }
  CHECK(after.stage("move").result.at("target").at("test_accuracy").is_number());
}

TEST_CASE("workflow: SIGKILL in the middle of the ensemble's retraining, then resume") {
  TempDir dir;
  // 3 search trials (no threshold), then 4 retrained members: results 4..7 are the retrain trials;
  // the master dies handling the 6th result (the 3rd retrained one).
  const std::string cfg = dir.write("w.yaml", workflow_config(3, "", 2, false));
  const std::string db = dir.file("w.db");
  run_killed({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "6"}, dir.file("killed.log"),
             db);
  const Snapshot before = read_db(db);
  CHECK(before.stage("tune").state == "completed");
  CHECK(before.trials_of(before.stage("tune").id).size() == 3);
  CHECK(before.stage("blend").state == "running");
  const int64_t blend_id = before.stage("blend").id;
  std::vector<store::TrialRow> done_before;
  for (const auto& t : before.trials_of(blend_id)) {
    if (t.state == TrialState::kDone) done_before.push_back(t);
  }
  REQUIRE_MESSAGE(!done_before.empty(), read_file(dir.file("killed.log")));
  CHECK(done_before.size() < 4);

  const Snapshot after = resume_completes(db, dir.file("resume.log"));
  check_all_done_no_twins(after);
  check_final_trials_kept(before, after);
  const auto retrained = after.trials_of(blend_id);
  CHECK(retrained.size() == 4);
  for (const auto& t : done_before) {
    CAPTURE(t.id);
    CHECK(after.trial(t.id)->attempt == 1);
    // Not assigned again: no attempt of it after the kill.
    for (const auto& e : after.events) {
      if (e.trial_id == t.id) CHECK(e.kind != "trial_requeued");
    }
  }
  // Each retrained member has its lineage, and the ensemble counts them all.
  for (const auto& t : retrained) {
    CAPTURE(t.id);
    REQUIRE(t.meta.contains("lineage"));
    CHECK(after.has_lineage(t.id, t.meta["lineage"][0].at("trial").get<int64_t>(), "retrain_of"));
  }
  const auto& result = after.stage("blend").result;
  CHECK(result.at("retrained") == 4);
  CHECK(result.at("test_accuracy").is_number());
}

namespace {

// What every finished PBT run must hold: members done at `steps`, each member's weights trained
// through every step, decisions recorded once (ordinal unique per target), one explore per
// exploit, and a pbt_exploit lineage row for each exploit.
void check_pbt_run(const Snapshot& s, int64_t population, int64_t steps) {
  const auto& pop = s.stage("pop");
  const auto members = s.trials_of(pop.id);
  REQUIRE(members.size() == static_cast<std::size_t>(population));
  for (const auto& t : members) {
    CAPTURE(t.id);
    CHECK(t.state == TrialState::kDone);
    CHECK(t.step == steps);
    CHECK(t.params.at("epochs") == steps);
    check_steps_add_up(s, t, steps);
  }
  std::set<std::pair<int64_t, int64_t>> ordinals;
  std::map<int64_t, int> exploits, explores;
  for (const auto& e : pbt_decisions(s)) {
    CAPTURE(e.id);
    const int64_t target = e.detail.at("target").get<int64_t>();
    CHECK(target == e.trial_id);
    CHECK(ordinals.insert({target, e.detail.at("ordinal").get<int64_t>()}).second);
    if (e.kind == "pbt_exploit") {
      ++exploits[target];
      CHECK(s.has_lineage(target, e.detail.at("source").get<int64_t>(), "pbt_exploit"));
    }
  }
  for (const auto& e : s.events_of("pbt_explore")) ++explores[e.detail.at("target").get<int64_t>()];
  CHECK(exploits == explores);
  CHECK(pop.result.at("exploits").get<int64_t>() == static_cast<int64_t>(s.events_of("pbt_exploit").size()));
}

}  // namespace

TEST_CASE("pbt: SIGKILL in the middle of an interval, then resume: every member done, decisions kept and not repeated") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pbt_config(5));
  const std::string db = dir.file("p.db");
  // Every attempt (one interval) ends with a result: 4 members x 3 intervals at least. The 7th
  // falls in the second round of intervals.
  run_killed({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "7"}, dir.file("killed.log"),
             db);
  const Snapshot before = read_db(db);
  CHECK(before.stage("pop").state == "running");
  const auto decisions_before = pbt_decisions(before);
  REQUIRE_MESSAGE(!decisions_before.empty(), read_file(dir.file("killed.log")));
  int done_before = 0;
  for (const auto& t : before.trials_of(before.stage("pop").id)) done_before += t.state == TrialState::kDone;
  CHECK(done_before < 4);

  const Snapshot after = resume_completes(db, dir.file("resume.log"));
  check_pbt_run(after, 4, 6);
  // The decisions recorded before the kill are still there, unchanged.
  for (const auto& b : before.events) {
    if (b.kind.rfind("pbt_", 0) != 0 && b.kind != "trial_paused") continue;
    CAPTURE(b.id);
    const auto it = std::find_if(after.events.begin(), after.events.end(), [&](const auto& a) { return a.id == b.id; });
    REQUIRE(it != after.events.end());
    CHECK(it->kind == b.kind);
    CHECK(it->detail == b.detail);
  }
}

TEST_CASE("pbt: a campaign moved to another directory while stopped resumes to completion, every result kept once") {
  // Before: the database recorded absolute paths into <db>.trials (trials.resume_from, the pbt
  // decisions' snapshot and resume_from, trial_paused's resume_from); once the campaign was moved,
  // they were outside the new <db>.trials and `resume` refused the campaign (and read_db the trials).
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pbt_config(5));
  const std::string db = dir.file("p.db");
  run_killed({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "7"}, dir.file("killed.log"),
             db);
  // Recorded relative to the trial directory: paused members and decisions with snapshots.
  {
    auto st = store::Store::open_readonly(db);
    REQUIRE(st.ok());
    auto campaign = (*st)->load_campaign();
    REQUIRE((campaign.ok() && *campaign));
    auto raw = (*st)->events((*campaign)->id, 0);
    REQUIRE(raw.ok());
    int paths = 0;
    for (const auto& e : *raw) {
      if (e.kind != "pbt_continue" && e.kind != "pbt_exploit" && e.kind != "trial_paused" &&
          e.kind != "pause_requested")
        continue;
      CAPTURE(e.detail.dump());
      const std::string from = e.detail.at("resume_from").get<std::string>();
      CHECK(from.rfind("/", 0) != 0);
      CHECK(std::regex_match(from, std::regex("[0-9]+/pbt/[0-9]{3}-step-[0-9]+")));
      ++paths;
    }
    CHECK(paths > 0);
  }
  const Snapshot before = read_db(db);
  const int64_t pop = before.stage("pop").id;
  int paused_before = 0, done_before = 0;
  for (const auto& t : before.trials_of(pop)) {
    paused_before += t.state == TrialState::kPaused;
    done_before += t.state == TrialState::kDone;
  }
  REQUIRE_MESSAGE(paused_before + static_cast<int>(pbt_decisions(before).size()) > 0, read_file(dir.file("killed.log")));
  CHECK(done_before < 4);

  // mv p.db p.db.trials p.db.keys ... moved/
  const std::string moved = move_campaign(dir, "p.db");
  const std::string moved_db = moved + "/p.db";
  REQUIRE(!std::filesystem::exists(db + ".trials"));

  const Snapshot after = resume_completes(moved_db, dir.file("resume.log"));
  check_pbt_run(after, 4, 6);
  check_final_trials_kept(before, after);
  // Every decision and pause recorded before the move is there once, unchanged (paths as relative
  // to the trial directory they were recorded under).
  for (const auto& b : before.events) {
    if (b.kind.rfind("pbt_", 0) != 0 && b.kind != "trial_paused") continue;
    CAPTURE(b.id);
    const auto it = std::find_if(after.events.begin(), after.events.end(), [&](const auto& a) { return a.id == b.id; });
    REQUIRE(it != after.events.end());
    CHECK(it->kind == b.kind);
    CHECK(it->detail.dump().find(dir.path + "/p.db.trials") == std::string::npos);
  }
  // Every report of every attempt before the move is kept exactly once.
  for (const auto& [trial, rows] : before.metrics) {
    CAPTURE(trial);
    for (const auto& m : rows) {
      int found = 0;
      for (const auto& a : after.metrics.at(trial))
        found += a.attempt == m.attempt && a.step == m.step && a.name == m.name && a.value == m.value;
      CHECK(found == 1);
    }
  }
  // The members resumed from their snapshots in the new place.
  const std::string log = read_file(dir.file("resume.log"));
  CHECK(log.find("is gone") == std::string::npos);
}

TEST_CASE("pbt: an exploit trains the source's exact snapshot with the explored values (replayed)") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pbt_config(5));
  const std::string db = dir.file("p.db");
  run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  check_each_stage_completed_once(s);
  check_pbt_run(s, 4, 6);

  const auto exploits = s.events_of("pbt_exploit");
  REQUIRE_MESSAGE(!exploits.empty(), "no exploit in this run: choose another seed");
  const nlohmann::json trainer_settings = s.campaign.config_json.at("stages").at(0).at("trainer");
  int checked = 0;
  for (const auto& ex : exploits) {
    CAPTURE(ex.detail.dump());
    const nlohmann::json& d = ex.detail;
    const int64_t target = ex.trial_id, source = d.at("source").get<int64_t>();
    const int64_t attempt = ex.attempt, source_step = d.at("source_step").get<int64_t>();
    const std::string checkpoint = d.at("checkpoint").get<std::string>();
    const nlohmann::json params = d.at("params");
    // The checkpoint is the source's own snapshot of that decision, in the source's directory, at
    // the source's step; the target's own snapshot of this boundary holds other weights.
    CHECK(d.at("resume_from") == checkpoint);
    CHECK(checkpoint.rfind(trial_dir_of(db, source) + "/pbt/", 0) == 0);
    bool source_made_it = false;
    for (const auto& e : pbt_decisions(s)) {
      if (e.trial_id == source && e.detail.at("ordinal") == d.at("source_ordinal")) {
        source_made_it = e.detail.at("snapshot") == checkpoint && e.detail.at("step") == source_step;
      }
    }
    CHECK(source_made_it);
    const std::string ckpt_file = nn::checkpoint_path(checkpoint, 0);
    auto ck = nn::read_checkpoint(ckpt_file);
    REQUIRE(ck.ok());
    CHECK(ck->epoch == source_step);
    const std::string own = nn::checkpoint_path(d.at("snapshot").get<std::string>(), 0);
    CHECK(file_bytes(own) != file_bytes(ckpt_file));
    // The explored values are the params the target's next interval was given and trained with.
    const auto explore = std::find_if(s.events.begin(), s.events.end(), [&](const auto& e) {
      return e.kind == "pbt_explore" && e.id > ex.id && e.trial_id == target;
    });
    REQUIRE(explore != s.events.end());
    for (auto it = explore->detail.at("new").begin(); it != explore->detail.at("new").end(); ++it) {
      CHECK(params.at(it.key()) == it.value());
    }
    CHECK(params.at("epochs") == source_step + 2);
    bool paused = false;
    for (const auto& e : s.events_of("trial_paused")) {
      if (e.trial_id != target || e.attempt != attempt) continue;
      paused = true;
      CHECK(e.detail.at("params") == params);
      CHECK(e.detail.at("resume_from") == checkpoint);
    }
    CHECK(paused);
    const store::TrialRow* tr = s.trial(target);
    REQUIRE(tr != nullptr);
    // Its next decision (if any) says it trained with these params.
    for (const auto& e : pbt_decisions(s)) {
      if (e.trial_id == target && e.detail.at("ordinal") == d.at("ordinal").get<int64_t>() + 1) {
        CHECK(e.detail.at("trained_params") == params);
        CHECK(e.attempt == attempt + 1);
      }
    }
    // The trainer of the next attempt says where it started.
    std::string logs;
    for (const auto& f : std::filesystem::directory_iterator(db + ".trials/logs")) logs += read_file(f.path());
    CHECK(logs.find("trial " + std::to_string(target) + " attempt " + std::to_string(attempt + 1) + ": resumed from " +
                    checkpoint + " at epoch " + std::to_string(source_step) + " ") != std::string::npos);

    // Replay: the trainer run from the source's snapshot with the new params reports, epoch by
    // epoch, exactly what the target's next attempt recorded; from the target's own weights, or
    // with the params it had before, it does not.
    const uint64_t seed = derive_seed(s.campaign.seed, static_cast<uint64_t>(tr->seq));
    const Reports replayed = replay(trainer_settings, params, checkpoint, target, attempt + 1, seed);
    REQUIRE(replayed.size() == 2);
    for (const auto& [step, metrics] : replayed) {
      CAPTURE(step);
      CHECK(step > source_step);
      for (const char* name : {"train_loss", "val_accuracy", "val_loss"}) {
        CAPTURE(name);
        const auto recorded = s.metric(target, attempt + 1, step, name);
        REQUIRE(recorded.has_value());
        CHECK(*recorded == metrics.at(name));
      }
    }
    const Reports own_weights = replay(trainer_settings, params, d.at("snapshot").get<std::string>(), target,
                                       attempt + 1, seed);
    REQUIRE(!own_weights.empty());
    CHECK(own_weights.back().second.at("train_loss") != replayed.back().second.at("train_loss"));
    nlohmann::json old_params = d.at("trained_params");
    old_params["epochs"] = params.at("epochs");
    const Reports old_values = replay(trainer_settings, old_params, checkpoint, target, attempt + 1, seed);
    REQUIRE(!old_values.empty());
    CHECK(old_values.back().second.at("train_loss") != replayed.back().second.at("train_loss"));
    ++checked;
  }
  CHECK(checked >= 1);
}

TEST_CASE("pbt: 6 members on 2 groups stay in step: none is more than one interval ahead of the slowest") {
  TempDir dir;
  const std::string cfg = dir.write(
      "p.yaml",
      "name: pbt6\nseed: 11\nobjective: {metric: val_accuracy, mode: max}\n"
      "trainer: {kind: mlp, epochs: 6, max_train_samples: 600, max_test_samples: 300, hidden: 16, "
      "lr_schedule: constant}\n"
      "resources: {groups: 2}\n"
      "stages:\n"
      "  - {name: pop, kind: pbt, population: 6, ready: 2, steps: 6, quantile: 0.34, space: {lr: {type: float, "
      "low: 0.001, high: 0.5, log: true}, momentum: {type: float, low: 0.0, high: 0.99}}}\n");
  const std::string db = dir.file("p.db");
  run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  check_pbt_run(s, 6, 6);
  // Every report of the objective in the order recorded; each member's step is its latest report's
  // (0 before its first). After every report no member is more than `ready` steps ahead of the
  // slowest: the old scheduling ran members 0-1 through all 6 steps before members 2-5 started.
  struct Report {
    double t;
    int64_t trial, step;
  };
  std::vector<Report> reports;
  std::map<int64_t, int64_t> step_of;
  for (const auto& t : s.trials_of(s.stage("pop").id)) {
    step_of[t.id] = 0;
    for (const auto& m : s.metrics.at(t.id))
      if (m.name == "val_accuracy") reports.push_back({m.t, t.id, m.step});
  }
  REQUIRE(step_of.size() == 6);
  std::sort(reports.begin(), reports.end(), [](const Report& a, const Report& b) { return a.t < b.t; });
  int64_t widest = 0;
  for (const Report& r : reports) {
    step_of[r.trial] = r.step;
    int64_t lo = 1 << 30, hi = 0;
    for (const auto& [id, step] : step_of) lo = std::min(lo, step), hi = std::max(hi, step);
    widest = std::max(widest, hi - lo);
  }
  CHECK(widest <= 2);
  // Exploits happened (quantile 0.34 of 6: the bottom 2 against the top 2).
  CHECK(!s.events_of("pbt_exploit").empty());
}

// Early stopping that pauses (workflow/promotion_source.h): a 3 x 3 grid of mlp trials under ASHA
// (rungs 1 and 3 of max_t 9) with a budget of 60 steps, less than the 81 of training all 9 fully.
std::string pause_config(int64_t max_steps) {
  return "name: pause\nseed: 4\nobjective: {metric: val_accuracy, mode: max}\n"
         "search: {algorithm: grid, max_trials: 9, max_steps: " +
         std::to_string(max_steps) +
         "}\n"
         "space:\n  lr: {type: choice, values: [0.003, 0.03, 0.3]}\n  hidden: {type: choice, values: [8, 16, 32]}\n"
         "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 9, mode: pause}\n"
         "trainer: {kind: mlp, epochs: 9, max_train_samples: 600, max_test_samples: 300, lr_schedule: constant}\n"
         "resources: {groups: 2}\n";
}

TEST_CASE("early stopping (pause): promoted trials resume from their rung's checkpoint; the budget is spent") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pause_config(60));
  const std::string db = dir.file("p.db");
  run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  // Every step of every trial was trained once: the reports (trial, attempt, step) are as many as
  // the distinct (trial, step) pairs, and together they are the steps consumed.
  std::set<std::pair<int64_t, int64_t>> distinct;
  int64_t rows = 0, done = 0;
  for (const auto& t : s.trials) {
    CAPTURE(t.id);
    CHECK((t.state == TrialState::kDone || t.state == TrialState::kPruned));
    done += t.state == TrialState::kDone;
    for (const auto& m : s.metrics.at(t.id)) {
      if (m.name != "val_accuracy") continue;
      ++rows;
      distinct.insert({t.id, m.step});
    }
  }
  CHECK(rows == static_cast<int64_t>(distinct.size()));
  // The grid (9 trials) is smaller than the budget asks for: paused trials are continued until the
  // 60 steps are spent (the attempts in flight then end at their rungs: at most 2 x 6 more).
  CHECK(static_cast<int64_t>(distinct.size()) >= 54);
  CHECK(static_cast<int64_t>(distinct.size()) <= 72);
  CHECK(done >= 1);
  // Each pause kept its rung's checkpoint, read-only, and the next attempt started from it, at the
  // step after the rung.
  int resumed = 0;
  for (const auto& e : s.events_of("trial_paused")) {
    CAPTURE(e.detail.dump());
    const int64_t step = e.detail.at("step").get<int64_t>();
    const std::string from = e.detail.at("resume_from").get<std::string>();
    CHECK(from == trial_dir_of(db, e.trial_id) + "/rungs/step-" + std::to_string(step));
    const std::string file = nn::checkpoint_path(from, 0);
    auto ck = nn::read_checkpoint(file);
    REQUIRE(ck.ok());
    CHECK(ck->epoch == step);
    struct stat st {};
    REQUIRE(::stat(file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0222) == 0);
    std::optional<int64_t> first;
    for (const auto& m : s.metrics.at(e.trial_id))
      if (m.attempt == e.attempt + 1 && m.name == "val_accuracy" && (!first || m.step < *first)) first = m.step;
    if (first) {
      CHECK(*first == step + 1);
      ++resumed;
    }
  }
  CHECK(resumed >= 3);
}

// A program that reports every 2 steps, so not at a rung of 3 or at the end of a PBT interval of 3
// (HPCTUNE_MAX_STEP, where it stops by itself). It logs "trial step" for every step it trains and
// keeps its step in its checkpoint. Before, its attempt ended with its last report at step 2 and
// the trial was recorded done at its first rung or interval: never paused, never continued, no
// member exploited (pause: 60 of 200 steps spent, the best trial trained 3 of 27 steps).
const char* kEveryOtherStep = R"(import json, os
import hpctune_report as hp
for trial in hp.trials():
    p = hp.params()
    step = 0
    r = hp.resume_from()
    if r and os.path.exists(os.path.join(r, "ck.json")):
        step = json.load(open(os.path.join(r, "ck.json")))["step"]
    if os.environ.get("RESTART") == "1":
        limit = (hp.max_step() or 9) - step  # counts from 0 again after loading, as some programs do
        step = 0
    else:
        limit = hp.max_step() or 9
    if step == 0 and os.environ.get("ZERO") == "1":
        hp.report(0, loss=10.0)  # an evaluation before training, as some programs report
    while step < limit:
        step += 1
        with open(os.environ["STEPS_LOG"], "a") as f:
            f.write("%d %d\n" % (hp.trial_id(), step))
        tmp = os.path.join(hp.checkpoint_dir(), "ck.tmp")
        json.dump({"step": step}, open(tmp, "w"))
        os.replace(tmp, os.path.join(hp.checkpoint_dir(), "ck.json"))
        reported = step - 1 if os.environ.get("FROM_ZERO") == "1" else step  # the epoch's index, as Optuna's examples report
        if step % int(os.environ.get("EVERY", "2")) == 0 and not hp.report(reported, loss=(float(p["a"]) - 0.3) ** 2 + 1.0 / step):
            break
)";

// restart: the program counts its steps from 0 again after loading a checkpoint (and trains the
// same number of steps to the end of its interval), and reports every step. zero: it reports step 0
// before it trains. from_zero: it reports every step as the index of the epoch it just trained
// (0 after the first).
std::string every_other_step_trainer(TempDir& dir, bool restart = false, bool zero = false, bool from_zero = false) {
  const std::string program = dir.write("every2.py", kEveryOtherStep);
  return "trainer: {kind: command, command: \"/usr/bin/python3 " + program +
         "\", persistent: true, provides: [checkpoints], timeout: 2m, env: {PYTHONPATH: \"" + std::string(HPCTUNE_SOURCE_DIR) +
         "/tools/python\", STEPS_LOG: \"" + dir.file("steps.log") + "\", RESTART: \"" + (restart ? "1" : "0") +
         "\", EVERY: \"" + (restart || from_zero ? "1" : "2") + "\", ZERO: \"" + (zero ? "1" : "0") +
         "\", FROM_ZERO: \"" + (from_zero ? "1" : "0") + "\"}}\nresources: {groups: 2}\n";
}

// Every (trial, step) the program trained, from its log; with `once`, each exactly once (a PBT
// exploit of an older snapshot trains some steps again, by design).
std::map<int64_t, std::set<int64_t>> trained_steps(TempDir& dir, bool once) {
  std::map<int64_t, std::set<int64_t>> out;
  std::ifstream in(dir.file("steps.log"));
  int64_t trial = 0, step = 0;
  while (in >> trial >> step) {
    const bool first = out[trial].insert(step).second;
    if (once) CHECK_MESSAGE(first, "trial " << trial << " trained step " << step << " twice");
  }
  return out;
}

// A pbt stage of 4 members in intervals of 3 steps, 9 in all, on that program (restart, zero: as
// every_other_step_trainer): every member decided at steps 3 and 6 (continue or exploit), and
// done; an exploit of a snapshot one interval older sends its member back an interval (one more
// decision and attempt).
Snapshot run_pbt_every_other_step(TempDir& dir, bool restart, bool zero) {
  const std::string cfg =
      dir.write("pbt.yaml", "name: every2-pbt\nseed: 3\nobjective: {metric: loss, mode: min}\n" +
                                every_other_step_trainer(dir, restart, zero) +
                                "stages:\n  - name: pbt\n    kind: pbt\n    population: 4\n    ready: 3\n    steps: 9\n"
                                "    quantile: 0.25\n    space:\n      a: {type: float, low: 0, high: 1}\n");
  const std::string db = dir.file("pbt.db");
  run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
  Snapshot s = read_db(db);
  const size_t decisions = s.events_of("pbt_continue").size() + s.events_of("pbt_exploit").size();
  CHECK(decisions >= 8);
  CHECK(decisions <= 12);
  REQUIRE(s.trials.size() == 4);
  for (const auto& t : s.trials) {
    CAPTURE(t.id);
    CHECK(t.state == TrialState::kDone);
    CHECK(t.attempt >= 3);
  }
  // A program whose count starts again after loading is told once (before, nothing said so).
  const auto restarted = s.events_of("steps_restarted");
  CHECK(restarted.size() == (restart ? 1u : 0u));
  for (const auto& e : restarted) {
    CAPTURE(e.detail.dump());
    CHECK(e.detail.at("resumed_at").get<int64_t>() % 3 == 0);
    CHECK(e.detail.at("reported_step").get<int64_t>() < e.detail.at("resumed_at").get<int64_t>());
  }
  if (restart) CHECK(read_file(dir.file("run.log")).find("counts steps from the start again") != std::string::npos);
  return s;
}

namespace {

// The trainer and resources of a config whose trials run `body`, a Python program after
// `import hpctune_report as hp` (the helper from this checkout), on 2 groups.
std::string python_trainer(TempDir& dir, const std::string& body) {
  const std::string program = dir.write("train.py", "import sys\nsys.path.insert(0, '" + std::string(HPCTUNE_SOURCE_DIR) +
                                                        "/tools/python')\nimport hpctune_report as hp\n" + body);
  return "trainer: {kind: command, command: [/usr/bin/python3, \"" + program + "\"]}\nresources: {groups: 2}\n";
}

}  // namespace

TEST_CASE("trials whose parameters change nothing (a program that reads other names) are told once") {
  // The space says `lr`, the program reads `learning_rate` with a default: every trial trains the
  // same model and reports the same loss, and the search has nothing to go on. Before, nothing
  // said so. A program that reads its parameter reports other values: not told.
  for (const bool reads : {false, true}) {
    CAPTURE(reads);
    TempDir dir;
    const std::string trainer = python_trainer(dir, std::string("lr = hp.params().get('") + (reads ? "lr" : "learning_rate") +
                                                        "', 0.05)\nw = 0.0\nfor step in range(1, 4):\n"
                                                        "    w -= lr * 2 * (w - 1.0)\n    hp.report(step, loss=(w - 1.0) ** 2)\n");
    const std::string cfg = dir.write("p.yaml", "name: same\nseed: 4\nobjective: {metric: loss, mode: min}\n"
                                                "search: {algorithm: random, max_trials: 8}\n"
                                                "space:\n  lr: {type: float, low: 0.001, high: 0.2, log: true}\n" + trainer);
    const std::string db = dir.file("p.db");
    run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
    const Snapshot s = read_db(db);
    const auto same = s.events_of("same_objective");
    if (reads) {
      CHECK(same.empty());
      continue;
    }
    REQUIRE(same.size() == 1);
    CHECK(same[0].detail.at("trials").size() == 5);
    CHECK(read_file(dir.file("run.log")).find("under other names than the space's") != std::string::npos);
    run_ok({"status", db}, dir.file("status.log"));
    CHECK(read_file(dir.file("status.log")).find("the first 5 trials, each with other parameters, all reported loss") !=
          std::string::npos);
  }
}

TEST_CASE("a program that reports every few steps pauses at its rung and at its PBT interval's end all the same") {
  SUBCASE("early stopping, mode pause: rungs 3 and 9 of max_t 27") {
    TempDir dir;
    const std::string cfg = dir.write("p.yaml", "name: every2\nseed: 4\nobjective: {metric: loss, mode: min}\n"
                                                "search: {algorithm: grid, max_trials: 6, max_steps: 100}\n"
                                                "space:\n  a: {type: choice, values: [0.1, 0.3, 0.5, 0.7, 0.9, 1.1]}\n"
                                                "early_stopping: {kind: asha, grace_period: 3, reduction_factor: 3, "
                                                "max_t: 27, mode: pause}\n" +
                                                    every_other_step_trainer(dir));
    const std::string db = dir.file("p.db");
    run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
    const Snapshot s = read_db(db);
    const auto trained = trained_steps(dir, true);
    // Every pause is at a rung, judged on the report before it.
    const auto paused = s.events_of("pause_requested");
    CHECK(paused.size() >= 6);
    for (const auto& e : paused) {
      CAPTURE(e.detail.dump());
      const int64_t step = e.detail.at("step").get<int64_t>();
      CHECK((step == 3 || step == 9));
      CHECK(e.detail.at("reported_step").get<int64_t>() == step - 1);
    }
    // Promoted trials went on from their rung (nothing trained twice, trained_steps) to max_t.
    int64_t full = 0, total = 0;
    for (const auto& [trial, steps] : trained) {
      total += static_cast<int64_t>(steps.size());
      full += steps.size() == 27 ? 1 : 0;
    }
    CHECK(full >= 1);
    CHECK(total >= 90);  // the budget of 100 steps is spent (60 before: each trial's first 3, then done)
    CHECK(s.events_of("steps_restarted").empty());  // it goes on from its checkpoint's step
    CHECK(s.events_of("steps_past_judge").empty());  // its last report is max_t itself
    int64_t done_at_end = 0;
    for (const auto& t : s.trials) done_at_end += t.state == TrialState::kDone && t.step >= 26 ? 1 : 0;
    CHECK(done_at_end >= 1);
  }
  SUBCASE("early stopping, mode pause: a program that counts from 0 again after loading is told once") {
    // Its second attempt, resumed at rung 3, reports steps 1, 2, 3 again on top of the loaded
    // weights: it trains 3 + 9 steps for the 9 counted, and rungs compare it with trials at fewer.
    // Before, nothing said so.
    TempDir dir;
    const std::string cfg = dir.write("p.yaml", "name: restart\nseed: 4\nobjective: {metric: loss, mode: min}\n"
                                                "search: {algorithm: grid, max_trials: 3}\n"
                                                "space:\n  a: {type: choice, values: [0.1, 0.5, 0.9]}\n"
                                                "early_stopping: {kind: asha, grace_period: 3, reduction_factor: 3, "
                                                "max_t: 9, mode: pause}\n" +
                                                    every_other_step_trainer(dir, true));
    const std::string db = dir.file("p.db");
    run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
    const Snapshot s = read_db(db);
    const auto restarted = s.events_of("steps_restarted");
    REQUIRE(restarted.size() == 1);
    CHECK(restarted[0].detail.at("resumed_at").get<int64_t>() == 3);
    CHECK(restarted[0].detail.at("reported_step").get<int64_t>() == 1);
    CHECK(read_file(dir.file("run.log")).find("resumed from its checkpoint at step 3") != std::string::npos);
    run_ok({"status", db}, dir.file("status.log"));  // and `status` shows it after the campaign
    CHECK(read_file(dir.file("status.log")).find("warning    trial " + std::to_string(restarted[0].trial_id) +
                                                 " resumed from its checkpoint at step 3 but reported step 1") !=
          std::string::npos);
  }
  SUBCASE("early stopping, mode pause: a program that reports its epochs from 0 pauses at rung 1 (its one report: step 0)") {
    // Before, an attempt whose only report was step 0 counted as one that reported nothing: it was
    // not judged at its rung, and every trial ended done after its first epoch (9 of 81 steps).
    TempDir dir;
    const std::string cfg = dir.write("p.yaml", "name: epochs\nseed: 4\nobjective: {metric: loss, mode: min}\n"
                                                "search: {algorithm: grid, max_trials: 3}\n"
                                                "space:\n  a: {type: choice, values: [0.1, 0.5, 0.9]}\n"
                                                "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, "
                                                "max_t: 9, mode: pause}\n" +
                                                    every_other_step_trainer(dir, false, false, true));
    const std::string db = dir.file("p.db");
    run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
    const Snapshot s = read_db(db);
    int64_t at_first_rung = 0;
    for (const auto& e : s.events_of("pause_requested")) {
      CAPTURE(e.detail.dump());
      const int64_t step = e.detail.at("step").get<int64_t>();
      CHECK((step == 1 || step == 3));
      CHECK(e.detail.at("reported_step").get<int64_t>() == step - 1);
      at_first_rung += step == 1 ? 1 : 0;
    }
    CHECK(at_first_rung == 3);
    // max_steps 0 under pause: every trial's full training, each step once, none after its first
    // epoch's report taken for nothing.
    const auto trained = trained_steps(dir, true);
    REQUIRE(trained.size() == 3);
    for (const auto& [trial, steps] : trained) CHECK(steps.size() == 9);
    for (const auto& t : s.trials) CHECK(t.state == TrialState::kDone);
    CHECK(s.events_of("reports_unjudged").empty());
    CHECK(s.events_of("steps_restarted").empty());
  }
  SUBCASE("early stopping, mode stop: a program that counts batches against a max_t of epochs is told once") {
    // Its reports (steps 100, 200, 300) are all past max_t (9), which asha takes for a trial's result
    // and never judges: nothing is stopped. Before, nothing said so.
    TempDir dir;
    const std::string trainer = python_trainer(dir, "a = float(hp.params()['a'])\nfor k in range(1, 4):\n"
                                                    "    hp.report(100 * k, loss=(a - 0.3) ** 2 + 1.0 / k)\n");
    const std::string cfg = dir.write("p.yaml", "name: batches\nseed: 4\nobjective: {metric: loss, mode: min}\n"
                                                "search: {algorithm: grid, max_trials: 6}\n"
                                                "space:\n  a: {type: choice, values: [0.1, 0.3, 0.5, 0.7, 0.9, 1.1]}\n"
                                                "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 9}\n" +
                                                    trainer);
    const std::string db = dir.file("p.db");
    run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
    const Snapshot s = read_db(db);
    for (const auto& t : s.trials) CHECK(t.state == TrialState::kDone);  // the premise: none judged
    const auto past = s.events_of("steps_past_judge");
    REQUIRE(past.size() == 1);
    CHECK(past[0].detail.at("step").get<int64_t>() == 100);
    CHECK(past[0].detail.at("last_step").get<int64_t>() == 9);
    CHECK(read_file(dir.file("run.log")).find("past early_stopping.max_t (9)") != std::string::npos);
    run_ok({"status", db}, dir.file("status.log"));
    CHECK(read_file(dir.file("status.log")).find("reported step 100, past early_stopping.max_t 9") != std::string::npos);
  }
  SUBCASE("early stopping, mode pause: a rung at 1, before the program's first report, is named in the error") {
    TempDir dir;
    const std::string cfg = dir.write("p.yaml", "name: every2\nseed: 4\nobjective: {metric: loss, mode: min}\n"
                                                "search: {algorithm: random, max_trials: 2}\n"
                                                "space:\n  a: {type: float, low: 0, high: 1}\n"
                                                "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, "
                                                "max_t: 9, mode: pause}\n" +
                                                    every_other_step_trainer(dir));
    const std::string db = dir.file("p.db");
    const auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
    CHECK_FALSE(status.success());  // no trial succeeded
    const Snapshot s = read_db(db);
    REQUIRE(!s.trials.empty());
    for (const auto& t : s.trials) {
      CAPTURE(t.error);
      CHECK(t.state == TrialState::kFailed);
      CHECK(t.error.find("it was to train to step 1 and stop there (HPCTUNE_MAX_STEP") != std::string::npos);
    }
  }
  SUBCASE("pbt: intervals of 3 steps, 9 in all") {
    TempDir dir;
    const Snapshot s = run_pbt_every_other_step(dir, false, false);
    const auto trained = trained_steps(dir, false);
    for (const auto& t : s.trials) {
      CAPTURE(t.id);
      CHECK(trained.count(t.id) == 1);
      if (trained.count(t.id)) CHECK(*trained.at(t.id).rbegin() == 9);
    }
  }
  SUBCASE("pbt, intervals of 1, a program that reports its epochs from 0: an exploit of an older snapshot is no restart") {
    // A member that takes a better member's snapshot of an earlier step goes on from that step; its
    // first report is below the step it paused at, and that is no restarted count (the warning
    // compares with the checkpoint's step, Verdict::resume_step; before, it fired here).
    TempDir dir;
    bool older = false;
    for (const int seed : {3, 11, 12, 13}) {
      const std::string cfg = dir.write("pbt" + std::to_string(seed) + ".yaml",
                                        "name: epochs-pbt\nseed: " + std::to_string(seed) +
                                            "\nobjective: {metric: loss, mode: min}\n" +
                                            every_other_step_trainer(dir, false, false, true) +
                                            "stages:\n  - name: pbt\n    kind: pbt\n    population: 4\n    ready: 1\n"
                                            "    steps: 6\n    quantile: 0.25\n    space:\n      a: {type: float, low: 0, high: 1}\n");
      const std::string db = dir.file("pbt" + std::to_string(seed) + ".db");
      run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
      const Snapshot s = read_db(db);
      for (const auto& t : s.trials) CHECK(t.state == TrialState::kDone);
      CHECK(s.events_of("pbt_continue").size() + s.events_of("pbt_exploit").size() >= 20);  // 4 members x steps 1..5
      for (const auto& e : s.events_of("pbt_exploit"))
        older = older || e.detail.at("source_step").get<int64_t>() < e.detail.at("step").get<int64_t>();
      CHECK(s.events_of("steps_restarted").empty());
    }
    CHECK(older);  // the premise: some exploit went back to an older snapshot
  }
  SUBCASE("pbt, a program that counts from 0 again after loading: judged at its interval's end only") {
    // Its report at step 3 of every later interval (3 steps after loading the checkpoint) was taken
    // for the boundary at 3: decided there again, and again (a program that trains on after that
    // report failed the campaign instead: "paused at step 5, where the stage decided no pause").
    TempDir dir;
    run_pbt_every_other_step(dir, true, false);
  }
  SUBCASE("pbt, a program that reports step 0 before it trains") {
    // Step 0 is a multiple of every interval: before, it was decided there, the program stopped
    // after step 1, and the campaign failed ("paused at step 1, where the stage decided no pause").
    TempDir dir;
    run_pbt_every_other_step(dir, false, true);
  }
}

TEST_CASE("reports that all come at an attempt's end (a buffered program) are told once; reports a step apart are not") {
  // Python with PYTHONUNBUFFERED empty writes its pipe in blocks: the 4 reports, 0.3 s apart as
  // printed, reach the master together when the program ends, and the rungs judge nothing while it
  // runs. hpctune's own default (PYTHONUNBUFFERED=1) delivers them as printed.
  for (const bool buffered : {true, false}) {
    CAPTURE(buffered);
    TempDir dir;
    const std::string program = dir.write("train.py",
                                          "import json, os, time\n"
                                          "x = json.loads(os.environ['HPCTUNE_PARAMS'])['x']\n"
                                          "for step in range(1, 5):\n"
                                          "    time.sleep(0.3)\n"
                                          "    print('hpctune-report ' + json.dumps({'step': step, 'loss': (x - 0.3) ** 2 + 1.0 / step}))\n");
    const std::string cfg = dir.write(
        "b.yaml", "name: bunched\nseed: 2\nobjective: {metric: loss, mode: min}\nsearch: {algorithm: random, max_trials: 2}\n"
                  "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 2, max_t: 4}\n"
                  "space:\n  x: {type: float, low: 0, high: 1}\n"
                  "trainer: {kind: command, command: [/usr/bin/python3, \"" + program + "\"]" +
                      (buffered ? ", env: {PYTHONUNBUFFERED: \"\"}" : "") + "}\nresources: {groups: 2}\n");
    const std::string db = dir.file("b.db");
    run_ok({"run", cfg, "--db", db}, dir.file("run.log"));
    const Snapshot s = read_db(db);
    const auto told = s.events_of("reports_bunched");
    CHECK(s.events_of("attempt_overhead").empty());  // no step time to read from reports that came together
    if (!buffered) {
      CHECK(told.empty());
      continue;
    }
    REQUIRE(told.size() == 1);
    CHECK(told[0].detail.at("reports") == 4);
    CHECK(told[0].detail.at("first_step") == 1);
    CHECK(told[0].detail.at("last_step") == 4);
    CHECK(told[0].detail.at("span_s").get<double>() < 0.05);
    CHECK(told[0].detail.at("after_s").get<double>() >= 1.0);
    CHECK(read_file(dir.file("run.log")).find("print each report line with a flush") != std::string::npos);
  }
}
