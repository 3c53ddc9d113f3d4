// End to end through the hpctune binary (issue 21, finding 10): a stage that fails does not strand
// the campaign. A search whose every trial fails (its data files are damaged), an ensemble over
// it, and an independent healthy search: the failed stages are recorded failed with their reason
// (shown by `status`), the independent stage runs to its end, no trial is left running, `run`
// exits non-zero, and `resume` runs what can still run and leaves nothing running. A transfer
// stage whose every trial failed is failed too, and `run` exits non-zero.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;
using store::TrialState;

namespace {

const char* const kTrainer =
    "trainer: {kind: mlp, epochs: 1, max_train_samples: 400, max_test_samples: 200, hidden: 16}\n";

// A data directory with the four files the classifier reads, whose image files end after their
// headers: `hpctune validate`, which reads the headers and labels only, takes it, and every trial
// that reads it fails when it loads its images. Labels 0..9, one image each.
std::string damaged_data(const TempDir& dir) {
  const std::string d = dir.file("damaged-data");
  std::filesystem::create_directories(d);
  const std::string count("\0\0\0\x0a", 4);
  const std::string images = std::string("\0\0\x08\x03", 4) + count + std::string("\0\0\0\x1c\0\0\0\x1c", 8);
  std::string labels = std::string("\0\0\x08\x01", 4) + count;
  for (char label = 0; label < 10; ++label) labels += label;
  for (const char* prefix : {"train", "t10k"}) {
    dir.write(std::string("damaged-data/") + prefix + "-images-idx3-ubyte.gz", images);
    dir.write(std::string("damaged-data/") + prefix + "-labels-idx1-ubyte.gz", labels);
  }
  return d;
}

// bad: a search whose trials all fail; blend: an ensemble over it; good: an independent search.
std::string stranded_config(const std::string& damaged, int good_trials) {
  std::string y = "name: strand\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n";
  y += kTrainer;
  y += "resources: {groups: 2}\nstages:\n";
  y += "  - name: bad\n    kind: search\n    search: {algorithm: random, max_trials: 2}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  y += "    trainer: {data: " + damaged + "}\n";
  y += "  - {name: blend, kind: ensemble, from: bad, method: greedy}\n";
  y += "  - name: good\n    kind: search\n    search: {algorithm: random, max_trials: " + std::to_string(good_trials) +
       "}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  return y;
}

struct Snapshot {
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;
  std::vector<store::TrialRow> trials;
  const store::StageRow& stage(const std::string& name) const {
    for (const auto& s : stages) {
      if (s.name == name) return s;
    }
    FAIL("no stage " << name);
    return stages.front();
  }
  std::vector<store::TrialRow> trials_of(const std::string& name) const {
    std::vector<store::TrialRow> out;
    const int64_t id = stage(name).id;
    for (const auto& t : trials) {
      if (t.stage_id == id) out.push_back(t);
    }
    return out;
  }
};

Snapshot read_db(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  Snapshot snap;
  snap.campaign = **c;
  auto stages = (*s)->stages(snap.campaign.id);
  REQUIRE(stages.ok());
  snap.stages = *stages;
  auto trials = (*s)->trials(snap.campaign.id);
  REQUIRE(trials.ok());
  snap.trials = *trials;
  return snap;
}

// Every stage and every trial in a final state: nothing "running" with no process behind it.
void check_all_final(const Snapshot& s) {
  CHECK(s.campaign.state == "failed");
  for (const auto& st : s.stages) {
    INFO("stage " << st.name);
    CHECK((st.state == "completed" || st.state == "failed"));
  }
  for (const auto& t : s.trials) {
    INFO("trial " << t.id << " is " << store::to_string(t.state));
    CHECK((t.state == TrialState::kDone || t.state == TrialState::kPruned || t.state == TrialState::kFailed ||
           t.state == TrialState::kInterrupted));
  }
}

void check_outcome(const Snapshot& s, int good_trials) {
  check_all_final(s);
  CHECK(s.stage("bad").state == "failed");
  CHECK(s.stage("blend").state == "failed");
  CHECK(s.stage("good").state == "completed");
  CHECK(s.trials_of("bad").size() == 2);
  for (const auto& t : s.trials_of("bad")) CHECK(t.state == TrialState::kFailed);
  const auto good = s.trials_of("good");
  CHECK(good.size() == static_cast<std::size_t>(good_trials));
  for (const auto& t : good) CHECK(t.state == TrialState::kDone);
}

// `hpctune status` names each failed stage with its reason.
void check_status_reason(const TempDir& dir, const std::string& db) {
  const std::string log = dir.file("status.log");
  const auto st = run_hpctune({"status", db}, log);
  const std::string out = read_file(log);
  CHECK_MESSAGE(st.success(), out);
  CHECK_MESSAGE(out.find("state      failed") != std::string::npos, out);
  CHECK_MESSAGE(out.find("reason     stage 'bad' (search): none of its 2 trials succeeded") != std::string::npos, out);
  CHECK_MESSAGE(out.find("reason     stage 'blend' (ensemble): stage 'bad' it depends on failed: none of its 2 trials "
                         "succeeded") != std::string::npos,
                out);
}

}  // namespace

TEST_CASE("a search whose trials all fail, an ensemble over it and an independent search: every state final, "
          "the reason shown, the independent stage completed; resume leaves nothing running") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", stranded_config(damaged_data(dir), 3));
  const std::string db = dir.file("c.db");
  const std::string run_log = dir.file("run.log");
  const auto run = run_hpctune({"run", cfg, "--db", db}, run_log, std::chrono::seconds(240));
  CHECK_MESSAGE(!run.success(), read_file(run_log));
  CHECK_MESSAGE(read_file(run_log).find("stage 'bad' (search) failed") != std::string::npos, read_file(run_log));
  check_no_orphans(db);
  check_outcome(read_db(db), 3);
  check_status_reason(dir, db);

  // resume: the failed stages are tried again and fail again with their reasons; nothing runs for
  // ever, nothing finished is run again.
  const std::string resume_log = dir.file("resume.log");
  const auto resumed = run_hpctune({"resume", db}, resume_log, std::chrono::seconds(240));
  CHECK_MESSAGE(!resumed.success(), read_file(resume_log));
  check_no_orphans(db);
  check_outcome(read_db(db), 3);
  check_status_reason(dir, db);
}

TEST_CASE("the master killed in the middle of the independent stage: resume finishes it and ends failed") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", stranded_config(damaged_data(dir), 6));
  const std::string db = dir.file("c.db");
  const std::string killed_log = dir.file("killed.log");
  // The third result recorded (of either search) kills the master before its commit.
  const auto killed = run_hpctune({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "3"},
                                  killed_log, std::chrono::seconds(240));
  REQUIRE_MESSAGE(killed.signaled, read_file(killed_log));
  check_no_orphans(db);
  CHECK(read_db(db).campaign.state == "running");  // a crashed master: resume picks it up

  const std::string resume_log = dir.file("resume.log");
  const auto resumed = run_hpctune({"resume", db}, resume_log, std::chrono::seconds(240));
  CHECK_MESSAGE(!resumed.success(), read_file(resume_log));
  check_no_orphans(db);
  check_outcome(read_db(db), 6);
  check_status_reason(dir, db);
}

TEST_CASE("a transfer stage whose every trial failed is failed, and run exits non-zero") {
  TempDir dir;
  std::string y = "name: xfer\nseed: 4\nobjective: {metric: val_accuracy, mode: max}\n";
  y += kTrainer;
  y += "resources: {groups: 2}\nstages:\n";
  y += "  - name: tune\n    kind: search\n    search: {algorithm: random, max_trials: 2}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  y += "    trainer: {classes: [0, 1, 2, 3, 4]}\n";
  y += "  - name: move\n    kind: transfer\n    from: [tune]\n    classes: [5, 6, 7, 8, 9]\n"
       "    max_train_samples: 300\n    baseline: true\n";
  y += "    trainer: {data: " + damaged_data(dir) + "}\n";
  const std::string cfg = dir.write("c.yaml", y);
  const std::string db = dir.file("c.db");
  const std::string run_log = dir.file("run.log");
  const auto run = run_hpctune({"run", cfg, "--db", db}, run_log, std::chrono::seconds(240));
  CHECK_MESSAGE(!run.success(), read_file(run_log));
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  check_all_final(s);
  CHECK(s.stage("tune").state == "completed");
  CHECK(s.stage("move").state == "failed");
  REQUIRE(!s.trials_of("move").empty());
  for (const auto& t : s.trials_of("move")) CHECK(t.state == TrialState::kFailed);
  const std::string log = dir.file("status.log");
  (void)run_hpctune({"status", db}, log);
  CHECK_MESSAGE(read_file(log).find("reason     stage 'move' (transfer): none of its") != std::string::npos,
                read_file(log));
}

// Issue 36, item 4: search.max_failures stops the campaign while the failing search runs; the
// stages that depend on it can never run, so they end failed with the reason, not pending.
TEST_CASE("search.max_failures stops a search stage: the stages that depend on it are failed with the reason") {
  TempDir dir;
  std::string y = "name: stop\nseed: 5\nobjective: {metric: val_accuracy, mode: max}\n";
  y += kTrainer;
  y += "resources: {groups: 2}\nstages:\n";
  // 8 trials budgeted, every one fails: the default search.max_failures (5) stops the campaign first.
  y += "  - name: bad\n    kind: search\n    search: {algorithm: random, max_trials: 8}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  y += "    trainer: {data: " + damaged_data(dir) + ", classes: [0, 1, 2, 3, 4]}\n";
  y += "  - {name: blend, kind: ensemble, from: bad, method: greedy}\n";
  y += "  - name: move\n    kind: transfer\n    from: [bad]\n    classes: [5, 6, 7, 8, 9]\n    max_train_samples: 300\n";
  const std::string cfg = dir.write("c.yaml", y);
  const std::string db = dir.file("c.db");
  const std::string run_log = dir.file("run.log");
  const auto run = run_hpctune({"run", cfg, "--db", db}, run_log, std::chrono::seconds(240));
  const std::string out = read_file(run_log);
  CHECK_MESSAGE(!run.success(), out);
  const std::string why = "trials failed before any succeeded (search.max_failures = 5)";
  CHECK_MESSAGE(out.find("stopped: ") != std::string::npos, out);
  // The campaign's end names every failed stage, the dependents with the stage they depend on.
  CHECK_MESSAGE(out.find("stage 'blend' (ensemble) failed: stage 'bad' it depends on failed: ") != std::string::npos, out);
  CHECK_MESSAGE(out.find("stage 'move' (transfer) failed: stage 'bad' it depends on failed: ") != std::string::npos, out);
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  CHECK(s.campaign.state == "failed");
  for (const auto& t : s.trials) {
    INFO("trial " << t.id << " is " << store::to_string(t.state));
    CHECK((t.state != TrialState::kRunning && t.state != TrialState::kAssigned));
  }
  CHECK(s.stage("bad").state == "failed");
  CHECK(s.stage("bad").reason.find(why) != std::string::npos);
  for (const char* name : {"blend", "move"}) {
    INFO("stage " << name);
    CHECK(s.stage(name).state == "failed");
    CHECK(s.stage(name).reason.rfind("stage 'bad' it depends on failed: ", 0) == 0);
    CHECK(s.stage(name).reason.find(why) != std::string::npos);
    CHECK(s.trials_of(name).empty());
  }
  const std::string log = dir.file("status.log");
  (void)run_hpctune({"status", db}, log);
  const std::string st = read_file(log);
  CHECK_MESSAGE(st.find("state      failed") != std::string::npos, st);
  CHECK_MESSAGE(st.find("reason     stage 'move' (transfer): stage 'bad' it depends on failed: ") != std::string::npos, st);
}

TEST_CASE("damaged prediction files: the ensemble fails alone with its reason after resume; the others complete") {
  TempDir dir;
  // One group: tune's trials run first, so tune is the first stage to complete.
  std::string y = "name: damaged\nseed: 5\nobjective: {metric: val_accuracy, mode: max}\n";
  y += kTrainer;
  y += "resources: {groups: 1}\nstages:\n";
  y += "  - name: tune\n    kind: search\n    search: {algorithm: random, max_trials: 2}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  y += "  - {name: blend, kind: ensemble, from: tune, method: greedy}\n";
  y += "  - name: other\n    kind: search\n    search: {algorithm: random, max_trials: 2}\n";
  y += "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n";
  const std::string cfg = dir.write("c.yaml", y);
  const std::string db = dir.file("c.db");
  // The master dies as tune's completion is written (not committed).
  const auto killed = run_hpctune({"run", cfg, "--db", db, "--failpoint", "stage-completed", "--failpoint-hit", "1"},
                                  dir.file("killed.log"), std::chrono::seconds(240));
  REQUIRE_MESSAGE(killed.signaled, read_file(dir.file("killed.log")));
  REQUIRE_MESSAGE(read_file(dir.file("killed.log")).find("stage 'tune' (search) completed") != std::string::npos,
                  read_file(dir.file("killed.log")));
  check_no_orphans(db);
  // Every prediction file of tune's trials is damaged before the ensemble reads them.
  int damaged = 0;
  for (const auto& t : read_db(db).trials_of("tune")) {
    for (const auto& e : std::filesystem::directory_iterator(db + ".trials/" + std::to_string(t.id))) {
      if (e.path().extension() != ".npy") continue;
      dir.write(std::filesystem::relative(e.path(), dir.path).string(), "damaged\n");
      ++damaged;
    }
  }
  REQUIRE(damaged > 0);

  const std::string resume_log = dir.file("resume.log");
  const auto resumed = run_hpctune({"resume", db}, resume_log, std::chrono::seconds(240));
  CHECK_MESSAGE(!resumed.success(), read_file(resume_log));
  check_no_orphans(db);
  const Snapshot s = read_db(db);
  check_all_final(s);
  CHECK(s.stage("tune").state == "completed");
  CHECK(s.stage("other").state == "completed");
  CHECK(s.trials_of("other").size() == 2);
  CHECK(s.stage("blend").state == "failed");
  CHECK_MESSAGE(s.stage("blend").reason.rfind("could not finish: ", 0) == 0, s.stage("blend").reason);
  const std::string log = dir.file("status.log");
  (void)run_hpctune({"status", db}, log);
  CHECK_MESSAGE(read_file(log).find("reason     stage 'blend' (ensemble): could not finish: ") != std::string::npos,
                read_file(log));
}
