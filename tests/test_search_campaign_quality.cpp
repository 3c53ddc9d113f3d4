// Search quality through the real path: whole campaigns, each from YAML text through
// config::parse_config, run by the Scheduler over the in-process transport with one trainer group
// (a real worker loop, worker::run_worker, running the `function` trainer), recorded in an
// in-memory SQLite store. Over 10 seeds on branin, hartmann6 and 10-d levy at budgets of 50 and
// 100 trials: bayesian and tpe beat random on median regret at both budgets; genetic and evolution
// at 100 (issue 3, acceptance 2).
//
// One group means one trial at a time: the scheduler asks for one suggestion whenever the group is
// idle, so each campaign is the sequential ask/tell loop of test_search_quality.cpp, and the
// regret after 50 trials is read from the first 50 trials of the 100-trial campaign. That is exact
// because no algorithm here reads max_trials (only random search with init: lhs does); the test
// checks it by running 50-trial campaigns for one seed, and checks that a campaign's values equal
// those of the direct ask/tell loop. Campaigns run in parallel on a few threads, each with its own
// hub, store, scheduler and worker.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "config/config.h"
#include "scheduler/master.h"
#include "scheduler/scheduler.h"
#include "store/store.h"
#include "protocol/transport.h"
#include "search/test_functions.h"
#include "tests/search_quality.h"
#include "trainers/trainer_factory.h"
#include "worker/worker.h"

using namespace hpctune;
using namespace hpctune::search_quality;
using namespace std::chrono_literals;
using scheduler::Clock;

namespace {

std::string number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// The campaign config, as a user would write it.
std::string campaign_yaml(const std::string& algo, const search::TestFunction& fn, uint64_t seed, int budget) {
  std::string y = "name: quality-" + algo + "-" + fn.name + "\n";
  y += "seed: " + std::to_string(seed) + "\n";
  y += "objective: {metric: value, mode: min}\n";
  y += "search: {algorithm: " + algo + ", max_trials: " + std::to_string(budget) + "}\n";
  y += "trainer: {kind: function, name: " + fn.name + ", dim: " + std::to_string(fn.dim) + "}\n";
  y += "resources: {groups: 1}\n";
  y += "space:\n";
  for (int i = 0; i < fn.dim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    y += "  x";
    y += std::to_string(i + 1);  // not "x" + to_string: GCC 12 warns falsely (-Wrestrict)
    y += ": {type: float, low: " + number(fn.low[k]) + ", high: " + number(fn.high[k]) + "}\n";
  }
  return y;
}

struct CampaignRun {
  std::vector<double> values;   // the objective of each trial, by seq
  std::vector<double> regrets;  // the trainer's `regret` metric of each trial, by seq
  scheduler::Counters counters;
};

// Runs one campaign to completion the way the master does (a transaction per loop turn), with the
// in-process transport instead of ZeroMQ and a worker thread instead of a launched process.
Result<CampaignRun> run_campaign(const std::string& yaml, std::chrono::seconds limit) {
  HPCTUNE_ASSIGN(config::CampaignConfig cfg, config::parse_config(yaml, "quality.yaml"));
  HPCTUNE_ASSIGN(auto db, store::Store::open(":memory:"));
  HPCTUNE_ASSIGN(const int64_t campaign_id, db->create_campaign(scheduler::campaign_row(cfg, 1)));
  HPCTUNE_ASSIGN(const int64_t stage_id, db->create_stage(campaign_id, "search", "search", nlohmann::json::object(), 1));

  HPCTUNE_ASSIGN(auto searcher, search::make_searcher(cfg.search_spec()));
  HPCTUNE_ASSIGN(auto stopper, search::make_stopper(cfg.stopper_spec()));

  protocol::InProcHub hub;
  auto server = hub.server();
  const scheduler::SchedulerOptions sopt = scheduler::scheduler_options(cfg, campaign_id, stage_id);
  scheduler::Scheduler sched(sopt, *server, *db, *searcher, *stopper);
  HPCTUNE_TRY(sched.restore(Clock::now()));

  // The group leader's loop on its own thread; joined on every way out of this function.
  struct WorkerThread {
    std::atomic<int> terminate{0};
    std::shared_ptr<protocol::ClientTransport> client;
    std::thread thread;
    Status status;
    std::atomic<bool> ended{false};  // the worker loop returned: status is set
    ~WorkerThread() {
      terminate = 1;
      client->notify();
      if (thread.joinable()) thread.join();
    }
  } worker;
  worker.client = hub.connect();
  auto credential = sched.launch_credential(0);
  REQUIRE(credential.ok());
  worker.thread = std::thread([&worker, limit, secret = credential.value()] {
    worker::WorkerOptions o;
    o.group = 0;
    o.secret = secret;
    o.terminate = &worker.terminate;
    o.give_up = limit;
    o.make = trainers::trainer_factory();  // the real trainers: the `function` kind
    o.kinds = trainers::trainer_kinds();
    worker.status = worker::run_worker(*worker.client, o);
    worker.ended = true;
  });

  const auto deadline = Clock::now() + limit;
  const auto poll = std::chrono::milliseconds(std::clamp<int64_t>(sopt.heartbeat_interval.count() / 4, 5, 50));
  while (!sched.finished()) {
    if (Clock::now() > deadline) return err(Errc::kTimeout, "campaign did not finish in time:\n" + yaml);
    if (worker.ended) {
      if (!worker.status.ok()) return worker.status.error();
      return err(Errc::kInternal, "the worker ended before the campaign");
    }
    HPCTUNE_ASSIGN(auto env, server->recv(poll));
    HPCTUNE_TRY(db->begin());
    while (env) {
      HPCTUNE_TRY(sched.handle(env->peer, env->bytes, Clock::now()));
      HPCTUNE_ASSIGN(env, server->recv(0ms));
    }
    HPCTUNE_TRY(sched.tick(Clock::now()));
    HPCTUNE_TRY(db->commit());
  }
  sched.shutdown_workers("campaign complete");
  // run_worker returns Ok on the shutdown or on `terminate`, whichever it sees first; setting both
  // bounds the join even if the shutdown frame were lost.
  worker.terminate = 1;
  worker.client->notify();
  worker.thread.join();
  HPCTUNE_TRY(worker.status);

  HPCTUNE_ASSIGN(auto trials, db->trials(campaign_id));
  std::sort(trials.begin(), trials.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  CampaignRun out;
  out.counters = sched.counters();
  for (const auto& t : trials) {
    if (t.state != store::TrialState::kDone || !t.objective || !t.metrics.is_object() || !t.metrics.contains("regret"))
      return err(Errc::kFailed, "trial " + std::to_string(t.id) + " did not finish with value and regret: " + t.error);
    if (t.seq != static_cast<int64_t>(out.values.size()))
      return err(Errc::kInternal, "trial seqs are not 0..n-1");
    out.values.push_back(*t.objective);
    out.regrets.push_back(t.metrics["regret"].get<double>());
  }
  return out;
}

// Runs `jobs` on `threads` threads; each job's error (or REQUIRE failure) is collected, not thrown
// across threads.
struct Job {
  std::string yaml;
  Result<CampaignRun> result = err(Errc::kInternal, "not run");
};

void run_all(std::vector<Job>& jobs, unsigned threads) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        try {
          jobs[i].result = run_campaign(jobs[i].yaml, 300s);
        } catch (const std::exception& e) {
          jobs[i].result = err(Errc::kInternal, e.what());
        }
      }
    });
  for (auto& t : pool) t.join();
}

unsigned thread_count() { return std::clamp(std::thread::hardware_concurrency(), 2u, 4u); }

}  // namespace

TEST_CASE("campaign config -> scheduler -> function trainer: the real path is the sequential ask/tell loop") {
  // For one seed per (problem, algorithm): a 100-trial campaign gives exactly the values of the
  // direct loop, and a 50-trial campaign exactly its first 50, so reading the 50-trial regret from
  // the 100-trial campaigns below is sound.
  std::vector<Job> jobs;
  struct Key {
    search::TestFunction fn;
    std::string algo;
    int budget;
  };
  std::vector<Key> keys;
  for (const auto& p : problems()) {
    const auto fn = search::make_test_function(p.name, p.dim).value();
    for (const auto& algo : algorithms())
      for (int budget : {kHalfBudget, kBudget}) {
        keys.push_back({fn, algo, budget});
        jobs.push_back({campaign_yaml(algo, fn, kFirstSeed, budget)});
      }
  }
  run_all(jobs, thread_count());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const auto& fn = keys[i].fn;
    CAPTURE(fn.name);
    CAPTURE(keys[i].algo);
    CAPTURE(keys[i].budget);
    REQUIRE_MESSAGE(jobs[i].result.ok(), jobs[i].result.error().to_string());
    const auto& run = jobs[i].result.value();
    REQUIRE(run.values.size() == static_cast<std::size_t>(keys[i].budget));
    CHECK(run.counters.malformed == 0);
    CHECK(run.counters.lost_attempts == 0);
    const auto direct = ask_tell_values(keys[i].algo, fn, kFirstSeed);
    for (std::size_t k = 0; k < run.values.size(); ++k) {
      CAPTURE(k);
      CHECK(run.values[k] == direct[k]);                               // bit for bit
      CHECK(run.regrets[k] == doctest::Approx(run.values[k] - fn.optimum).epsilon(1e-12));
    }
  }
}

TEST_CASE("campaigns: bayesian and tpe beat random at 50 and 100 trials; genetic and evolution at 100") {
  const auto t0 = Clock::now();
  std::vector<Job> jobs;
  struct Key {
    std::size_t problem;
    std::string algo;
  };
  std::vector<Key> keys;
  const auto ps = problems();
  std::vector<search::TestFunction> fns;
  for (const auto& p : ps) fns.push_back(search::make_test_function(p.name, p.dim).value());
  for (std::size_t p = 0; p < ps.size(); ++p)
    for (const auto& algo : algorithms())
      for (int seed = 0; seed < kSeeds; ++seed) {
        keys.push_back({p, algo});
        jobs.push_back({campaign_yaml(algo, fns[p], kFirstSeed + static_cast<uint64_t>(seed), kBudget)});
      }
  run_all(jobs, thread_count());

  std::vector<std::map<std::string, Regrets>> results(ps.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(ps[keys[i].problem].name);
    CAPTURE(keys[i].algo);
    REQUIRE_MESSAGE(jobs[i].result.ok(), jobs[i].result.error().to_string());
    add_run(results[keys[i].problem][keys[i].algo], jobs[i].result->values, fns[keys[i].problem].optimum);
  }
  std::string table;
  for (std::size_t p = 0; p < ps.size(); ++p) table += median_table(ps[p].name + " (" + std::to_string(ps[p].dim) + "-d)", results[p]);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  MESSAGE(table << jobs.size() << " campaigns of " << kBudget << " trials in " << secs << " s on " << thread_count()
                << " threads");
  for (std::size_t p = 0; p < ps.size(); ++p) check_against_random(ps[p].name, results[p]);
}
