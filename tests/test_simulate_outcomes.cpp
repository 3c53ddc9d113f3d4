// `hpctune simulate` (issue 24): where simulated trials' outcomes come from (--outcomes function,
// replay:DB, surrogate:DB), the 'simulated' mark in status and trials, and the speed of a
// 2,048-node simulation. Through the binary, against campaigns recorded by real `hpctune run`s.
#include <chrono>
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

}  // namespace

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
