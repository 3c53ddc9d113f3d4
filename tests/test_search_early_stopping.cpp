// Early stoppers: ASHA's rung arithmetic on a scripted stream, Hyperband brackets, median rule.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "search/early_stopping.h"

using namespace hpctune;
using namespace hpctune::search;

namespace {

std::unique_ptr<EarlyStopper> make(std::string kind, nlohmann::json settings, bool maximize = true, uint64_t seed = 0) {
  auto s = make_stopper({kind, settings, maximize, seed});
  REQUIRE(s.ok());
  return std::move(*s);
}

}  // namespace

TEST_CASE("ASHA: a trial continues past a rung while in the top max(1, floor(n/eta)) so far") {
  // eta = 3, r = 1: rungs at steps 1, 3, 9. Nine trials reach rung 1 in this order.
  auto asha = make("asha", {{"grace_period", 1}, {"reduction_factor", 3}});
  const double values[9] = {0.5, 0.6, 0.4, 0.7, 0.3, 0.8, 0.2, 0.9, 0.1};
  // n=1 keep 1 (rank 1), n=2 keep 1 (rank 1), n=3 keep 1 (rank 3), n=4 keep 1 (rank 1), n=5 keep 1 (rank 5),
  // n=6 keep 2 (rank 1), n=7 keep 2 (rank 7), n=8 keep 2 (rank 1), n=9 keep 3 (rank 9).
  const Decision expected[9] = {Decision::kContinue, Decision::kContinue, Decision::kStop,
                                Decision::kContinue, Decision::kStop,     Decision::kContinue,
                                Decision::kStop,     Decision::kContinue, Decision::kStop};
  for (int i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(asha->on_report(i, 1, values[i]) == expected[i]);
  }
  // Between rungs nothing is judged, even a poor value.
  CHECK(asha->on_report(0, 2, 0.0) == Decision::kContinue);
  // Rung 3: survivors 0, 1, 3, 5, 7 arrive with these values.
  CHECK(asha->on_report(7, 3, 0.95) == Decision::kContinue);  // n=1
  CHECK(asha->on_report(5, 3, 0.85) == Decision::kStop);      // n=2, keep 1, rank 2
  CHECK(asha->on_report(3, 3, 0.99) == Decision::kContinue);  // n=3, keep 1, rank 1
  CHECK(asha->on_report(1, 3, 0.90) == Decision::kStop);      // n=4, keep 1, rank 3
  CHECK(asha->on_report(0, 3, 0.97) == Decision::kStop);      // n=5, keep 1, rank 2
  // A report that jumps past rungs 3 and 9 at once is judged at both: first at 3 (n=6, keep 2).
  auto asha2 = make("asha", {{"grace_period", 1}, {"reduction_factor", 3}});
  CHECK(asha2->on_report(0, 1, 0.5) == Decision::kContinue);
  CHECK(asha2->on_report(1, 10, 0.4) == Decision::kStop);  // rung 1: n=2, keep 1, rank 2
  CHECK(asha2->on_report(2, 10, 0.6) == Decision::kContinue);  // rung 1: n=3, rank 1; rungs 3 and 9: alone
  auto st = asha2->state();
  REQUIRE(st["rungs"].size() == 3);
  CHECK(st["rungs"][0]["milestone"] == 1);
  CHECK(st["rungs"][1]["milestone"] == 3);
  CHECK(st["rungs"][2]["milestone"] == 9);
  CHECK(st["rungs"][0]["trials"].size() == 3);
  CHECK(st["rungs"][2]["trials"].size() == 1);
}

TEST_CASE("ASHA minimizes when told to, and ignores rungs at or past max_t") {
  auto asha = make("asha", {{"grace_period", 2}, {"reduction_factor", 2}, {"max_t", 8}}, /*maximize=*/false);
  // Rungs at 2, 4 (8 is max_t, not judged).
  CHECK(asha->on_report(0, 2, 1.0) == Decision::kContinue);
  CHECK(asha->on_report(1, 2, 2.0) == Decision::kStop);      // n=2, keep 1, rank 2 (loss higher)
  CHECK(asha->on_report(2, 2, 0.5) == Decision::kContinue);  // n=3, keep 1, rank 1
  CHECK(asha->on_report(3, 2, 0.7) == Decision::kContinue);  // n=4, keep 2, rank 2
  CHECK(asha->on_report(0, 4, 1.0) == Decision::kContinue);
  CHECK(asha->on_report(2, 4, 3.0) == Decision::kStop);
  CHECK(asha->on_report(0, 8, 100.0) == Decision::kContinue);
  CHECK(asha->on_report(2, 8, 100.0) == Decision::kContinue);
  CHECK(asha->state()["rungs"].size() == 2);
}

TEST_CASE("ASHA and Hyperband never stop a trial at or past max_t, even one that skipped its rungs") {
  // issue 9, item 23: a report at the last step used to be judged at the rungs it passed.
  auto asha = make("asha", {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", 10}});
  CHECK(asha->on_report(0, 1, 0.9) == Decision::kContinue);
  CHECK(asha->on_report(1, 1, 0.1) == Decision::kStop);       // below the rung: stopped
  CHECK(asha->on_report(2, 10, 0.0) == Decision::kContinue);  // its first report is its last
  CHECK(asha->on_report(3, 12, 0.0) == Decision::kContinue);
  auto hyperband = make("hyperband", {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", 9}});
  for (int64_t seq = 0; seq < 20; ++seq) CHECK(hyperband->on_report(seq, 9, seq == 0 ? 1.0 : 0.0) == Decision::kContinue);
}

TEST_CASE("ASHA and Hyperband with a max_t near 2^63: a finite list of rungs, reports judged, no endless loop") {
  // Before: a rung past 2^63 steps overflowed llround to INT64_MIN, which no max_t reaches, so
  // `hpctune validate` and `run` of early_stopping {kind: hyperband, max_t: 9223372036854775807}
  // looped for ever (milestones()), and report() grew its rungs without a bound.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  for (const char* kind : {"asha", "hyperband"}) {
    CAPTURE(kind);
    for (double eta : {1.01, 3.0, 1000.0}) {
      CAPTURE(eta);
      auto stopper = make(kind, {{"grace_period", 1}, {"reduction_factor", eta}, {"max_t", huge}});
      const std::vector<int64_t> rungs = stopper->milestones(0);
      REQUIRE_FALSE(rungs.empty());
      CHECK(rungs.front() >= 1);  // 1 in ASHA; a bracket's first rung in Hyperband
      CHECK(rungs.back() < huge);
      CHECK(std::is_sorted(rungs.begin(), rungs.end()));
      CHECK(stopper->on_report(0, huge - 1, 0.5) == Decision::kContinue);  // alone in every rung it passed
      if (std::string(kind) == "asha") CHECK(stopper->on_report(1, huge - 1, 0.1) == Decision::kStop);  // below trial 0
    }
  }
  // ASHA without a max_t (0: none): a report at the largest step passes every rung below 2^63.
  auto asha = make("asha", {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", 0}});
  CHECK(asha->on_report(0, huge, 0.5) == Decision::kContinue);
  CHECK(asha->state()["rungs"].size() == 40);  // 3^0 .. 3^39 (3^40 > 2^63)
}

TEST_CASE("ASHA with min_early_stopping_rate shifts its rungs; NaN counts as worst") {
  auto asha = make("asha", {{"grace_period", 1}, {"reduction_factor", 3}, {"min_early_stopping_rate", 1}});
  CHECK(asha->on_report(0, 1, 0.9) == Decision::kContinue);
  CHECK(asha->on_report(1, 1, 0.1) == Decision::kContinue);  // no rung at 1: the first is at 3
  CHECK(asha->on_report(0, 3, 0.9) == Decision::kContinue);
  CHECK(asha->on_report(1, 3, std::nan("")) == Decision::kStop);
}

TEST_CASE("Hyperband: deterministic brackets of ASHA with Hyperband's weights") {
  nlohmann::json s = {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", 27}};
  auto hb = make("hyperband", s, true, 5);
  auto st = hb->state();
  REQUIRE(st["brackets"].size() == 4);  // s_max = log3(27) = 3
  CHECK(st["brackets"][0]["weight"] == 27.0);  // Hyperband's n for its most aggressive bracket: eta^3
  CHECK(st["brackets"][1]["weight"] == 12.0);  // ceil(4/3 * 9)
  CHECK(st["brackets"][2]["weight"] == 6.0);   // ceil(4/2 * 3)
  CHECK(st["brackets"][3]["weight"] == 4.0);   // ceil(4/1 * 1)
  // Each trial is judged only at the rungs of its bracket: feed everyone a poor report at step 1,
  // then count which trials could have been stopped there (bracket 0 only).
  auto hb2 = make("hyperband", s, true, 5);
  int stopped_at_1 = 0;
  for (int i = 0; i < 400; ++i) {
    hb->on_report(i, 1, 1.0 * i);
    if (hb2->on_report(i, 1, -1.0 * i) == Decision::kStop) ++stopped_at_1;
  }
  auto st1 = hb->state();
  const std::size_t in_b0 = st1["brackets"][0]["rungs"][0]["trials"].size();
  CHECK(in_b0 == doctest::Approx(400 * 27.0 / 49).epsilon(0.15));
  for (int b = 1; b < 4; ++b) CHECK(st1["brackets"][b]["rungs"].empty());
  CHECK(stopped_at_1 == static_cast<int>(in_b0) - 1);  // the same seed puts the same trials in bracket 0
}

TEST_CASE("median rule: stop when the best so far is worse than the median of running means") {
  auto med = make("median", {{"grace_period", 2}, {"min_samples", 3}});
  // Three finished trials with curves (step: value): running means at step 2 are 0.55, 0.45, 0.65.
  const double curves[3][3] = {{0.5, 0.6, 0.7}, {0.4, 0.5, 0.6}, {0.6, 0.7, 0.8}};
  for (int t = 0; t < 3; ++t) {
    for (int step = 1; step <= 3; ++step) CHECK(med->on_report(t, step, curves[t][step - 1]) == Decision::kContinue);
    if (t < 2) CHECK(med->on_report(10, 0, 0.0) == Decision::kContinue);  // nothing judged before min_samples
    med->on_finish(t);
  }
  CHECK(med->on_report(3, 1, 0.1) == Decision::kContinue);  // grace period
  CHECK(med->on_report(3, 2, 0.56) == Decision::kContinue);  // best 0.56 >= median 0.55
  CHECK(med->on_report(4, 1, 0.2) == Decision::kContinue);
  CHECK(med->on_report(4, 2, 0.54) == Decision::kStop);      // best 0.54 < 0.55
  // At step 3 the running means are 0.6, 0.5, 0.7: median 0.6.
  CHECK(med->on_report(3, 3, 0.3) == Decision::kStop);       // best so far 0.56 < 0.6
}

TEST_CASE("stopper factory: none never stops; unknown kinds and settings are config errors") {
  auto none = make("none", nlohmann::json::object());
  for (int i = 0; i < 10; ++i) CHECK(none->on_report(i, i, -1e9 * i) == Decision::kContinue);
  auto bad = make_stopper({"ashaa", {}, true, 0});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kConfig);
  CHECK(bad.error().message().find("hyperband") != std::string::npos);
  bad = make_stopper({"asha", {{"reduction_factor", 0.5}}, true, 0});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kConfig);
  CHECK(bad.error().message().rfind("reduction_factor: ", 0) == 0);
  bad = make_stopper({"hyperband", {{"max_t", 2}, {"grace_period", 3}}, true, 0});
  REQUIRE_FALSE(bad.ok());
  CHECK(stopper_names() == std::vector<std::string>{"none", "asha", "hyperband", "median"});
}

#include "search/test_functions.h"

TEST_CASE("ASHA on simulated learning curves keeps the best trial and saves most of the steps") {
  // 81 random Branin configurations, 27 epochs each, loss curves converging to f(x) from a shared
  // start; ASHA (r = 1, eta = 3) judges at epochs 1, 3 and 9.
  auto fn = make_test_function("branin").value();
  const auto space = test_function_space(fn);
  auto asha = make("asha", {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", 27}}, /*maximize=*/false);
  Rng rng(12);
  int64_t steps = 0, best_seq = -1;
  double best = 1e300;
  std::vector<bool> stopped(81, false);
  for (int64_t seq = 0; seq < 81; ++seq) {
    const double final_value = fn(space.sample(rng));
    if (final_value < best) {
      best = final_value;
      best_seq = seq;
    }
    for (int64_t step = 1; step <= 27; ++step) {
      ++steps;
      if (asha->on_report(seq, step, learning_curve(final_value, 400.0, step, 27)) == Decision::kStop) {
        stopped[static_cast<std::size_t>(seq)] = true;
        break;
      }
    }
    asha->on_finish(seq);
  }
  CHECK_FALSE(stopped[static_cast<std::size_t>(best_seq)]);
  CHECK(steps < 81 * 27 / 2);
  MESSAGE("steps used: " << steps << " of " << 81 * 27);
}
