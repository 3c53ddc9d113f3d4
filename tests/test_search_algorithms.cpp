// Properties every search algorithm must have, checked for each name the factory knows:
// determinism, membership in a mixed conditional space, robustness to failed/pruned trials,
// batches, restore, multi-objective state and warm start.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "search/algorithms.h"
#include "search/auto_search.h"
#include "search/searcher.h"
#include "param_specs.h"
#include "tests/search_ask_tell.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;
using hpctune::testing::choice;
using hpctune::testing::integer;

namespace {

ParamSpec num(std::string name, ParamType t, double lo, double hi, bool log = false, int64_t step = 1) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = t;
  p.low = lo;
  p.high = hi;
  p.log = log;
  p.step = step;
  p.resolution = 3;
  return p;
}

// Floats (linear, log), ints (step, log), ordered and unordered choices, a fixed value, and two
// levels of conditions.
Space mixed_space() {
  std::vector<ParamSpec> s;
  s.push_back(num("lr", ParamType::kFloat, 1e-4, 1e-1, true));
  s.push_back(num("x", ParamType::kFloat, -2, 2));
  ParamSpec opt;
  opt.name = "optimizer";
  opt.type = ParamType::kChoice;
  opt.choices = {"sgd", "adam", "rmsprop"};
  s.push_back(opt);
  ParamSpec mom = num("momentum", ParamType::kFloat, 0.0, 0.99);
  mom.when = Condition{"optimizer", {"sgd", "rmsprop"}};
  s.push_back(mom);
  ParamSpec nest;
  nest.name = "nesterov";
  nest.type = ParamType::kChoice;
  nest.choices = {true, false};
  nest.when = Condition{"optimizer", {"sgd"}};
  s.push_back(nest);
  ParamSpec nest_k = num("nesterov_k", ParamType::kInt, 1, 9, false, 2);
  nest_k.when = Condition{"nesterov", {true}};
  s.push_back(nest_k);
  s.push_back(num("units", ParamType::kInt, 8, 512, true, 8));
  ParamSpec layers;
  layers.name = "layers";
  layers.type = ParamType::kChoice;
  layers.choices = {1, 2, 4};
  layers.ordered = true;
  s.push_back(layers);
  ParamSpec fixed;
  fixed.name = "epochs";
  fixed.type = ParamType::kFixed;
  fixed.value = 5;
  s.push_back(fixed);
  auto space = Space::create(s);
  REQUIRE(space.ok());
  return *space;
}

// A deterministic objective over the mixed space (larger is better).
double objective(const Params& p) {
  double v = -std::pow(std::log10(p["lr"].get<double>()) + 2.0, 2) - p["x"].get<double>() * p["x"].get<double>();
  if (p["optimizer"] == "sgd") v += 0.5 * p["momentum"].get<double>();
  if (p.contains("nesterov_k")) v += 0.05 * p["nesterov_k"].get<double>();
  v -= std::fabs(std::log2(p["units"].get<double>()) - 7) * 0.1;
  return v;
}

SearchSpec spec_for(const std::string& algo, uint64_t seed) {
  SearchSpec spec;
  spec.algorithm = algo;
  spec.space = mixed_space();
  spec.objectives = {{"score", true}};
  spec.seed = seed;
  spec.max_trials = algo == "grid" ? 100000 : 60;
  if (algo == "bayesian") spec.settings = {{"acq_samples", 200}, {"acq_local_starts", 2}, {"n_initial", 6}};
  if (algo == "tpe") spec.settings = {{"n_startup", 6}};
  if (algo == "genetic") spec.settings = {{"population", 6}};
  if (algo == "evolution") spec.settings = {{"population", 6}, {"sample_size", 3}};
  return spec;
}

std::unique_ptr<Searcher> make(const SearchSpec& spec) {
  auto s = make_searcher(spec);
  REQUIRE_MESSAGE(s.ok(), s.error().to_string());
  return std::move(*s);
}

// Runs `rounds` of ask(batch)/tell; every 7th trial fails and every 5th is pruned.
std::vector<Suggestion> drive(Searcher& s, int rounds, std::size_t batch) {
  std::vector<Suggestion> all;
  for (int r = 0; r < rounds; ++r) {
    auto sug = s.ask(batch).value();
    for (const auto& x : sug) {
      all.push_back(x);
      Observation o{x.seq, x.params, Outcome::kCompleted, {objective(x.params)}, 5};
      if (x.seq % 7 == 3) o = Observation{x.seq, x.params, Outcome::kFailed, {}, 0};
      else if (x.seq % 5 == 4) o = Observation{x.seq, x.params, Outcome::kPruned, {objective(x.params) - 1.0}, 2};
      s.tell(o);
    }
  }
  return all;
}

}  // namespace

TEST_CASE("every algorithm: the same seed gives the same suggestions; another seed differs") {
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    auto a = make(spec_for(algo, 3)), b = make(spec_for(algo, 3)), c = make(spec_for(algo, 4));
    auto sa = drive(*a, 12, 2), sb = drive(*b, 12, 2), sc = drive(*c, 12, 2);
    REQUIRE(sa.size() == sb.size());
    CHECK(sa.size() >= 20);
    int differ = 0;
    for (std::size_t i = 0; i < sa.size(); ++i) {
      CHECK(sa[i].seq == sb[i].seq);
      CHECK(sa[i].params == sb[i].params);
      CHECK(sa[i].meta == sb[i].meta);
      if (i < sc.size() && sa[i].params != sc[i].params) ++differ;
    }
    if (algo != "grid") CHECK(differ > static_cast<int>(sa.size()) / 2);
  }
}

TEST_CASE("every algorithm: no suggestion outside the space or breaking a condition") {
  const Space space = mixed_space();
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    auto s = make(spec_for(algo, 11));
    auto all = drive(*s, 20, 3);
    CHECK(all.size() >= 40);
    std::set<int64_t> seqs;
    for (const auto& x : all) {
      Status st = space.contains(x.params);
      CHECK_MESSAGE(st.ok(), x.params.dump());
      seqs.insert(x.seq);
    }
    CHECK(seqs.size() == all.size());  // seq numbers are unique
  }
}

TEST_CASE("every algorithm: batches with pending trials, tells in any order, restore") {
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    auto s = make(spec_for(algo, 5));
    std::vector<Suggestion> pending;
    std::vector<Record> history;
    for (int r = 0; r < 8; ++r) {
      auto sug = s->ask(4).value();
      pending.insert(pending.end(), sug.begin(), sug.end());
      // Tell the oldest half, in reverse order; the rest stays running.
      std::size_t k = pending.size() / 2;
      for (std::size_t i = k; i-- > 0;) {
        const auto& x = pending[i];
        Observation o{x.seq, x.params, Outcome::kCompleted, {objective(x.params)}, 5};
        s->tell(o);
        history.push_back({x, o});
      }
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(k));
    }
    for (const auto& x : pending) history.push_back({x, std::nullopt});
    std::sort(history.begin(), history.end(), [](const Record& a, const Record& b) { return a.suggestion.seq < b.suggestion.seq; });
    int64_t max_seq = history.back().suggestion.seq;
    // A fresh searcher restored from the records continues with new seq numbers.
    auto restored = make(spec_for(algo, 5));
    restored->restore(history);
    auto more = restored->ask(3).value();
    // genetic and cmaes may wait for their generation (cmaes: 8 members here, some still running)
    if (algo != "genetic" && algo != "cmaes") CHECK(more.size() == 3);
    for (const auto& x : more) {
      CHECK(x.seq > max_seq);
      CHECK(mixed_space().contains(x.params).ok());
    }
    auto st = restored->state();
    CHECK(st["algorithm"] == algo);
    CHECK(st["observed"].get<std::size_t>() == history.size() - pending.size());
  }
}

TEST_CASE("every algorithm: all trials failing does not stall or crash it") {
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    auto s = make(spec_for(algo, 8));
    std::size_t total = 0;
    for (int r = 0; r < 15; ++r) {
      auto sug = s->ask(2).value();
      total += sug.size();
      for (const auto& x : sug) s->tell({x.seq, x.params, Outcome::kFailed, {}, 0});
    }
    CHECK(total == 30);
  }
}

TEST_CASE("every algorithm handles two objectives and reports a Pareto front") {
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    auto spec = spec_for(algo, 2);
    spec.objectives = {{"score", true}, {"cost", false}};
    if (algo == "cmaes" || algo == "rl") {  // one objective only: a config error, not a silent scalarization
      CHECK(make_searcher(spec).error().code() == Errc::kConfig);
      continue;
    }
    auto s = make(spec);
    std::vector<std::vector<double>> values;
    for (int r = 0; r < 10; ++r) {
      for (const auto& x : s->ask(3).value_or({})) {
        const double cost = x.params["units"].get<double>() / 512.0;
        std::vector<double> v{objective(x.params), cost};
        values.push_back(v);
        s->tell({x.seq, x.params, Outcome::kCompleted, v, 1});
      }
    }
    auto front = s->state()["pareto_front"];
    REQUIRE(front.is_array());
    CHECK(!front.empty());
    // Nothing observed dominates a front member (score maximized, cost minimized).
    for (const auto& f : front) {
      const double fs = f["values"][0].get<double>(), fc = f["values"][1].get<double>();
      for (const auto& v : values) CHECK_FALSE((v[0] >= fs && v[1] <= fc && (v[0] > fs || v[1] < fc)));
    }
  }
}

TEST_CASE("model-based algorithms use warm-start trials from their first suggestion") {
  // Warm start with many trials near x = 1.5, lr = 1e-2 (all good); the searchers skip or
  // shorten their initial design and concentrate there.
  for (std::string algo : {"bayesian", "tpe", "evolution", "genetic"}) {
    CAPTURE(algo);
    auto spec = spec_for(algo, 21);
    Rng rng(99);
    const Space space = mixed_space();
    for (int i = 0; i < 30; ++i) {
      Params p = space.sample(rng);
      Observation o{-1, p, Outcome::kCompleted, {objective(p)}, 5};
      spec.warm_start.push_back(o);
    }
    auto warm = make(spec);
    auto cold = make(spec_for(algo, 21));
    double warm_mean = 0, cold_mean = 0;
    const int n = 6;
    for (int i = 0; i < n; ++i) {
      auto w = warm->ask(1).value(), c = cold->ask(1).value();
      REQUIRE(w.size() == 1);
      REQUIRE(c.size() == 1);
      warm_mean += objective(w[0].params) / n;
      cold_mean += objective(c[0].params) / n;
      warm->tell({w[0].seq, w[0].params, Outcome::kCompleted, {objective(w[0].params)}, 1});
      cold->tell({c[0].seq, c[0].params, Outcome::kCompleted, {objective(c[0].params)}, 1});
    }
    CHECK(warm_mean > cold_mean);
  }
}

TEST_CASE("every algorithm copes with degenerate spaces") {
  ParamSpec fixed;
  fixed.name = "epochs";
  fixed.type = ParamType::kFixed;
  fixed.value = 3;
  ParamSpec coin;
  coin.name = "coin";
  coin.type = ParamType::kChoice;
  coin.choices = {"heads", "tails"};
  for (auto specs : {std::vector<ParamSpec>{fixed}, std::vector<ParamSpec>{coin}, std::vector<ParamSpec>{coin, fixed}}) {
    const Space space = Space::create(specs).value();
    for (const auto& algo : searcher_names()) {
      CAPTURE(algo);
      SearchSpec spec;
      spec.algorithm = algo;
      spec.space = space;
      spec.objectives = {{"score", true}};
      spec.max_trials = 40;
      auto s = make(spec);
      int asked = 0;
      for (int r = 0; r < 20 && !s->exhausted(); ++r) {
        for (const auto& x : s->ask(2).value_or({})) {
          ++asked;
          CHECK(space.contains(x.params).ok());
          s->tell({x.seq, x.params, Outcome::kCompleted, {x.params.contains("coin") && x.params["coin"] == "heads" ? 1.0 : 0.0}, 1});
        }
      }
      CHECK(asked > 0);
    }
  }
}

TEST_CASE("bayesian batches over running trials are spread out (kriging believer and constant liar)") {
  for (std::string pending : {"kriging_believer", "constant_liar"}) {
    CAPTURE(pending);
    std::vector<ParamSpec> specs(2);
    specs[0].name = std::string("a");
    specs[0].low = 0;
    specs[0].high = 1;
    specs[1].name = std::string("b");
    specs[1].low = 0;
    specs[1].high = 1;
    SearchSpec spec;
    spec.algorithm = "bayesian";
    spec.settings = {{"pending", pending}, {"n_initial", 8}};
    spec.space = Space::create(specs).value();
    spec.objectives = {{"f", false}};
    spec.seed = 6;
    auto s = make(spec);
    auto f = [](const Params& p) {
      const double a = p["a"].get<double>() - 0.3, b = p["b"].get<double>() - 0.6;
      return a * a + b * b;
    };
    for (const auto& x : s->ask(8).value_or({})) s->tell({x.seq, x.params, Outcome::kCompleted, {f(x.params)}, 1});
    auto batch = s->ask(6).value();
    REQUIRE(batch.size() == 6);
    double min_dist = 1e9;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      CHECK(batch[i].meta["source"] == "model");
      for (std::size_t j = 0; j < i; ++j) {
        const double da = batch[i].params["a"].get<double>() - batch[j].params["a"].get<double>();
        const double db = batch[i].params["b"].get<double>() - batch[j].params["b"].get<double>();
        min_dist = std::min(min_dist, std::sqrt(da * da + db * db));
      }
    }
    CHECK(min_dist > 1e-3);  // no two members of a batch coincide
    // The running batch also shapes the next ask: it does not repeat a running point.
    auto next = s->ask(1).value();
    REQUIRE(next.size() == 1);
    for (const auto& x : batch) CHECK(x.params != next[0].params);
    auto st = s->state();
    CHECK(st["lengthscales"].size() == 2);
  }
}

// --- no repeated evaluation on a finite space (issue 12) -------------------------------------------
namespace {

// Exactly 24 points: an int 1..4, a 3-level unordered choice, a 2-level ordered choice.
Space space_24() {
  auto s = Space::create({integer("a", 1, 4), choice("act", {"relu", "tanh", "gelu"}, false),
                          choice("w", {32, 64}, true)});
  REQUIRE(s.ok());
  return *s;
}

// Exactly 24 points with a condition: a in 1..3, opt in {sgd, adam}, mom (3 levels) only for sgd,
// w in {32, 64}: 3 x (3 + 1) x 2.
Space conditional_24() {
  ParamSpec mom = choice("mom", {0.0, 0.5, 0.9}, true);
  mom.when = Condition{"opt", {"sgd"}};
  auto s = Space::create({integer("a", 1, 3), choice("opt", {"sgd", "adam"}, false), mom,
                          choice("w", {32, 64}, true)});
  REQUIRE(s.ok());
  return *s;
}

// A deterministic objective over both spaces (larger is better; the optimum is inside).
double small_objective(const Params& p) {
  double v = -std::pow(p["a"].get<double>() - 2.6, 2);
  if (p.contains("act")) v += p["act"] == "tanh" ? 0.3 : 0.0;
  if (p.contains("mom")) v += p["mom"].get<double>() * 0.4;
  v += p["w"].get<double>() / 64.0;
  return v;
}

// A key of a configuration independent of Space::config_key: numbers as doubles.
std::string plain_key(const Params& p) {
  std::string k;
  for (auto it = p.begin(); it != p.end(); ++it)
    k += it.key() + "=" + (it->is_number() ? std::to_string(it->get<double>()) : it->dump()) + ";";
  return k;
}

SearchSpec small_spec(const std::string& algo, const Space& space, int64_t budget, bool noisy = false) {
  SearchSpec spec;
  spec.algorithm = algo;
  spec.space = space;
  spec.objectives = {{"score", true}};
  spec.seed = 11;
  spec.max_trials = budget;
  spec.noisy = noisy;
  if (algo == "bayesian") spec.settings = {{"acq_samples", 200}, {"acq_local_starts", 2}, {"n_initial", 6}};
  if (algo == "tpe") spec.settings = {{"n_startup", 6}};
  if (algo == "genetic") spec.settings = {{"population", 6}};
  if (algo == "evolution") spec.settings = {{"population", 6}, {"sample_size", 3}};
  return spec;
}

std::vector<Suggestion> run_budget(Searcher& s, std::size_t batch, int64_t budget) {
  return hpctune::testing::ask_tell_budget(s, batch, budget, small_objective);
}

}  // namespace

TEST_CASE("every algorithm: no repeat on a 24-point space before it is exhausted (budget 24 and 30)") {
  for (const bool conditional : {false, true}) {
    const Space space = conditional ? conditional_24() : space_24();
    REQUIRE(space.cardinality() == uint64_t{24});
    for (const auto& algo : searcher_names()) {
      for (const int64_t budget : {24, 30}) {
        for (const std::size_t batch : {std::size_t{1}, std::size_t{4}}) {
          CAPTURE(algo);
          CAPTURE(conditional);
          CAPTURE(budget);
          CAPTURE(batch);
          auto made = make_searcher(small_spec(algo, space, budget));
          REQUIRE_MESSAGE(made.ok(), (algo + " cannot take the 24-point space: " + made.error().to_string()));
          Searcher& s = **made;
          const auto all = run_budget(s, batch, budget);
          std::set<std::string> distinct;
          for (const auto& x : all) {
            CHECK_MESSAGE(space.contains(x.params).ok(), x.params.dump());
            CHECK_MESSAGE(distinct.insert(plain_key(x.params)).second, ("repeated: " + x.params.dump()));
          }
          CHECK(all.size() == 24);
          CHECK(distinct.size() == 24);
          CHECK(s.exhausted());
          CHECK(s.ask(4).value().empty());
        }
      }
    }
  }
}

TEST_CASE("a repeat is moved to a configuration not issued yet, marked, and restore keeps the issued set") {
  // Random search draws uniformly: on 24 points, 20 draws collide (birthday) unless moved.
  const Space space = space_24();
  auto s = make(small_spec("random", space, 24));
  const auto all = run_budget(*s, 1, 20);
  int moved = 0;
  for (const auto& x : all) moved += x.meta.value("deduplicated", false) ? 1 : 0;
  CHECK(moved > 0);
  // A restored searcher knows what was issued: it completes the space without a repeat, exactly as
  // the uninterrupted one does.
  std::vector<Record> history;
  for (const auto& x : all) history.push_back({x, Observation{x.seq, x.params, Outcome::kCompleted, {small_objective(x.params)}, 1}});
  auto restored = make(small_spec("random", space, 24));
  restored->restore(history);
  const auto rest = run_budget(*restored, 1, 10);
  const auto rest_live = run_budget(*s, 1, 10);
  REQUIRE(rest.size() == 4);
  std::set<std::string> distinct;
  for (const auto& x : all) distinct.insert(plain_key(x.params));
  for (std::size_t i = 0; i < rest.size(); ++i) {
    CHECK(distinct.insert(plain_key(rest[i].params)).second);
    CHECK(rest[i].params == rest_live[i].params);
  }
  CHECK(restored->exhausted());
}

TEST_CASE("warm-start trials count as evaluated; a space smaller than the budget says so") {
  const Space space = space_24();
  SearchSpec spec = small_spec("tpe", space, 30);
  spec.warm_start.push_back({0, json{{"a", 2}, {"act", "tanh"}, {"w", 64}}, Outcome::kCompleted, {1.0}, 1});
  spec.warm_start.push_back({1, json{{"a", 3.0}, {"act", "relu"}, {"w", 32}}, Outcome::kCompleted, {0.5}, 1});
  auto s = make(spec);
  const auto all = run_budget(*s, 4, 30);
  CHECK(all.size() == 22);
  for (const auto& x : all) {
    CHECK(plain_key(x.params) != plain_key(json{{"a", 2}, {"act", "tanh"}, {"w", 64}}));
    CHECK(plain_key(x.params) != plain_key(json{{"a", 3}, {"act", "relu"}, {"w", 32}}));
  }
  CHECK(s->exhausted());
  const auto notes = make(small_spec("random", space, 30))->notes();
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "the space has 24 points, fewer than max_trials 30: the search ends when every point has been evaluated");
  CHECK(make(small_spec("random", space, 24))->notes().empty());
  CHECK(make(small_spec("random", space, 30, /*noisy=*/true))->notes().empty());
}

TEST_CASE("objective.noisy: repeats are allowed and the search runs past the size of the space") {
  const Space space = space_24();
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    auto made = make_searcher(small_spec(algo, space, 30, /*noisy=*/true));
    REQUIRE_MESSAGE(made.ok(), (algo + " cannot take the 24-point space: " + made.error().to_string()));
    const auto all = run_budget(**made, 4, 30);
    for (const auto& x : all) CHECK(space.contains(x.params).ok());
    if (algo == "grid") {
      // The grid visits its points once by construction, noisy or not.
      CHECK_MESSAGE(all.size() == 24, "grid ends with its grid");
    } else {
      CHECK(all.size() == 30);
      CHECK_FALSE((*made)->exhausted());
    }
  }
}

TEST_CASE("auto: picks by the space and the budget, says what and why, and runs what it picked") {
  SearchSpec spec;
  spec.algorithm = "auto";
  spec.space = mixed_space();
  spec.objectives = {{"value", false}};
  spec.seed = 5;
  spec.max_trials = 100;
  auto picked = auto_choice(spec);
  REQUIRE(picked.ok());
  CHECK(picked->algorithm == "bayesian");
  CHECK(picked->reason.find("categorical") != std::string::npos);
  CHECK(picked->reason.find("conditional") != std::string::npos);

  auto s = make_searcher(spec);
  REQUIRE(s.ok());
  CHECK((*s)->name() == "auto");
  const auto notes = (*s)->notes();
  REQUIRE(notes.size() >= 2);
  CHECK(notes[0].rfind("auto: runs bayesian for ", 0) == 0);
  CHECK(notes[1].rfind("startup: ", 0) == 0);  // the GP's own line follows
  // It is the GP, suggestion for suggestion.
  SearchSpec gp = spec;
  gp.algorithm = "bayesian";
  auto direct = make_searcher(gp);
  REQUIRE(direct.ok());
  for (int round = 0; round < 12; ++round) {
    auto a = (*s)->ask(1).value();
    auto b = (*direct)->ask(1).value();
    REQUIRE(a.size() == 1);
    REQUIRE(b.size() == 1);
    CHECK(a[0].params == b[0].params);
    const double v = a[0].params["x"].get<double>() * a[0].params["x"].get<double>();
    (*s)->tell({a[0].seq, a[0].params, Outcome::kCompleted, {v}, 1});
    (*direct)->tell({b[0].seq, b[0].params, Outcome::kCompleted, {v}, 1});
  }
  CHECK((*s)->state()["algorithm"] == "auto");
  CHECK((*s)->state()["auto"]["algorithm"] == "bayesian");

  // A budget beyond the GP's comfort: tpe; gp_max_trials moves the line.
  spec.max_trials = 5000;
  CHECK(auto_choice(spec)->algorithm == "tpe");
  spec.settings = {{"gp_max_trials", 10000}};
  CHECK(auto_choice(spec)->algorithm == "bayesian");
  // Nothing to search: random.
  ParamSpec fixed;
  fixed.name = "k";
  fixed.type = ParamType::kFixed;
  fixed.value = 3;
  spec.space = Space::create({fixed}).value();
  spec.settings = json::object();
  CHECK(auto_choice(spec)->algorithm == "random");
  // A bad setting is a config error naming it.
  spec.settings = {{"gp_max_trials", "many"}};
  auto bad = auto_choice(spec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("gp_max_trials") != std::string::npos);
}

TEST_CASE("bayesian: the first design point is the middle of every numeric and ordered range (start_at_centre)") {
  for (uint64_t seed : {1, 2, 3}) {
    SearchSpec spec = spec_for("bayesian", seed);
    auto first = make(spec)->ask(1).value().at(0).params;
    CAPTURE(first.dump());
    CHECK(first["lr"].get<double>() == doctest::Approx(std::pow(10.0, -2.5)).epsilon(1e-9));  // log scale: the geometric middle
    CHECK(first["x"].get<double>() == doctest::Approx(0.0));
    CHECK(first["units"].get<int64_t>() == 48);  // log int 8..512 step 8: the geometric middle of the levels' span 4..516 (45.4), on the step
    CHECK(first["layers"] == 2);                 // ordered {1, 2, 4}
    if (first.contains("momentum")) CHECK(first["momentum"].get<double>() == doctest::Approx(0.495));
    if (first.contains("nesterov_k")) CHECK(first["nesterov_k"] == 5);  // 1..9 step 2
    // The unordered choice is the design's: over seeds it is not always the same (checked below).
    spec.settings["start_at_centre"] = false;
    auto off = make(spec)->ask(1).value().at(0).params;
    CHECK(off["x"].get<double>() != doctest::Approx(0.0));
    // The second suggestion is the design's second point either way.
    SearchSpec on = spec_for("bayesian", seed);
    auto a = make(on), b = make(spec);
    REQUIRE(a->ask(1).ok());
    REQUIRE(b->ask(1).ok());
    CHECK(a->ask(1).value().at(0).params == b->ask(1).value().at(0).params);
  }
  std::set<std::string> optimizers;
  for (uint64_t seed = 1; seed <= 12; ++seed) optimizers.insert(make(spec_for("bayesian", seed))->ask(1).value().at(0).params["optimizer"].get<std::string>());
  CHECK(optimizers.size() >= 2);
}

// Issue 38, item 4: what each algorithm declares (search/algorithms.h) is what it does: the config,
// the dashboard and simulate ask these instead of comparing names (tests/test_algorithm_names.sh).
TEST_CASE("every algorithm declares what it is, and the declarations hold") {
  CHECK(algorithm_traits("no-such-algorithm") == nullptr);
  CHECK(algorithm_traits(default_algorithm()) != nullptr);
  CHECK(algorithm_traits(default_algorithm())->picks_another);
  int model_based = 0, breeding = 0, single = 0, enumerating = 0;
  for (const auto& algo : searcher_names()) {
    CAPTURE(algo);
    const AlgorithmTraits* t = algorithm_traits(algo);
    REQUIRE(t != nullptr);
    CHECK_FALSE(t->help.empty());
    const auto decls = searcher_settings(algo).value();
    auto declared = [&](const std::string& key) {
      return std::any_of(decls.begin(), decls.end(), [&](const SettingDecl& d) { return d.key == key; });
    };
    if (t->model_based) {  // its start-up setting is one of its settings, and the default is what it runs
      ++model_based;
      REQUIRE(t->startup_setting != nullptr);
      CHECK(declared(t->startup_setting));
      SearchSpec spec = spec_for(algo, 1);
      spec.max_trials = 40;
      spec.settings = json::object();
      const auto info = model_startup_of(spec);
      REQUIRE(info);
      CHECK(info->random_trials == t->default_startup(spec.space, 40));
      spec.settings = {{t->startup_setting, 7}};
      CHECK(model_startup_of(spec)->random_trials == 7);
      auto s = make(spec);
      const auto first = s->ask(7).value();
      for (const auto& x : first) CHECK(x.meta.value("source", "") != "model");
    } else if (!t->picks_another) {
      CHECK_FALSE(model_startup_of(spec_for(algo, 1)));
    }
    if (*t->population_setting != 0) CHECK(declared(t->population_setting));
    CHECK(population_trials(algo, json::object()).has_value() == (*t->population_setting != 0));
    breeding += t->breeds ? 1 : 0;
    enumerating += t->enumerates ? 1 : 0;
    if (!t->multi_objective) {  // its factory refuses two objectives
      ++single;
      SearchSpec spec = spec_for(algo, 1);
      spec.objectives = {{"a", false}, {"b", false}};
      CHECK_FALSE(make_searcher(spec).ok());
    }
  }
  CHECK(model_based == 2);  // bayesian, tpe
  CHECK(breeding == 2);     // genetic, evolution
  CHECK(single == 2);       // cmaes, rl
  CHECK(enumerating == 1);  // grid
  // auto resolves to what it picks: bayesian on this mixed space (mostly numbers).
  SearchSpec spec = spec_for("auto", 1);
  spec.max_trials = 40;
  const auto info = model_startup_of(spec);
  REQUIRE(info);
  CHECK(info->algorithm == auto_choice(spec)->algorithm);
  CHECK(info->setting == algorithm_traits(info->algorithm)->startup_setting);
  // A generation-based algorithm's population is its generation (of every island).
  CHECK(population_trials("genetic", {{"population", 6}, {"islands", 3}}) == 18);
  CHECK(population_trials("evolution", {{"population", 9}}) == 9);
  // evolution refuses a tournament larger than its population, naming both settings.
  const auto problem = algorithm_traits("evolution")->check_settings({{"population", 3}, {"sample_size", 5}});
  REQUIRE(problem);
  CHECK(problem->keys == std::vector<std::string>{"sample_size", "population"});
  CHECK_FALSE(algorithm_traits("evolution")->check_settings({{"population", 5}, {"sample_size", 5}}));
}

// acquisition mes (max-value entropy search) on the mixed conditional space, with the GP and the
// forest, batches of 3 with failed and pruned trials: every suggestion valid, the model's from the
// design's end on, the same seed the same suggestions.
TEST_CASE("bayesian with acquisition mes: valid model suggestions in batches, GP and forest, deterministic") {
  const Space space = mixed_space();
  for (const std::string surrogate : {"gp", "forest"}) {
    CAPTURE(surrogate);
    SearchSpec spec = spec_for("bayesian", 13);
    spec.settings["acquisition"] = "mes";
    spec.settings["surrogate"] = surrogate;
    auto a = make(spec), b = make(spec);
    const auto all = drive(*a, 12, 3), again = drive(*b, 12, 3);
    REQUIRE(all.size() == 36);
    REQUIRE(again.size() == all.size());
    std::size_t from_model = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      CHECK_MESSAGE(space.contains(all[i].params).ok(), all[i].params.dump());
      CHECK(all[i].params == again[i].params);
      from_model += all[i].meta.value("source", "") == "model" ? 1 : 0;
    }
    CHECK(from_model == all.size() - 6);  // n_initial 6
  }
}
