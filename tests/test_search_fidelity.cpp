// Multi-fidelity modelling under early stopping (issue 34, item 4; search/model_data.h): bayesian,
// tpe and auto never take a partial value (a pruned trial's, or one short of max_step) for a final
// one. They model the values at one level (a rung or the final step: the highest with at least
// max(d + 1, 6) values, as BOHB), and a running or paused trial that has reported but was not told
// a final outcome is pending there. Without a fidelity (max_step 0) nothing changes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "search/encoding.h"
#include "search/model_data.h"
#include "search/searcher.h"
#include "param_specs.h"

using namespace hpctune;
using namespace hpctune::search;
using hpctune::testing::choice;
using hpctune::testing::flt;

namespace {

constexpr int64_t kMaxStep = 27;
const std::vector<int64_t> kRungs = {1, 3, 9};

Space line() { return Space::create({flt("x", 0.0, 1.0)}).value(); }

// The final value (larger is better): best at x = 0.8.
double final_value(double x) { return 1.0 - (x - 0.8) * (x - 0.8); }

SearchSpec spec(const std::string& algorithm, bool fidelity, uint64_t seed = 3) {
  SearchSpec s;
  s.algorithm = algorithm;
  s.space = line();
  s.objectives = {{"acc", true}};
  s.seed = seed;
  s.max_trials = 40;
  if (fidelity) s.fidelity = Fidelity{kMaxStep, kRungs};
  return s;
}

Params at(double x) { return Params{{"x", x}}; }

// The history of the misleading case: 8 trials trained to the end (final values best at 0.8), and 4
// near x = 0.2 whose partial values look better than any final one: 2 pruned at step 1, 2 told
// completed at step 3 (short of max_step, so partial too). A searcher that took those for final
// values would search near 0.2.
void tell_misleading_history(Searcher& s) {
  const double finals[] = {0.05, 0.15, 0.35, 0.45, 0.55, 0.65, 0.75, 0.95};
  int64_t seq = 0;
  for (double x : finals) {
    for (int64_t step : {int64_t{1}, int64_t{3}, int64_t{9}, kMaxStep})
      s.tell_report(seq, step, final_value(x) * static_cast<double>(step) / kMaxStep);
    s.tell({seq, at(x), Outcome::kCompleted, {final_value(x)}, kMaxStep});
    ++seq;
  }
  const double partial[] = {0.18, 0.22, 0.2, 0.24};
  for (int k = 0; k < 4; ++k) {
    const int64_t step = k < 2 ? 1 : 3;
    s.tell_report(seq, step, 2.0);
    s.tell({seq, at(partial[k]), k < 2 ? Outcome::kPruned : Outcome::kCompleted, {2.0}, step});
    ++seq;
  }
}

// The median distance to `target` of `n` suggestions asked one at a time, each told its final value.
double median_distance(Searcher& s, double target, int n) {
  std::vector<double> d;
  for (int k = 0; k < n; ++k) {
    auto got = s.ask(1);
    REQUIRE_MESSAGE(got.ok(), got.error().to_string());
    REQUIRE(got->size() == 1);
    const double x = got->front().params.at("x").get<double>();
    d.push_back(std::fabs(x - target));
    s.tell({got->front().seq, got->front().params, Outcome::kCompleted, {final_value(x)}, kMaxStep});
  }
  std::sort(d.begin(), d.end());
  return d[d.size() / 2];
}

std::unique_ptr<Searcher> make(const SearchSpec& s) {
  auto made = make_searcher(s);
  REQUIRE_MESSAGE(made.ok(), made.error().to_string());
  return std::move(made).value();
}

DataPoint told_point(const Encoder& enc, int64_t seq, double x, Outcome outcome, double value, int64_t step) {
  return make_data_point(enc, Observation{seq, at(x), outcome, {value}, step}, {{"acc", true}});
}

// Six trials (seqs 0..5, x = 0, 0.1, ... 0.5) trained to the end, each reported at rungs 1, 3 and 9:
// max_step has the 6 values a level needs.
void add_six_finals(const Encoder& enc, std::vector<DataPoint>& told, ReportLog& reports) {
  for (int64_t k = 0; k < 6; ++k) {
    reports[k] = {{1, 0.1}, {3, 0.2}, {9, 0.3}};
    told.push_back(told_point(enc, k, 0.1 * static_cast<double>(k), Outcome::kCompleted, 0.4, kMaxStep));
  }
}

}  // namespace

TEST_CASE("fidelity levels and the values a level needs") {
  CHECK(fidelity_levels(Fidelity{}, 1).empty());
  CHECK(fidelity_levels(Fidelity{27, {9, 1, 3, 3, 27, 0}}, 1) == std::vector<int64_t>{1, 3, 9, 27});
  CHECK(fidelity_levels(Fidelity{27, {1, 3, 9}}, 2) == std::vector<int64_t>{27});  // reports carry one objective
  CHECK(fidelity_min_points(line()) == 6);
  std::vector<ParamSpec> many;
  for (const char* name : {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}) many.push_back(flt(name, 0, 1));
  CHECK(fidelity_min_points(Space::create(many).value()) == 9);  // d + 1, BOHB's N_min
}

TEST_CASE("a misleading early value: the model's data at max_step holds final values only") {
  // A (x = 0.2) is great at rung 1 and poor at the end; B (x = 0.8) the opposite and pruned at rung 1.
  SearchSpec s = spec("bayesian", true);
  const Encoder enc(s.space);
  std::vector<DataPoint> told;
  ReportLog reports;
  // Five trials trained to the end besides A, so that max_step has the 6 values it needs.
  for (int64_t k = 0; k < 5; ++k) {
    const double x = 0.05 + 0.1 * static_cast<double>(k);
    reports[k][1] = 0.3;
    told.push_back(told_point(enc, k, x, Outcome::kCompleted, 0.5, kMaxStep));
  }
  reports[5] = {{1, 0.9}, {3, 0.5}, {9, 0.2}, {27, 0.1}};  // A
  told.push_back(told_point(enc, 5, 0.2, Outcome::kCompleted, 0.1, kMaxStep));
  reports[6] = {{1, 0.1}};  // B, pruned at rung 1
  told.push_back(told_point(enc, 6, 0.8, Outcome::kPruned, 0.1, 1));

  const LevelData top = fidelity_model_data(s, enc, told, {}, reports);
  CHECK(top.level == kMaxStep);
  REQUIRE(top.points.size() == 6);  // B's partial value is not a final one
  for (const auto& p : top.points) {
    CHECK(p.seq != 6);
    CHECK(p.step == kMaxStep);
  }
  CHECK(top.points[5].seq == 5);
  CHECK(top.points[5].losses == std::vector<double>{-0.1});  // A at its final value, not its rung-1 one
  CHECK(top.counts == std::vector<std::pair<int64_t, int64_t>>{{1, 7}, {3, 1}, {9, 1}, {27, 6}});

  // With one final value fewer than needed, the model drops to rung 1, where A and B are at their
  // rung-1 values (each, there, a value of the same fidelity as the others').
  told.erase(told.begin());
  reports.erase(0);
  const LevelData low = fidelity_model_data(s, enc, told, {}, reports);
  CHECK(low.level == 1);
  REQUIRE(low.points.size() == 6);
  CHECK(low.points[4].seq == 5);
  CHECK(low.points[4].losses == std::vector<double>{-0.9});
  CHECK(low.points[5].seq == 6);
  CHECK(low.points[5].losses == std::vector<double>{-0.1});

  // No level with 6 values: nothing to model (the design goes on).
  const LevelData none = fidelity_model_data(s, enc, {told.begin(), told.begin() + 3}, {}, reports);
  CHECK(none.level == 0);
  CHECK(none.points.empty());
}

TEST_CASE("a pruned trial counts only up to its last step; a running one that reported is pending above its reports") {
  SearchSpec s = spec("tpe", true);
  const Encoder enc(s.space);
  std::vector<DataPoint> told;
  ReportLog reports;
  add_six_finals(enc, told, reports);
  // Pruned at step 4 with (stray) reports past it: none above step 4 counts; its value at 4 is not rung 3's
  // (rung 3 takes the first value in [3, 9)).
  reports[6] = {{1, 0.1}, {3, 0.25}, {9, 0.9}, {20, 0.9}};
  told.push_back(told_point(enc, 6, 0.65, Outcome::kPruned, 0.26, 4));
  // Running (or paused): reported at every rung and even at max_step, but never told a final outcome.
  reports[7] = {{1, 0.1}, {3, 0.2}, {9, 0.35}, {27, 0.99}};
  const std::map<int64_t, Params> pending = {{7, at(0.7)}, {8, at(0.75)}};

  const LevelData top = fidelity_model_data(s, enc, told, pending, reports);
  CHECK(top.level == kMaxStep);
  CHECK(top.points.size() == 6);
  CHECK(top.pending == std::vector<int64_t>{7, 8});
  CHECK(top.counts == std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {3, 8}, {9, 7}, {27, 6}});
  for (const auto& p : top.points) CHECK(p.losses == std::vector<double>{-0.4});

  // One final value fewer: rung 9 is the highest level with 6 values, and there the running trial
  // that reached it is an observation, the one that did not is pending, the pruned one is absent.
  told.erase(told.begin());
  reports.erase(0);
  const LevelData nine = fidelity_model_data(s, enc, told, pending, reports);
  CHECK(nine.level == 9);
  CHECK(nine.counts == std::vector<std::pair<int64_t, int64_t>>{{1, 7}, {3, 7}, {9, 6}, {27, 5}});
  REQUIRE(nine.points.size() == 6);
  CHECK(nine.points.back().seq == 7);
  CHECK(nine.points.back().losses == std::vector<double>{-0.35});
  CHECK(nine.pending == std::vector<int64_t>{8});
  for (const auto& p : nine.points) CHECK(p.seq != 6);
  // Rung 3 takes the pruned trial's first value in [3, 9): its report at 3, not its value at 4.
  s.fidelity.rungs = {1, 3};
  const LevelData three = fidelity_model_data(s, enc, told, pending, reports);
  CHECK(three.level == 3);
  bool pruned_seen = false;
  for (const auto& p : three.points)
    if (p.seq == 6) {
      pruned_seen = true;
      CHECK(p.losses == std::vector<double>{-0.25});
    }
  CHECK(pruned_seen);

  // The order of the reports and of the told trials' arrival does not matter to a level's values.
  ReportLog again;
  for (auto it = reports.rbegin(); it != reports.rend(); ++it) again[it->first] = it->second;
  const LevelData same = fidelity_model_data(s, enc, told, pending, again);
  CHECK(same.level == three.level);
  CHECK(same.counts == three.counts);
}

// A region where every trial is pruned at rung 1 (x < 0.3) never reaches the level the model is
// fitted on (rung 3 or the end). Left out of the model, it stayed the least known part of the
// space, and every model trial after the 10th went there: 177-180 of 180 (6 seeds; bayesian, tpe,
// auto), each pruned at rung 1 again. (The forest, whose variance does not grow away from its data,
// never had it; it runs here for its batched fantasies.) Its trials are now `stopped`: visited, their value there
// unknown (a fantasy for the GP, the bad group for TPE).
TEST_CASE("trials stopped below the model's level are not proposed again and again") {
  for (const std::string algorithm : {"bayesian", "tpe", "auto", "forest"}) {
    CAPTURE(algorithm);
    int pruned_late = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      SearchSpec s = spec(algorithm == "forest" ? "bayesian" : algorithm, true, seed);
      if (algorithm == "forest") s.settings = {{"surrogate", "forest"}};  // auto's model of unordered choices
      s.fidelity = Fidelity{9, {1, 3}};
      auto searcher = make(s);
      for (int i = 0; i < 40; ++i) {
        auto got = searcher->ask(1);
        REQUIRE_MESSAGE(got.ok(), got.error().to_string());
        const Suggestion& g = got->front();
        const double x = g.params.at("x").get<double>(), v = final_value(x);
        searcher->tell_report(g.seq, 1, v - 1.0);
        if (x < 0.3) {
          searcher->tell({g.seq, g.params, Outcome::kPruned, {v - 1.0}, 1});
          pruned_late += i >= 10 ? 1 : 0;
          continue;
        }
        searcher->tell_report(g.seq, 3, v - 0.5);
        searcher->tell({g.seq, g.params, Outcome::kCompleted, {v}, 9});
      }
      if (seed == 1) {
        const auto st = searcher->state();
        REQUIRE(st.contains("fidelity"));
        CHECK(st["fidelity"]["level"].get<int64_t>() > 1);
        CHECK(st["fidelity"]["stopped"].get<int64_t>() > 0);
      }
    }
    CHECK(pruned_late < 30);  // of 180 model trials: 2-5 now
  }
}

TEST_CASE("fidelity_model_data: a trial stopped below the level is `stopped`, a failed one a point, a final one neither") {
  SearchSpec s = spec("tpe", true);
  const Encoder enc(s.space);
  std::vector<DataPoint> told;
  ReportLog reports;
  add_six_finals(enc, told, reports);
  reports[6] = {{1, 0.05}};
  told.push_back(told_point(enc, 6, 0.65, Outcome::kPruned, 0.05, 1));  // stopped at rung 1
  told.push_back(make_data_point(enc, Observation{7, at(0.9), Outcome::kFailed, {}, 2}, {{"acc", true}}));
  reports[8] = {{1, 0.1}, {3, 0.2}};
  told.push_back(told_point(enc, 8, 0.3, Outcome::kPruned, 0.2, 3));  // stopped at rung 3
  const LevelData top = fidelity_model_data(s, enc, told, {}, reports);
  CHECK(top.level == kMaxStep);
  CHECK(top.stopped == std::vector<std::size_t>{6, 8});
  CHECK(top.points.size() == 7);  // the 6 finals and the failed one
  // One final value fewer: rung 3 (5 finals and seq 8 reached it) is the level; seq 8 is a point
  // there, seq 6 (row 5 of the 8 told) still stopped below it.
  const LevelData three = fidelity_model_data(s, enc, {told.begin() + 1, told.end()}, {}, reports);
  CHECK(three.level == 3);
  CHECK(three.stopped == std::vector<std::size_t>{5});
  CHECK(three.points.size() == 7);
  CHECK(fidelity_state(three)["stopped"] == 1);
}

TEST_CASE("fidelity_model_data: a program that reports its epochs from 0 completes at max_step - 1, a full training") {
  // Its reports are 0, 1, ... max_step - 1 (the index of the epoch it just trained); a trial that
  // completed there trained all max_step epochs. Before, every such trial was partial: the top
  // level never had a value and the model stayed at rung 9 for the whole campaign.
  SearchSpec s = spec("tpe", true);
  const Encoder enc(s.space);
  std::vector<DataPoint> told;
  ReportLog reports;
  for (int64_t k = 0; k < 6; ++k) {
    reports[k] = {{0, 0.05}, {1, 0.1}, {3, 0.2}, {9, 0.3}, {kMaxStep - 1, 0.4}};
    told.push_back(told_point(enc, k, 0.1 * static_cast<double>(k), Outcome::kCompleted, 0.4, kMaxStep - 1));
  }
  const LevelData top = fidelity_model_data(s, enc, told, {}, reports);
  CHECK(top.level == kMaxStep);
  CHECK(top.points.size() == 6);
  CHECK(top.stopped.empty());
  CHECK(is_final(Observation{0, at(0.1), Outcome::kCompleted, {0.4}, kMaxStep - 1}, s.fidelity));
  // Two steps short is partial still (a program that ended early by itself); pruned is never final.
  CHECK_FALSE(is_final(Observation{0, at(0.1), Outcome::kCompleted, {0.4}, kMaxStep - 2}, s.fidelity));
  CHECK_FALSE(is_final(Observation{0, at(0.1), Outcome::kPruned, {0.4}, kMaxStep - 1}, s.fidelity));
  told.back().step = kMaxStep - 2;
  CHECK(fidelity_model_data(s, enc, told, {}, reports).level == 9);  // 5 finals: rung 9 has the 6
}

TEST_CASE("a level's pending trials are named by seq: their parameters are read from the searcher's map, not copied") {
  // At 2,048 groups a copy of every running trial's parameters on every ask was a quarter of the master's time.
  std::map<int64_t, Params> pending = {{2, at(0.2)}, {4, at(0.4)}, {5, at(0.5)}, {9, at(0.9)}};
  std::vector<int64_t> seen;
  for_each_pending({1, 4, 5, 9, 12}, pending, [&](int64_t seq, const Params& params) {
    CHECK(&params == &pending.at(seq));  // the map's own parameters
    seen.push_back(seq);
  });
  CHECK(seen == std::vector<int64_t>{4, 5, 9});  // in seq order; 1 and 12 are not (or no longer) pending
  seen.clear();
  for_each_pending({}, pending, [&](int64_t seq, const Params&) { seen.push_back(seq); });
  CHECK(seen.empty());
}

TEST_CASE("several objectives: only final values are modelled (the reports carry the primary objective)") {
  SearchSpec s = spec("bayesian", true);
  s.objectives = {{"acc", true}, {"latency", false}};
  const Encoder enc(s.space);
  std::vector<DataPoint> told;
  ReportLog reports;
  for (int64_t k = 0; k < 7; ++k) {
    reports[k][1] = 0.5;
    const bool pruned = k == 6;
    told.push_back(make_data_point(enc, Observation{k, at(0.1 * static_cast<double>(k)), pruned ? Outcome::kPruned : Outcome::kCompleted,
                                                    {0.5, 2.0}, pruned ? 1 : kMaxStep},
                                   s.objectives));
  }
  const LevelData top = fidelity_model_data(s, enc, told, {}, reports);
  CHECK(top.level == kMaxStep);
  CHECK(top.counts == std::vector<std::pair<int64_t, int64_t>>{{kMaxStep, 6}});
  REQUIRE(top.points.size() == 6);
  for (const auto& p : top.points) CHECK(p.losses == std::vector<double>{-0.5, 2.0});
  told.erase(told.begin());
  CHECK(fidelity_model_data(s, enc, told, {}, reports).level == 0);  // 5 final values: not enough
}

TEST_CASE("bayesian under early stopping: suggestions go to the final optimum, not to the partial values") {
  for (uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    auto with = make(spec("bayesian", true, seed));
    tell_misleading_history(*with);
    REQUIRE(with->ask(1).ok());
    // The GP's first model: the 8 final values, not the 4 partial ones (nor the one just asked).
    auto st = with->state();
    REQUIRE(st.contains("fidelity"));
    CHECK(st["fidelity"]["level"] == kMaxStep);
    CHECK(st["fidelity"]["observations"] == 8);
    CHECK(st["observations_in_model"] == 8);
    CHECK(median_distance(*with, 0.8, 5) < 0.15);
    st = with->state();  // the last ask's model: its own suggestions told since (not the first, still running)
    CHECK(st["fidelity"]["observations"] == 8 + 4);
    CHECK(st["fidelity"]["pending"] == 1);

    // The same history without a fidelity: the partial values are taken for final (today's
    // behaviour, which the fidelity is there to change).
    auto without = make(spec("bayesian", false, seed));
    tell_misleading_history(*without);
    REQUIRE(without->ask(1).ok());
    CHECK(without->state()["observations_in_model"] == 12);
    CHECK_FALSE(without->state().contains("fidelity"));
  }
}

TEST_CASE("tpe under early stopping: suggestions go to the final optimum, not to the partial values") {
  for (uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    auto with = make(spec("tpe", true, seed));
    tell_misleading_history(*with);
    CHECK(median_distance(*with, 0.8, 5) < 0.2);
    const auto st = with->state();
    REQUIRE(st.contains("fidelity"));
    CHECK(st["fidelity"]["level"] == kMaxStep);

    auto without = make(spec("tpe", false, seed));
    tell_misleading_history(*without);
    CHECK(median_distance(*without, 0.2, 3) < 0.2);
  }
}

TEST_CASE("auto under early stopping: says it models per rung, and its GP is not misled") {
  auto s = make(spec("auto", true));
  const auto notes = s->notes();
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& l) {
    return l.find("auto: under early stopping, bayesian models per rung") == 0 && l.find("as BOHB") != std::string::npos;
  }));
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& l) { return l.find("multi-fidelity:") == 0; }));
  tell_misleading_history(*s);
  CHECK(median_distance(*s, 0.8, 5) < 0.15);
  CHECK(s->state()["fidelity"]["level"] == kMaxStep);

  auto plain = make(spec("auto", false));
  const auto plain_notes = plain->notes();
  CHECK(std::none_of(plain_notes.begin(), plain_notes.end(),
                     [](const std::string& l) { return l.find("early stopping") != std::string::npos; }));
}

TEST_CASE("auto's portfolio forwards the reports to its members") {
  std::vector<ParamSpec> specs;
  for (const char* n : {"a", "b", "c"}) specs.push_back(choice(n, {"p", "q", "r", "s"}, false));
  SearchSpec sp;
  sp.algorithm = "auto";
  sp.space = Space::create(specs).value();
  sp.objectives = {{"acc", true}};
  sp.seed = 4;
  sp.max_trials = 40;
  sp.fidelity = Fidelity{kMaxStep, kRungs};
  auto s = make(sp);
  REQUIRE(s->state()["auto"]["algorithm"] == "portfolio");
  auto first = s->ask(8);
  REQUIRE(first.ok());
  REQUIRE(first->size() == 8);
  // Every trial reaches rung 1 (reports only: all running); none is final.
  for (const auto& g : *first) s->tell_report(g.seq, 1, 0.1 * static_cast<double>(g.seq));
  auto next = s->ask(1);
  REQUIRE(next.ok());
  const auto st = s->state();  // the first member's (the forest's) state
  REQUIRE(st.contains("fidelity"));
  CHECK(st["fidelity"]["level"] == 1);
  CHECK(st["fidelity"]["observations"] == 8);
  CHECK(st["fidelity"]["levels"][0]["values"] == 8);
  CHECK(st["fidelity"]["levels"][3]["values"] == 0);
}

TEST_CASE("a running trial with reports but no final tell is pending at max_step (bayesian, tpe)") {
  for (const char* algorithm : {"bayesian", "tpe"}) {
    CAPTURE(algorithm);
    auto s = make(spec(algorithm, true));
    auto got = s->ask(9);
    REQUIRE(got.ok());
    REQUIRE(got->size() == 9);
    for (int k = 0; k < 8; ++k) {
      const auto& g = (*got)[static_cast<std::size_t>(k)];
      const double x = g.params.at("x").get<double>();
      s->tell({g.seq, g.params, Outcome::kCompleted, {final_value(x)}, kMaxStep});
    }
    // The ninth reports at every rung and at max_step, then pauses: never told.
    for (int64_t step : {int64_t{1}, int64_t{3}, int64_t{9}, kMaxStep}) s->tell_report((*got)[8].seq, step, 5.0);
    auto next = s->ask(1);
    REQUIRE(next.ok());
    const auto f = s->state()["fidelity"];
    CHECK(f["level"] == kMaxStep);
    CHECK(f["observations"] == 8);
    // bayesian's state is its last ask's model (the paused trial); tpe's is the current history
    // (the paused trial and the one just asked).
    CHECK(f["pending"].get<int64_t>() == (std::string(algorithm) == "bayesian" ? 1 : 2));
  }
}

TEST_CASE("reports replayed before or after restore() give the same model and suggestions") {
  for (const char* algorithm : {"bayesian", "tpe", "auto"}) {
    CAPTURE(algorithm);
    auto live = make(spec(algorithm, true));
    auto got = live->ask(10);
    REQUIRE(got.ok());
    std::vector<Record> history;
    struct Report {
      int64_t seq, step;
      double value;
    };
    std::vector<Report> reports;
    for (const auto& g : *got) {
      const double x = g.params.at("x").get<double>();
      Record r{g, std::nullopt};
      for (int64_t step : {int64_t{1}, int64_t{3}}) reports.push_back({g.seq, step, final_value(x) * step / 27.0});
      if (g.seq % 3 == 2) {  // pruned at step 3
        r.observation = Observation{g.seq, g.params, Outcome::kPruned, {final_value(x) * 3 / 27.0}, 3};
      } else if (g.seq != 9) {  // 9 is still running
        r.observation = Observation{g.seq, g.params, Outcome::kCompleted, {final_value(x)}, kMaxStep};
      }
      history.push_back(r);
    }
    auto before = make(spec(algorithm, true));
    for (const auto& r : reports) before->tell_report(r.seq, r.step, r.value);
    before->restore(history);
    auto after = make(spec(algorithm, true));
    after->restore(history);
    for (auto it = reports.rbegin(); it != reports.rend(); ++it) after->tell_report(it->seq, it->step, it->value);
    auto a = before->ask(2);
    auto b = after->ask(2);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(a->size() == 2);
    REQUIRE(b->size() == 2);
    for (std::size_t i = 0; i < 2; ++i) CHECK((*a)[i].params == (*b)[i].params);
    CHECK(before->state()["fidelity"] == after->state()["fidelity"]);
  }
}

TEST_CASE("a report for a trial already told reaches the next ask: the cache of the told trials' values is refilled") {
  // tpe and bayesian keep the told trials' values at the rungs between asks (RungCache); a report
  // that comes after its trial was told (a replay) must not leave a stale value there.
  for (const char* algorithm : {"bayesian", "tpe", "auto"}) {
    CAPTURE(algorithm);
    auto live = make(spec(algorithm, true));
    auto got = live->ask(12);
    REQUIRE(got.ok());
    std::vector<Record> history;
    std::vector<std::pair<int64_t, double>> at_three;  // the rung-3 reports, which come late
    for (const auto& g : *got) {
      const double x = g.params.at("x").get<double>();
      history.push_back({g, Observation{g.seq, g.params, Outcome::kPruned, {final_value(x) * 9 / 27.0}, 9}});
      at_three.emplace_back(g.seq, final_value(x) * 3 / 27.0);
    }
    auto late = make(spec(algorithm, true));
    late->restore(history);
    for (const auto& g : *got) late->tell_report(g.seq, 1, 0.5);
    auto first = late->ask(1);  // fills the cache: no values at rung 3 but the trials' own at 9
    REQUIRE(first.ok());
    REQUIRE(first->size() == 1);
    for (const auto& [seq, v] : at_three) late->tell_report(seq, 3, v);

    auto early = make(spec(algorithm, true));
    std::vector<Record> with_first = history;
    with_first.push_back({first->front(), std::nullopt});
    early->restore(with_first);
    for (const auto& g : *got) early->tell_report(g.seq, 1, 0.5);
    for (const auto& [seq, v] : at_three) early->tell_report(seq, 3, v);
    auto a = late->ask(2);
    auto b = early->ask(2);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(a->size() == 2);
    REQUIRE(b->size() == 2);
    for (std::size_t i = 0; i < 2; ++i) CHECK((*a)[i].params == (*b)[i].params);
    CHECK(late->state()["fidelity"] == early->state()["fidelity"]);
    CHECK(late->state()["fidelity"]["levels"][1]["values"] == 12);  // rung 3: the late reports count
  }
}

TEST_CASE("fidelity_model_data with a cache gives what it gives without one, as trials are told and reports come late") {
  SearchSpec s = spec("tpe", true);
  const Encoder enc(s.space);
  std::vector<DataPoint> told;
  ReportLog reports;
  std::map<int64_t, Params> pending;
  RungCache cache;
  uint64_t late = 0;  // reports to told trials, as SearcherBase::told_reports() counts them
  auto same = [](const LevelData& a, const LevelData& b) {
    CHECK(a.level == b.level);
    CHECK(a.counts == b.counts);
    CHECK(a.pending == b.pending);
    REQUIRE(a.points.size() == b.points.size());
    for (std::size_t i = 0; i < a.points.size(); ++i) {
      CHECK(a.points[i].seq == b.points[i].seq);
      CHECK(a.points[i].losses == b.points[i].losses);
      CHECK(a.points[i].step == b.points[i].step);
    }
  };
  for (int64_t seq = 0; seq < 40; ++seq) {
    CAPTURE(seq);
    const double x = static_cast<double>(seq % 10) / 10.0;
    pending[seq] = at(x);
    reports[seq][1] = final_value(x) / 27.0;
    if (seq >= 2) {  // the trial two before finishes: pruned at 1, or trained to the end
      const int64_t t = seq - 2;
      pending.erase(t);
      const bool pruned = t % 3 != 0;
      told.push_back(told_point(enc, t, static_cast<double>(t % 10) / 10.0, pruned ? Outcome::kPruned : Outcome::kCompleted,
                                0.3, pruned ? 1 : kMaxStep));
    }
    if (seq % 5 == 4) {  // a late report at rung 3 for a trial told before, trained to the end
      for (const auto& p : told)
        if (p.step == kMaxStep && !reports[p.seq].count(3)) {
          reports[p.seq][3] = 0.9;
          ++late;
          break;
        }
    }
    const LevelData cached = fidelity_model_data(s, enc, told, pending, reports, &cache, late);
    const LevelData fresh = fidelity_model_data(s, enc, told, pending, reports);
    same(cached, fresh);
  }
  CHECK(cache.rows == told.size());
  CHECK(late >= 5);
  CHECK(fidelity_model_data(s, enc, told, pending, reports).counts[1].second == static_cast<int64_t>(late));  // rung 3
}

TEST_CASE("without a fidelity, reports are ignored and nothing changes") {
  for (const char* algorithm : {"bayesian", "tpe", "auto", "random", "cmaes", "evolution", "genetic", "rl"}) {
    CAPTURE(algorithm);
    auto quiet = make(spec(algorithm, false));
    auto talked = make(spec(algorithm, false));
    for (int round = 0; round < 4; ++round) {
      auto a = quiet->ask(3);
      auto b = talked->ask(3);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      REQUIRE(a->size() == b->size());
      for (std::size_t i = 0; i < a->size(); ++i) {
        CHECK((*a)[i].params == (*b)[i].params);
        const double x = (*a)[i].params.at("x").get<double>();
        talked->tell_report((*a)[i].seq, 1, 100.0);  // would mislead if it were modelled
        for (Searcher* s : {quiet.get(), talked.get()})
          s->tell({(*a)[i].seq, (*a)[i].params, Outcome::kCompleted, {final_value(x)}, 1});
      }
    }
    CHECK(quiet->state() == talked->state());
  }
}
