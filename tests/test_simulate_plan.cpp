// `hpctune simulate` with the cost model (issue 24): machine files, the report's metrics (the JSON
// contract of the common brief), --plan's ranking of the splits of N nodes, and --calibrate from
// real campaigns. Through the binary.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;

namespace {

// 4 trials of random search over branin, each 5 steps of 60 s on one rank, imitating a network of
// 50 M parameters (200 MB of gradients) and 4 layers (or `layers`): on 8 nodes half the nodes would idle.
std::string few_trials_config(int64_t trials, const std::string& search = "random", const std::string& extra_search = "",
                              int64_t layers = 4) {
  return "name: plan\nseed: 3\nobjective: {metric: value, mode: min}\n"
         "search: {algorithm: " + search + ", max_trials: " + std::to_string(trials) + extra_search + "}\n"
         "space:\n  x1: {type: float, low: -5.0, high: 10.0}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
         "trainer: {kind: function, name: branin, steps: 5, seconds_per_step: 60, parameters: 50000000, layers: " + std::to_string(layers) + "}\n"
         "resources: {groups: 1}\n";
}

// A machine whose network moves `gb_s` GB/s with `latency_us`, between nodes and inside them.
std::string machine(const std::string& name, double gb_s, double latency_us, int64_t calibrated = 1) {
  return "name: " + name + "\ncalibrated_nodes: " + std::to_string(calibrated) +
         "\nranks_per_node: 1\ncompute: {mlp_gflops: 10, cnn_gflops: 10, image_overhead_us: 0}\n"
         "network:\n  intra_node: {bandwidth_gb_s: " + std::to_string(gb_s) + ", latency_us: " + std::to_string(latency_us) +
         "}\n  inter_node: {bandwidth_gb_s: " + std::to_string(gb_s) + ", latency_us: " + std::to_string(latency_us) +
         "}\n  stage_handoff_us: 1000\nstartup: {seconds: 2, per_rank_seconds: 0}\ndisk: {bandwidth_mb_s: 100}\n";
}

nlohmann::json run_json(const std::vector<std::string>& args, const std::string& log) {
  const auto st = run_hpctune(args, log);
  REQUIRE_MESSAGE(st.success(), read_file(log));
  return nlohmann::json::parse(read_file(log));
}

}  // namespace

TEST_CASE("simulate --plan: on a slow network pure search wins, on a fast one data parallelism does") {
  TempDir dir;
  const std::string cfg = dir.write("p.yaml", few_trials_config(4));
  // One layer: no model-parallel split (the cost model's stage hand-off is a latency, not a
  // bandwidth term, so a slow network does not slow a pipeline of the function trainer).
  const std::string one_layer = dir.write("one.yaml", few_trials_config(4, "random", "", 1));
  const std::string slow = dir.write("slow.yaml", machine("slow", 0.001, 1000));
  const std::string fast = dir.write("fast.yaml", machine("fast", 1000, 0));
  // Slow: an allreduce of 200 MB at 1 MB/s per step dwarfs a 60 s step; 4 groups of 1 node finish
  // the 4 trials in one round of 300 s (+ 2 s start-up) and leave 4 nodes idle, and win.
  const auto s = run_json({"simulate", one_layer, "--nodes", "8", "--plan", "--machine", slow, "--format", "json"}, dir.file("slow.log"));
  REQUIRE(s["plans"].size() == 4);
  CHECK(s["machine"] == "slow");
  CHECK(s["extrapolated"] == true);  // 8 nodes beyond the 1 it was calibrated on
  CHECK(s["plans"][0]["data"] == 1);
  CHECK(s["plans"][0]["model"] == 1);
  CHECK(s["plans"][0]["simulated_seconds"].get<double>() == doctest::Approx(302).epsilon(0.01));
  CHECK(s["plans"][3]["data"] == 8);  // 200 MB at 1 MB/s per step: worst
  // Fast: data ranks divide every step (allreduce ~0): 4 groups of 2, 2 of 4 or 1 of 8 all finish
  // the 4 trials' 1,200 rank-seconds on 8 nodes in 150 s (+ 2 s start-up), pure search in 302 s.
  const auto f = run_json({"simulate", cfg, "--nodes", "8", "--plan", "--machine", fast, "--format", "json"}, dir.file("fast.log"));
  const auto& best = f["plans"][0];
  CHECK(best["data"].get<int64_t>() * best["groups"].get<int64_t>() * best["model"].get<int64_t>() == 8);
  CHECK(best["data"].get<int64_t>() >= 2);
  CHECK(best["model"] == 1);  // a pipeline pays its bubble
  CHECK(best["simulated_seconds"].get<double>() == doctest::Approx(152).epsilon(0.01));
  for (const auto& p : f["plans"]) {
    if (p["data"] == 1 && p["model"] == 1) CHECK(p["simulated_seconds"].get<double>() == doctest::Approx(302).epsilon(0.01));
  }
  // Every split of 8 into powers of two with model <= 4 layers: (data, model) for model 1, 2, 4.
  CHECK(f["plans"].size() == 4 + 3 + 2);
  double previous = 0;
  int own = 0;
  for (const auto& p : f["plans"]) {
    CHECK(p["simulated_seconds"].get<double>() >= previous);  // best first
    previous = p["simulated_seconds"].get<double>();
    CHECK(p["model"].get<int64_t>() <= 4);
    own += p["config_split"].get<bool>();
  }
  CHECK(own == 1);
  // The table names the config's split and the ranking.
  const auto t = run_hpctune({"simulate", cfg, "--nodes", "8", "--plan", "--machine", fast}, dir.file("table.log"));
  REQUIRE(t.success());
  const std::string table = read_file(dir.file("table.log"));
  CHECK(table.find("ranked by simulated time") != std::string::npos);
  CHECK(table.find("<- the config's split") != std::string::npos);
}

TEST_CASE("simulate --format json: the contract's fields, consistent; the speed-up over a baseline; generations") {
  TempDir dir;
  const std::string m = dir.write("m.yaml", machine("lab", 1, 10, 4));
  std::string text = few_trials_config(40, "genetic", ", settings: {population: 4}");
  text.replace(text.find("groups: 1"), 9, "groups: 2, ranks: {data: 2, model: 1}");
  const std::string cfg = dir.write("g.yaml", text);
  const std::string base = dir.write("base.yaml", few_trials_config(40));
  const auto j = run_json({"simulate", cfg, "--nodes", "8", "--machine", m, "--target", "5", "--baseline", base, "--format", "json",
                           "--db", dir.file("g.db")},
                          dir.file("g.log"));
  for (const char* key : {"nodes", "groups", "data", "model", "global_batch", "trials", "simulated_seconds", "wall_seconds", "target",
                          "time_to_target_seconds", "runs_to_target", "generations", "node_utilization", "speedup", "machine",
                          "extrapolated", "cost"}) {
    CHECK_MESSAGE(j.contains(key), key);
  }
  for (const char* key : {"compute_s", "allreduce_s", "bubble_s", "startup_s", "checkpoint_s", "decision_s"}) {
    CHECK_MESSAGE(j["cost"].contains(key), key);
  }
  CHECK(j["nodes"] == 8);
  CHECK(j["groups"] == 4);
  // What run would say of these groups: 3 trials a generation (its elite carried over) on 4.
  REQUIRE(j["warnings"].size() == 1);
  CHECK(j["warnings"][0].get<std::string>().find("population 4 keeps 3 of 4 groups busy (75%; 1 elite carried over unrun); "
                                                 "population: 5 would fill them") != std::string::npos);
  CHECK(j["data"] == 2);
  CHECK(j["model"] == 1);
  CHECK(j["machine"] == "lab");
  CHECK(j["extrapolated"] == true);
  CHECK(j["global_batch"].is_null());  // the function trainer has no batch
  CHECK(j["target"]["metric"] == "value");
  CHECK(j["target"]["value"] == 5.0);
  REQUIRE(j["time_to_target_seconds"].is_number());
  CHECK(j["time_to_target_seconds"].get<double>() <= j["simulated_seconds"].get<double>());
  CHECK(j["runs_to_target"].get<int64_t>() >= 1);
  CHECK(j["runs_to_target"].get<int64_t>() <= j["trials"]["done"].get<int64_t>());
  CHECK(j["generations"].get<int64_t>() == (j["runs_to_target"].get<int64_t>() + 3) / 4);
  const double u = j["node_utilization"].get<double>();
  CHECK(u > 0);
  CHECK(u <= 1);
  // Each step: 30 s of compute on 2 ranks, an allreduce of 200 MB at 1 GB/s: 0.2 s + 20 us.
  const int64_t steps = 5 * j["trials"]["done"].get<int64_t>();
  CHECK(j["cost"]["compute_s"].get<double>() == doctest::Approx(30.0 * static_cast<double>(steps)));
  CHECK(j["cost"]["allreduce_s"].get<double>() == doctest::Approx((0.2 + 2e-5) * static_cast<double>(steps)));
  CHECK(j["cost"]["startup_s"].get<double>() == doctest::Approx(2.0 * j["group_launches"].get<double>()));
  CHECK(j["cost"]["decision_s"].get<double>() > 0);
  REQUIRE(j["speedup"].is_number());
  CHECK(j["speedup"].get<double>() > 1);  // 8 nodes against the baseline's 1
  // The master's decision time, measured, moves the clock only with --count-decision-time.
  const auto counted = run_json({"simulate", cfg, "--nodes", "8", "--machine", m, "--target", "5", "--count-decision-time", "--format",
                                 "json", "--db", dir.file("counted.db")},
                                dir.file("counted.log"));
  CHECK(counted["trials"]["done"] == j["trials"]["done"]);
  CHECK(counted["simulated_seconds"].get<double>() > j["simulated_seconds"].get<double>());
  CHECK(counted["simulated_seconds"].get<double>() <=
        j["simulated_seconds"].get<double>() + counted["cost"]["decision_s"].get<double>() + 1);
  // --target on a minimised objective: a target nothing reaches gives nulls, not a number.
  const auto none = run_json({"simulate", cfg, "--nodes", "8", "--machine", m, "--target", "-100", "--format", "json", "--db",
                              dir.file("none.db")},
                             dir.file("none.log"));
  CHECK(none["time_to_target_seconds"].is_null());
  CHECK(none["runs_to_target"].is_null());
  // --nodes that do not split into groups of data x model ranks, and a bad machine file, are refused with exit 2.
  const auto odd = run_hpctune({"simulate", cfg, "--nodes", "7", "--machine", m, "--db", dir.file("odd.db")}, dir.file("odd.log"));
  CHECK(odd.code == 2);
  CHECK(read_file(dir.file("odd.log")).find("do not split into groups of 2 ranks") != std::string::npos);
  const std::string bad = dir.write("bad.yaml", "name: bad\ncalibrated_nodes: 1\nranks_per_node: 1\ncompute: {mlp_gflops: 0}\n");
  const auto refused = run_hpctune({"simulate", cfg, "--machine", bad, "--db", dir.file("bad.db")}, dir.file("bad.log"));
  CHECK(refused.code == 2);
  CHECK(read_file(dir.file("bad.log")).find("bad.yaml:4:11: compute.mlp_gflops: 0 is out of range") != std::string::npos);
}

TEST_CASE("simulate --calibrate runs real campaigns and writes a machine file that simulate accepts") {
  TempDir dir;
  const std::string out = dir.file("machines/here.yaml");
  const auto st = run_hpctune({"simulate", "--calibrate", "--machine-out", out}, dir.file("cal.log"), std::chrono::seconds(240));
  const std::string log = read_file(dir.file("cal.log"));
  REQUIRE_MESSAGE(st.success(), log);
  CHECK(log.find("compute.mlp_gflops") != std::string::npos);
  CHECK(log.find("residuals") != std::string::npos);
  CHECK(log.find("wrote " + out) != std::string::npos);
  const std::string text = read_file(out);
  CHECK(text.find("name: this-machine") != std::string::npos);
  CHECK(text.find("# Fitted by `hpctune simulate --calibrate`") == 0);
  const std::string cfg = dir.write("p.yaml", few_trials_config(4));
  const auto j = run_json({"simulate", cfg, "--machine", out, "--format", "json", "--db", dir.file("p.db")}, dir.file("p.log"));
  CHECK(j["machine"] == "this-machine");
  CHECK(j["extrapolated"] == false);
  CHECK(j["trials"]["done"] == 4);
}
