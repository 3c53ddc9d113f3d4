// `hpctune simulate` (simulate/simulator.h, issue 24): the campaign's real master on simulated
// time. Through the binary, against real `hpctune run`s of the same configs.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <cmath>
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

struct Recorded {
  store::CampaignRow campaign;
  std::vector<store::TrialRow> trials;
  std::vector<std::vector<store::MetricRow>> metrics;  // per trial
  std::vector<store::EventRow> events;
};

Recorded read_db(const std::string& path) {
  auto db = store::Store::open(path);
  REQUIRE(db.ok());
  Recorded r;
  auto c = (*db)->load_campaign();
  REQUIRE(c.ok());
  REQUIRE(c->has_value());
  r.campaign = **c;
  auto t = (*db)->trials(r.campaign.id);
  REQUIRE(t.ok());
  r.trials = *t;
  for (const auto& trial : r.trials) {
    auto m = (*db)->metrics(trial.id);
    REQUIRE(m.ok());
    r.metrics.push_back(*m);
  }
  auto e = (*db)->events(r.campaign.id, 0);
  REQUIRE(e.ok());
  r.events = *e;
  return r;
}

int64_t count_events(const Recorded& r, const std::string& kind) {
  int64_t n = 0;
  for (const auto& e : r.events) n += e.kind == kind;
  return n;
}

// tpe over branin: each trial's suggestion depends on the results before it, so equal trials in
// equal order mean equal results too.
std::string function_config(int64_t trials, int64_t groups, const std::string& extra = "") {
  return "name: simtest\nseed: 11\nobjective: {metric: value, mode: min}\n"
         "search: {algorithm: tpe, max_trials: " + std::to_string(trials) + "}\n"
         "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
         "trainer: {kind: function, name: branin, steps: 3, noise: 0.5}\n"
         "resources: {groups: " + std::to_string(groups) + extra + "}\n";
}

}  // namespace

TEST_CASE("simulate gives the same trials, in the same order, with the same results as a real run (1 group)") {
  TempDir dir;
  const std::string cfg = dir.write("f.yaml", function_config(14, 1));
  const auto real = run_hpctune({"run", cfg, "--db", dir.file("real.db"), "--seed", "5"}, dir.file("real.log"));
  REQUIRE_MESSAGE(real.success(), read_file(dir.file("real.log")));
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("sim.db"), "--seed", "5", "--step-seconds", "30"},
                               dir.file("sim.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("sim.log")));
  CHECK(read_file(dir.file("sim.log")).find("14 done") != std::string::npos);

  const Recorded r = read_db(dir.file("real.db")), s = read_db(dir.file("sim.db"));
  CHECK(s.campaign.state == "completed");
  CHECK(s.campaign.seed == 5);
  REQUIRE(r.trials.size() == 14);
  REQUIRE(s.trials.size() == r.trials.size());
  for (std::size_t i = 0; i < r.trials.size(); ++i) {
    INFO("trial seq " << r.trials[i].seq);
    CHECK(s.trials[i].seq == r.trials[i].seq);
    CHECK(s.trials[i].params == r.trials[i].params);
    CHECK(s.trials[i].state == TrialState::kDone);
    CHECK(s.trials[i].state == r.trials[i].state);
    REQUIRE(s.trials[i].objective.has_value());
    REQUIRE(r.trials[i].objective.has_value());
    CHECK(*s.trials[i].objective == *r.trials[i].objective);  // bit for bit: the same code
    REQUIRE(s.metrics[i].size() == r.metrics[i].size());
    for (std::size_t k = 0; k < r.metrics[i].size(); ++k) {
      CHECK(s.metrics[i][k].step == r.metrics[i][k].step);
      CHECK(s.metrics[i][k].name == r.metrics[i][k].name);
      CHECK(s.metrics[i][k].value == r.metrics[i][k].value);
    }
  }
  // Marked simulated; the real one is not. Its times are simulated: 3 steps of 30 s per trial, one group.
  CHECK(count_events(s, "campaign_simulated") == 1);
  CHECK(count_events(r, "campaign_simulated") == 0);
  const double span = s.trials.back().finished_at - s.trials.front().started_at;
  CHECK(span >= 14 * 90.0 - 1);
  CHECK(span <= 14 * 90.0 + 10);
  // `status` reads it as any campaign.
  const auto status = run_hpctune({"status", dir.file("sim.db")}, dir.file("status.log"));
  CHECK(status.success());
  CHECK(read_file(dir.file("status.log")).find("completed") != std::string::npos);
}

TEST_CASE("idle groups change nothing: a genetic search of population 4 on 8 and on 256 groups, trial for trial and turn for turn") {
  // Each generation's 4 members run at once on groups 0-3 either way: the same trials, results,
  // groups and simulated times. And the same master turns: the groups left idle send nothing and
  // are sent nothing (no heartbeats travel in a simulation), so they cost no event (issue 36: 20,000
  // trials of a population of 10 on 2,048 groups took 507 s, heartbeats of idle groups included).
  TempDir dir;
  const std::string text = "name: idle\nseed: 4\nobjective: {metric: value, mode: min}\n"
                           "search: {algorithm: genetic, max_trials: 40, settings: {population: 4}}\n"
                           "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
                           "trainer: {kind: function, name: branin, steps: 3, seconds_per_step: 30, noise: 0.5}\n"
                           "resources: {groups: 8}\n";
  const std::string cfg = dir.write("idle.yaml", text);
  nlohmann::json out[2];
  Recorded rec[2];
  const char* nodes[2] = {"8", "256"};
  for (int k = 0; k < 2; ++k) {
    const std::string db = dir.file(std::string("idle") + nodes[k] + ".db"), log = dir.file(std::string("idle") + nodes[k] + ".log");
    const auto sim = run_hpctune({"simulate", cfg, "--nodes", nodes[k], "--db", db, "--format", "json"}, log);
    REQUIRE_MESSAGE(sim.success(), read_file(log));
    out[k] = nlohmann::json::parse(read_file(log));
    rec[k] = read_db(db);
  }
  CHECK(out[1]["nodes"] == 256);
  CHECK(out[0]["trials"]["done"] == 40);
  CHECK(out[1]["trials"] == out[0]["trials"]);
  CHECK(out[1]["master_turns"] == out[0]["master_turns"]);
  CHECK(out[1]["simulated_seconds"] == out[0]["simulated_seconds"]);
  // The frames: 248 more groups say hello and ready, and are welcomed and shut down; nothing else.
  REQUIRE(out[0].contains("frames"));
  CHECK(out[1]["frames"]["to_master"].get<int64_t>() - out[0]["frames"]["to_master"].get<int64_t>() == 2 * 248);
  CHECK(out[1]["frames"]["to_groups"].get<int64_t>() - out[0]["frames"]["to_groups"].get<int64_t>() == 2 * 248);
  REQUIRE(rec[0].trials.size() == 40);
  REQUIRE(rec[1].trials.size() == rec[0].trials.size());
  for (std::size_t i = 0; i < rec[0].trials.size(); ++i) {
    const auto &a = rec[0].trials[i], &b = rec[1].trials[i];
    INFO("trial seq " << a.seq);
    CHECK(b.seq == a.seq);
    CHECK(b.params == a.params);
    CHECK(b.state == a.state);
    CHECK(b.objective == a.objective);  // bit for bit
    CHECK(b.group_id == a.group_id);
    CHECK(a.group_id < 4);
    CHECK(b.started_at - rec[1].campaign.created_at == doctest::Approx(a.started_at - rec[0].campaign.created_at).epsilon(1e-9));
    CHECK(b.finished_at - rec[1].campaign.created_at == doctest::Approx(a.finished_at - rec[0].campaign.created_at).epsilon(1e-9));
    REQUIRE(rec[1].metrics[i].size() == rec[0].metrics[i].size());
    for (std::size_t m = 0; m < rec[0].metrics[i].size(); ++m) CHECK(rec[1].metrics[i][m].value == rec[0].metrics[i][m].value);
  }
}

TEST_CASE("simulated time advances only through the clock: 1,000 trials of 60 simulated seconds in seconds of wall time") {
  TempDir dir;
  // random search: tpe's own cost over 1,000 trials is not what is measured here.
  std::string text = function_config(1000, 4, ", heartbeat_interval: 30s, heartbeat_timeout: 120s");
  text.replace(text.find("tpe"), 3, "random");
  const std::string cfg = dir.write("big.yaml", text);
  const auto t0 = std::chrono::steady_clock::now();
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("big.db"), "--step-seconds", "60", "--format", "json"},
                               dir.file("big.log"));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("big.log")));
  MESSAGE("1,000 simulated trials took " << wall << " s of wall time");
  CHECK(wall < 10.0);
  const auto out = nlohmann::json::parse(read_file(dir.file("big.log")));
  CHECK(out["simulated"] == true);
  CHECK(out["trials"]["done"] == 1000);
  CHECK(out["nodes"] == 4);
  // 1,000 trials x 3 steps x 60 s over 4 groups: 45,000 simulated seconds (12.5 h), and a little more.
  const double simulated = out["simulated_seconds"].get<double>();
  CHECK(simulated >= 45000.0);
  CHECK(simulated <= 45000.0 + 1000);
  const Recorded s = read_db(dir.file("big.db"));
  REQUIRE(s.trials.size() == 1000);
  double first = INFINITY, last = 0;
  for (const auto& t : s.trials) {
    CHECK(t.state == TrialState::kDone);
    CHECK(t.finished_at - t.started_at >= 180.0 - 1e-6);
    CHECK(t.finished_at - t.started_at <= 181.0);
    first = std::min(first, t.started_at);
    last = std::max(last, t.finished_at);
  }
  CHECK(last - first >= 45000.0);
  CHECK(s.campaign.finished_at - s.campaign.created_at >= 45000.0);
}

TEST_CASE("a machine of fewer cores than ranks: the busy ranks share them, step by step, and idle groups use none") {
  TempDir dir;
  // 2 cores (nodes 1 x ranks_per_node 2); 4 groups of 1 rank; 5 trials of 3 steps of 1 s each.
  const std::string machine = dir.write(
      "two-cores.yaml",
      "name: two-cores\ncalibrated_nodes: 1\nranks_per_node: 2\nnodes: 1\n"
      "compute: {mlp_gflops: 10, cnn_gflops: 3, image_overhead_us: 0}\n"
      "network:\n  intra_node: {bandwidth_gb_s: 5, latency_us: 2}\n  inter_node: {bandwidth_gb_s: 1, latency_us: 8}\n"
      "  stage_handoff_us: 100\nstartup: {seconds: 1, per_rank_seconds: 0, trial_seconds: 0.5}\ndisk: {bandwidth_mb_s: 400}\n");
  std::string text = function_config(5, 4, ", heartbeat_interval: 30s, heartbeat_timeout: 120s");
  text.replace(text.find("tpe"), 3, "random");
  text.replace(text.find("noise: 0.5"), 10, "noise: 0.5, seconds_per_step: 1");
  const std::string cfg = dir.write("share.yaml", text);
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("share.db"), "--machine", machine, "--format", "json"},
                               dir.file("share.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("share.log")));
  const auto out = nlohmann::json::parse(read_file(dir.file("share.log")));
  CHECK(out["cost"]["trial_setup_s"].get<double>() == doctest::Approx(4 * 0.5 * 2 + 0.5).epsilon(0.01));
  const Recorded s = read_db(dir.file("share.db"));
  REQUIRE(s.trials.size() == 5);
  // The first four run at once on 2 cores: each at half speed, (0.5 s setup + 3 steps) x 2 = 7 s.
  // The fifth runs alone: at full speed, 3.5 s. A static slowdown (4 ranks / 2 cores) would make it 7 s.
  for (int i = 0; i < 4; ++i) {
    CHECK(s.trials[static_cast<std::size_t>(i)].finished_at - s.trials[static_cast<std::size_t>(i)].started_at ==
          doctest::Approx(7.0).epsilon(0.01));
  }
  CHECK(s.trials[4].finished_at - s.trials[4].started_at == doctest::Approx(3.5).epsilon(0.01));
  // Without `nodes` (every simulated node its own): no sharing, 3.5 s each.
  std::string unbounded = read_file(machine);
  unbounded.replace(unbounded.find("\nnodes: 1\n"), 9, "");  // not calibrated_nodes
  const std::string own = dir.write("own-nodes.yaml", unbounded);
  REQUIRE(run_hpctune({"simulate", cfg, "--db", dir.file("own.db"), "--machine", own}, dir.file("own.log")).success());
  for (const auto& t : read_db(dir.file("own.db")).trials) CHECK(t.finished_at - t.started_at == doctest::Approx(3.5).epsilon(0.01));
}

TEST_CASE("a simulated group that goes silent is lost, killed and restarted, and its trial retried, as in a real run") {
  TempDir dir;
  const std::string cfg =
      dir.write("lost.yaml", function_config(6, 2, ", heartbeat_interval: 1s, heartbeat_timeout: 5s"));
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("lost.db"), "--step-seconds", "10", "--silence", "1@15",
                                "--format", "json"},
                               dir.file("lost.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("lost.log")));
  const auto out = nlohmann::json::parse(read_file(dir.file("lost.log")));
  CHECK(out["trials"]["done"] == 6);
  CHECK(out["lost_attempts"] == 1);
  CHECK(out["group_launches"] == 3);  // two, and group 1 again
  const Recorded s = read_db(dir.file("lost.db"));
  CHECK(count_events(s, "group_lost") == 1);
  CHECK(count_events(s, "group_restarted") == 1);
  int retried = 0;
  auto db = store::Store::open(dir.file("lost.db"));
  REQUIRE(db.ok());
  for (const auto& t : s.trials) {
    CHECK(t.state == TrialState::kDone);
    if (t.attempt == 1) continue;
    ++retried;
    CHECK(t.attempt == 2);
    auto attempts = (*db)->attempts(t.id);
    REQUIRE(attempts.ok());
    REQUIRE(attempts->size() == 2);
    CHECK((*attempts)[0]["state"] == "lost");
    CHECK((*attempts)[1]["state"] == "done");
  }
  CHECK(retried == 1);
}

TEST_CASE("more groups than the master takes frames per step: the backlog is stepped through, no group is lost") {
  // 1,100 groups: their hellos, dones and heartbeats arrive together, more than the master's batch
  // of 512 frames per step. The simulator steps the master again while frames wait, as a busy
  // master would; before, they waited for its next wake and live groups were declared lost.
  TempDir dir;
  std::string text = function_config(1100, 1);
  text.replace(text.find("tpe"), 3, "random");
  text.replace(text.find("steps: 3"), 8, "steps: 1");
  const std::string cfg = dir.write("wide.yaml", text);
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("wide.db"), "--nodes", "1100", "--step-seconds", "30",
                                "--format", "json"},
                               dir.file("wide.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("wide.log")));
  const auto out = nlohmann::json::parse(read_file(dir.file("wide.log")));
  CHECK(out["trials"]["done"] == 1100);
  CHECK(out["lost_attempts"] == 0);
  CHECK(out["group_launches"] == 1100);
  CHECK(out["simulated_seconds"].get<double>() < 60.0);  // one round of 30 s, after a 1 s start-up
}

TEST_CASE("early stopping on simulated time: asha's stops end trials at their rung and free the group") {
  TempDir dir;
  std::string text = function_config(30, 2);
  text.replace(text.find("tpe"), 3, "random");
  text.replace(text.find("steps: 3"), 8, "steps: 9");
  text += "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 9}\n";
  const std::string cfg = dir.write("asha.yaml", text);
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("asha.db"), "--step-seconds", "10", "--format", "json"},
                               dir.file("asha.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("asha.log")));
  const Recorded s = read_db(dir.file("asha.db"));
  int pruned = 0, done = 0;
  for (std::size_t i = 0; i < s.trials.size(); ++i) {
    const auto& t = s.trials[i];
    const int64_t last_step = s.metrics[i].empty() ? 0 : s.metrics[i].back().step;
    const double seconds = t.finished_at - t.started_at;
    INFO("trial " << t.seq << " last step " << last_step << " seconds " << seconds);
    if (t.state == TrialState::kPruned) {
      ++pruned;
      CHECK((last_step == 1 || last_step == 3));  // a rung: 1, 3 (9 is the end)
      CHECK(seconds >= 10.0 * last_step - 1e-6);
      CHECK(seconds <= 10.0 * last_step + 1);
    } else {
      ++done;
      CHECK(t.state == TrialState::kDone);
      CHECK(last_step == 9);
      CHECK(seconds >= 90.0 - 1e-6);
      CHECK(seconds <= 91.0);
    }
  }
  CHECK(pruned >= 10);
  CHECK(done >= 1);
  CHECK(pruned + done == 30);
  const auto out = nlohmann::json::parse(read_file(dir.file("asha.log")));
  CHECK(out["trials"]["pruned"] == pruned);
}

TEST_CASE("simulate refuses a trainer whose outcomes it cannot compute, and an existing database") {
  TempDir dir;
  const std::string cfg = dir.write(
      "sleep.yaml", "name: s\nobjective: {metric: value, mode: min}\nsearch: {algorithm: random, max_trials: 2}\n"
                    "space:\n  seconds: {type: float, low: 0.0, high: 0.1}\ntrainer: {kind: sleep}\n");
  const auto refused = run_hpctune({"simulate", cfg, "--db", dir.file("s.db")}, dir.file("s.log"));
  CHECK(refused.code == 2);
  CHECK(read_file(dir.file("s.log")).find("trainer.kind 'sleep'") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("s.db")));
  const std::string fcfg = dir.write("f.yaml", function_config(2, 1));
  dir.write("taken.db", "");
  const auto taken = run_hpctune({"simulate", fcfg, "--db", dir.file("taken.db")}, dir.file("t.log"));
  CHECK(taken.code == 2);
  CHECK(read_file(dir.file("t.log")).find("exists") != std::string::npos);
}

// Every trial fails (x1 lies outside branin's box, which only the trainer checks); 4 trials, fewer
// than search.max_failures' default 5.
std::string failing_config(const std::string& extra_search) {
  return "name: f\nseed: 1\nobjective: {metric: value, mode: min}\n"
         "search: {algorithm: random, max_trials: 4" + extra_search + "}\n"
         "space:\n  x1: {type: float, low: 20.0, high: 30.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
         "trainer: {kind: function, name: branin, steps: 3}\nresources: {groups: 2}\n";
}

TEST_CASE("a simulated campaign whose trials all fail exits as `run` does, non-zero, and says why") {
  TempDir dir;
  const std::string cfg = dir.write("f.yaml", failing_config(""));
  const auto run = run_hpctune({"run", cfg, "--db", dir.file("run.db")}, dir.file("run.log"));
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("sim.db")}, dir.file("sim.log"));
  CHECK(run.code == 1);
  CHECK(sim.code == run.code);
  const std::string log = read_file(dir.file("sim.log"));
  CHECK(log.find("0 done, 0 pruned, 4 failed") != std::string::npos);  // the report is printed first
  CHECK(log.find("no trial succeeded in simulated campaign 'f' (4 failed)") != std::string::npos);
  // The failed stage is named, with why, before (its error said only "no trial succeeded").
  const auto stage = log.find("simulated campaign 'f' failed: stage 'search' (search) failed: none of its 4 trials succeeded");
  CHECK_MESSAGE(stage < log.find("no trial succeeded in simulated campaign"), log);
  CHECK(log.find("is outside branin's box") != std::string::npos);  // the first failure, named
  CHECK(log.find("hpctune trials " + dir.file("sim.db")) != std::string::npos);
  const Recorded r = read_db(dir.file("sim.db"));  // recorded all the same
  CHECK(r.trials.size() == 4);
  for (const auto& t : r.trials) CHECK(t.state == TrialState::kFailed);

  // --format json: the JSON on standard output, the exit and the reason as in table form.
  const auto json = run_hpctune({"simulate", cfg, "--db", dir.file("json.db"), "--format", "json"}, dir.file("json.log"));
  CHECK(json.code == 1);
  const std::string jlog = read_file(dir.file("json.log"));
  const auto brace = jlog.find('{');
  REQUIRE(brace != std::string::npos);
  const auto end = jlog.find("\n}\n", brace);
  REQUIRE(end != std::string::npos);
  const auto j = nlohmann::json::parse(jlog.substr(brace, end + 2 - brace));
  CHECK(j["trials"]["failed"] == 4);
  CHECK(jlog.find("no trial succeeded", end) != std::string::npos);

  // search.max_failures stops the search: exit 1, saying it stopped.
  const std::string capped = dir.write("c.yaml", failing_config(", max_failures: 2"));
  const auto stopped = run_hpctune({"simulate", capped, "--db", dir.file("c.db")}, dir.file("c.log"));
  CHECK(stopped.code == 1);
  CHECK(read_file(dir.file("c.log")).find("simulated campaign 'f' stopped:") != std::string::npos);

  // A campaign with a trial done exits 0.
  const std::string fine = dir.write("ok.yaml", function_config(2, 1));
  CHECK(run_hpctune({"simulate", fine, "--db", dir.file("ok.db")}, dir.file("ok.log")).code == 0);
}

TEST_CASE("a trial priced past the simulation's bound fails saying so; the clock never wraps") {
  TempDir dir;
  // 1 MB/s between ranks (the slowest a machine file takes) and 4 TB of gradients, allreduced a
  // billion times a step: 4e15 simulated seconds a step. Before, the clock wrapped: the campaign
  // "finished" after 1 simulated second, every trial done, its allreduce -55340232221 s.
  const std::string machine = dir.write(
      "slow-net.yaml",
      "name: slow-net\ncalibrated_nodes: 1\nranks_per_node: 1\n"
      "compute: {mlp_gflops: 10, cnn_gflops: 3, image_overhead_us: 0}\n"
      "network:\n  intra_node: {bandwidth_gb_s: 0.001, latency_us: 2}\n  inter_node: {bandwidth_gb_s: 0.001, latency_us: 8}\n"
      "  stage_handoff_us: 100\nstartup: {seconds: 1, per_rank_seconds: 0}\ndisk: {bandwidth_mb_s: 400}\n");
  std::string text = function_config(2, 1, ", ranks: {data: 2}");
  text.replace(text.find("noise: 0.5"), 10, "noise: 0.5, parameters: 1000000000000, batches_per_step: 1000000000");
  const std::string cfg = dir.write("huge.yaml", text);
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("huge.db"), "--machine", machine, "--format", "json"},
                               dir.file("huge.log"), 60s);
  const std::string log = read_file(dir.file("huge.log"));
  CAPTURE(log);
  CHECK(sim.code == 1);
  CHECK(log.find("no trial succeeded") != std::string::npos);
  CHECK(log.find("more than the simulation's bound of 3.1536e+08 s (10 years)") != std::string::npos);
  const Recorded r = read_db(dir.file("huge.db"));
  REQUIRE(r.trials.size() == 2);
  for (const auto& t : r.trials) {
    CHECK(t.state == TrialState::kFailed);
    CHECK(t.error.find("3 steps of 4e+15 s") != std::string::npos);
  }
}

TEST_CASE("steps of a year take master turns per event, not per wake: the clock jumps over quiet time") {
  TempDir dir;
  // 4 trials of 3 steps of 3e7 s (under a year each) on 2 groups: 1.8e8 simulated seconds. Before,
  // the master woke every half heartbeat timeout (5 s) between events: 3.6e7 turns, minutes of wall
  // time. Now two quiet turns and the clock goes to the next event or deadline.
  const std::string cfg = dir.write("year.yaml", function_config(4, 2));
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("year.db"), "--step-seconds", "3e7", "--format", "json"},
                               dir.file("year.log"), 60s);
  const std::string log = read_file(dir.file("year.log"));
  REQUIRE_MESSAGE(sim.success(), log);
  const auto out = nlohmann::json::parse(log);
  CHECK(out["trials"]["done"] == 4);
  CHECK(out["simulated_seconds"].get<double>() >= 1.8e8);
  CHECK(out["simulated_seconds"].get<double>() <= 1.8e8 + 100);
  CHECK(out["master_turns"].get<int64_t>() < 1000);
  const Recorded r = read_db(dir.file("year.db"));
  for (const auto& t : r.trials) CHECK(t.finished_at - t.started_at == doctest::Approx(9e7).epsilon(1e-6));
}

TEST_CASE("a silent group's timeout is seen at its deadline, not at the next wake, when the clock jumps") {
  TempDir dir;
  // Steps of 1,000 s, heartbeat timeout 10 s: group 1 goes silent at second 50 and is lost just
  // past 60 (a silence of more than the timeout). Before, at the wake after that: second 65.
  const std::string cfg = dir.write("silent.yaml", function_config(2, 2, ", heartbeat_interval: 1s, heartbeat_timeout: 10s"));
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("silent.db"), "--step-seconds", "1000", "--silence",
                                "1@50", "--format", "json"},
                               dir.file("silent.log"), 60s);
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("silent.log")));
  const Recorded r = read_db(dir.file("silent.db"));
  int lost = 0;
  for (const auto& e : r.events) {
    if (e.kind != "group_lost") continue;
    ++lost;
    CHECK(e.group_id == 1);
    CHECK(e.t - r.campaign.created_at > 60.0);
    CHECK(e.t - r.campaign.created_at < 60.5);
  }
  CHECK(lost == 1);
  // A group the campaign does not have: refused before anything is recorded (before, ignored).
  const auto none = run_hpctune({"simulate", cfg, "--db", dir.file("none.db"), "--silence", "2@50"}, dir.file("none.log"));
  CHECK(none.code == 2);
  CHECK(read_file(dir.file("none.log")).find("--silence: group 2 is not one of the campaign's 2 groups (0..1)") !=
        std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("none.db")));
}

TEST_CASE("simulate stops at SIGTERM and at the first Ctrl-C, and refuses more trials than --max-trials") {
  TempDir dir;
  // Random search: the master's turns are cheap, and 90,000 trials take far longer than the signal.
  const std::string cfg = dir.write(
      "big.yaml", "name: big\nseed: 1\nobjective: {metric: value, mode: min}\nsearch: {algorithm: random, max_trials: 90000}\n"
                  "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
                  "trainer: {kind: function, name: branin, steps: 3}\nresources: {groups: 64}\n");
  for (const int sig : {SIGTERM, SIGINT}) {
    CAPTURE(sig);
    const std::string db = dir.file("big-" + std::to_string(sig) + ".db");
    auto child = start_hpctune({"simulate", cfg, "--db", db}, dir.file("big.log"));
    REQUIRE(wait_until([&] { return std::filesystem::exists(db); }, std::chrono::seconds(30)));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    child.signal(sig);
    auto st = child.wait_for(std::chrono::seconds(30));
    REQUIRE(st.has_value());
    CHECK(st->code == (sig == SIGTERM ? 143 : 130));
    CHECK_MESSAGE(read_file(dir.file("big.log")).find("interrupted after") != std::string::npos, read_file(dir.file("big.log")));
  }
  // A step of slow asks: the GP with every one of 2,048 running trials as a fantasy (max_fantasies
  // lifted) takes a second or more an ask, and a step handles up to 512 finished trials. After the
  // signal the step records what it received without asking (MasterParts::interrupt,
  // Scheduler::hold_dispatch); before, it asked for every finished trial, for minutes.
  const std::string slow = dir.write(
      "slow.yaml", "name: slow\nseed: 1\nobjective: {metric: value, mode: min}\n"
                   "search: {algorithm: bayesian, max_trials: 5000, settings: {max_fantasies: 100000}}\n"
                   "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
                   "trainer: {kind: function, name: branin, steps: 3}\nresources: {groups: 2048}\n");
  {
    const std::string db = dir.file("slow.db");
    auto child = start_hpctune({"simulate", slow, "--db", db}, dir.file("slow.log"));
    REQUIRE(wait_until([&] { return std::filesystem::exists(db); }, std::chrono::seconds(30)));
    std::this_thread::sleep_for(std::chrono::seconds(4));  // the design's trials end, the slow asks begin
    child.signal(SIGTERM);
    const auto signalled = std::chrono::steady_clock::now();
    auto st = child.wait_for(std::chrono::seconds(300));
    REQUIRE(st.has_value());
    // One ask is a few seconds at most even on a loaded machine; the rest of a step, minutes.
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
    CHECK_MESSAGE(took < 30.0, "it ended " << took << " s after SIGTERM");
    CHECK(st->code == 143);
    CHECK_MESSAGE(read_file(dir.file("slow.log")).find("interrupted after") != std::string::npos, read_file(dir.file("slow.log")));
  }
  const std::string huge = dir.write(
      "huge.yaml", "name: huge\nobjective: {metric: value, mode: min}\nsearch: {algorithm: random, max_trials: 1000000}\n"
                   "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
                   "trainer: {kind: function, name: branin, steps: 3}\n");
  const auto refused = run_hpctune({"simulate", huge, "--db", dir.file("huge.db")}, dir.file("huge.log"));
  CHECK(refused.code == 2);
  CHECK_MESSAGE(read_file(dir.file("huge.log")).find("--max-trials 1000000") != std::string::npos, read_file(dir.file("huge.log")));
  CHECK(!std::filesystem::exists(dir.file("huge.db")));
}

TEST_CASE("simulate draws its progress on a terminal, and prints none into --format json or a short log") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", function_config(200, 16));
  // On a terminal (script(1) gives the command one): the live line, redrawn in place, ending at
  // the whole budget.
  const std::string command = std::string(HPCTUNE_BINARY) + " simulate " + cfg + " --db " + dir.file("tty.db") + " --step-seconds 30";
  launch::SpawnOptions o;
  o.argv = {"script", "-qfec", command, "/dev/null"};
  o.stdout_path = dir.file("tty.log");
  o.stderr_path = "=stdout";
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto st = child->wait_for(std::chrono::seconds(120));
  REQUIRE(st.has_value());
  const std::string tty = read_file(dir.file("tty.log"));
  REQUIRE_MESSAGE(st->success(), tty);
  CHECK_MESSAGE(tty.find("\r\033[2K[  0/200]") != std::string::npos, tty);
  CHECK_MESSAGE(tty.find("\r\033[2K[200/200]") != std::string::npos, tty);
  CHECK_MESSAGE(tty.find("done 200") != std::string::npos, tty);
  CHECK(tty.find("simulated campaign 'simtest'") != std::string::npos);
  // Not a terminal: the JSON alone (a line every 10 s of wall time only on long runs, never into json).
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("json.db"), "--step-seconds", "30", "--format", "json"},
                               dir.file("json.log"));
  REQUIRE(sim.success());
  const auto out = nlohmann::json::parse(read_file(dir.file("json.log")));
  CHECK(out["trials"]["done"] == 200);
}
