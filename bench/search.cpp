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
// Quality: for each (problem, algorithm, seed) and each budget one sequential run of that many
// trials (ask(1), evaluate, tell), the budgets the problem's own (Problem::budgets) unless --budgets
// gives them; the regret (the noise-free value of the incumbent, the best value so far, - the
// optimum; for a real table the incumbent is the configuration with the best drawn seed's value,
// its regret measured on its mean over the seeds) is read at its end. A run per budget, because
// algorithms read max_trials (bayesian's polish of its last third on grids, auto's pick, the
// start-up designs). --batch N asks N suggestions at a time and tells their results after all N
// were evaluated (N free trainer groups): how well an algorithm spreads a batch.
//
// Latency: a searcher is restored with n observations of uniform random points (restore() replays
// them as a finished history, as after a restart), then `repeats` times: time ask(1), evaluate,
// tell. The first ask builds the model from scratch, later ones update it (the GP refits its
// hyperparameters every refit_every = 5 observations). Median, mean and max wall time are reported,
// and the median process CPU time (the better estimate on a machine whose cores are shared).
//
// The problems (bench/search_problems.h): continuous test functions, their discretised (ordinal)
// versions, NAS-like categorical cells, mixed conditional spaces and the tabulated Fashion-MNIST
// MLP. --dump-problems writes their definitions (spaces, tables, check points) for
// bench/search_optuna.py, which evaluates exactly the same functions from them.
//
// Algorithms: every registered one (search::searcher_names()) unless --algorithms names some. An
// algorithm that refuses a space (make_searcher or ask fails) gives a run marked "na" with the
// reason, not a failure of the benchmark. A run whose searcher says it is exhausted (a finite space
// fully visited) stops there; its later budgets keep the best value found. Each run also counts
// its distinct configurations after each budget (a repeat is a wasted trial).
//
//   bench_search [--out FILE] [--problems branin,hartmann6,levy10,...] [--algorithms a,b,...|all]
//                [--seeds N] [--first-seed S] [--budgets 50,100] [--threads N] [--batch N]
//                [--no-quality] [--no-latency] [--repeats N] [--running P,...] [--fashion-table CSV]
//   bench_search --dump-problems FILE [--problems ...] [--fashion-table CSV]
//   bench_search --list-algorithms | --list-problems
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/search_problems.h"
#include "common/rng.h"
#include "search/searcher.h"
#include "search/test_functions.h"

namespace {

using namespace hpctune;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Args {
  std::string out;  // "" = stdout
  std::vector<std::string> problems = bench::problem_ids();
  std::vector<std::string> algorithms = search::searcher_names();
  std::string fashion_table = HPCTUNE_SOURCE_DIR "/bench/data/fashion_mlp_table.csv";
  std::string dump_problems;  // --dump-problems FILE: write the definitions and exit
  bool list_algorithms = false, list_problems = false;
  int seeds = 10;
  uint64_t first_seed = 1000;
  std::vector<int> budgets;  // empty: each problem's own (Problem::budgets)
  unsigned threads = 2;
  int batch = 1;  // --batch N: ask N suggestions before telling their results (N free trainer groups)
  bool quality = true, latency = true;
  int repeats = 11;
  std::vector<int> running;  // --running P,...: the latency also beside P running trials (many groups)
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
    if (flag == "--list-algorithms") { a.list_algorithms = true; continue; }
    if (flag == "--list-problems") { a.list_problems = true; continue; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_search: %s needs a value\n", flag.c_str());
      return false;
    }
    const std::string v = argv[++i];
    if (flag == "--out") a.out = v;
    else if (flag == "--problems") a.problems = split(v);
    else if (flag == "--algorithms") a.algorithms = v == "all" ? search::searcher_names() : split(v);
    else if (flag == "--fashion-table") a.fashion_table = v;
    else if (flag == "--dump-problems") a.dump_problems = v;
    else if (flag == "--seeds") a.seeds = std::atoi(v.c_str());
    else if (flag == "--first-seed") a.first_seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (flag == "--threads") a.threads = static_cast<unsigned>(std::max(1, std::atoi(v.c_str())));
    else if (flag == "--repeats") a.repeats = std::max(1, std::atoi(v.c_str()));
    else if (flag == "--batch") a.batch = std::atoi(v.c_str());
    else if (flag == "--running") {
      for (const auto& r : split(v)) a.running.push_back(std::max(0, std::atoi(r.c_str())));
    }
    else if (flag == "--budgets") {
      a.budgets.clear();
      for (const auto& b : split(v)) a.budgets.push_back(std::atoi(b.c_str()));
      std::sort(a.budgets.begin(), a.budgets.end());
    } else {
      std::fprintf(stderr, "bench_search: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  if (a.seeds < 1 || (!a.budgets.empty() && a.budgets.front() < 1) || a.batch < 1 || a.batch > 1024) {
    std::fprintf(stderr, "bench_search: --seeds and --budgets must be positive, --batch in 1..1024\n");
    return false;
  }
  return true;
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

// An algorithm name may carry settings, for trying them out: "bayesian@acquisition=ucb@ucb_kappa=3"
// (each value JSON where it parses as JSON, a string otherwise).
search::SearchSpec spec_for(const std::string& algo, const search::Space& space, uint64_t seed, int64_t max_trials) {
  search::SearchSpec spec;
  const auto at = algo.find('@');
  spec.algorithm = algo.substr(0, at);
  for (std::size_t start = at; start != std::string::npos && start < algo.size();) {
    const std::size_t next = algo.find('@', start + 1);
    const std::string item = algo.substr(start + 1, next == std::string::npos ? std::string::npos : next - start - 1);
    const std::size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const std::string value = item.substr(eq + 1);
      json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
      spec.settings[item.substr(0, eq)] = v.is_discarded() ? json(value) : v;
    }
    start = next;
  }
  spec.space = space;
  spec.objectives = {{"value", false}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  return spec;
}

using Problems = std::map<std::string, bench::Problem>;

struct QualityJob {
  std::string problem, algorithm;
  uint64_t seed;
  json result;
};

// A run the algorithm could not do: it refused the space (at construction or at an ask).
json not_applicable(const QualityJob& job, const std::string& reason) {
  return json{{"source", "hpctune"}, {"problem", job.problem}, {"algorithm", job.algorithm}, {"seed", job.seed},
              {"na", reason}};
}

// One run of `budgets.back()` trials, asking `batch` suggestions at a time (fewer for the last
// batch) and telling their results after all of them were evaluated, as `batch` free trainer
// groups would. The regret after b trials is the noise-free value of the incumbent (the best value
// seen; for a noisy problem, the point with the best noisy value) less the optimum.
json quality_run(const QualityJob& job, const bench::Problem& problem, const std::vector<int>& budgets, int batch) {
  const int total = budgets.back();
  auto made = search::make_searcher(spec_for(job.algorithm, problem.space, job.seed, total));
  if (!made.ok()) return not_applicable(job, made.error().message());
  auto searcher = std::move(made).value();
  json regret = json::object(), distinct = json::object();
  std::set<std::string> seen;
  double best = INFINITY, best_truth = INFINITY;
  double ask_seconds = 0;
  int exhausted_at = 0;  // the trial after which the searcher said it was exhausted
  const auto t0 = Clock::now();
  std::size_t next_budget = 0;
  auto record_budgets = [&](int t) {
    while (next_budget < budgets.size() && budgets[next_budget] <= t) {
      regret[std::to_string(budgets[next_budget])] = best_truth - problem.optimum;
      distinct[std::to_string(budgets[next_budget++])] = seen.size();
    }
  };
  // A real table's evaluation is one seed's value, drawn from this run's own generator (seeded by the
  // run's seed, so a run is reproducible, independent of the other runs).
  Rng noise(derive_seed(job.seed, 38));
  int t = 0;
  while (t < total) {
    const auto want = static_cast<std::size_t>(std::min(batch, total - t));
    const auto a0 = Clock::now();
    auto asked = searcher->ask(want);
    ask_seconds += std::chrono::duration<double>(Clock::now() - a0).count();
    if (!asked.ok()) return not_applicable(job, asked.error().message());
    auto sug = std::move(asked).value();
    if (sug.empty() && searcher->exhausted()) {
      exhausted_at = t;
      record_budgets(total);
      break;
    }
    if (sug.empty() || sug.size() > want)
      return not_applicable(job, std::to_string(sug.size()) + " suggestions for " + std::to_string(want) + " free groups at trial " +
                                     std::to_string(t + 1) + " with nothing pending");
    std::vector<double> values;
    for (const auto& s : sug) {
      if (auto ok = problem.space.contains(s.params); !ok.ok())
        return not_applicable(job, "suggested a point outside the space: " + ok.error().message());
      const double v = problem.draw ? problem.draw(s.params, noise) : problem.eval(s.params);
      values.push_back(v);
      if (v < best) best = v, best_truth = problem.truth ? problem.truth(s.params) : v;
      seen.insert(s.params.dump());
      record_budgets(++t);
    }
    for (std::size_t k = 0; k < sug.size(); ++k)
      searcher->tell({sug[k].seq, sug[k].params, search::Outcome::kCompleted, {values[k]}, 1});
  }
  json out = {{"source", "hpctune"},
              {"problem", job.problem},
              {"algorithm", job.algorithm},
              {"seed", job.seed},
              {"batch", batch},
              {"regret", regret},
              {"distinct", distinct},
              {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
              {"ask_seconds", ask_seconds}};
  if (exhausted_at) out["exhausted_at"] = exhausted_at;
  return out;
}

// One run per budget, each searcher told that budget as max_trials: bayesian's polish (its last
// third on grids), auto's pick and the start-up designs read it, so the regret after 50 trials of
// a 100-trial run is not a 50-trial campaign's. The runs' regrets and counts merged into one result.
json quality_runs(const QualityJob& job, const bench::Problem& problem, const std::vector<int>& budgets, int batch) {
  json out;
  for (const int b : budgets) {
    json r = quality_run(job, problem, {b}, batch);
    if (r.contains("na") || out.is_null()) {
      if (r.contains("na")) return r;
      out = std::move(r);
      continue;
    }
    for (const char* key : {"regret", "distinct"}) out[key].update(r[key]);
    for (const char* key : {"seconds", "ask_seconds"}) out[key] = out[key].get<double>() + r[key].get<double>();
    if (r.contains("exhausted_at")) out["exhausted_at"] = r["exhausted_at"];
  }
  return out;
}

json run_quality(const Args& a, const Problems& problems) {
  std::vector<QualityJob> jobs;
  for (const auto& p : a.problems)
    for (const auto& algo : a.algorithms)
      for (int s = 0; s < a.seeds; ++s) jobs.push_back({p, algo, a.first_seed + static_cast<uint64_t>(s), json()});
  // The slow ones (bayesian) first, so the threads finish together.
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto& x, const auto& y) { auto slow = [](const std::string& algo) { return algo == "bayesian" || algo == "auto"; };
    return slow(x.algorithm) > slow(y.algorithm); });
  std::atomic<std::size_t> next{0};
  std::mutex io;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < a.threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        const auto& problem = problems.at(jobs[i].problem);
        const std::vector<int>& budgets = a.budgets.empty() ? problem.budgets : a.budgets;
        json r = quality_runs(jobs[i], problem, budgets, a.batch);
        std::lock_guard lock(io);
        jobs[i].result = std::move(r);
        const json& res = jobs[i].result;
        const std::string last = std::to_string(budgets.back());
        if (res.contains("na"))
          std::fprintf(stderr, "  %-18s %-10s seed %llu: n/a (%s)\n", jobs[i].problem.c_str(), jobs[i].algorithm.c_str(),
                       static_cast<unsigned long long>(jobs[i].seed), res["na"].get<std::string>().c_str());
        else
          std::fprintf(stderr, "  %-18s %-10s seed %llu: regret@%s %.4g, %d distinct (%.2f s)\n", jobs[i].problem.c_str(),
                       jobs[i].algorithm.c_str(), static_cast<unsigned long long>(jobs[i].seed), last.c_str(),
                       res["regret"][last].get<double>(), res["distinct"][last].get<int>(), res["seconds"].get<double>());
      }
    });
  for (auto& t : pool) t.join();
  json runs = json::array();
  for (auto& j : jobs) runs.push_back(std::move(j.result));
  return runs;
}

// Times `repeats` ask(1) calls of `algo` restored with n uniform random observations of `problem`.
// With `running` > 0, first asks that many suggestions and leaves them running (as on that many
// groups): each timed ask then follows the tell of the oldest running one, so that as many run.
Result<json> latency_point(const std::string& algo, const bench::Problem& problem, int n, int repeats, int running) {
  auto spec = spec_for(algo, problem.space, 7, 0);
  HPCTUNE_ASSIGN(auto searcher, search::make_searcher(spec));
  Rng rng(derive_seed(99, static_cast<uint64_t>(n)));
  std::vector<search::Record> history;
  for (int k = 0; k < n; ++k) {
    search::Record rec;
    rec.suggestion.seq = k;
    rec.suggestion.params = spec.space.sample(rng);
    const double v = problem.eval(rec.suggestion.params);
    rec.observation = search::Observation{k, rec.suggestion.params, search::Outcome::kCompleted, {v}, 1};
    history.push_back(std::move(rec));
  }
  searcher->restore(history);
  const auto tb = Clock::now();
  std::vector<search::Suggestion> running_now;
  if (running > 0) {
    HPCTUNE_ASSIGN(auto first, searcher->ask(static_cast<std::size_t>(running)));
    running_now = std::move(first);
  }
  const double batch_s = std::chrono::duration<double>(Clock::now() - tb).count();
  std::vector<double> ms, cpu;
  for (int r = 0; r < repeats; ++r) {
    if (!running_now.empty()) {
      const auto& old = running_now.front();
      searcher->tell({old.seq, old.params, search::Outcome::kCompleted, {problem.eval(old.params)}, 1});
      running_now.erase(running_now.begin());
    }
    const auto t0 = Clock::now();
    const double c0 = cpu_ms();
    HPCTUNE_ASSIGN(auto sug, searcher->ask(1));
    cpu.push_back(cpu_ms() - c0);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (sug.size() != 1) return err(Errc::kInternal, algo + ": no suggestion");
    if (running > 0) running_now.push_back(sug[0]);
    else searcher->tell({sug[0].seq, sug[0].params, search::Outcome::kCompleted, {problem.eval(sug[0].params)}, 1});
  }
  double sum = 0;
  for (double x : ms) sum += x;
  return json{{"source", "hpctune"},
              {"algorithm", algo},
              {"problem", problem.id},
              {"dim", problem.dim},
              {"n", n},
              {"running", running},
              {"first_batch_seconds", batch_s},
              {"repeats", repeats},
              {"median_ms", median(ms)},
              {"mean_ms", sum / static_cast<double>(ms.size())},
              {"max_ms", *std::max_element(ms.begin(), ms.end())},
              {"first_ms", ms.front()},
              {"median_cpu_ms", median(cpu)}};
}

json run_latency(const Args& a) {
  struct Point {
    std::string algo, problem;
    int n;
    int running = 0;
  };
  // The GP at d = 10 (the target's d <= 10 at its hardest, with n = 200 for its target), every
  // other algorithm at d = 8 (the TPE target's and Optuna's), on a continuous space and on the
  // categorical NAS cell.
  std::vector<Point> points;
  for (int n : {100, 200, 500, 1000}) points.push_back({"bayesian", "levy10", n});
  for (const auto& algo : a.algorithms)
    for (const char* problem : {"levy8", "nas-cell"})
      for (int n : {100, 500, 1000})
        if (algo != "bayesian" || std::string(problem) != "levy10") points.push_back({algo, problem, n});
  // --running: many groups, the searchers of --algorithms at d = 10 beside that many running trials.
  if (!a.running.empty()) points.clear();
  for (int running : a.running)
    for (const auto& algo : a.algorithms)
      for (int n : {200, 1000}) points.push_back({algo, "levy10", n, running});
  json out = json::array();
  Problems problems;
  for (const auto& p : points) {
    if (!problems.count(p.problem)) problems.emplace(p.problem, bench::make_problem(p.problem, a.fashion_table).value());
    auto r = latency_point(p.algo, problems.at(p.problem), p.n, a.repeats, p.running);
    if (!r.ok()) {
      std::fprintf(stderr, "  latency %-9s %-8s n=%-5d n/a (%s)\n", p.algo.c_str(), p.problem.c_str(), p.n,
                   r.error().message().c_str());
      out.push_back({{"source", "hpctune"}, {"algorithm", p.algo}, {"problem", p.problem}, {"n", p.n}, {"na", r.error().message()}});
      continue;
    }
    std::fprintf(stderr, "  latency %-9s %-8s n=%-5d running %-5d median %.2f ms (max %.2f, median CPU %.2f)\n",
                 p.algo.c_str(), p.problem.c_str(), p.n, p.running, (*r)["median_ms"].get<double>(),
                 (*r)["max_ms"].get<double>(), (*r)["median_cpu_ms"].get<double>());
    out.push_back(std::move(r).value());
  }
  return out;
}

bool write_json(const std::string& path, const json& j) {
  if (path.empty()) {
    std::cout << j.dump(1) << "\n";
    return true;
  }
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  if (!f.flush()) {
    std::fprintf(stderr, "bench_search: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse_args(argc, argv, a)) return 2;
  if (a.list_algorithms) {
    for (const auto& name : search::searcher_names()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (a.list_problems) {
    for (const auto& id : bench::problem_ids()) std::printf("%s\n", id.c_str());
    return 0;
  }
  Problems problems;  // the latency part builds its own two
  if (!a.quality && a.dump_problems.empty()) a.problems.clear();
  for (const auto& id : a.problems) {
    auto p = bench::make_problem(id, a.fashion_table);
    if (!p.ok()) {
      std::fprintf(stderr, "bench_search: problem %s: %s\n", id.c_str(), p.error().message().c_str());
      return 2;
    }
    problems.emplace(id, std::move(p).value());
  }
  if (!a.dump_problems.empty()) {
    json defs = json::object();
    for (const auto& [id, p] : problems) defs[id] = p.definition;
    return write_json(a.dump_problems, defs) ? 0 : 1;
  }
  json report = {{"budgets", a.budgets}, {"seeds", a.seeds}, {"first_seed", a.first_seed}, {"threads", a.threads},
                 {"algorithms", a.algorithms}, {"batch", a.batch}};
  json defs = json::object();
  for (const auto& [id, p] : problems) {
    json d = {{"kind", p.kind}, {"dim", p.dim}, {"optimum", p.optimum}, {"budgets", a.budgets.empty() ? p.budgets : a.budgets},
              {"part", p.part}};
    if (p.definition.contains("points_in_space")) d["points_in_space"] = p.definition["points_in_space"];
    if (p.definition.contains("function")) d["function"] = p.definition["function"];
    defs[id] = d;
  }
  report["problems"] = defs;
  const auto t0 = Clock::now();
  if (a.quality) report["quality"] = run_quality(a, problems);
  const auto t1 = Clock::now();
  if (a.latency) report["latency"] = run_latency(a);
  report["quality_seconds"] = std::chrono::duration<double>(t1 - t0).count();
  report["latency_seconds"] = std::chrono::duration<double>(Clock::now() - t1).count();
  return write_json(a.out, report) ? 0 : 1;
}
