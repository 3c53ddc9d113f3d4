// One campaign preparation for `hpctune run`, `resume` and `simulate` (scheduler/campaign_preparation.h,
// issue 24): the same refusals with the same messages, the same warm start with the same projected
// parameters, whichever driver (real clock and sockets, or simulated) runs the campaign after it.
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "store/store.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;

namespace {

// tpe over branin, one group: a real run and a simulation give the same trials in the same order
// (tests/test_simulate.cpp), so a warm start that differs shows in the trials too.
std::string branin_config(const std::string& name, int64_t trials, const std::string& x1_range,
                          const std::string& warm_start = "") {
  return "name: " + name + "\nseed: 3\nobjective: {metric: value, mode: min}\n"
         "search: {algorithm: tpe, max_trials: " + std::to_string(trials) +
         (warm_start.empty() ? "" : ", warm_start: " + warm_start) + "}\n"
         "space:\n  x1: {type: float, " + x1_range + "}\n  x2: {type: float, low: 0.0, high: 15.0}\n"
         "trainer: {kind: function, name: branin, steps: 2}\n"
         "resources: {groups: 1}\n";
}

struct Recorded {
  std::vector<nlohmann::json> params;  // per trial, in order
  std::vector<nlohmann::json> warm_start_events;
};

Recorded read_db(const std::string& path) {
  auto db = store::Store::open(path);
  REQUIRE(db.ok());
  auto c = (*db)->load_campaign();
  REQUIRE(c.ok());
  REQUIRE(c->has_value());
  Recorded r;
  auto trials = (*db)->trials((**c).id);
  REQUIRE(trials.ok());
  for (const auto& t : *trials) r.params.push_back(t.params);
  auto events = (*db)->events((**c).id, 0);
  REQUIRE(events.ok());
  for (const auto& e : *events) {
    if (e.kind == "warm_start") r.warm_start_events.push_back(e.detail);
  }
  return r;
}

std::string first_error_line(const std::string& log) {
  const auto at = log.find("error");
  REQUIRE_MESSAGE(at != std::string::npos, log);
  return log.substr(at, log.find('\n', at) - at);
}

}  // namespace

TEST_CASE("run and simulate refuse the same bad warm-start database with the same message, creating nothing") {
  TempDir dir;
  const std::string missing = dir.file("missing.db");
  dir.write("notastore.db", "this is not SQLite\n");
  for (const std::string& bad : {missing, dir.file("notastore.db")}) {
    CAPTURE(bad);
    const std::string cfg = dir.write("bad.yaml", branin_config("bad-warm", 4, "low: 0.0, high: 10.0", bad));
    std::filesystem::remove(dir.file("real.db"));
    std::filesystem::remove(dir.file("sim.db"));
    const auto real = run_hpctune({"run", cfg, "--db", dir.file("real.db")}, dir.file("real.log"));
    const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("sim.db")}, dir.file("sim.log"));
    const std::string real_log = read_file(dir.file("real.log")), sim_log = read_file(dir.file("sim.log"));
    CHECK(real.code == 2);
    CHECK(sim.code == real.code);
    CHECK_MESSAGE(real_log.find("search.warm_start: " + bad + ": ") != std::string::npos, real_log);
    CHECK(first_error_line(sim_log) == first_error_line(real_log));
    // Refused before the store is created, by both.
    CHECK(!std::filesystem::exists(dir.file("real.db")));
    CHECK(!std::filesystem::exists(dir.file("sim.db")));
  }
}

TEST_CASE("run and simulate of the same warm-started config load the same trials, project the same parameters, "
          "and then suggest the same trials") {
  TempDir dir;
  // The earlier campaign searched x1 over [-5, 10]; this one over [0, 10]: its trials with x1 < 0
  // are skipped (out_of_space), the others carried over.
  const std::string earlier = dir.write("earlier.yaml", branin_config("earlier", 10, "low: -5.0, high: 10.0"));
  REQUIRE(run_hpctune({"run", earlier, "--db", dir.file("earlier.db")}, dir.file("earlier.log")).success());
  const std::string cfg =
      dir.write("warm.yaml", branin_config("warm", 5, "low: 0.0, high: 10.0", dir.file("earlier.db")));
  const auto real = run_hpctune({"run", cfg, "--db", dir.file("real.db")}, dir.file("real.log"));
  REQUIRE_MESSAGE(real.success(), read_file(dir.file("real.log")));
  const auto sim = run_hpctune({"simulate", cfg, "--db", dir.file("sim.db"), "--step-seconds", "10"}, dir.file("sim.log"));
  REQUIRE_MESSAGE(sim.success(), read_file(dir.file("sim.log")));

  const Recorded r = read_db(dir.file("real.db")), s = read_db(dir.file("sim.db"));
  REQUIRE(r.warm_start_events.size() == 1);
  REQUIRE(s.warm_start_events.size() == 1);
  const nlohmann::json& w = r.warm_start_events[0];
  CHECK(w["read"] == 10);
  const int64_t skipped = w["skipped_by_reason"].value("out_of_space", 0);
  CHECK(skipped > 0);
  CHECK(w["loaded"].get<int64_t>() + skipped == 10);
  CHECK(s.warm_start_events[0] == w);
  // The searcher saw the same warm trials: the same suggestions, in the same order.
  REQUIRE(r.params.size() == 5);
  CHECK(s.params == r.params);

  // `resume` prepares the same way: the stored config read back, its warm start loaded again.
  const auto resumed = run_hpctune({"resume", dir.file("real.db"), "--max-trials", "7"}, dir.file("resume.log"));
  REQUIRE_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  const Recorded again = read_db(dir.file("real.db"));
  REQUIRE(again.warm_start_events.size() == 2);
  CHECK(again.warm_start_events[1] == w);
  CHECK(again.params.size() == 7);
}
