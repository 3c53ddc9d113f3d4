// Random search and the factory: determinism, membership, designs, restore after a crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "search/searcher.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;

namespace {

Space mixed_space() {
  std::vector<ParamSpec> specs(5);
  specs[0].name = "x";
  specs[0].low = -1;
  specs[0].high = 1;
  specs[1].name = "lr";
  specs[1].low = 1e-5;
  specs[1].high = 1;
  specs[1].log = true;
  specs[2].name = "opt";
  specs[2].type = ParamType::kChoice;
  specs[2].choices = {"sgd", "adam", "rms"};
  specs[3].name = "momentum";
  specs[3].low = 0;
  specs[3].high = 0.99;
  specs[3].when = Condition{"opt", {"sgd", "rms"}};
  specs[4].name = "layers";
  specs[4].type = ParamType::kInt;
  specs[4].low = 1;
  specs[4].high = 8;
  auto s = Space::create(specs);
  REQUIRE(s.ok());
  return *s;
}

SearchSpec spec_for(std::string init, uint64_t seed, int64_t max_trials = 64) {
  SearchSpec spec;
  spec.algorithm = "random";
  spec.settings = {{"init", init}};
  spec.space = mixed_space();
  spec.objectives = {{"score", true}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  return spec;
}

std::unique_ptr<Searcher> make(const SearchSpec& spec) {
  auto s = make_searcher(spec);
  REQUIRE(s.ok());
  return std::move(*s);
}

double score(const Params& p) { return -p["x"].get<double>() * p["x"].get<double>(); }

}  // namespace

TEST_CASE("the same seed gives the same suggestions; another seed does not") {
  for (std::string init : {"uniform", "sobol", "lhs"}) {
    CAPTURE(init);
    auto a = make(spec_for(init, 42));
    auto b = make(spec_for(init, 42));
    auto c = make(spec_for(init, 43));
    auto sa = a->ask(40).value(), sb = b->ask(40).value(), sc = c->ask(40).value();
    REQUIRE(sa.size() == 40);
    int same_as_other_seed = 0;
    for (std::size_t i = 0; i < sa.size(); ++i) {
      CHECK(sa[i].seq == static_cast<int64_t>(i));
      CHECK(sa[i].params == sb[i].params);
      same_as_other_seed += sa[i].params == sc[i].params ? 1 : 0;
    }
    CHECK(same_as_other_seed == 0);
  }
}

TEST_CASE("no suggestion leaves the space or breaks a condition") {
  for (std::string init : {"uniform", "sobol", "lhs"}) {
    auto s = make(spec_for(init, 5, 500));
    const Space space = mixed_space();
    for (const auto& sug : s->ask(1000).value_or({})) {
      Status st = space.contains(sug.params);
      CHECK_MESSAGE(st.ok(), init << " " << sug.params.dump());
    }
  }
}

TEST_CASE("uniform suggestion k is Space::sample(Rng(derive_seed(seed, k)))") {
  auto s = make(spec_for("uniform", 9));
  const Space space = mixed_space();
  auto sug = s->ask(10).value();
  for (const auto& x : sug) {
    Rng rng(derive_seed(9, static_cast<uint64_t>(x.seq)));
    CHECK(x.params == space.sample(rng));
  }
}

TEST_CASE("sobol and lhs designs are stratified") {
  // Every one of the first 64 points falls in its own 1/64 slice of x, for both designs.
  for (std::string init : {"sobol", "lhs"}) {
    CAPTURE(init);
    auto s = make(spec_for(init, 11, 64));
    std::set<int> slices_x, slices_lr;
    for (const auto& sug : s->ask(64).value_or({})) {
      slices_x.insert(static_cast<int>((sug.params["x"].get<double>() + 1) / 2 * 64));
      const double u = (std::log(sug.params["lr"].get<double>()) - std::log(1e-5)) / (0 - std::log(1e-5));
      slices_lr.insert(std::min(63, static_cast<int>(u * 64)));
    }
    CHECK(slices_x.size() == 64);
    CHECK(slices_lr.size() == 64);
  }
}

TEST_CASE("restore after a crash continues exactly as the uninterrupted run") {
  for (std::string init : {"uniform", "sobol", "lhs"}) {
    CAPTURE(init);
    // Uninterrupted: ask in batches of 3, tell all but the last batch.
    auto full = make(spec_for(init, 77));
    std::vector<Suggestion> reference;
    for (int round = 0; round < 10; ++round) {
      auto batch = full->ask(3).value();
      reference.insert(reference.end(), batch.begin(), batch.end());
      for (const auto& s : batch) full->tell({s.seq, s.params, Outcome::kCompleted, {score(s.params)}, 1});
    }
    // Interrupted after 5 rounds, with the 5th round still running.
    auto first = make(spec_for(init, 77));
    std::vector<Record> history;
    for (int round = 0; round < 5; ++round) {
      auto batch = first->ask(3).value();
      for (const auto& s : batch) {
        Record r{s, std::nullopt};
        if (round < 4) {
          r.observation = Observation{s.seq, s.params, round == 2 ? Outcome::kFailed : Outcome::kCompleted,
                                      round == 2 ? std::vector<double>{} : std::vector<double>{score(s.params)}, 1};
          first->tell(*r.observation);
        }
        history.push_back(r);
      }
    }
    auto resumed = make(spec_for(init, 77));
    resumed->restore(history);
    auto rest = resumed->ask(15).value();
    REQUIRE(rest.size() == 15);
    for (std::size_t i = 0; i < rest.size(); ++i) {
      CHECK(rest[i].seq == reference[15 + i].seq);
      CHECK(rest[i].params == reference[15 + i].params);
    }
  }
}

TEST_CASE("failed, pruned and malformed observations do not crash; state has the best") {
  auto s = make(spec_for("uniform", 1));
  auto sug = s->ask(4).value();
  s->tell({sug[0].seq, sug[0].params, Outcome::kFailed, {}, 0});
  s->tell({sug[1].seq, sug[1].params, Outcome::kCompleted, {0.25}, 3});
  s->tell({sug[2].seq, sug[2].params, Outcome::kPruned, {0.5}, 1});
  s->tell({sug[3].seq, sug[3].params, Outcome::kCompleted, {}, 3});  // no value: treated as failed
  s->tell({sug[1].seq, sug[1].params, Outcome::kCompleted, {9.0}, 3});  // a second tell is ignored
  auto st = s->state();
  CHECK(st["observed"] == 4);
  CHECK(st["best"]["seq"] == sug[1].seq);
  CHECK(st["best"]["value"] == 0.25);
}

TEST_CASE("multi-objective random search reports the Pareto front") {
  auto spec = spec_for("uniform", 1);
  spec.objectives = {{"acc", true}, {"seconds", false}};
  auto s = make(spec);
  auto sug = s->ask(4).value();
  s->tell({0, sug[0].params, Outcome::kCompleted, {0.9, 10}, 1});
  s->tell({1, sug[1].params, Outcome::kCompleted, {0.8, 5}, 1});
  s->tell({2, sug[2].params, Outcome::kCompleted, {0.7, 6}, 1});  // dominated by 1
  s->tell({3, sug[3].params, Outcome::kCompleted, {0.95, 20}, 1});
  auto front = s->state()["pareto_front"];
  std::vector<int64_t> seqs;
  for (const auto& f : front) seqs.push_back(f["seq"].get<int64_t>());
  CHECK(seqs == std::vector<int64_t>{0, 1, 3});
}

TEST_CASE("the factory refuses unknown algorithms and settings, listing the valid ones") {
  auto spec = spec_for("uniform", 1);
  spec.algorithm = "randon";
  auto s = make_searcher(spec);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
  for (const auto& name : searcher_names()) CHECK(s.error().message().find(name) != std::string::npos);

  spec = spec_for("halton", 1);
  s = make_searcher(spec);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
  CHECK(s.error().message().rfind("init: ", 0) == 0);

  spec = spec_for("uniform", 1);
  spec.settings["inti"] = "sobol";
  s = make_searcher(spec);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
  CHECK(s.error().message().rfind("inti: ", 0) == 0);

  auto decls = searcher_settings("random");
  REQUIRE(decls.ok());
  REQUIRE(decls->size() == 1);
  CHECK((*decls)[0].key == "init");
  CHECK((*decls)[0].default_value == "uniform");
  CHECK(searcher_settings("nope").error().code() == Errc::kConfig);
}
