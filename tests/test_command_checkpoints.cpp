// End to end through the hpctune binary: the checkpoint side of the command trainer's contract
// (HPCTUNE_CHECKPOINT_DIR, HPCTUNE_RESUME_FROM, HPCTUNE_MAX_STEP) with a pure-Python program,
// tests/scripts/ckpt_train.py, that saves a tree of files each step and records, attempt by
// attempt, the bytes it loaded and the params it trained with (<trial_dir>/loads.jsonl):
//   - a PBT stage over it completes, with exploits, and after every decision the member's next
//     attempt loaded exactly the bytes of the snapshot chosen and trained with the decision's params;
//     the same with trainer.persistent, every interval served by one process per group;
//   - an attempt run again after its worker was killed starts from the trial's own last checkpoint;
//   - SIGKILL of the master in the middle of an interval, then `resume`: every member done,
//     decisions kept and not repeated, the interrupted interval continued from its checkpoint.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/campaign_fixture.h"
#include "trainers/command_trainer.h"
#include "workflow/checkpoint_snapshot.h"

using namespace hpctune;
using namespace hpctune::testing;
using json = nlohmann::json;
using store::TrialState;

namespace {

namespace fs = std::filesystem;

const std::string kSource = HPCTUNE_SOURCE_DIR;
const std::string kProgram = "/usr/bin/python3 " + kSource + "/tests/scripts/ckpt_train.py";
const std::string kPythonPath = kSource + "/tools/python";

std::string pbt_config(int seed, double sleep, bool persistent = false) {
  std::ostringstream sleep_text;
  sleep_text << sleep;
  return "name: cpbt\nseed: " + std::to_string(seed) +
         "\nobjective: {metric: score, mode: max}\n"
         "trainer:\n  kind: command\n  command: \"" + kProgram + " --sleep " + sleep_text.str() + "\"\n"
         "  env: {PYTHONPATH: \"" + kPythonPath + "\"}\n  provides: [checkpoints]\n" +
         (persistent ? "  persistent: true\n" : "") +
         "resources: {groups: 2, threads: 1}\n"
         "stages:\n"
         "  - {name: pop, kind: pbt, population: 4, ready: 2, steps: 6, quantile: 0.5, "
         "space: {lr: {type: float, low: 0.02, high: 0.6, log: true}}}\n";
}

std::string trial_dir_of(const std::string& db, int64_t trial) { return db + ".trials/" + std::to_string(trial); }

// The lines of <trial_dir>/loads.jsonl: one per attempt the program ran.
std::vector<json> loads_of(const std::string& db, int64_t trial) {
  std::vector<json> out;
  std::istringstream in(read_file(trial_dir_of(db, trial) + "/loads.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}
const json* load_of(const std::vector<json>& loads, int64_t attempt) {
  for (const auto& l : loads)
    if (l.at("attempt") == attempt) return &l;
  return nullptr;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Every file under `dir` by its path relative to it, with its bytes in hex (as the program records).
std::map<std::string, std::string> files_under(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = hex(read_file(e.path().string()));
  return out;
}
std::map<std::string, std::string> recorded_files(const json& load) {
  std::map<std::string, std::string> out;
  for (auto it = load.at("loaded").begin(); it != load.at("loaded").end(); ++it)
    out[it.key()] = it.value().at("hex").get<std::string>();
  return out;
}

struct Db {
  std::vector<store::TrialRow> trials;
  std::vector<store::EventRow> events;
  std::vector<store::StageRow> stages;
  std::map<int64_t, std::vector<store::MetricRow>> metrics;
};
Db read_db(const std::string& db) {
  Db d;
  auto st = store::Store::open_readonly(db);
  REQUIRE(st.ok());
  auto c = (*st)->load_campaign();
  REQUIRE((c.ok() && *c));
  d.trials = (*st)->trials((*c)->id).value();
  d.events = (*st)->events((*c)->id, 0).value();
  // The snapshot paths events record are relative to <db>.trials (a moved campaign resumes):
  // absolute here, as the program was given them.
  for (auto& e : d.events) {
    if (!e.detail.is_object()) continue;
    for (const char* key : {"snapshot", "resume_from", "checkpoint"}) {
      if (!e.detail.contains(key) || !e.detail[key].is_string()) continue;
      const std::string path = e.detail[key].get<std::string>();
      if (path.empty()) continue;
      CHECK_MESSAGE(path.front() != '/', e.detail.dump());
      e.detail[key] = db + ".trials/" + path;
    }
  }
  d.stages = (*st)->stages((*c)->id).value();
  for (const auto& t : d.trials) d.metrics[t.id] = (*st)->metrics(t.id).value();
  return d;
}
std::vector<store::EventRow> decisions(const Db& d) {
  std::vector<store::EventRow> out;
  for (const auto& e : d.events)
    if (e.kind == "pbt_exploit" || e.kind == "pbt_continue") out.push_back(e);
  return out;
}
json without_max_step(json params) {
  params.erase("max_step");
  return params;
}

// Every member done at 6 steps; each decision once per (target, ordinal); and after every decision
// the member's next attempt that ran loaded exactly the files of the snapshot it names (the
// source's, for an exploit) and trained with its params; the snapshots are read-only.
void check_pbt_run(const std::string& db, const Db& d, bool expect_exploit) {
  REQUIRE(d.stages.size() == 1);
  CHECK(d.stages[0].state == "completed");
  REQUIRE(d.trials.size() == 4);
  for (const auto& t : d.trials) {
    CAPTURE(t.id);
    CHECK(t.state == TrialState::kDone);
    CHECK(t.step == 6);
    CHECK(t.params.at("max_step") == 6);
    std::set<std::tuple<int64_t, int64_t, std::string>> rows;
    for (const auto& m : d.metrics.at(t.id)) CHECK(rows.insert({m.attempt, m.step, m.name}).second);
    // The program saw max_step in HPCTUNE_MAX_STEP, never in HPCTUNE_PARAMS.
    for (const auto& l : loads_of(db, t.id)) {
      CHECK_FALSE(l.at("params").contains("max_step"));
      CHECK(l.at("max_step").is_number_integer());
      CHECK(l.at("checkpoint_dir") == trial_dir_of(db, t.id) + "/checkpoint");
    }
  }
  std::set<std::pair<int64_t, int64_t>> ordinals;
  int exploits = 0, checked = 0;
  for (const auto& e : decisions(d)) {
    CAPTURE(e.detail.dump());
    const int64_t target = e.trial_id;
    CHECK(ordinals.insert({target, e.detail.at("ordinal").get<int64_t>()}).second);
    const std::string from = e.detail.at("resume_from").get<std::string>();
    const json params = e.detail.at("params");
    if (e.kind == "pbt_exploit") {
      ++exploits;
      CHECK(from == e.detail.at("checkpoint"));
      CHECK(from.rfind(trial_dir_of(db, e.detail.at("source").get<int64_t>()) + "/pbt/", 0) == 0);
      CHECK(params.at("max_step") == e.detail.at("source_step").get<int64_t>() + 2);
    } else {
      CHECK(from == e.detail.at("snapshot"));
    }
    // The snapshot: whole, read-only, the program's tree.
    REQUIRE(fs::is_directory(from));
    CHECK(fs::exists(from + "/state.json"));
    CHECK(fs::exists(from + "/blob/bytes.bin"));
    CHECK_FALSE(fs::exists(from + ".tmp"));
    struct stat st {};
    REQUIRE(::stat(from.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0500);
    REQUIRE(::stat((from + "/blob").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0500);
    REQUIRE(::stat((from + "/state.json").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0400);
    const auto snapshot = files_under(from);
    // The attempt after the decision's pause (recorded by the decided attempt, or by its retry
    // when the master was killed before the pause: the retry reaches the same boundary again).
    int64_t paused = 0;
    for (const auto& p : d.events)
      if (p.kind == "trial_paused" && p.trial_id == target && p.attempt >= e.attempt && paused == 0 &&
          p.detail.at("resume_from") == from)
        paused = p.attempt;
    REQUIRE(paused > 0);
    // The first attempt after it whose program ran (one lost with the master before its program
    // started leaves no line, and the next one starts from the same place).
    const auto loads = loads_of(db, target);
    const json* next = nullptr;
    for (const auto& l : loads)
      if (l.at("attempt").get<int64_t>() > paused && (next == nullptr || l.at("attempt") < next->at("attempt"))) next = &l;
    REQUIRE(next != nullptr);
    CAPTURE(next->dump());
    CHECK(next->at("resume_from") == from);
    CHECK(recorded_files(*next) == snapshot);
    CHECK(next->at("start_step") == (e.kind == "pbt_exploit" ? e.detail.at("source_step") : e.detail.at("step")));
    CHECK(next->at("params") == without_max_step(params));
    CHECK(next->at("max_step") == params.at("max_step"));
    ++checked;
  }
  CHECK(checked >= 4);
  if (expect_exploit) CHECK(exploits >= 1);
}

void remove_run(const std::string& db) { CHECK(workflow::remove_snapshot_tree(db + ".trials").ok()); }

}  // namespace

TEST_CASE("command trainer: the checkpoint environment; the trial's own checkpoint wins over resume_from") {
  TempDir dir;
  const std::string trial_dir = dir.file("trial");
  auto run = [&](const json& params, const std::string& resume_from) {
    trainers::TrialContext ctx;
    ctx.trial_id = 7;
    ctx.trial_dir = trial_dir;
    ctx.trainer = {{"kind", "command"},
                   {"command", "env > \"$HPCTUNE_TRIAL_DIR/env.txt\"; echo {max_step} {checkpoint_dir} > \"$HPCTUNE_TRIAL_DIR/args.txt\""}};
    ctx.params = params;
    ctx.resume_from = resume_from;
    ctx.report = [](int64_t, const protocol::Metrics&) {};
    auto r = trainers::CommandTrainer().run(ctx);
    std::map<std::string, std::string> env;
    if (!r.ok()) {
      env["error"] = r.error().message();
      return env;
    }
    std::istringstream in(read_file(trial_dir + "/env.txt"));
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (line.rfind("HPCTUNE_", 0) == 0 && eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    env["args"] = read_file(trial_dir + "/args.txt");
    return env;
  };
  const std::string own = trial_dir + "/checkpoint";
  // A pbt interval: resume from the chosen snapshot, train to max_step, which is not a parameter.
  auto env = run({{"lr", 0.1}, {"max_step", 4}}, "/snapshots/000-step-2");
  REQUIRE_MESSAGE(!env.count("error"), env["error"]);
  CHECK(env["HPCTUNE_CHECKPOINT_DIR"] == own);
  CHECK(env["HPCTUNE_RESUME_FROM"] == "/snapshots/000-step-2");
  CHECK(env["HPCTUNE_MAX_STEP"] == "4");
  CHECK(json::parse(env["HPCTUNE_PARAMS"]) == json{{"lr", 0.1}});
  CHECK(env["args"] == "4 " + own + "\n");
  struct stat st {};
  REQUIRE(::stat(own.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // No limit, no checkpoint to start from: neither is set.
  env = run({{"lr", 0.1}}, "");
  CHECK(env.count("HPCTUNE_RESUME_FROM") == 0);
  CHECK(env.count("HPCTUNE_MAX_STEP") == 0);
  CHECK(env["args"] == "0 " + own + "\n");
  // The trial's own checkpoint, left by an earlier attempt, wins over resume_from.
  std::ofstream(own + "/state.json") << "{}";
  env = run({{"lr", 0.1}, {"max_step", 4}}, "/snapshots/000-step-2");
  CHECK(env["HPCTUNE_RESUME_FROM"] == own);
  // A checkpoint directory that is a link is refused, never followed.
  fs::remove_all(own);
  fs::create_directory_symlink(dir.path, own);
  env = run({{"lr", 0.1}}, "");
  REQUIRE(env.count("error") == 1);
  CHECK(env["error"].find(own + " is not a directory of this user's") != std::string::npos);
}

TEST_CASE("command pbt: a program's checkpoint tree through a PBT stage; every exploit loads the source's exact bytes") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pbt_config(5, 0.0));
  const std::string db = dir.file("p.db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"), std::chrono::seconds(120));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("run.log")));
  check_no_orphans(db);
  const Db d = read_db(db);
  check_pbt_run(db, d, /*expect_exploit=*/true);
  // After a pause the member's own checkpoint was emptied (kept in the snapshot): its next attempt
  // started from the snapshot, not from its own files.
  for (const auto& t : d.trials) {
    for (const auto& l : loads_of(db, t.id)) {
      CAPTURE(l.dump());
      if (l.at("attempt") == 1) CHECK(l.at("resume_from") == "");
      else CHECK(l.at("resume_from").get<std::string>().find("/pbt/") != std::string::npos);
    }
  }
  remove_run(db);
}

// pbt_config(5, 0.0) with `command:` set to `command` (YAML), run to its end: 4 members read back.
Db run_pbt_with_command(const TempDir& dir, const std::string& db, const std::string& command) {
  std::string cfg = pbt_config(5, 0.0);
  const std::string line = "  command: \"" + kProgram + " --sleep 0\"\n";
  REQUIRE(cfg.find(line) != std::string::npos);
  cfg.replace(cfg.find(line), line.size(), "  command: " + command + "\n");
  auto status = run_hpctune({"run", dir.write("p.yaml", cfg), "--db", db}, dir.file("run.log"), std::chrono::seconds(120));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("run.log")));
  Db d = read_db(db);
  REQUIRE(d.trials.size() == 4);
  return d;
}

// A member whose training diverged reports NaN (the helper sends it as json.dumps writes it): PBT
// judges it (ranked worst, it copies a top member, as Jaderberg et al.'s PBT does) and it finishes. Before, the helper
// left the value out, the member's interval ended with no report, and it failed.
TEST_CASE("command pbt: a member that reports NaN is judged, ranked last, and finishes") {
  TempDir dir;
  const std::string db = dir.file("p.db");
  const Db d = run_pbt_with_command(dir, db, "\"" + kProgram + " --sleep 0 --diverge-trial 2\"");
  for (const auto& t : d.trials) {
    CAPTURE(t.id);
    CHECK(t.state == TrialState::kDone);
  }
  // Its step-2 decision judged the NaN (recorded as null): an exploit when other members had reported
  // by then (ranked last), else a continue (alone at that step: nothing to compare).
  bool judged = false;
  for (const auto& e : d.events) {
    if (e.trial_id != 2 || !e.detail.is_object() || e.detail.value("step", -1) != 2) continue;
    if (e.kind == "pbt_exploit") judged = judged || e.detail.at("target_value").is_null();
    if (e.kind == "pbt_continue") judged = judged || e.detail.at("value").is_null();
  }
  CHECK(judged);
  remove_run(db);
}

// A member whose checkpoint is refused at its pause (a link out of its checkpoint directory) fails
// as if its program had; the stage and the campaign go on. Before, `hpctune run` stopped with the
// error at the first interval and every other member was left unfinished.
TEST_CASE("command pbt: a member whose checkpoint holds a link out of its directory fails alone; the others finish") {
  TempDir dir;
  const std::string plant = "if [ \"$HPCTUNE_TRIAL_ID\" = 2 ]; then ln -sf /etc/hostname \"$HPCTUNE_CHECKPOINT_DIR/outside\"; fi; "
                            "exec " + kProgram;
  const std::string db = dir.file("p.db");
  const Db d = run_pbt_with_command(dir, db, "[/bin/sh, -c, " + json(plant).dump() + ", sh]");
  for (const auto& t : d.trials) {
    CAPTURE(t.id);
    CHECK(t.state == (t.id == 2 ? TrialState::kFailed : TrialState::kDone));
  }
  const auto& failed = *std::find_if(d.trials.begin(), d.trials.end(), [](const store::TrialRow& t) { return t.id == 2; });
  CHECK(failed.error.find("checkpoint/outside is a symbolic link to '/etc/hostname', out of the checkpoint directory") !=
        std::string::npos);
  CHECK(d.stages.at(0).state == "completed");
  remove_run(db);
}

TEST_CASE("command pbt, persistent: one process per group serves every member's intervals, with the same checks") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pbt_config(5, 0.0, /*persistent=*/true));
  const std::string db = dir.file("p.db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"), std::chrono::seconds(120));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("run.log")));
  check_no_orphans(db);
  const Db d = read_db(db);
  check_pbt_run(db, d, /*expect_exploit=*/true);
  std::set<int64_t> pids;
  std::size_t attempts = 0;
  for (const auto& t : d.trials) {
    for (const auto& l : loads_of(db, t.id)) {
      pids.insert(l.at("pid").get<int64_t>());
      ++attempts;
    }
    CHECK(!fs::exists(trial_dir_of(db, t.id) + "/" + launch::kAttemptFenceFile));  // none left to reach a program
  }
  MESSAGE(attempts << " intervals run by " << pids.size() << " processes");
  CHECK(attempts >= 12);          // 4 members x 3 intervals
  CHECK(pids.size() <= 2);        // one program per group (2 groups)
  remove_run(db);
}

TEST_CASE("command trainer: an attempt run again after its worker was killed resumes from the trial's own checkpoint") {
  TempDir dir;
  const std::string cfg = dir.write(
      "c.yaml", "name: crash\nseed: 3\nobjective: {metric: score, mode: max}\n"
                "search: {algorithm: random, max_trials: 1}\n"
                "space: {lr: {type: float, low: 0.1, high: 0.2}}\n"
                "trainer:\n  kind: command\n  command: \"" + kProgram + " --steps 100 --sleep 0.4\"\n"
                "  env: {PYTHONPATH: \"" + kPythonPath + "\"}\n  max_step: 6\n"
                "resources: {groups: 1, threads: 1}\n");
  const std::string db = dir.file("c.db");
  launch::ChildProcess master = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  // Killed once attempt 1 has reported step 2.
  int64_t reported = 0;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        auto s = store::Store::open_readonly(db);
                        if (!s.ok()) return false;
                        auto m = (*s)->metrics(1);
                        if (!m.ok()) return false;
                        for (const auto& r : *m) reported = std::max(reported, r.step);
                        return reported >= 2;
                      },
                      std::chrono::seconds(30)),
                  read_file(dir.file("run.log")));
  auto pids = workers_of(db);
  REQUIRE(pids.size() == 1);
  ::kill(pids[0], SIGKILL);
  auto status = master.wait_for(std::chrono::seconds(60));
  REQUIRE_MESSAGE(status.has_value(), read_file(dir.file("run.log")));
  CHECK_MESSAGE(status->success(), read_file(dir.file("run.log")));
  check_no_orphans(db);

  const Db d = read_db(db);
  REQUIRE(d.trials.size() == 1);
  const auto& t = d.trials[0];
  CHECK(t.state == TrialState::kDone);
  CHECK(t.attempt == 2);
  CHECK(t.step == 6);  // trainer.max_step, though the program would go to 100
  const auto loads = loads_of(db, t.id);
  REQUIRE(loads.size() == 2);
  CHECK(loads[0].at("resume_from") == "");
  CHECK(loads[0].at("start_step") == 0);
  CHECK(loads[0].at("max_step") == 6);
  CHECK(loads[0].at("params") == json{{"lr", t.params.at("lr")}});
  // Attempt 2: HPCTUNE_RESUME_FROM is the trial's own checkpoint directory, and the program went on
  // from the step it had saved (at least the last one reported: it saves before it reports).
  const std::string own = trial_dir_of(db, t.id) + "/checkpoint";
  CHECK(loads[1].at("attempt") == 2);
  CHECK(loads[1].at("resume_from") == own);
  CHECK(loads[1].at("checkpoint_dir") == own);
  const int64_t start = loads[1].at("start_step").get<int64_t>();
  CHECK(start >= reported);
  CHECK(start < 6);
  std::set<int64_t> second;
  for (const auto& m : d.metrics.at(t.id))
    if (m.attempt == 2) second.insert(m.step);
  std::set<int64_t> expected;
  for (int64_t k = start + 1; k <= 6; ++k) expected.insert(k);
  CHECK(second == expected);
}

TEST_CASE("command pbt: SIGKILL of the master in the middle of an interval, then resume: nothing lost or repeated") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", pbt_config(5, 0.4));
  const std::string db = dir.file("p.db");
  launch::ChildProcess master = start_hpctune({"run", cfg, "--db", db}, dir.file("killed.log"));
  // Killed when a member in its second interval (attempt 2) has reported step 3, in the middle.
  int64_t victim = 0;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        auto s = store::Store::open_readonly(db);
                        if (!s.ok()) return false;
                        for (int64_t id = 1; id <= 4; ++id) {
                          auto m = (*s)->metrics(id);
                          if (!m.ok()) continue;
                          for (const auto& r : *m) {
                            if (r.attempt == 2 && r.step == 3) {
                              victim = id;
                              return true;
                            }
                          }
                        }
                        return false;
                      },
                      std::chrono::seconds(60)),
                  read_file(dir.file("killed.log")));
  ::kill(master.pid(), SIGKILL);
  auto killed = master.wait_for(std::chrono::seconds(10));
  REQUIRE(killed.has_value());
  CHECK(killed->signaled);
  check_no_orphans(db);
  const Db before = read_db(db);
  CHECK(before.stages[0].state == "running");
  int64_t victim_attempt = 0;
  for (const auto& t : before.trials)
    if (t.id == victim) victim_attempt = t.attempt;
  REQUIRE(victim_attempt == 2);

  auto resumed = run_hpctune({"resume", db}, dir.file("resume.log"), std::chrono::seconds(120));
  REQUIRE_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  check_no_orphans(db);
  const Db after = read_db(db);
  check_pbt_run(db, after, /*expect_exploit=*/false);
  // The decisions recorded before the kill are there, unchanged, and none was made twice.
  for (const auto& b : before.events) {
    if (b.kind.rfind("pbt_", 0) != 0 && b.kind != "trial_paused") continue;
    CAPTURE(b.id);
    const auto it = std::find_if(after.events.begin(), after.events.end(), [&](const auto& a) { return a.id == b.id; });
    REQUIRE(it != after.events.end());
    CHECK(it->detail == b.detail);
  }
  // The victim's interrupted interval went on from its own checkpoint: the retry loaded the
  // trial's checkpoint directory at step 3 or later, and nothing reported before was trained again.
  const auto loads = loads_of(db, victim);
  const json* retry = load_of(loads, victim_attempt + 1);
  REQUIRE(retry != nullptr);
  CAPTURE(retry->dump());
  CHECK(retry->at("resume_from") == trial_dir_of(db, victim) + "/checkpoint");
  CHECK(retry->at("start_step").get<int64_t>() >= 3);
  CHECK(retry->at("params") == load_of(loads, victim_attempt)->at("params"));
  for (const auto& m : after.metrics.at(victim))
    if (m.attempt == victim_attempt + 1 && m.name == "score") CHECK(m.step >= retry->at("start_step").get<int64_t>());
  remove_run(db);
}

TEST_CASE("a checkpoint snapshot and its missing parents get the trial directories' mode whatever the umask") {
  // Before, they were made with std::filesystem::create_directories: 0777 under umask 0, so with
  // storage_access: all (<db>.trials 0755) any local user could plant a checkpoint in a PBT
  // snapshot that the next member then loads.
  TempDir dir;
  const std::string trials = dir.file("c.db.trials");
  REQUIRE(::mkdir(trials.c_str(), 0755) == 0);
  REQUIRE(::chmod(trials.c_str(), 0755) == 0);
  const std::string trial = trials + "/3";
  REQUIRE(::mkdir(trial.c_str(), 0755) == 0);
  dir.write("c.db.trials/3/checkpoint-stage0.bin", "weights");
  const mode_t old = ::umask(0);
  const Status made = workflow::snapshot_trial_checkpoint(trial, "", trials + "/pbt/snapshots/3-step-2", "pbt: ");
  ::umask(old);
  REQUIRE_MESSAGE(made.ok(), made.error().message());
  for (const std::string& d : {trials + "/pbt", trials + "/pbt/snapshots", trials + "/pbt/snapshots/3-step-2"}) {
    CAPTURE(d);
    struct stat st {};
    REQUIRE(::stat(d.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0755);
  }
  CHECK(read_file(trials + "/pbt/snapshots/3-step-2/checkpoint-stage0.bin") == "weights");
}
