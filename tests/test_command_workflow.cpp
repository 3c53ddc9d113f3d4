// The user's own program (the `command` trainer) in a workflow, end to end through the hpctune
// binary: a Python program with numpy (tests/scripts/command_workflow.py, run by /usr/bin/python3)
// through search -> ensemble -> transfer; members whose validation rows disagree refused, naming
// the member and the row; a regression ensemble of hand-made predictions with a known answer; and
// `validate` on what the program declares (trainer.provides).
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/campaign_fixture.h"
#include "trainers/trainer_settings.h"

using namespace hpctune;
using namespace hpctune::testing;
using json = nlohmann::json;

namespace {

const std::string kSource = HPCTUNE_SOURCE_DIR;
const std::string kPython = "/usr/bin/python3";  // Debian's, with numpy (python3-numpy)

// A command trainer running the test program in `mode`, declaring `provides`.
std::string command_trainer(const std::string& args, const std::string& provides = "[predictions, checkpoints]") {
  return "trainer: {kind: command, command: \"" + kPython + " " + kSource + "/tests/scripts/command_workflow.py " +
         args + "\", provides: " + provides + ", env: {PYTHONPATH: " + kSource + "/tools/python}}\n";
}

struct Run {
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;
  std::vector<store::TrialRow> trials;

  const store::StageRow& stage(const std::string& name) const {
    for (const auto& s : stages)
      if (s.name == name) return s;
    FAIL("no stage " << name);
    return stages.front();
  }
  std::vector<store::TrialRow> trials_of(const std::string& name) const {
    std::vector<store::TrialRow> out;
    for (const auto& t : trials)
      if (t.stage_id == stage(name).id) out.push_back(t);
    return out;
  }
  const store::TrialRow& trial(int64_t id) const {
    for (const auto& t : trials)
      if (t.id == id) return t;
    FAIL("no trial " << id);
    return trials.front();
  }
};

Run read_run(const std::string& db) {
  Run r;
  auto st = store::Store::open_readonly(db);
  REQUIRE(st.ok());
  auto c = (*st)->load_campaign();
  REQUIRE((c.ok() && *c));
  r.campaign = **c;
  auto stages = (*st)->stages(r.campaign.id);
  REQUIRE(stages.ok());
  r.stages = *stages;
  auto trials = (*st)->trials(r.campaign.id);
  REQUIRE(trials.ok());
  r.trials = *trials;
  return r;
}

std::string trial_dir_of(const std::string& db, int64_t trial) {
  return std::filesystem::absolute(db + ".trials/" + std::to_string(trial)).lexically_normal().string();
}

// What the program saw (its seen.json).
json seen_by(const std::string& db, int64_t trial) {
  const std::string text = read_file(trial_dir_of(db, trial) + "/seen.json");
  REQUIRE_MESSAGE(!text.empty(), "trial " << trial << " wrote no seen.json");
  return json::parse(text);
}

// The id of the trial of `stage` whose parameter `member` is `m`.
int64_t member_trial(const Run& r, const std::string& stage, int m) {
  for (const auto& t : r.trials_of(stage))
    if (t.params.value("member", -1) == m) return t.id;
  FAIL("no trial with member " << m);
  return 0;
}

std::string sha256_of(const std::string& path) {
  // The program hashes with Python's hashlib; the test asks the same of the file it read.
  TempDir dir;
  const std::string out = dir.file("sum");
  launch::SpawnOptions o;
  o.argv = {kPython, "-c", "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())", path};
  o.stdout_path = out;
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(60));
  REQUIRE((status && status->success()));
  std::string text = read_file(out);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

TEST_CASE("command workflow: search -> ensemble -> transfer over the user's program") {
  TempDir dir;
  const std::string cfg = dir.write(
      "w.yaml",
      "name: cw\nseed: 11\nobjective: {metric: val_accuracy, mode: max}\n" + command_trainer("classify") +
          "resources: {groups: 2}\n"
          "stages:\n"
          "  - name: tune\n"
          "    kind: search\n"
          "    search: {algorithm: random, max_trials: 3}\n"
          "    space: {lr: {type: float, low: 0.1, high: 0.5, log: true}}\n"
          "  - {name: blend, kind: ensemble, from: tune, method: greedy, max_size: 5}\n"
          "  - {name: move, kind: transfer, from: tune, sources: 2, classes: [5, 6, 7, 8, 9], max_train_samples: 300, "
          "freeze: 1, baseline: true}\n");
  const std::string db = dir.file("w.db");
  {
    const auto status = run_hpctune({"validate", cfg}, dir.file("validate.log"));
    CHECK_MESSAGE(status.success(), read_file(dir.file("validate.log")));
  }
  const auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("run.log")));
  check_no_orphans(db);
  const Run r = read_run(db);
  CHECK(r.campaign.state == "completed");
  for (const auto& s : r.stages) {
    CAPTURE(s.name);
    CHECK(s.state == "completed");
  }

  // Every attempt got the campaign's data seed; the search trials no source.
  const auto tune = r.trials_of("tune");
  REQUIRE(tune.size() == 3);
  for (const auto& t : tune) {
    CAPTURE(t.id);
    CHECK(t.state == store::TrialState::kDone);
    const json seen = seen_by(db, t.id);
    CHECK(seen.at("HPCTUNE_DATA_SEED") == "11");
    CHECK(seen.at("HPCTUNE_SOURCE_CHECKPOINT").is_null());
    CHECK(seen.at("HPCTUNE_SOURCE_TRIAL").is_null());
    CHECK(seen.at("params") == t.params);
  }

  // The ensemble blended the program's own prediction files: its best single member's test accuracy
  // is the one the program computed from the same probabilities and reported.
  const json& blend = r.stage("blend").result;
  CAPTURE(blend.dump());
  CHECK(blend.at("candidates") == 3);
  CHECK(blend.at("skipped") == 0);
  REQUIRE(!blend.at("members").empty());
  double weights = 0;
  for (const auto& m : blend.at("members")) {
    CHECK(r.trial(m.at("trial").get<int64_t>()).stage_id == r.stage("tune").id);
    weights += m.at("weight").get<double>();
  }
  CHECK(weights == doctest::Approx(1.0));
  const store::TrialRow& single = r.trial(blend.at("best_single").at("trial").get<int64_t>());
  CHECK(blend.at("best_single").at("test_accuracy").get<double>() ==
        doctest::Approx(single.metrics.at("test_accuracy").get<double>()).epsilon(1e-9));
  CHECK(blend.at("best_single").at("val_accuracy").get<double>() ==
        doctest::Approx(single.metrics.at("val_accuracy").get<double>()).epsilon(1e-9));
  for (const char* k : {"val_accuracy", "val_log_loss", "test_accuracy", "test_log_loss"}) CHECK(blend.at(k).is_number());
  CHECK(blend.at("test_accuracy").get<double>() > 0.5);

  // The transfer: each target got a source trial's checkpoint directory and id as variables (not as
  // parameters), that source's lr, and the stage's classes, max_train_samples and freeze as
  // parameters; it loaded exactly the source's saved body. Each baseline twin got no source.
  const trainers::TrainerCapabilities can = trainers::command_capabilities();
  const json& move = r.stage("move").result;
  CAPTURE(move.dump());
  std::vector<int64_t> sources;
  for (const auto& id : move.at("sources")) sources.push_back(id.get<int64_t>());
  REQUIRE(sources.size() == 2);
  const auto moved = r.trials_of("move");
  REQUIRE(moved.size() == 4);
  int targets = 0, baselines = 0;
  for (const auto& t : moved) {
    CAPTURE(t.id);
    CHECK(t.state == store::TrialState::kDone);
    const json seen = seen_by(db, t.id);
    const json& params = seen.at("params");
    CHECK(seen.at("HPCTUNE_DATA_SEED") == "11");
    CHECK(params.at("classes") == json::array({5, 6, 7, 8, 9}));
    CHECK(params.at("max_train_samples") == 300);
    CHECK(!params.contains(can.init_setting));
    CHECK(!params.contains(can.source_trial_setting));
    if (t.meta.value("role", "") == "target") {
      ++targets;
      const int64_t source = t.meta.at("lineage")[0].at("trial").get<int64_t>();
      CHECK(std::find(sources.begin(), sources.end(), source) != sources.end());
      const std::string checkpoint = trial_dir_of(db, source) + "/checkpoint";
      CHECK(seen.at("HPCTUNE_SOURCE_CHECKPOINT") == checkpoint);
      CHECK(seen.at("HPCTUNE_SOURCE_TRIAL") == std::to_string(source));
      CHECK(t.params.at(can.init_setting) == checkpoint);  // what the stage recorded
      CHECK(params.at("freeze") == 1);
      CHECK(params.at("lr") == r.trial(source).params.at("lr"));
      CHECK(seen.at("loaded_sha256") == sha256_of(checkpoint + "/body.npz"));
    } else {
      ++baselines;
      CHECK(t.meta.value("role", "") == "baseline");
      CHECK(seen.at("HPCTUNE_SOURCE_CHECKPOINT").is_null());
      CHECK(seen.at("HPCTUNE_SOURCE_TRIAL").is_null());
      CHECK(seen.at("loaded_sha256").is_null());
      CHECK(!t.params.contains(can.init_setting));
      CHECK(params.at("freeze") == 0);
    }
  }
  CHECK(targets == 2);
  CHECK(baselines == 2);
  // The result compares the targets with their twins on the held-out figure the program reported.
  CHECK(move.at("compare_metric") == "test_accuracy");
  const int64_t best = move.at("target").at("trial").get<int64_t>();
  CHECK(move.at("target").at("test_accuracy") == r.trial(best).metrics.at("test_accuracy"));
  const int64_t twin = move.at("baseline").at("trial").get<int64_t>();
  CHECK(r.trial(twin).meta.at("baseline_of") == r.trial(best).seq);
  CHECK(move.at("baseline").at("test_accuracy") == r.trial(twin).metrics.at("test_accuracy"));
  CHECK(move.at("gain").get<double>() == doctest::Approx(move.at("target").at("test_accuracy").get<double>() -
                                                         move.at("baseline").at("test_accuracy").get<double>()));
  CHECK(move.at("paired").at("pairs") == 2);
}

TEST_CASE("command workflow: members whose validation rows disagree are refused, naming the member and the row") {
  struct Case {
    std::string option;
    std::string what;  // the row that differs, as the stage says it
  };
  // Member 1 changes its validation label at row 2 (and no member lists val_indices); or member 1
  // drops its last validation row.
  for (const Case& c : {Case{"--corrupt-member 1", "validation row 2: label "},
                        Case{"--short-member 1", "it has no validation row "}}) {
    CAPTURE(c.option);
    TempDir dir;
    const std::string cfg = dir.write(
        "w.yaml", "name: bad\nseed: 4\nobjective: {metric: val_accuracy, mode: max}\n" +
                      command_trainer("classify " + c.option) +
                      "resources: {groups: 2}\n"
                      "stages:\n"
                      "  - name: tune\n"
                      "    kind: search\n"
                      "    search: {algorithm: grid, max_trials: 2}\n"
                      "    space: {member: {type: choice, values: [0, 1]}, steps: {type: fixed, value: 2}}\n"
                      "  - {name: blend, kind: ensemble, from: tune}\n");
    const std::string db = dir.file("w.db");
    const auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
    CHECK_FALSE(status.success());
    check_no_orphans(db);
    const Run r = read_run(db);
    const store::StageRow& blend = r.stage("blend");
    CHECK(blend.state == "failed");
    const int64_t first = member_trial(r, "tune", 0), bad = member_trial(r, "tune", 1);
    REQUIRE(first < bad);  // the first member is the reference the others are checked against
    const std::string expected = "member trial " + std::to_string(bad) + " is refused: its predictions do not line " +
                                 "up with trial " + std::to_string(first) + "'s: " + c.what;
    CHECK_MESSAGE(blend.reason.find(expected) != std::string::npos, blend.reason);
    if (c.option.rfind("--short", 0) == 0) {
      const int64_t rows = seen_by(db, first).at("val_rows").get<int64_t>();
      CHECK(seen_by(db, bad).at("val_rows") == rows - 1);
      CHECK_MESSAGE(blend.reason.find(c.what + std::to_string(rows - 1) + ";") != std::string::npos, blend.reason);
    }
  }
}

TEST_CASE("command workflow: a regression ensemble of a program's hand-made predictions reaches the known answer") {
  // Member 0 predicts y + e, member 1 y - e, member 2 y + 2: half of 0 and half of 1 is exactly y.
  // The best single member is 1 (score 0.6), whose MSEs are the mean of e^2.
  TempDir dir;
  const std::string cfg = dir.write(
      "r.yaml", "name: reg\nseed: 2\nobjective: {metric: score, mode: max}\n" + command_trainer("regress", "[predictions]") +
                    "resources: {groups: 2}\n"
                    "stages:\n"
                    "  - name: tune\n"
                    "    kind: search\n"
                    "    search: {algorithm: grid, max_trials: 3}\n"
                    "    space: {member: {type: choice, values: [0, 1, 2]}}\n"
                    "  - {name: blend, kind: ensemble, from: tune, task: regression, method: greedy, max_size: 2}\n");
  const std::string db = dir.file("r.db");
  const auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("run.log")));
  check_no_orphans(db);
  const Run r = read_run(db);
  const json& blend = r.stage("blend").result;
  CAPTURE(blend.dump());
  const int64_t a = member_trial(r, "tune", 0), b = member_trial(r, "tune", 1);
  CHECK(blend.at("task") == "regression");
  CHECK(blend.at("candidates") == 3);
  const json expected_members = a < b ? json::array({{{"trial", a}, {"weight", 0.5}}, {{"trial", b}, {"weight", 0.5}}})
                                      : json::array({{{"trial", b}, {"weight", 0.5}}, {{"trial", a}, {"weight", 0.5}}});
  CHECK(blend.at("members") == expected_members);
  CHECK(blend.at("val_mse").get<double>() < 1e-12);
  CHECK(blend.at("test_mse").get<double>() < 1e-12);
  CHECK(blend.at("best_single").at("trial") == b);
  const double val_e2 = (0.25 + 0.25 + 0.0625 + 1) / 4, test_e2 = (0.04 + 0.16 + 0.36) / 3;
  CHECK(blend.at("best_single").at("val_mse").get<double>() == doctest::Approx(val_e2).epsilon(1e-6));
  CHECK(blend.at("best_single").at("test_mse").get<double>() == doctest::Approx(test_e2).epsilon(1e-6));
}

TEST_CASE("command workflow: validate refuses an ensemble or a transfer over a program that does not declare its outputs") {
  TempDir dir;
  const std::string head = "name: v\nobjective: {metric: val_accuracy, mode: max}\n";
  const std::string search =
      "stages:\n  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.1, high: 0.5}}}\n";
  struct Case {
    std::string stage, provides, expected;
  };
  const Case cases[] = {
      {"  - {name: blend, kind: ensemble, from: tune}\n", "[]",
       "v.yaml:6:35: stages[1].from: the ensemble needs predictions, and trainer kind 'command' of stage 'tune' provides "
       "none (trainer.provides)"},
      {"  - {name: move, kind: transfer, from: tune}\n", "[predictions]",
       "v.yaml:6:34: stages[1].from: the transfer needs checkpoints, and trainer kind 'command' of stage 'tune' provides "
       "none (trainer.provides)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.stage);
    const std::string cfg = dir.write("v.yaml", head + command_trainer("classify", c.provides) + search + c.stage);
    const std::string log = dir.file("v-" + c.provides + ".log");
    const auto status = run_hpctune({"validate", cfg}, log);
    CHECK_FALSE(status.success());
    const std::string out = read_file(log);
    CHECK_MESSAGE(out.find(c.expected) != std::string::npos, out);
  }
}

TEST_CASE("command workflow: a transfer stage's trainer: {lr: 0.01, epochs: 2} reaches the program in HPCTUNE_PARAMS") {
  // The program's own keys in a transfer stage's trainer: (not settings of the command kind) are
  // parameters of its trials, over the source's searched lr; timeout, a setting, stays one.
  TempDir dir;
  const std::string cfg = dir.write(
      "t.yaml", "name: ft\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n" + command_trainer("classify") +
                    "resources: {groups: 2}\n"
                    "stages:\n"
                    "  - name: tune\n"
                    "    kind: search\n"
                    "    search: {algorithm: random, max_trials: 2}\n"
                    "    space: {lr: {type: float, low: 0.1, high: 0.5, log: true}}\n"
                    "  - name: move\n"
                    "    kind: transfer\n"
                    "    from: tune\n"
                    "    sources: 1\n"
                    "    classes: [5, 6, 7, 8, 9]\n"
                    "    trainer: {lr: 0.01, epochs: 2, steps: 3, timeout: 5m}\n");
  const std::string db = dir.file("t.db");
  {
    const auto status = run_hpctune({"validate", cfg}, dir.file("validate.log"));
    CHECK_MESSAGE(status.success(), read_file(dir.file("validate.log")));
  }
  const auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("run.log")));
  const Run r = read_run(db);
  for (const auto& t : r.trials_of("tune")) {
    CAPTURE(t.id);
    const json params = seen_by(db, t.id).at("params");
    CHECK(params.at("lr").get<double>() >= 0.1);  // the search's own, untouched
    CHECK(!params.contains("epochs"));
  }
  const auto moved = r.trials_of("move");
  REQUIRE(moved.size() == 1);
  const store::TrialRow& target = moved.front();
  CHECK(target.state == store::TrialState::kDone);
  const json params = seen_by(db, target.id).at("params");
  CAPTURE(params.dump());
  CHECK(params.at("lr") == 0.01);  // the stage's, over the source's searched lr
  CHECK(params.at("epochs") == 2);
  CHECK(params.at("steps") == 3);
  CHECK(params.at("classes") == json::array({5, 6, 7, 8, 9}));
  CHECK(!params.contains("timeout"));  // a setting of the command kind, not a parameter
  CHECK(target.step == 3);             // the program trained the stage's steps
  CHECK(target.params.at("lr") == 0.01);  // as recorded
}
