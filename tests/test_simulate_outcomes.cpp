// `hpctune simulate` (issue 24): where simulated trials' outcomes come from (--outcomes function,
// replay:DB, surrogate:DB), the 'simulated' mark in status and trials, and the speed of a
// 2,048-node simulation. Through the binary, against campaigns recorded by real `hpctune run`s.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "store/store.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;
using store::TrialState;

namespace {

std::vector<store::TrialRow> trials_of(const std::string& path) {
  auto db = store::Store::open(path);
  REQUIRE(db.ok());
  auto c = (*db)->load_campaign();
  REQUIRE(c.ok());
  REQUIRE(c->has_value());
  auto t = (*db)->trials((**c).id);
  REQUIRE(t.ok());
  return *t;
}

std::vector<store::MetricRow> metrics_of(const std::string& path, int64_t trial) {
  auto db = store::Store::open(path);
  REQUIRE(db.ok());
  auto m = (*db)->metrics(trial);
  REQUIRE(m.ok());
  return *m;
}

nlohmann::json simulated_event(const std::string& path) {
  auto db = store::Store::open(path);
  REQUIRE(db.ok());
  auto e = (*db)->events(1, 0);
  REQUIRE(e.ok());
  for (const auto& ev : *e) {
    if (ev.kind == "campaign_simulated") return ev.detail;
  }
  return nullptr;
}

// Random search over branin: the trials' params depend only on the seed, so the same seed proposes
// the same configurations as the recorded run, and another seed new ones.
std::string branin_config(const std::string& name, int64_t trials, double noise) {
  return "name: " + name + "\nseed: 3\nobjective: {metric: value, mode: min}\n"
         "search: {algorithm: random, max_trials: " + std::to_string(trials) + "}\n"
         "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
         "trainer: {kind: function, name: branin, steps: 4, noise: " + std::to_string(noise) + "}\n"
         "resources: {groups: 2}\n";
}

// The recorded campaign: a real `hpctune run` with the function trainer.
std::string record(TempDir& dir, const std::string& name, int64_t trials, double noise) {
  const std::string cfg = dir.write(name + ".yaml", branin_config(name, trials, noise));
  const std::string db = dir.file(name + ".db");
  const auto run = run_hpctune({"run", cfg, "--db", db}, dir.file(name + ".log"));
  REQUIRE_MESSAGE(run.success(), read_file(dir.file(name + ".log")));
  return db;
}

double value(const store::TrialRow& t, const std::string& name) {
  REQUIRE(t.metrics.is_object());
  REQUIRE(t.metrics.contains(name));
  return t.metrics[name].get<double>();
}

}  // namespace

TEST_CASE("replay: the recorded configurations give exactly the recorded curves; a new one its nearest neighbour's, and says so") {
  TempDir dir;
  const std::string rec = record(dir, "rec", 24, 0.5);
  const auto recorded = trials_of(rec);
  REQUIRE(recorded.size() == 24);
  std::map<int64_t, const store::TrialRow*> by_id;
  for (const auto& t : recorded) by_id[t.id] = &t;

  SUBCASE("the same configurations: the recorded final metrics and reports, distance 0") {
    const auto sim = run_hpctune({"simulate", dir.file("rec.yaml"), "--db", dir.file("same.db"), "--outcomes", "replay:" + rec},
                                 dir.file("same.log"));
    REQUIRE_MESSAGE(sim.success(), read_file(dir.file("same.log")));
    const auto simulated = trials_of(dir.file("same.db"));
    REQUIRE(simulated.size() == recorded.size());
    for (std::size_t i = 0; i < simulated.size(); ++i) {
      const auto& s = simulated[i];
      const auto& r = recorded[i];
      REQUIRE(s.params == r.params);
      CHECK(s.state == TrialState::kDone);
      CHECK(value(s, "simulated_distance") == 0.0);
      CHECK(value(s, "simulated_from_trial") == static_cast<double>(r.id));
      for (auto it = r.metrics.begin(); it != r.metrics.end(); ++it) CHECK(value(s, it.key()) == it.value().get<double>());
      CHECK(s.objective == r.objective);
      // The reports by step, value for value.
      const auto sm = metrics_of(dir.file("same.db"), s.id), rm = metrics_of(rec, r.id);
      REQUIRE(sm.size() == rm.size());
      for (std::size_t k = 0; k < sm.size(); ++k) {
        CHECK(sm[k].step == rm[k].step);
        CHECK(sm[k].name == rm[k].name);
        CHECK(sm[k].value == rm[k].value);
      }
    }
    const nlohmann::json ev = simulated_event(dir.file("same.db"));
    REQUIRE(ev.is_object());
    CHECK(ev["outcomes"]["outcomes"] == "replay");
    CHECK(ev["outcomes"]["recorded_trials"] == 24);
  }

  SUBCASE("a configuration whose recorded trial failed fails again, with the recorded message; the rest as recorded") {
    const std::string copy = dir.file("failed.db");
    std::filesystem::copy_file(rec, copy);
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(copy.c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw, "UPDATE trials SET state = 'failed', error = 'training diverged in epoch 1' WHERE id = 5",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
    const auto sim = run_hpctune({"simulate", dir.file("rec.yaml"), "--db", dir.file("f.db"), "--outcomes", "replay:" + copy},
                                 dir.file("f.log"));
    REQUIRE_MESSAGE(sim.success(), read_file(dir.file("f.log")));
    const auto simulated = trials_of(dir.file("f.db"));
    REQUIRE(simulated.size() == recorded.size());
    for (std::size_t i = 0; i < simulated.size(); ++i) {
      REQUIRE(simulated[i].params == recorded[i].params);
      if (recorded[i].id == 5) {
        CHECK(simulated[i].state == TrialState::kFailed);
        CHECK(simulated[i].error.find("replayed failure of the recorded trial: training diverged in epoch 1") != std::string::npos);
      } else {
        CHECK(simulated[i].state == TrialState::kDone);
      }
    }
    // Without the recorded failure (the original database) the same configuration is done.
    CHECK(simulated.size() == 24);
  }

  SUBCASE("new configurations (another seed): the nearest recorded trial's curve, its id and distance in the metrics") {
    const auto sim = run_hpctune({"simulate", dir.file("rec.yaml"), "--db", dir.file("new.db"), "--seed", "99", "--outcomes",
                                  "replay:" + rec},
                                 dir.file("new.log"));
    REQUIRE_MESSAGE(sim.success(), read_file(dir.file("new.log")));
    const auto simulated = trials_of(dir.file("new.db"));
    REQUIRE(simulated.size() == 24);
    for (const auto& s : simulated) {
      // The nearest neighbour, computed here over the range-normalised space (both ranges are 15).
      double best = INFINITY;
      int64_t best_id = 0;
      for (const auto& r : recorded) {
        const double d = std::hypot((s.params["x1"].get<double>() - r.params["x1"].get<double>()) / 15.0,
                                    (s.params["x2"].get<double>() - r.params["x2"].get<double>()) / 15.0);
        if (d < best) best = d, best_id = r.id;
      }
      CHECK(best > 0);
      CHECK(value(s, "simulated_from_trial") == static_cast<double>(best_id));
      CHECK(value(s, "simulated_distance") == doctest::Approx(best).epsilon(1e-9));
      const store::TrialRow& r = *by_id.at(best_id);
      CHECK(value(s, "value") == value(r, "value"));
      CHECK(value(s, "regret") == value(r, "regret"));
    }
    // `hpctune trial` shows where a trial's outcome came from.
    const auto shown = run_hpctune({"trial", dir.file("new.db"), std::to_string(simulated[0].id)}, dir.file("trial.log"));
    CHECK(shown.success());
    CHECK(read_file(dir.file("trial.log")).find("simulated_from_trial") != std::string::npos);
  }
}

TEST_CASE("surrogate: deterministic, and within 10% of the objective's range of the function on held-out trials") {
  TempDir dir;
  const std::string rec = record(dir, "fit", 60, 0.0);
  const std::string cfg = dir.write("held.yaml", branin_config("held", 30, 0.0));
  // Held out: seed 99 proposes configurations the recorded campaign (seed 3) does not have; the
  // function trainer's own outcomes for them are the truth.
  for (const std::string db : {"s1.db", "s2.db"}) {
    const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file(db), "--seed", "99", "--outcomes", "surrogate:" + rec},
                                 dir.file(db + ".log"));
    REQUIRE_MESSAGE(sim.success(), read_file(dir.file(db + ".log")));
  }
  const auto truth_run = run_hpctune({"simulate", cfg, "--db", dir.file("f.db"), "--seed", "99"}, dir.file("f.log"));
  REQUIRE_MESSAGE(truth_run.success(), read_file(dir.file("f.log")));
  const auto s1 = trials_of(dir.file("s1.db")), s2 = trials_of(dir.file("s2.db")), truth = trials_of(dir.file("f.db"));
  const auto fitted = trials_of(rec);
  REQUIRE(s1.size() == 30);
  REQUIRE(s2.size() == 30);
  REQUIRE(truth.size() == 30);
  double lo = INFINITY, hi = -INFINITY, mean = 0;
  for (const auto& t : fitted) {
    lo = std::min(lo, value(t, "value"));
    hi = std::max(hi, value(t, "value"));
    mean += value(t, "value") / static_cast<double>(fitted.size());
  }
  std::vector<double> errors, constant_errors;
  for (std::size_t i = 0; i < s1.size(); ++i) {
    REQUIRE(s1[i].params == truth[i].params);
    CHECK(s1[i].metrics == s2[i].metrics);  // deterministic
    CHECK(value(s1[i], "simulated_neighbours") == 5.0);
    CHECK(value(s1[i], "simulated_distance") > 0.0);
    errors.push_back(std::fabs(value(s1[i], "value") - value(truth[i], "value")));
    constant_errors.push_back(std::fabs(mean - value(truth[i], "value")));
  }
  std::sort(errors.begin(), errors.end());
  std::sort(constant_errors.begin(), constant_errors.end());
  const double median = errors[errors.size() / 2], constant = constant_errors[errors.size() / 2];
  MESSAGE("surrogate median absolute error " << median << " (recorded range " << lo << ".." << hi
                                             << "; the recorded mean's " << constant << ")");
  CHECK(median <= 0.10 * (hi - lo));
  CHECK(median <= 0.5 * constant);  // far better than predicting the recorded mean
}

TEST_CASE("--outcomes refuses a file that is not a campaign, a planted bad field, and a bad source, naming them") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", branin_config("c", 4, 0.0));
  auto refused = [&](const std::vector<std::string>& extra, const std::string& needle) {
    static int n = 0;
    const std::string log = dir.file("refused" + std::to_string(++n) + ".log");
    std::vector<std::string> args = {"simulate", cfg, "--db", dir.file("out" + std::to_string(n) + ".db")};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_hpctune(args, log);
    CHECK(!r.signaled);
    CHECK_MESSAGE(r.code == 2, read_file(log));
    CHECK_MESSAGE(read_file(log).find(needle) != std::string::npos, read_file(log));
    CHECK(read_file(log).find("internal error") == std::string::npos);
    CHECK(!std::filesystem::exists(dir.file("out" + std::to_string(n) + ".db")));
  };
  const std::string text = dir.write("notes.db", "this is not a database\n");
  refused({"--outcomes", "replay:" + text}, text);
  refused({"--outcomes", "replay:" + dir.file("missing.db")}, "missing.db");
  refused({"--outcomes", "guess:" + text}, "is not one of function, replay:DB, surrogate:DB");
  refused({"--outcomes", "replay:"}, "is not one of function, replay:DB, surrogate:DB");

  const std::string rec = record(dir, "rec", 4, 0.0);
  // The config's objective is not recorded. (A program's: the function trainer reports value and
  // regret only, and validate refuses another objective over it.)
  std::string other_text = branin_config("o", 4, 0.0);
  other_text.replace(other_text.find("metric: value"), 13, "metric: loss");
  const auto trainer_at = other_text.find("trainer: ");
  other_text.replace(trainer_at, other_text.find('\n', trainer_at) - trainer_at, "trainer: {kind: command, command: 'true'}");
  const std::string other = dir.write("other.yaml", other_text);
  {
    const auto r = run_hpctune({"simulate", other, "--db", dir.file("o.db"), "--outcomes", "surrogate:" + rec}, dir.file("o.log"));
    CHECK(r.code == 2);
    CHECK_MESSAGE(read_file(dir.file("o.log")).find("records the metric 'loss'") != std::string::npos, read_file(dir.file("o.log")));
  }
  // Planted bad fields, one copy each.
  auto plant = [&](const std::string& name, const std::string& sql) {
    const std::string copy = dir.file(name + ".db");
    std::filesystem::copy_file(rec, copy);
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(copy.c_str(), &raw) == SQLITE_OK);
    char* why = nullptr;
    const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &why);
    const std::string message = why ? why : "";
    sqlite3_free(why);
    sqlite3_close(raw);
    REQUIRE_MESSAGE(rc == SQLITE_OK, message);
    return copy;
  };
  refused({"--outcomes", "replay:" + plant("params", "UPDATE trials SET params = '[1, 2]' WHERE id = 2")},
          "trial 2: params is not an object");
  refused({"--outcomes", "replay:" + plant("metric", "UPDATE trials SET metrics = '{\"value\": \"low\"}' WHERE id = 3")},
          "trial 3: metrics.value is not a number");
  refused({"--outcomes", "surrogate:" + plant("time", "UPDATE trials SET finished_at = started_at - 5 WHERE id = 1")},
          "trial 1: finished_at - started_at");
  refused({"--outcomes", "replay:" + plant("none", "UPDATE trials SET state = 'failed'")}, "has no done trial");
}

TEST_CASE("status and trials mark a simulated campaign, with its machine and outcomes; a real one is not marked") {
  TempDir dir;
  const std::string rec = record(dir, "real", 6, 0.0);
  const auto sim = run_hpctune({"simulate", dir.file("real.yaml"), "--db", dir.file("sim.db"), "--outcomes", "replay:" + rec},
                               dir.file("sim.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("sim.log")));
  const std::string mark = "simulated (machine this-machine, outcomes replay of " + rec + ")";
  REQUIRE(run_hpctune({"status", dir.file("sim.db")}, dir.file("status.log")).success());
  CHECK_MESSAGE(read_file(dir.file("status.log")).find("mark       " + mark + "\n") != std::string::npos,
                read_file(dir.file("status.log")));
  REQUIRE(run_hpctune({"status", dir.file("sim.db"), "--format", "json"}, dir.file("status.json")).success());
  const auto js = nlohmann::json::parse(read_file(dir.file("status.json")));
  CHECK(js["campaign"]["simulated"]["mark"] == mark);
  CHECK(js["campaign"]["simulated"]["detail"]["outcomes"]["outcomes"] == "replay");
  REQUIRE(run_hpctune({"trials", dir.file("sim.db")}, dir.file("trials.log")).success());
  CHECK(read_file(dir.file("trials.log")).rfind(mark + "\ntrial", 0) == 0);
  // The function trainer's outcomes at a fixed cost per step (no machine file's model).
  REQUIRE(run_hpctune({"simulate", dir.file("real.yaml"), "--db", dir.file("f.db"), "--step-seconds", "60"}, dir.file("f.log"))
              .success());
  REQUIRE(run_hpctune({"status", dir.file("f.db")}, dir.file("fstatus.log")).success());
  CHECK(read_file(dir.file("fstatus.log")).find("mark       simulated (machine fixed step cost, outcomes function trainer)\n") !=
        std::string::npos);
  // The recorded campaign ran for real: no mark anywhere.
  REQUIRE(run_hpctune({"status", rec}, dir.file("rstatus.log")).success());
  CHECK(read_file(dir.file("rstatus.log")).find("simulated") == std::string::npos);
  REQUIRE(run_hpctune({"status", rec, "--format", "json"}, dir.file("rstatus.json")).success());
  CHECK(nlohmann::json::parse(read_file(dir.file("rstatus.json")))["campaign"]["simulated"].is_null());
  REQUIRE(run_hpctune({"trials", rec}, dir.file("rtrials.log")).success());
  CHECK(read_file(dir.file("rtrials.log")).rfind("trial", 0) == 0);
}

TEST_CASE("a 2,048-node simulation of 20,000 trials finishes within a minute") {
  TempDir dir;
  const std::string cfg = dir.write(
      "big.yaml",
      "name: big\nseed: 11\nobjective: {metric: value, mode: min}\n"
      "search: {algorithm: random, max_trials: 20000}\n"
      "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
      "trainer: {kind: function, name: branin, steps: 3, noise: 0.5}\n");
  const auto t0 = std::chrono::steady_clock::now();
  const auto sim = run_hpctune({"simulate", cfg, "--nodes", "2048", "--db", dir.file("big.db"), "--step-seconds", "60",
                                "--format", "json"},
                               dir.file("big.log"), std::chrono::seconds(120));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("big.log")));
  MESSAGE("2,048 nodes x 20,000 trials: " << wall << " s of wall time");
  CHECK(wall < 60.0);
  const auto out = nlohmann::json::parse(read_file(dir.file("big.log")));
  CHECK(out["trials"]["done"] == 20000);
  CHECK(out["nodes"] == 2048);
  // 20,000 trials of 3 x 60 s over 2,048 nodes: 10 rounds (9.77), 1,800 s and start-up.
  CHECK(out["simulated_seconds"].get<double>() >= 1800.0);
  CHECK(out["simulated_seconds"].get<double>() <= 1900.0);
  const auto trials = trials_of(dir.file("big.db"));
  REQUIRE(trials.size() == 20000);
  int64_t done = 0;
  for (const auto& t : trials) done += t.state == TrialState::kDone;
  CHECK(done == 20000);
}
