// bench_search: hpctune's search algorithms on benchmark functions with known optima (quality) and
// the time of one ask() as the number of observations grows (latency). bench/run-search runs it
// together with bench/search_optuna.py (the same problems, budgets and seeds with Optuna) and
// writes bench/results/search.{json,md}; this binary only writes raw JSON.
//
// It drives search/ directly through ask/tell, with no scheduler in between: it measures the
// algorithms, not the orchestration. (tests/test_search_campaign_quality.cpp checks that a
// sequential campaign through the scheduler and the `function` trainer gives exactly the values
// of this loop.)
//
// Quality: for each (problem, algorithm, seed) one sequential run of max(budgets) trials (ask(1),
// evaluate, tell); the regret (best value so far - the optimum) is read after each budget from
// the same run. That equals separate runs per budget because no algorithm benchmarked here reads
// max_trials (only random search with init: lhs does, and it uses the default uniform).
//
// Latency: a searcher is restored with n observations of uniform random points (restore() replays
// them as a finished history, as after a restart), then `repeats` times: time ask(1), evaluate,
// tell. The first ask builds the model from scratch, later ones update it (the GP refits its
// hyperparameters every refit_every = 5 observations). Median, mean and max wall time are reported,
// and the median process CPU time (the better estimate on a machine whose cores are shared).
//
//   bench_search [--out FILE] [--problems branin,hartmann6,levy10,...] [--algorithms a,b,...]
//                [--seeds N] [--first-seed S] [--budgets 50,100] [--threads N]
//                [--no-quality] [--no-latency] [--repeats N]
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "search/searcher.h"
#include "search/test_functions.h"

namespace {

using namespace hpctune;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Args {
  std::string out;  // "" = stdout
  std::vector<std::string> problems = {"branin", "hartmann6", "levy10", "rosenbrock4", "ackley4"};
  std::vector<std::string> algorithms = {"random", "bayesian", "tpe", "genetic", "evolution"};
  int seeds = 10;
  uint64_t first_seed = 1000;
  std::vector<int> budgets = {50, 100};
  unsigned threads = 2;
  bool quality = true, latency = true;
  int repeats = 11;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-quality") { a.quality = false; continue; }
    if (flag == "--no-latency") { a.latency = false; continue; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_search: %s needs a value\n", flag.c_str());
      return false;
    }
    const std::string v = argv[++i];
    if (flag == "--out") a.out = v;
    else if (flag == "--problems") a.problems = split(v);
    else if (flag == "--algorithms") a.algorithms = split(v);
    else if (flag == "--seeds") a.seeds = std::atoi(v.c_str());
    else if (flag == "--first-seed") a.first_seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (flag == "--threads") a.threads = static_cast<unsigned>(std::max(1, std::atoi(v.c_str())));
    else if (flag == "--repeats") a.repeats = std::max(1, std::atoi(v.c_str()));
    else if (flag == "--budgets") {
      a.budgets.clear();
      for (const auto& b : split(v)) a.budgets.push_back(std::atoi(b.c_str()));
      std::sort(a.budgets.begin(), a.budgets.end());
    } else {
      std::fprintf(stderr, "bench_search: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  if (a.seeds < 1 || a.budgets.empty() || a.budgets.front() < 1) {
    std::fprintf(stderr, "bench_search: --seeds and --budgets must be positive\n");
    return false;
  }
  return true;
}

// "levy10" -> levy in 10 dimensions; "branin" -> its natural dimension.
Result<search::TestFunction> problem(const std::string& id) {
  std::size_t cut = id.size();
  while (cut > 0 && std::isdigit(static_cast<unsigned char>(id[cut - 1]))) --cut;
  const std::string name = id.substr(0, cut);
  const int dim = cut < id.size() && name != "hartmann" ? std::atoi(id.c_str() + cut) : 0;
  return search::make_test_function(name == "hartmann" ? "hartmann6" : name, dim);
}

// CPU time of this process in ms: on a machine whose cores are shared, it estimates what an idle
// core would take better than the wall time (search/ is single-threaded).
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

search::SearchSpec spec_for(const std::string& algo, const search::TestFunction& fn, uint64_t seed, int64_t max_trials) {
  search::SearchSpec spec;
  spec.algorithm = algo;
  spec.space = search::test_function_space(fn);
  spec.objectives = {{"value", false}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  return spec;
}

struct QualityJob {
  std::string problem, algorithm;
  uint64_t seed;
  json result;
};

Result<json> quality_run(const QualityJob& job, const std::vector<int>& budgets) {
  HPCTUNE_ASSIGN(const search::TestFunction fn, problem(job.problem));
  const int total = budgets.back();
  HPCTUNE_ASSIGN(auto searcher, search::make_searcher(spec_for(job.algorithm, fn, job.seed, total)));
  json regret = json::object();
  double best = INFINITY;
  double ask_seconds = 0;
  const auto t0 = Clock::now();
  std::size_t next_budget = 0;
  for (int t = 1; t <= total; ++t) {
    const auto a0 = Clock::now();
    auto sug = searcher->ask(1).value();
    ask_seconds += std::chrono::duration<double>(Clock::now() - a0).count();
    if (sug.size() != 1) return err(Errc::kInternal, job.algorithm + " returned no suggestion at trial " + std::to_string(t));
    const double v = fn(sug[0].params);
    best = std::min(best, v);
    searcher->tell({sug[0].seq, sug[0].params, search::Outcome::kCompleted, {v}, 1});
    while (next_budget < budgets.size() && budgets[next_budget] == t) regret[std::to_string(budgets[next_budget++])] = best - fn.optimum;
  }
  return json{{"source", "hpctune"},
              {"problem", job.problem},
              {"algorithm", job.algorithm},
              {"seed", job.seed},
              {"regret", regret},
              {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
              {"ask_seconds", ask_seconds}};
}

json run_quality(const Args& a) {
  std::vector<QualityJob> jobs;
  for (const auto& p : a.problems)
    for (const auto& algo : a.algorithms)
      for (int s = 0; s < a.seeds; ++s) jobs.push_back({p, algo, a.first_seed + static_cast<uint64_t>(s), json()});
  // The slow ones (bayesian) first, so the threads finish together.
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto& x, const auto& y) { return (x.algorithm == "bayesian") > (y.algorithm == "bayesian"); });
  std::atomic<std::size_t> next{0};
  std::mutex io;
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < a.threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        auto r = quality_run(jobs[i], a.budgets);
        std::lock_guard lock(io);
        if (!r.ok()) {
          std::fprintf(stderr, "bench_search: %s\n", r.error().to_string().c_str());
          failed = true;
          continue;
        }
        jobs[i].result = std::move(r).value();
        std::fprintf(stderr, "  %-12s %-10s seed %llu: regret@%d %.4g (%.2f s)\n", jobs[i].problem.c_str(),
                     jobs[i].algorithm.c_str(), static_cast<unsigned long long>(jobs[i].seed), a.budgets.back(),
                     jobs[i].result["regret"][std::to_string(a.budgets.back())].get<double>(),
                     jobs[i].result["seconds"].get<double>());
      }
    });
  for (auto& t : pool) t.join();
  if (failed) std::exit(1);
  json runs = json::array();
  for (auto& j : jobs) runs.push_back(std::move(j.result));
  return runs;
}

// Times `repeats` ask(1) calls of `algo` restored with n uniform random observations of `fn`.
Result<json> latency_point(const std::string& algo, const std::string& problem_id, int n, int repeats) {
  HPCTUNE_ASSIGN(const search::TestFunction fn, problem(problem_id));
  auto spec = spec_for(algo, fn, 7, 0);
  HPCTUNE_ASSIGN(auto searcher, search::make_searcher(spec));
  Rng rng(derive_seed(99, static_cast<uint64_t>(n)));
  std::vector<search::Record> history;
  for (int k = 0; k < n; ++k) {
    search::Record rec;
    rec.suggestion.seq = k;
    rec.suggestion.params = spec.space.sample(rng);
    const double v = fn(rec.suggestion.params);
    rec.observation = search::Observation{k, rec.suggestion.params, search::Outcome::kCompleted, {v}, 1};
    history.push_back(std::move(rec));
  }
  searcher->restore(history);
  std::vector<double> ms, cpu;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    const double c0 = cpu_ms();
    auto sug = searcher->ask(1).value();
    cpu.push_back(cpu_ms() - c0);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (sug.size() != 1) return err(Errc::kInternal, algo + ": no suggestion");
    searcher->tell({sug[0].seq, sug[0].params, search::Outcome::kCompleted, {fn(sug[0].params)}, 1});
  }
  double sum = 0;
  for (double x : ms) sum += x;
  return json{{"source", "hpctune"},
              {"algorithm", algo},
              {"problem", problem_id},
              {"dim", fn.dim},
              {"n", n},
              {"repeats", repeats},
              {"median_ms", median(ms)},
              {"mean_ms", sum / static_cast<double>(ms.size())},
              {"max_ms", *std::max_element(ms.begin(), ms.end())},
              {"first_ms", ms.front()},
              {"median_cpu_ms", median(cpu)}};
}

json run_latency(const Args& a) {
  struct Point {
    const char* algo;
    const char* problem;
    int n;
  };
  // GP at d = 10 (the target's d <= 10 at its hardest), TPE at d = 8 (the target's and Optuna's).
  const std::vector<Point> points = {{"bayesian", "levy10", 100}, {"bayesian", "levy10", 200}, {"bayesian", "levy10", 500},
                                     {"bayesian", "levy10", 1000}, {"tpe", "levy8", 100},      {"tpe", "levy8", 500},
                                     {"tpe", "levy8", 1000}};
  json out = json::array();
  for (const auto& p : points) {
    auto r = latency_point(p.algo, p.problem, p.n, a.repeats);
    if (!r.ok()) {
      std::fprintf(stderr, "bench_search: %s\n", r.error().to_string().c_str());
      std::exit(1);
    }
    std::fprintf(stderr, "  latency %-9s %-7s n=%-5d median %.2f ms (max %.2f, median CPU %.2f)\n", p.algo, p.problem,
                 p.n, (*r)["median_ms"].get<double>(), (*r)["max_ms"].get<double>(), (*r)["median_cpu_ms"].get<double>());
    out.push_back(std::move(r).value());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse_args(argc, argv, a)) return 2;
  for (const auto& p : a.problems) {
    auto fn = problem(p);
    if (!fn.ok()) {
      std::fprintf(stderr, "bench_search: problem %s: %s\n", p.c_str(), fn.error().message().c_str());
      return 2;
    }
  }
  json report = {{"budgets", a.budgets}, {"seeds", a.seeds}, {"first_seed", a.first_seed}, {"threads", a.threads}};
  json problems = json::object();
  for (const auto& p : a.problems) {
    const auto fn = problem(p).value();
    problems[p] = {{"function", fn.name}, {"dim", fn.dim}, {"optimum", fn.optimum}, {"low", fn.low}, {"high", fn.high}};
  }
  report["problems"] = problems;
  const auto t0 = Clock::now();
  if (a.quality) report["quality"] = run_quality(a);
  const auto t1 = Clock::now();
  if (a.latency) report["latency"] = run_latency(a);
  report["quality_seconds"] = std::chrono::duration<double>(t1 - t0).count();
  report["latency_seconds"] = std::chrono::duration<double>(Clock::now() - t1).count();
  if (a.out.empty()) {
    std::cout << report.dump(1) << "\n";
  } else {
    std::ofstream f(a.out);
    f << report.dump(1) << "\n";
    if (!f.flush()) {
      std::fprintf(stderr, "bench_search: cannot write %s\n", a.out.c_str());
      return 1;
    }
  }
  return 0;
}
