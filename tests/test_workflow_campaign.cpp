// Workflows end to end with the `hpctune` binary and the mlp trainer on a slice of Fashion-MNIST:
// lineage, and SIGKILL of the master at a stage boundary, in the middle of the ensemble stage and in
// the middle of a PBT interval, then `resume`: the campaign completes, no finished stage or trial is
// computed again, nothing recorded is lost. And a PBT exploit, end to end: the member resumes from
// the source's snapshot, whose weights are the source's at its interval's end, with the new values.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <csignal>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nn/checkpoint.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;
using nlohmann::json;
using store::TrialState;

namespace {

// The small MLP every campaign here trains: seconds per stage.
const char* const kTop =
    "objective: {metric: val_accuracy, mode: max}\n"
    "trainer: {kind: mlp, epochs: 2, hidden: 16, max_train_samples: 600, max_test_samples: 300, val_fraction: 0.2}\n"
    "resources: {groups: 2, threads: 1}\n";

std::string workflow_config(const std::string& name) {
  return "name: " + name + "\nseed: 3\n" + kTop +
         "stages:\n"
         "  - name: tune\n"
         "    kind: search\n"
         "    search: {algorithm: random, max_trials: 4}\n"
         "    space: {lr: {type: float, low: 0.02, high: 0.2, log: true}}\n"
         "    trainer: {classes: [0, 1, 2, 3, 4]}\n"
         "  - {name: blend, kind: ensemble, from: tune, retrain: {top: 1, seeds: 2}}\n"
         "  - {name: move, kind: transfer, from: tune, classes: [5, 6, 7, 8, 9], max_train_samples: 200,"
         " baseline: true, seeds: 2}\n";
}

std::string pbt_config(const std::string& name) {
  return "name: " + name + "\nseed: 4\n" + kTop +
         "stages:\n"
         "  - {name: pop, kind: pbt, population: 4, ready: 1, steps: 3, quantile: 0.5,"
         " space: {lr: {type: float, low: 0.001, high: 0.3, log: true}}}\n";
}

// Rows of a query on the database, each as strings.
std::vector<std::vector<std::string>> query(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE_MESSAGE(sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK, sqlite3_errmsg(h));
  std::vector<std::vector<std::string>> rows;
  while (sqlite3_step(s) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < sqlite3_column_count(s); ++i) {
      const unsigned char* t = sqlite3_column_text(s, i);
      row.push_back(t ? reinterpret_cast<const char*>(t) : "");
    }
    rows.push_back(std::move(row));
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return rows;
}

int64_t count(const std::string& db, const std::string& sql) { return std::stoll(query(db, sql).at(0).at(0)); }

// Every stage completed with a result, each completed once.
void check_stages_completed(const std::string& db, std::size_t stages) {
  const auto rows = query(db, "SELECT name, state, result FROM stages ORDER BY id");
  REQUIRE(rows.size() == stages);
  for (const auto& r : rows) {
    CAPTURE(r[0]);
    CHECK(r[1] == "completed");
    CHECK(count(db, "SELECT COUNT(*) FROM events WHERE kind = 'stage_completed' AND json_extract(detail, '$.stage') = '" +
                        r[0] + "'") == 1);
  }
}

// The finished trials of `before` are in `after` unchanged: same attempt, same finish, same metrics.
void check_kept(const std::vector<store::TrialRow>& before, const std::vector<store::TrialRow>& after) {
  std::map<int64_t, const store::TrialRow*> by_id;
  for (const auto& t : after) by_id[t.id] = &t;
  int64_t kept = 0;
  for (const auto& b : before) {
    if (!store::is_final(b.state)) continue;
    auto it = by_id.find(b.id);
    REQUIRE(it != by_id.end());
    CHECK(it->second->attempt == b.attempt);
    CHECK(it->second->finished_at == b.finished_at);
    CHECK(it->second->metrics == b.metrics);
    ++kept;
  }
  CHECK(kept > 0);
}

int64_t trials_of(const std::string& db, const std::string& stage) {
  return count(db, "SELECT COUNT(*) FROM trials t JOIN stages s ON s.id = t.stage_id WHERE s.name = '" + stage + "'");
}

}  // namespace

TEST_CASE("a workflow: every stage's result, lineage of the transfer and the retrained members, twins' seeds") {
  TempDir dir;
  const std::string db = dir.file("w.db");
  auto run = run_hpctune({"run", dir.write("w.yaml", workflow_config("wf")), "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(run.success(), read_file(dir.file("run.log")));
  check_stages_completed(db, 3);
  CHECK(trials_of(db, "tune") == 4);
  CHECK(trials_of(db, "blend") == 2);
  CHECK(trials_of(db, "move") == 4);
  // Each transfer target names its source, a tune trial; its baseline twin has none, and its seed.
  const auto targets = query(db, "SELECT t.id, t.seq, t.parent_trial_id FROM trials t "
                                 "JOIN stages s ON s.id = t.stage_id WHERE s.name = 'move' AND "
                                 "json_extract(t.meta, '$.role') = 'target'");
  REQUIRE(targets.size() == 2);
  for (const auto& t : targets) {
    CHECK(count(db, "SELECT COUNT(*) FROM lineage l JOIN trials p ON p.id = l.parent_trial_id JOIN stages s ON "
                    "s.id = p.stage_id WHERE s.name = 'tune' AND l.relation = 'transfer_source' AND l.child_trial_id = " +
                        t[0]) == 1);
    CHECK_FALSE(t[2].empty());
    // (Seeds are compared in SQL: a 64-bit seed above 2^63 reads back from JSON as a float.)
    CHECK(count(db, "SELECT COUNT(*) FROM trials b WHERE json_extract(b.meta, '$.baseline_of') = " + t[1] +
                    " AND json_extract(b.meta, '$.seed') = (SELECT json_extract(meta, '$.seed') FROM trials WHERE id = " +
                    t[0] + ") AND json_extract(b.params, '$.init_from') IS NULL AND b.stage_id = (SELECT stage_id FROM "
                    "trials WHERE id = " + t[0] + ")") == 1);
  }
  // The retrained members name the configuration they retrain.
  CHECK(count(db, "SELECT COUNT(*) FROM lineage WHERE relation = 'retrain_of'") == 2);
  const json blend = json::parse(query(db, "SELECT result FROM stages WHERE name = 'blend'")[0][0]);
  CHECK(blend["retrained"] == 2);
  CHECK(blend["candidates"].get<int>() >= 4);
  const json move = json::parse(query(db, "SELECT result FROM stages WHERE name = 'move'")[0][0]);
  CHECK(move["target"]["test_accuracy"].is_number());
  CHECK(move["baseline"]["test_accuracy"].is_number());
}

TEST_CASE("SIGKILL of the master at a stage boundary, then resume: the stage completes once, no trial is redone") {
  TempDir dir;
  const std::string db = dir.file("w.db");
  const std::string cfg = dir.write("w.yaml", workflow_config("wf-boundary"));
  // The first stage's result is written, not committed: the master dies with the whole turn.
  auto killed = run_hpctune({"run", cfg, "--db", db, "--failpoint", "stage-completed", "--failpoint-hit", "1"},
                            dir.file("killed.log"));
  CHECK(killed.signaled);
  CHECK(killed.signal == SIGKILL);
  check_no_orphans(db);
  const auto before = read_trials(db);
  CHECK(before.size() == 4);  // tune's trials, all done; nothing of the later stages began
  CHECK(query(db, "SELECT state FROM stages WHERE name = 'tune'")[0][0] == "running");
  auto resumed = run_hpctune({"resume", db}, dir.file("resume.log"));
  REQUIRE_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  check_no_orphans(db);
  check_stages_completed(db, 3);
  check_kept(before, read_trials(db));
  CHECK(trials_of(db, "tune") == 4);
  CHECK(count(db, "SELECT COUNT(*) FROM trials WHERE state != 'done'") == 0);
}

TEST_CASE("SIGKILL of the master in the middle of the ensemble stage, then resume: retrained members kept") {
  TempDir dir;
  const std::string db = dir.file("w.db");
  const std::string cfg = dir.write("w.yaml", workflow_config("wf-blend"));
  // Results 1-4 are tune's; the 6th comes while the ensemble's retrained members and the transfer
  // trials run (the later stages begin together once tune completes).
  auto killed = run_hpctune({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "6"},
                            dir.file("killed.log"));
  CHECK(killed.signaled);
  check_no_orphans(db);
  const auto before = read_trials(db);
  CHECK(query(db, "SELECT state FROM stages WHERE name = 'tune'")[0][0] == "completed");
  CHECK(query(db, "SELECT state FROM stages WHERE name = 'blend'")[0][0] == "running");
  CHECK(trials_of(db, "blend") >= 1);
  auto resumed = run_hpctune({"resume", db}, dir.file("resume.log"));
  REQUIRE_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  check_no_orphans(db);
  check_stages_completed(db, 3);
  check_kept(before, read_trials(db));
  // Nothing proposed twice: the retrain and transfer budgets, no more.
  CHECK(trials_of(db, "tune") == 4);
  CHECK(trials_of(db, "blend") == 2);
  CHECK(trials_of(db, "move") == 4);
  CHECK(count(db, "SELECT COUNT(*) FROM trials WHERE state != 'done'") == 0);
}

TEST_CASE("SIGKILL of the master in the middle of a PBT interval, then resume: every member trains to the end") {
  TempDir dir;
  const std::string db = dir.file("p.db");
  const std::string cfg = dir.write("p.yaml", pbt_config("pbt-kill"));
  // 4 members x 3 intervals: 12 attempt ends; the 6th is in the middle of the second interval.
  auto killed = run_hpctune({"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "6"},
                            dir.file("killed.log"));
  CHECK(killed.signaled);
  check_no_orphans(db);
  const int64_t decisions_before = count(db, "SELECT COUNT(*) FROM events WHERE kind LIKE 'pbt_%'");
  CHECK(decisions_before > 0);
  auto resumed = run_hpctune({"resume", db}, dir.file("resume.log"));
  REQUIRE_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  check_no_orphans(db);
  check_stages_completed(db, 1);
  // Every member done at the last step, no member twice.
  CHECK(count(db, "SELECT COUNT(*) FROM trials") == 4);
  CHECK(count(db, "SELECT COUNT(*) FROM trials WHERE state = 'done' AND step = 3") == 4);
  // Each decision is recorded once: one per member and boundary (steps 1 and 2), whatever the restart.
  CHECK(count(db, "SELECT COUNT(*) FROM events WHERE kind IN ('pbt_exploit', 'pbt_continue')") == 8);
  CHECK(count(db, "SELECT COUNT(DISTINCT trial_id || ':' || json_extract(detail, '$.ordinal')) FROM events "
                  "WHERE kind IN ('pbt_exploit', 'pbt_continue')") == 8);
  CHECK(count(db, "SELECT COUNT(*) FROM events WHERE kind LIKE 'pbt_%'") >= decisions_before);
  // Every member's reports cover steps 1..3.
  for (const auto& m : query(db, "SELECT id FROM trials")) {
    CAPTURE(m[0]);
    CHECK(count(db, "SELECT COUNT(DISTINCT step) FROM metrics WHERE name = 'val_accuracy' AND trial_id = " + m[0]) == 3);
  }
}

TEST_CASE("a PBT exploit, end to end: the source's weights at its interval's end, trained with the new values") {
  TempDir dir;
  const std::string db = dir.file("p.db");
  auto run = run_hpctune({"run", dir.write("p.yaml", pbt_config("pbt-exploit")), "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(run.success(), read_file(dir.file("run.log")));
  // With half the population exploiting at every boundary, there are exploits.
  const auto exploits = query(db, "SELECT trial_id, detail FROM events WHERE kind = 'pbt_exploit'");
  REQUIRE(!exploits.empty());
  CHECK(count(db, "SELECT COUNT(*) FROM lineage WHERE relation = 'pbt_exploit'") >= 1);
  for (const auto& e : exploits) {
    const json d = json::parse(e[1]);
    CAPTURE(d.dump());
    // The snapshot holds the source's model at the step it was judged at.
    auto snapshot = nn::read_trial_checkpoint(d["checkpoint"].get<std::string>());
    REQUIRE(snapshot.ok());
    CHECK(snapshot->epoch == d["source_step"].get<int64_t>());
    // The member's next attempt started from that snapshot with the explored values.
    const json explore = json::parse(query(db, "SELECT detail FROM events WHERE kind = 'pbt_explore' AND trial_id = " +
                                                   e[0] + " AND json_extract(detail, '$.step') = " +
                                                   std::to_string(d["step"].get<int64_t>()))
                                         .at(0)
                                         .at(0));
    CHECK(d["params"]["lr"] == explore["new"]["lr"]);
    CHECK(d["resume_from"] == d["checkpoint"]);
    const std::string logs = read_file(dir.file("p.db.trials/logs/group-0.log")) +
                             read_file(dir.file("p.db.trials/logs/group-1.log"));
    CHECK(logs.find("resumed from " + d["checkpoint"].get<std::string>()) != std::string::npos);
  }
}
