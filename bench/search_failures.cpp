// bench_search_failures: search on spaces where part of the trials fail (a training that diverges
// past a learning rate, a deep network at a high rate), for bench/run-search-failures.
//
//   bench_search_failures --problem NAME --algorithm NAME [--seeds 20] [--budget 50]
//   bench_search_failures --problems        the problems, one per line
//   bench_search_failures --checks          points and their values (NaN: fails), as JSON, for the
//                                           Optuna side's copy of the formulas
//
// Each run asks one suggestion at a time and tells its value, or Outcome::kFailed where the problem
// fails, as the scheduler tells a trial whose training diverged. Per seed, one JSON line: the trials
// that failed, the best value reached and its regret against the problem's known optimum.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/search_problems.h"
#include "search/searcher.h"
#include "search/test_functions.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;
using hpctune::bench::choice_param;
using hpctune::bench::float_param;
using hpctune::bench::int_param;

namespace {

struct Problem {
  std::string name;
  std::vector<ParamSpec> space;
  std::function<double(const Params&)> value;  // NaN: the trial fails
  double optimum;
  std::vector<Params> check_points;
};

constexpr double kFail = std::numeric_limits<double>::quiet_NaN();

// A learning rate whose loss falls until the training diverges past 0.3: the optimum is the edge.
Problem diverge_lr() {
  return {"diverge-lr",
          {float_param("lr", 1e-4, 1.0, true)},
          [](const Params& p) {
            const double lr = p["lr"].get<double>();
            const double d = std::log10(0.3) - std::log10(lr);
            return lr > 0.3 ? kFail : 0.2 + 0.1 * d * d;
          },
          0.2,
          {{{"lr", 0.3}}, {{"lr", 0.01}}, {{"lr", 0.31}}}};
}

// A learning rate searched over 8 decades that diverges past 0.05: 58% of the range fails, and the
// best loss is a decade below the edge (a wide range, as a user sets one not knowing where it
// diverges).
Problem wide_lr() {
  return {"wide-lr",
          {float_param("lr", 1e-5, 1e3, true)},
          [](const Params& p) {
            const double lr = p["lr"].get<double>();
            const double d = std::log10(lr) + 2.3;
            return lr > 0.05 ? kFail : 0.3 + 0.05 * d * d;
          },
          0.3,
          {{{"lr", 0.005}}, {{"lr", 1e-4}}, {{"lr", 0.06}}}};
}

// The optimizer, its learning rate, the batch size and the weight decay of a network: each
// optimizer diverges past its own rate, larger batches take larger rates (sqrt scaling), and each
// is best at 0.6 of its limit.
Problem optimizer_lr() {
  auto value = [](const Params& p) {
    const std::string opt = p["optimizer"].get<std::string>();
    const double base = opt == "sgd" ? 0.30 : opt == "momentum" ? 0.24 : 0.22;
    const double limit0 = opt == "sgd" ? 0.5 : opt == "momentum" ? 0.1 : 0.01;
    const double lr = p["lr"].get<double>(), wd = p["weight_decay"].get<double>();
    const double batch = static_cast<double>(p["batch"].get<int64_t>());
    const double limit = limit0 * std::sqrt(batch / 64.0);
    if (lr > limit) return kFail;
    const double dl = std::log10(lr) - std::log10(0.6 * limit), dw = std::log10(wd) + 4.0, db = std::log2(batch) - 6.0;
    return base + 0.08 * dl * dl + 0.02 * dw * dw + 0.0075 * db * db;
  };
  return {"optimizer-lr",
          {choice_param("optimizer", {"sgd", "momentum", "adam"}, false), float_param("lr", 1e-5, 1.0, true),
           int_param("batch", 16, 512, true), float_param("weight_decay", 1e-6, 1e-1, true)},
          value,
          0.22,
          {{{"optimizer", "adam"}, {"lr", 0.006}, {"batch", 64}, {"weight_decay", 1e-4}},
           {{"optimizer", "sgd"}, {"lr", 0.2}, {"batch", 200}, {"weight_decay", 3e-3}},
           {{"optimizer", "momentum"}, {"lr", 0.2}, {"batch", 128}, {"weight_decay", 1e-5}}}};
}

// Hartmann-6 where x6 > 0.7 fails (30% of the cube); the optimum (x6 = 0.657) is near the edge.
Problem hartmann6_cliff() {
  std::vector<ParamSpec> space;
  for (int i = 1; i <= 6; ++i) space.push_back(float_param("x" + std::to_string(i), 0, 1));
  auto value = [](const Params& p) {
    std::vector<double> x;
    for (int i = 1; i <= 6; ++i) x.push_back(p["x" + std::to_string(i)].get<double>());
    return x[5] > 0.7 ? kFail : hartmann6(x);
  };
  return {"hartmann6-cliff", space, value, -3.32237,
          {{{"x1", 0.20169}, {"x2", 0.150011}, {"x3", 0.476874}, {"x4", 0.275332}, {"x5", 0.311652}, {"x6", 0.6573}},
           {{"x1", 0.5}, {"x2", 0.5}, {"x3", 0.5}, {"x4", 0.5}, {"x5", 0.5}, {"x6", 0.5}},
           {{"x1", 0.5}, {"x2", 0.5}, {"x3", 0.5}, {"x4", 0.5}, {"x5", 0.5}, {"x6", 0.8}}}};
}

// A grid of network trainings: depth, width, a learning rate and dropout as ordered levels. Deep
// networks diverge at the two highest rates, every network at the highest; the best is deep, at
// the highest rate it survives.
const std::vector<double> kRates{1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1};
double deep_net_value(const Params& p) {
  const double depth = static_cast<double>(p["depth"].get<int64_t>());
  const double width = static_cast<double>(p["width"].get<int64_t>());
  const double lr = p["lr"].get<double>(), dropout = p["dropout"].get<double>();
  if (lr >= 0.1 || (lr >= 0.03 && depth >= 5)) return kFail;
  const double dl = std::log10(lr) + 2.0, dd = (depth - 4.0) / 4.0, dw = std::log2(width) - 8.0, dp = dropout - 0.2;
  return 0.1 + 0.05 * dl * dl + 0.04 * dd * dd + 0.004 * dw * dw + 0.3 * dp * dp + 0.01 * dl * dd;
}

Problem deep_net() {
  std::vector<json> rates(kRates.begin(), kRates.end());
  Problem p{"deep-net",
            {int_param("depth", 1, 8), choice_param("width", {16, 32, 64, 128, 256, 512}, true), choice_param("lr", rates, true),
             choice_param("dropout", {0.0, 0.1, 0.2, 0.3, 0.4, 0.5}, true)},
            deep_net_value,
            kFail,
            {{{"depth", 4}, {"width", 256}, {"lr", 0.01}, {"dropout", 0.2}},
             {{"depth", 6}, {"width", 64}, {"lr", 0.03}, {"dropout", 0.0}},
             {{"depth", 2}, {"width", 512}, {"lr", 0.03}, {"dropout", 0.5}}}};
  double best = 1e300;  // the grid's optimum, by enumeration
  for (int64_t d = 1; d <= 8; ++d)
    for (int64_t w : {16, 32, 64, 128, 256, 512})
      for (double lr : kRates)
        for (double dp : {0.0, 0.1, 0.2, 0.3, 0.4, 0.5}) {
          const double v = deep_net_value({{"depth", d}, {"width", w}, {"lr", lr}, {"dropout", dp}});
          if (!std::isnan(v)) best = std::min(best, v);
        }
  p.optimum = best;
  return p;
}

std::vector<Problem> problems() { return {diverge_lr(), wide_lr(), optimizer_lr(), hartmann6_cliff(), deep_net()}; }

json run_seed(const Problem& problem, const std::string& algorithm, uint64_t seed, int budget) {
  SearchSpec spec;
  spec.algorithm = algorithm;
  spec.space = Space::create(problem.space).value();
  spec.objectives = {{"value", false}};
  spec.seed = seed;
  spec.max_trials = budget;
  auto made = make_searcher(spec);
  if (!made.ok()) {
    std::fprintf(stderr, "bench_search_failures: %s\n", made.error().message().c_str());
    std::exit(2);
  }
  auto searcher = std::move(made).value();
  int failed = 0;
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < budget; ++i) {
    auto asked = searcher->ask(1);
    if (!asked.ok() || asked.value().empty()) break;
    const Suggestion s = asked.value().at(0);
    const double v = problem.value(s.params);
    if (std::isnan(v)) {
      ++failed;
      searcher->tell({s.seq, s.params, Outcome::kFailed, {}, 1});
    } else {
      best = std::min(best, v);
      searcher->tell({s.seq, s.params, Outcome::kCompleted, {v}, 1});
    }
  }
  json out = {{"problem", problem.name}, {"algorithm", algorithm}, {"seed", seed}, {"budget", budget}, {"failed", failed}};
  out["best"] = std::isfinite(best) ? json(best) : json(nullptr);
  out["regret"] = std::isfinite(best) ? json(best - problem.optimum) : json(nullptr);
  return out;
}

json checks() {
  json out = json::array();
  for (const auto& p : problems()) {
    json pts = json::array();
    for (const auto& x : p.check_points) {
      const double v = p.value(x);
      pts.push_back({{"params", x}, {"value", std::isnan(v) ? json(nullptr) : json(v)}});
    }
    out.push_back({{"problem", p.name}, {"optimum", p.optimum}, {"points", pts}});
  }
  return out;
}

int usage(const char* why) {
  std::fprintf(stderr, "bench_search_failures: %s\nusage: bench_search_failures --problem NAME --algorithm NAME [--seeds N] [--budget N] | --problems | --checks\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string problem, algorithm;
  int seeds = 20, budget = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--problems") {
      for (const auto& p : problems()) std::printf("%s\n", p.name.c_str());
      return 0;
    }
    if (a == "--checks") {
      std::printf("%s\n", checks().dump().c_str());
      return 0;
    }
    const char* v = next();
    if (!v) return usage(("missing value after " + a).c_str());
    if (a == "--problem") problem = v;
    else if (a == "--algorithm") algorithm = v;
    else if (a == "--seeds") seeds = std::atoi(v);
    else if (a == "--budget") budget = std::atoi(v);
    else return usage(("unknown option " + a).c_str());
  }
  if (seeds < 1 || budget < 1) return usage("--seeds and --budget must be at least 1");
  for (const auto& p : problems()) {
    if (p.name != problem) continue;
    for (int s = 0; s < seeds; ++s) std::printf("%s\n", run_seed(p, algorithm, 1000 + static_cast<uint64_t>(s), budget).dump().c_str());
    return 0;
  }
  return usage(("no problem named '" + problem + "'").c_str());
}
