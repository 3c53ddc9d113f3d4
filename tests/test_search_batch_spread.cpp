// Parallel proposals (issue 25): with several groups free, the suggestions of one batch must not
// crowd one spot. After 20 observations, a batch of 16 from bayesian (running trials and earlier
// batch members as kriging-believer fantasies), tpe (constant liar) and auto (the portfolio's
// members adopt each other's suggestions) must be 16 distinct configurations whose mean pairwise
// distance is at least half that of 16 uniform random points, on a continuous, an ordinal-grid
// and a categorical space. Without the fantasies every member of a GP batch would be the same
// acquisition maximum, moved by SearcherBase's dedup to its nearest free neighbour (a cluster of
// distance ~0.1-0.3 in a space where random points are ~0.9-2.2 apart).
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "search/encoding.h"
#include "search/searcher.h"
#include "search/test_functions.h"
#include "param_specs.h"

using namespace hpctune;
using namespace hpctune::search;
using hpctune::testing::choice;
using hpctune::testing::flt;
using hpctune::testing::integer;
using nlohmann::json;

namespace {

constexpr int kDim = 6, kLevels = 6, kObserved = 20, kBatch = 16;

const char* name(int i) {
  static const char* const names[kDim] = {"x1", "x2", "x3", "x4", "x5", "x6"};
  return names[i];
}

enum class Kind { kContinuous, kOrdinal, kCategorical };

Space space_of(Kind kind) {
  std::vector<ParamSpec> specs;
  for (int i = 0; i < kDim; ++i) {
    if (kind == Kind::kContinuous) specs.push_back(flt(name(i), 0, 1));
    else if (kind == Kind::kOrdinal) specs.push_back(integer(name(i), 0, kLevels - 1));
    else specs.push_back(choice(name(i), {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}, false));
  }
  return Space::create(specs).value();
}

// Hartmann-6 at the point the configuration stands for (a level index / 5 for the ordinal grid).
double hartmann(const Params& p, Kind kind) {
  static const TestFunction fn = make_test_function("hartmann6", kDim).value();
  std::vector<double> x(kDim);
  for (int i = 0; i < kDim; ++i) {
    const double v = p.at(name(i)).get<double>();
    x[static_cast<std::size_t>(i)] = kind == Kind::kOrdinal ? v / (kLevels - 1) : v;
  }
  return fn(x);
}

// Distance in unit coordinates; an unordered choice counts 0 or 1.
double distance(const Encoder& enc, const Params& a, const Params& b) {
  const auto ua = enc.encode(a), ub = enc.encode(b);
  double d = 0;
  for (std::size_t i = 0; i < ua.size(); ++i) {
    const auto& p = enc.spec(i);
    if (p.type == ParamType::kChoice && !p.ordered) d += ua[i] == ub[i] ? 0.0 : 1.0;
    else d += (ua[i] - ub[i]) * (ua[i] - ub[i]);
  }
  return std::sqrt(d);
}

double mean_pairwise(const Encoder& enc, const std::vector<Params>& pts) {
  double sum = 0;
  int pairs = 0;
  for (std::size_t i = 0; i < pts.size(); ++i)
    for (std::size_t j = 0; j < i; ++j, ++pairs) sum += distance(enc, pts[i], pts[j]);
  return sum / pairs;
}

SearchSpec spec_for(const std::string& algo, const Space& space, uint64_t seed, int64_t max_trials, json settings) {
  SearchSpec spec;
  spec.algorithm = algo;
  spec.space = space;
  spec.objectives = {{"loss", false}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  spec.settings = std::move(settings);
  return spec;
}

// kObserved suggestions asked and told one at a time, as one free group would.
void observe(Searcher& s, Kind kind) {
  for (int t = 0; t < kObserved; ++t) {
    auto one = s.ask(1);
    REQUIRE(one.ok());
    REQUIRE(one->size() == 1);
    const auto& x = one->front();
    s.tell({x.seq, x.params, Outcome::kCompleted, {hartmann(x.params, kind)}, 1});
  }
}

}  // namespace

TEST_CASE("a batch of 16 after 20 observations is distinct and spread: bayesian, tpe, auto") {
  for (const Kind kind : {Kind::kContinuous, Kind::kOrdinal, Kind::kCategorical}) {
    const Space space = space_of(kind);
    const Encoder enc(space);
    for (const std::string algo : {"bayesian", "tpe", "auto"}) {
      double batch_sum = 0, random_sum = 0;
      for (const uint64_t seed : {1, 2, 3}) {
        CAPTURE(static_cast<int>(kind));
        CAPTURE(algo);
        CAPTURE(seed);
        const json settings =
            algo == "bayesian" ? json{{"acq_samples", 300}, {"acq_local_starts", 2}} : json::object();
        auto made = make_searcher(spec_for(algo, space, seed, 100, settings));
        REQUIRE_MESSAGE(made.ok(), made.error().to_string());
        Searcher& s = **made;
        observe(s, kind);
        auto batch = s.ask(kBatch);
        REQUIRE(batch.ok());
        REQUIRE(batch->size() == kBatch);
        std::vector<Params> pts;
        std::set<std::string> keys;
        for (const auto& x : *batch) {
          pts.push_back(x.params);
          keys.insert(x.params.dump());
        }
        CHECK(keys.size() == std::size_t{kBatch});  // pairwise distinct
        batch_sum += mean_pairwise(enc, pts);
        Rng rng(derive_seed(seed, 77));
        std::vector<Params> random;
        for (int i = 0; i < kBatch; ++i) random.push_back(space.sample(rng));
        random_sum += mean_pairwise(enc, random);
      }
      const double ratio = batch_sum / random_sum;
      MESSAGE("space " << static_cast<int>(kind) << " " << algo << ": mean pairwise distance " << batch_sum / 3
                       << ", random's " << random_sum / 3 << " (" << ratio << ")");
      CHECK(ratio >= 0.5);
    }
  }
}

// Many groups (issue 38's follow-up: 2,048 groups stalled the master for hours): the GP takes only
// the latest max_fantasies running trials into its model, so a suggestion's cost does not grow
// with the groups. Below the cap nothing changes (the same suggestions, bit for bit, as with no
// cap); above it the model holds at most 2 x max_fantasies running trials, the latest ones, and a
// large batch is still distinct and spread.
TEST_CASE("bayesian takes the latest max_fantasies running trials: the same below the cap, bounded above it") {
  const Space space = space_of(Kind::kContinuous);
  const Encoder enc(space);
  for (const std::string surrogate : {"gp", "forest"}) {
    CAPTURE(surrogate);
    auto run = [&](int64_t max_fantasies, std::size_t batch, std::size_t running_before) {
      const json settings = {
          {"acq_samples", 200}, {"acq_local_starts", 1}, {"max_fantasies", max_fantasies}, {"surrogate", surrogate}};
      auto s = make_searcher(spec_for("bayesian", space, 5, 1000, settings)).value();
      observe(*s, Kind::kContinuous);
      REQUIRE(s->ask(running_before).value().size() == running_before);  // running, never told
      auto out = s->ask(batch).value();
      REQUIRE(out.size() == batch);
      std::vector<Params> pts;
      for (const auto& x : out) pts.push_back(x.params);
      return std::make_pair(pts, s->state()["running_in_model"].get<std::size_t>());
    };
    // 8 running + a batch of 8: 16 fantasies at most, under the default 64 and under 16.
    const auto uncapped = run(100000, 8, 8), at_16 = run(16, 8, 8), at_64 = run(64, 8, 8);
    CHECK(at_16.first == uncapped.first);
    CHECK(at_64.first == uncapped.first);
    CHECK(uncapped.second == 16);
    // 40 running + a batch of 24 under a cap of 4: the model never holds more than 8 of them.
    const auto capped = run(4, 24, 40), free_run = run(100000, 24, 40);
    CHECK(capped.second <= 8);
    CHECK(capped.second >= 4);
    CHECK(free_run.second == 64);
    CHECK(capped.first != free_run.first);
    std::set<std::string> keys;
    for (const auto& p : capped.first) keys.insert(p.dump());
    CHECK(keys.size() == capped.first.size());
    Rng rng(derive_seed(5, 77));
    std::vector<Params> random;
    for (std::size_t i = 0; i < capped.first.size(); ++i) random.push_back(space.sample(rng));
    const double ratio = mean_pairwise(enc, capped.first) / mean_pairwise(enc, random);
    MESSAGE(surrogate << ": a batch of 24 beside 40 running, max_fantasies 4: mean pairwise distance " << ratio
                      << " of random's");
    CHECK(ratio >= 0.5);
  }
}
