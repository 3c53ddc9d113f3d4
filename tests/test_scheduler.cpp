// The scheduler's trial lifecycle over the in-process transport: real worker loops on threads,
// scripted fake workers for the failure cases, an in-memory SQLite store. No sockets; one case
// forks, to see a worker process end.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "config/config.h"
#include "launch/launcher.h"
#include "scheduler/master.h"
#include "scheduler/scheduler.h"
#include "scheduler/stages.h"
#include "workflow/stages.h"
#include "store/store.h"
#include "protocol/transport.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "worker/worker.h"

using namespace hpctune;
using namespace std::chrono_literals;
using scheduler::Clock;
using store::TrialState;

namespace {

// A trainer whose metric is a known function of the parameters: value = -(x - 0.3)^2.
class QuadraticTrainer final : public trainers::Trainer {
 public:
  // What every QuadraticTrainer of this process was given, in order.
  struct Seen {
    int64_t trial_id, attempt;
    nlohmann::json params;
    std::string resume_from;
  };
  static std::vector<Seen>& seen() {
    static std::vector<Seen> v;
    return v;
  }
  static std::mutex& seen_mu() {
    static std::mutex m;
    return m;
  }
  explicit QuadraticTrainer(std::chrono::milliseconds delay = 0ms) : delay_(delay) {}
  std::string kind() const override { return "quadratic"; }
  Result<trainers::TrialResult> run(const trainers::TrialContext& ctx) override {
    {
      std::lock_guard lock(seen_mu());
      seen().push_back({ctx.trial_id, ctx.attempt, ctx.params, ctx.resume_from});
    }
    const double x = ctx.params.at("x").get<double>();
    const double value = -(x - 0.3) * (x - 0.3);
    for (int step = 1; step <= 2; ++step) {
      std::this_thread::sleep_for(delay_);
      if (ctx.stop_requested()) return trainers::TrialResult{step, true, {{"score", value}}, {}};
      ctx.report(step, {{"score", value}});
    }
    return trainers::TrialResult{2, false, {{"score", value}}, {}};
  }

 private:
  std::chrono::milliseconds delay_;
};

search::Space one_dim_space() {
  search::ParamSpec x;
  x.name = "x";
  x.type = search::ParamType::kFloat;
  x.low = 0.0;
  x.high = 1.0;
  auto space = search::Space::create({x});
  REQUIRE(space.ok());
  return space.value();
}

// Random search over one_dim_space(), maximizing "score".
std::unique_ptr<search::Searcher> random_searcher(uint64_t seed, int64_t max_trials) {
  search::SearchSpec spec;
  spec.algorithm = "random";
  spec.space = one_dim_space();
  spec.objectives = {{"score", true}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  auto searcher = search::make_searcher(spec);
  REQUIRE(searcher.ok());
  return std::move(searcher).value();
}

struct Harness {
  explicit Harness(int64_t max_trials, int64_t max_attempts = 3, std::chrono::milliseconds hb_timeout = 400ms,
                   const std::function<void(scheduler::SchedulerOptions&)>& tweak = {}) {
    auto s = store::Store::open(":memory:");
    REQUIRE(s.ok());
    db = std::move(s).value();
    store::CampaignRow row;
    row.name = "test";
    row.created_at = 1;
    auto id = db->create_campaign(row);
    REQUIRE(id.ok());
    campaign_id = id.value();

    searcher = random_searcher(11, max_trials);
    auto stopper_r = search::make_stopper(search::StopperSpec{});
    REQUIRE(stopper_r.ok());
    stopper = std::move(stopper_r).value();

    server = hub.server();
    opt.campaign_id = campaign_id;
    opt.seed = 11;
    opt.objectives = {{"score", true}};
    opt.max_trials = max_trials;
    opt.max_attempts = max_attempts;
    opt.trainer = {{"kind", "quadratic"}};
    opt.heartbeat_interval = 50ms;
    opt.heartbeat_timeout = hb_timeout;
    if (tweak) tweak(opt);
    sched = std::make_unique<scheduler::Scheduler>(opt, *server, *db, *searcher, *stopper);
    REQUIRE(sched->restore(Clock::now()).ok());
  }

  ~Harness() {
    terminate = 1;
    for (auto& t : threads) t.join();
  }

  void add_worker(int64_t group, std::chrono::milliseconds delay = 0ms) {
    worker::WorkerOptions o = worker_options(group);
    o.reconnect_initial = 20ms;
    o.make = [delay](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
      return std::unique_ptr<trainers::Trainer>(new QuadraticTrainer(delay));
    };
    auto client = std::shared_ptr<protocol::ClientTransport>(hub.connect());
    threads.emplace_back([client, o] { (void)worker::run_worker(*client, o); });
  }

  // A worker for `group` on a detached thread (for the forked cases that end the process from the
  // worker's own thread), silent, with `stop_grace` and trainers from `make`.
  void add_detached_worker(int64_t group, std::chrono::milliseconds stop_grace, trainers::MakeTrainer make) {
    worker::WorkerOptions o = worker_options(group);
    o.stop_grace = stop_grace;
    o.log = [](const std::string&) {};
    o.make = std::move(make);
    auto client = std::shared_ptr<protocol::ClientTransport>(hub.connect());
    std::thread([client, o] { (void)worker::run_worker(*client, o); }).detach();
  }

  // A worker of `group` with its launch credential, ending with the harness.
  worker::WorkerOptions worker_options(int64_t group) {
    worker::WorkerOptions o;
    o.group = group;
    o.secret = credential(group);
    o.terminate = &terminate;
    return o;
  }

  // A new launch of `group`: its credential, as the launcher would hand it over.
  std::string credential(int64_t group) {
    auto c = sched->launch_credential(group);
    REQUIRE(c.ok());
    return c.value();
  }

  // Pumps the scheduler until it is finished or `limit` passes.
  void pump(std::chrono::milliseconds limit, const std::function<bool()>& until = {}) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (until ? until() : sched->finished()) return;
      auto env = server->recv(10ms);
      REQUIRE(env.ok());
      if (*env) REQUIRE(sched->handle((*env)->peer, (*env)->bytes, Clock::now()).ok());
      REQUIRE(sched->tick(Clock::now()).ok());
    }
  }

  std::vector<store::TrialRow> trials() {
    auto t = db->trials(campaign_id);
    REQUIRE(t.ok());
    return t.value();
  }

  scheduler::SchedulerOptions opt;
  protocol::InProcHub hub;
  std::unique_ptr<protocol::ServerTransport> server;
  std::unique_ptr<store::Store> db;
  std::unique_ptr<search::Searcher> searcher;
  std::unique_ptr<search::EarlyStopper> stopper;
  std::unique_ptr<scheduler::Scheduler> sched;
  int64_t campaign_id = 0;
  std::atomic<int> terminate{0};
  std::vector<std::thread> threads;
};

// A scripted worker: the test decides every frame it sends.
struct FakeWorker {
  explicit FakeWorker(protocol::InProcHub& hub) : client(hub.connect()) {}
  void send(const protocol::Message& m) { REQUIRE(client->send(protocol::encode(m)).ok()); }
  // The next message of type T within the deadline (others are skipped).
  template <class T>
  std::optional<T> expect(std::chrono::milliseconds limit, Harness& h) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      h.pump(5ms, [] { return false; });
      auto frame = client->recv(0ms);
      REQUIRE(frame.ok());
      if (!*frame) continue;
      auto msg = protocol::decode(**frame);
      REQUIRE(msg.ok());
      if (auto* t = std::get_if<T>(&*msg)) return *t;
    }
    return std::nullopt;
  }
  std::unique_ptr<protocol::ClientTransport> client;
};

// The hello of a new launch of `group` (a fresh credential from the scheduler).
protocol::Hello hello(int64_t group, Harness& h) {
  protocol::Hello m;
  m.secret = h.credential(group);
  m.incarnation = 1000 + group;
  m.group = group;
  return m;
}

// Registers `fake` as group 0 and says ready: the first trial assigned to it.
std::optional<protocol::Assign> first_assign(FakeWorker& fake, Harness& h) {
  fake.send(hello(0, h));
  REQUIRE(fake.expect<protocol::Welcome>(1s, h));
  fake.send(protocol::Ready{});
  return fake.expect<protocol::Assign>(1s, h);
}

}  // namespace

TEST_CASE("every trial runs exactly once and the best is found") {
  Harness h(20);
  h.add_worker(0);
  h.add_worker(1);
  h.add_worker(2);
  h.pump(10s);
  REQUIRE(h.sched->finished());
  auto trials = h.trials();
  REQUIRE(trials.size() == 20);
  double best = -1e9;
  for (const auto& t : trials) {
    CHECK(t.state == TrialState::kDone);
    CHECK(t.attempt == 1);
    REQUIRE(t.objective.has_value());
    const double x = t.params.at("x").get<double>();
    CHECK(*t.objective == doctest::Approx(-(x - 0.3) * (x - 0.3)));
    best = std::max(best, *t.objective);
    auto m = h.db->metrics(t.id);
    REQUIRE(m.ok());
    CHECK(m->size() == 2);  // two reports, one metric each
  }
  auto p = h.sched->progress();
  CHECK(p.done == 20);
  REQUIRE(p.best.has_value());
  CHECK(*p.best == doctest::Approx(best));
  CHECK(h.sched->counters().malformed == 0);
  CHECK(h.sched->counters().stale_results == 0);
}

// A trainer that never looks at stop requests.
class StuckTrainer final : public trainers::Trainer {
 public:
  std::string kind() const override { return "stuck"; }
  Result<trainers::TrialResult> run(const trainers::TrialContext&) override {
    for (;;) std::this_thread::sleep_for(10ms);
  }
};

// Waits up to `limit` for the child `pid` to exit; kills it past that. Its wait status when it
// ended by itself, none when it had to be killed.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds limit) {
  const auto started = Clock::now();
  int status = 0;
  pid_t ended = 0;
  while ((ended = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() - started < limit) std::this_thread::sleep_for(5ms);
  if (ended != 0) return status;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return std::nullopt;
}

TEST_CASE("a worker whose trial ignores stop requests exits within stop_grace after losing its master") {
  const auto started = Clock::now();
  std::fflush(stdout);  // what doctest has buffered is printed once, not again by the child
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: a master with one worker whose trial never ends; the master then goes silent.
    int code = 98;
    try {
      Harness h(1, 3, 200ms);
      h.add_detached_worker(0, 100ms, [](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
        return std::unique_ptr<trainers::Trainer>(new StuckTrainer());
      });
      h.pump(3s, [&h] { return !h.trials().empty() && h.trials()[0].state == TrialState::kRunning; });
      code = h.trials()[0].state == TrialState::kRunning ? 97 : 96;
      std::this_thread::sleep_for(15s);  // the master is gone: nobody answers the worker any more
    } catch (...) {
    }
    _exit(code);
  }
  const auto waited = wait_child(pid, 5s);
  if (!waited) FAIL("the worker process did not end within 5 s");
  const int status = waited.value_or(0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == worker::kTrialStuckExitCode);
  // 200 ms heartbeat timeout + 100 ms stop_grace, with room for a loaded machine.
  CHECK(Clock::now() - started < 3s);
}

// A trainer that returns its result at once but whose destructor never returns (a child process
// that will not die, a file system that hangs on close): the worker joins its trial thread only
// after the destructor, and that join has the same deadline as a stop.
class StuckInCleanupTrainer final : public trainers::Trainer {
 public:
  ~StuckInCleanupTrainer() override {
    for (;;) std::this_thread::sleep_for(10ms);
  }
  std::string kind() const override { return "stuck-cleanup"; }
  Result<trainers::TrialResult> run(const trainers::TrialContext&) override {
    return trainers::TrialResult{1, false, {{"score", 1.0}}, {}};
  }
};

TEST_CASE("a worker whose trainer hangs after its result exits within stop_grace, and the result is recorded") {
  const auto started = Clock::now();
  std::fflush(stdout);
  std::fflush(stderr);
  int report[2];
  REQUIRE(pipe(report) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: a master with one worker; the pipe says when the master recorded the result.
    close(report[0]);
    try {
      Harness h(1, 3, 5000ms);
      // A stop_grace of 500 ms: time enough for the master to record the result first.
      h.add_detached_worker(0, 500ms, [](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
        return std::unique_ptr<trainers::Trainer>(new StuckInCleanupTrainer());
      });
      h.pump(3s, [&h] { return !h.trials().empty() && h.trials()[0].state == TrialState::kDone; });
      const char done = !h.trials().empty() && h.trials()[0].state == TrialState::kDone ? 'd' : 'x';
      (void)!write(report[1], &done, 1);
      std::this_thread::sleep_for(15s);  // the worker thread ends the process before this
    } catch (...) {
    }
    _exit(98);
  }
  close(report[1]);
  const auto waited = wait_child(pid, 5s);
  char done = 0;
  const bool said = read(report[0], &done, 1) == 1;
  close(report[0]);
  REQUIRE_MESSAGE(waited.has_value(), "the worker process did not end within 5 s");
  const int status = *waited;
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == worker::kTrialStuckExitCode);
  // The result was sent before the join: the master recorded the trial as done.
  CHECK(said);
  CHECK(done == 'd');
  CHECK(Clock::now() - started < 3s);
}

TEST_CASE("a silent worker's trial is queued again as attempt 2 and its late result is ignored") {
  Harness h(1, 3, 300ms);
  FakeWorker fake(h.hub);
  auto assign = first_assign(fake, h);
  REQUIRE(assign);
  CHECK(assign->attempt == 1);
  // The fake goes silent. After the heartbeat timeout the trial is queued again.
  h.pump(600ms, [] { return false; });
  CHECK(h.sched->counters().lost_attempts == 1);
  auto t = h.db->trial(assign->trial_id);
  REQUIRE(t.ok());
  CHECK((*t)->state == TrialState::kQueued);
  CHECK((*t)->attempt == 2);
  // A real worker picks it up and completes it as attempt 2.
  h.add_worker(1);
  h.pump(5s);
  REQUIRE(h.sched->finished());
  // The silent worker's late result arrives and is ignored.
  fake.send(protocol::Done{assign->trial_id, 1, 2, false, {{"score", 123.0}}, {}});
  h.pump(100ms, [] { return false; });
  CHECK(h.sched->counters().stale_results == 1);
  t = h.db->trial(assign->trial_id);
  REQUIRE(t.ok());
  CHECK((*t)->state == TrialState::kDone);
  CHECK((*t)->attempt == 2);
  CHECK(*(*t)->objective != doctest::Approx(123.0));
  auto attempts = h.db->attempts(assign->trial_id);
  REQUIRE(attempts.ok());
  REQUIRE(attempts->size() == 2);
  CHECK((*attempts)[0]["state"] == "lost");
  CHECK((*attempts)[1]["state"] == "done");
  auto events = h.db->events(h.campaign_id, 0);
  REQUIRE(events.ok());
  bool late = false;
  for (const auto& e : *events) late = late || (e.kind == "late_result_ignored" && e.trial_id == assign->trial_id);
  CHECK(late);
}

TEST_CASE("a heartbeat saying idle while an acknowledged attempt runs there loses that attempt at once") {
  Harness h(1, 3, 2s);
  FakeWorker fake(h.hub);
  auto assign = first_assign(fake, h);
  REQUIRE(assign);
  // An idle heartbeat sent before the assign arrived changes nothing.
  fake.send(protocol::Heartbeat{});
  h.pump(100ms, [] { return false; });
  CHECK(h.sched->counters().lost_attempts == 0);
  // The worker runs it (a heartbeat naming it), then says idle: its result was lost on the way.
  fake.send(protocol::Heartbeat{assign->trial_id, assign->attempt});
  fake.send(protocol::Heartbeat{});
  auto again = fake.expect<protocol::Assign>(1s, h);  // well before the 2 s heartbeat timeout
  REQUIRE(again);
  CHECK(h.sched->counters().lost_attempts == 1);
  CHECK(again->trial_id == assign->trial_id);
  CHECK(again->attempt == 2);
  fake.send(protocol::Done{again->trial_id, again->attempt, 1, false, {{"score", 0.5}}, {}});
  h.pump(500ms);
  REQUIRE(h.sched->finished());
  auto t = h.db->trial(assign->trial_id);
  REQUIRE(t.ok());
  CHECK((*t)->state == TrialState::kDone);
  CHECK((*t)->attempt == 2);
}

TEST_CASE("an assign the worker never acknowledges is lost after a heartbeat timeout of idle heartbeats") {
  Harness h(1, 3, 400ms);
  FakeWorker fake(h.hub);
  auto assign = first_assign(fake, h);
  REQUIRE(assign);
  // Alive (idle heartbeats keep it from going silent) but it never heard of the trial.
  std::optional<protocol::Assign> again;
  const auto deadline = Clock::now() + 2s;
  while (!again && Clock::now() < deadline) {
    fake.send(protocol::Heartbeat{});
    again = fake.expect<protocol::Assign>(100ms, h);
  }
  REQUIRE(again);
  CHECK(again->attempt == 2);
  CHECK(h.sched->counters().lost_attempts == 1);
}

TEST_CASE("a trial is failed after max_attempts lost attempts") {
  Harness h(1, 2, 200ms);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    FakeWorker fake(h.hub);
    fake.send(hello(attempt, h));
    REQUIRE(fake.expect<protocol::Welcome>(1s, h));
    fake.send(protocol::Ready{});
    auto assign = fake.expect<protocol::Assign>(1s, h);
    REQUIRE(assign);
    CHECK(assign->attempt == attempt);
    h.pump(400ms, [] { return false; });  // silent past the timeout
  }
  h.pump(200ms);
  CHECK(h.sched->finished());
  auto trials = h.trials();
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::kFailed);
  CHECK(h.sched->progress().failed == 1);
}

// The assigns waiting at each slot of a packed process (index = group), into running[slot].
static void take_assigns(const std::vector<std::unique_ptr<FakeWorker>>& slots, std::map<int64_t, protocol::Assign>& running) {
  for (std::size_t g = 0; g < slots.size(); ++g) {
    for (;;) {
      auto frame = slots[g]->client->recv(0ms);
      REQUIRE(frame.ok());
      if (!*frame) break;
      auto msg = protocol::decode(**frame);
      REQUIRE(msg.ok());
      if (auto* a = std::get_if<protocol::Assign>(&*msg)) running[static_cast<int64_t>(g)] = *a;
    }
  }
}

TEST_CASE("a trial that brings down its packed process is found and failed; its pack-mates are not charged") {
  // Groups 0..3 are the slots of one process (a pack). Whenever it runs the poison trial, the
  // process dies, and all four groups exit. Before: every lost attempt was charged, so the first
  // two losses failed all four trials.
  constexpr int64_t kSlots = 4;
  Harness h(/*max_trials=*/6, /*max_attempts=*/2, 10s, [](scheduler::SchedulerOptions& o) {
    o.process_groups = [](int64_t) { return std::vector<int64_t>{0, 1, 2, 3}; };
  });
  int64_t poison = 0;
  std::vector<std::vector<int64_t>> crashed_with;  // the trials that ran in each lost process
  for (int process = 0; process < 12 && !h.sched->finished(); ++process) {
    std::vector<std::unique_ptr<FakeWorker>> slots;
    for (int64_t g = 0; g < kSlots; ++g) {
      slots.push_back(std::make_unique<FakeWorker>(h.hub));
      protocol::Hello hi = hello(g, h);
      hi.incarnation = 100 * (process + 1) + g;
      slots.back()->send(hi);
      REQUIRE(slots.back()->expect<protocol::Welcome>(1s, h));
      slots.back()->send(protocol::Ready{});
    }
    std::map<int64_t, protocol::Assign> running;  // slot -> its attempt
    bool lost = false;
    while (!lost && !h.sched->finished()) {
      h.pump(150ms, [] { return false; });
      take_assigns(slots, running);
      if (running.empty()) break;
      if (poison == 0) poison = running.begin()->second.trial_id;  // the first trial of slot 0
      std::vector<int64_t> ids;
      for (const auto& [g, a] : running) ids.push_back(a.trial_id);
      if (std::find(ids.begin(), ids.end(), poison) != ids.end()) {
        crashed_with.push_back(ids);
        for (int64_t g = 0; g < kSlots; ++g) REQUIRE(h.sched->on_group_exit(g, "process killed by signal 11", Clock::now()).ok());
        lost = true;
        break;
      }
      for (const auto& [g, a] : running) slots[g]->send(protocol::Done{a.trial_id, a.attempt, 1, false, {{"score", 0.5}}, {}});
      running.clear();
    }
  }
  h.pump(500ms);
  REQUIRE(h.sched->finished());
  // Lost with 4, then with its half (2), then alone twice: charged only those two, and failed.
  REQUIRE(crashed_with.size() == 4);
  CHECK(crashed_with[0].size() == 4);
  CHECK(crashed_with[1].size() == 2);
  CHECK(crashed_with[2] == std::vector<int64_t>{poison});
  CHECK(crashed_with[3] == std::vector<int64_t>{poison});
  int64_t done = 0;
  for (const auto& t : h.trials()) {
    auto attempts = h.db->attempts(t.id);
    REQUIRE(attempts.ok());
    int64_t charged = 0;
    for (const auto& a : *attempts) charged += a.value("state", "") == "lost" && a.value("charged", true) ? 1 : 0;
    if (t.id == poison) {
      CHECK(t.state == TrialState::kFailed);
      CHECK(charged == 2);
    } else {
      CHECK(t.state == TrialState::kDone);
      CHECK(charged == 0);
      ++done;
    }
  }
  CHECK(done == 5);
}

TEST_CASE("a resumed master keeps apart the halves of trials lost together in one packed process") {
  // Before, the halves lived only in the master's memory: run again on the database, it put the
  // four trials back into one process, and a trial that kills its process took its mates down again.
  constexpr int64_t kSlots = 4;
  Harness h(/*max_trials=*/4, /*max_attempts=*/3, 10s, [](scheduler::SchedulerOptions& o) {
    o.process_groups = [](int64_t) { return std::vector<int64_t>{0, 1, 2, 3}; };
  });
  std::vector<std::unique_ptr<FakeWorker>> slots;
  auto launch = [&](int64_t incarnation) {
    slots.clear();
    for (int64_t g = 0; g < kSlots; ++g) {
      slots.push_back(std::make_unique<FakeWorker>(h.hub));
      protocol::Hello hi = hello(g, h);
      hi.incarnation = incarnation + g;
      slots.back()->send(hi);
      REQUIRE(slots.back()->expect<protocol::Welcome>(5s, h));
      slots.back()->send(protocol::Ready{});
    }
  };
  // The assigns the slots get until `want` have come (and a little longer, for any more).
  auto assigned = [&](std::size_t want) {
    std::map<int64_t, protocol::Assign> running;  // slot -> its attempt
    const auto deadline = Clock::now() + 10s;
    auto settle = Clock::now() + 10s;
    while (Clock::now() < std::min(deadline, settle)) {
      h.pump(20ms, [] { return false; });
      take_assigns(slots, running);
      if (running.size() >= want && settle - Clock::now() > 300ms) settle = Clock::now() + 300ms;
    }
    std::set<int64_t> ids;
    for (const auto& [g, a] : running) ids.insert(a.trial_id);
    return std::make_pair(ids, running);
  };
  launch(100);
  const auto [together, first_run] = assigned(4);
  REQUIRE(together.size() == 4);
  for (int64_t g = 0; g < kSlots; ++g) REQUIRE(h.sched->on_group_exit(g, "process killed by signal 11", Clock::now()).ok());
  const std::set<int64_t> low(together.begin(), std::next(together.begin(), 2));
  const std::set<int64_t> high(std::next(together.begin(), 2), together.end());

  // "The master is stopped and run again" on the same database.
  h.sched.reset();
  h.searcher = random_searcher(11, 4);
  h.sched = std::make_unique<scheduler::Scheduler>(h.opt, *h.server, *h.db, *h.searcher, *h.stopper);
  REQUIRE(h.sched->restore(Clock::now()).ok());
  launch(200);
  const auto [half, running] = assigned(2);
  CHECK(half.size() == 2);
  CHECK(half == low);  // one half only; the other waits for the process to empty
  for (const auto& [g, a] : running) slots[g]->send(protocol::Done{a.trial_id, a.attempt, 1, false, {{"score", 0.5}}, {}});
  const auto [other, running2] = assigned(2);
  CHECK(other == high);
  for (const auto& [g, a] : running2) slots[g]->send(protocol::Done{a.trial_id, a.attempt, 1, false, {{"score", 0.5}}, {}});
  h.pump(5s);
  REQUIRE(h.sched->finished());
  for (const auto& t : h.trials()) {
    CHECK(t.state == TrialState::kDone);
    CHECK(t.attempt == 2);
  }
}

TEST_CASE("a silent slot of a packed process loses its mates' trials with it, none charged, and nothing goes to a dying slot") {
  Harness h(/*max_trials=*/2, /*max_attempts=*/1, 300ms, [](scheduler::SchedulerOptions& o) {
    o.process_groups = [](int64_t) { return std::vector<int64_t>{0, 1}; };
  });
  FakeWorker hung(h.hub), alive(h.hub);
  hung.send(hello(0, h));
  REQUIRE(hung.expect<protocol::Welcome>(1s, h));
  hung.send(protocol::Ready{});
  auto a0 = hung.expect<protocol::Assign>(1s, h);
  REQUIRE(a0);
  alive.send(hello(1, h));
  REQUIRE(alive.expect<protocol::Welcome>(1s, h));
  alive.send(protocol::Ready{});
  auto a1 = alive.expect<protocol::Assign>(1s, h);
  REQUIRE(a1);
  // Group 0 goes silent; group 1 keeps beating until its process is declared lost with group 0.
  const auto until = Clock::now() + 2s;
  while (Clock::now() < until && h.sched->group_registered(0)) {
    alive.send(protocol::Heartbeat{a1->trial_id, a1->attempt});
    h.pump(50ms, [] { return false; });
  }
  CHECK_FALSE(h.sched->group_registered(0));
  CHECK_FALSE(h.sched->group_registered(1));
  CHECK(h.sched->take_silent_groups() == std::vector<int64_t>{0});  // the launcher kills the process
  CHECK_FALSE(alive.expect<protocol::Assign>(200ms, h));  // its slot dies with it: no retry there
  // With max_attempts 1, a charged loss would have failed them: both are queued again instead.
  for (const auto& t : h.trials()) {
    CHECK(t.state == TrialState::kQueued);
    CHECK(t.attempt == 2);
  }
  CHECK(h.sched->progress().failed == 0);
}

TEST_CASE("bad frames are counted and dropped while a good worker is served") {
  Harness h(4);
  FakeWorker stranger(h.hub);
  stranger.send(protocol::Report{1, 1, 1, {{"score", 1.0}}});  // never said hello
  REQUIRE(stranger.client->send("\x01\x02garbage").ok());   // does not decode
  FakeWorker rude(h.hub);
  rude.send(hello(7, h));
  REQUIRE(rude.expect<protocol::Welcome>(1s, h));
  rude.send(protocol::Done{999, 1, 1, false, {{"score", 1.0}}, {}});  // a trial it does not run
  protocol::Assign forged;
  forged.trial_id = 1;
  rude.send(forged);                                                   // only the master sends assign
  protocol::Hello old = hello(8, h);
  old.version = 99;
  FakeWorker future(h.hub);
  future.send(old);
  REQUIRE(future.expect<protocol::Shutdown>(1s, h));
  h.add_worker(0);
  h.pump(5s);
  REQUIRE(h.sched->finished());
  const auto& c = h.sched->counters();
  CHECK(c.unregistered == 1);
  CHECK(c.malformed == 1);
  CHECK(c.stale_results == 1);
  CHECK(c.out_of_order == 1);
  CHECK(c.bad_version == 1);
  for (const auto& t : h.trials()) CHECK(t.state == TrialState::kDone);
}

TEST_CASE("a hello of another protocol version is answered only when it carries a launch credential (issue 21)") {
  Harness h(1);
  // No credential, or a made-up one: nothing comes back, not even the master's version.
  protocol::Hello bare;
  bare.version = 99;
  FakeWorker stranger(h.hub);
  stranger.send(bare);
  protocol::Hello forged = hello(0, h);
  forged.version = 99;
  forged.secret = std::string(32, 'a') + "." + std::string(32, 'b');
  FakeWorker forger(h.hub);
  forger.send(forged);
  h.pump(200ms, [] { return false; });
  for (FakeWorker* w : {&stranger, &forger}) {
    auto nothing = w->client->recv(0ms);
    REQUIRE(nothing.ok());
    CHECK_FALSE(nothing->has_value());
  }
  CHECK(h.sched->counters().unauthenticated == 2);
  // A worker this master launched, of another hpctune version: told why it is refused.
  protocol::Hello own = hello(0, h);
  own.version = 99;
  FakeWorker future(h.hub);
  future.send(own);
  auto why = future.expect<protocol::Shutdown>(1s, h);
  REQUIRE(why);
  CHECK(why->reason.find("the master speaks") != std::string::npos);
}

TEST_CASE("a new incarnation of a live group is refused until the group is reported lost") {
  Harness h(1, 3, 10s);  // the fake sends no heartbeats: it must not time out here
  FakeWorker first(h.hub);
  first.send(hello(0, h));
  REQUIRE(first.expect<protocol::Welcome>(1s, h));
  first.send(protocol::Ready{});
  auto assign = first.expect<protocol::Assign>(1s, h);
  REQUIRE(assign);
  FakeWorker again(h.hub);  // another process naming group 0, even with a valid launch credential
  protocol::Hello hi = hello(0, h);
  hi.incarnation = 555;
  again.send(hi);
  again.send(protocol::Ready{});
  h.pump(100ms, [] { return false; });
  auto nothing = again.client->recv(0ms);  // no welcome, no assign
  REQUIRE(nothing.ok());
  CHECK_FALSE(nothing->has_value());
  CHECK(h.sched->counters().identity_refused == 1);
  CHECK(h.sched->counters().lost_attempts == 0);
  CHECK(h.trials()[0].state == TrialState::kAssigned);
  // The launcher reports the group's exit: now a new incarnation is expected, and it takes over.
  REQUIRE(h.sched->on_group_exit(0, "process killed by signal 9", Clock::now()).ok());
  again.send(hi);
  REQUIRE(again.expect<protocol::Welcome>(1s, h));
  again.send(protocol::Ready{});
  auto reassigned = again.expect<protocol::Assign>(1s, h);
  REQUIRE(reassigned);
  CHECK(reassigned->trial_id == assign->trial_id);
  CHECK(reassigned->attempt == 2);
  CHECK(reassigned->seed == assign->seed);  // the same trial seed on every attempt
  again.send(protocol::Done{reassigned->trial_id, 2, 2, false, {{"score", 0.5}}, {}});
  h.pump(1s);
  CHECK(h.sched->finished());
  CHECK(h.trials()[0].state == TrialState::kDone);
}

TEST_CASE("the same incarnation on a new connection is the worker reconnecting") {
  Harness h(1);
  protocol::Hello hi = hello(0, h);
  FakeWorker first(h.hub);
  first.send(hi);
  REQUIRE(first.expect<protocol::Welcome>(1s, h));
  FakeWorker second(h.hub);  // the worker's fresh socket after it lost the master
  second.send(hi);
  REQUIRE(second.expect<protocol::Welcome>(1s, h));
  second.send(protocol::Ready{});
  auto a = second.expect<protocol::Assign>(1s, h);
  REQUIRE(a);
  second.send(protocol::Done{a->trial_id, a->attempt, 1, false, {{"score", 0.5}}, {}});
  h.pump(1s);
  CHECK(h.sched->finished());
  CHECK(h.sched->counters().identity_refused == 0);
}

TEST_CASE("a hello without the campaign secret and the group's launch token is refused, nothing recorded") {
  Harness h(2);
  const std::string good0 = h.credential(0);  // the launch of group 0 that has not said hello yet
  const std::string good1 = h.credential(1);
  const std::string secret = good1.substr(0, good1.find('.'));
  const std::string token1 = good1.substr(good1.find('.') + 1);
  std::string wrong_secret = good0;
  wrong_secret[0] = wrong_secret[0] == 'a' ? 'b' : 'a';
  const std::vector<std::pair<int64_t, std::string>> refused = {
      {0, ""},                                       // no secret at all
      {0, "not-a-secret"},                           // garbage
      {0, wrong_secret},                             // another campaign's secret
      {0, secret + "." + token1},                    // group 1's token naming group 0
      {0, secret + "." + std::string(32, '0')},      // the secret, a made-up token
      {0, secret},                                   // the secret, no token
      {-1, good0},                                   // a group the master did not launch
      {5, secret + "." + token1},
  };
  std::vector<std::unique_ptr<FakeWorker>> impostors;
  for (const auto& [group, credential] : refused) {
    impostors.push_back(std::make_unique<FakeWorker>(h.hub));
    protocol::Hello m;
    m.group = group;
    m.secret = credential;
    m.incarnation = 77;
    impostors.back()->send(m);
    impostors.back()->send(protocol::Ready{});
    impostors.back()->send(protocol::Done{1, 1, 1, false, {{"score", 9.0}}, {{"log", "/etc/shadow", 1}}});
  }
  h.pump(100ms, [] { return false; });
  for (auto& imp : impostors) {
    // No welcome, no assign: nothing at all comes back.
    auto frame = imp->client->recv(0ms);
    REQUIRE(frame.ok());
    CHECK_FALSE(frame->has_value());
  }
  const auto& c = h.sched->counters();
  CHECK(c.unauthenticated == static_cast<int64_t>(refused.size()));
  CHECK(c.unregistered == 2 * static_cast<int64_t>(refused.size()));
  auto groups = h.db->groups(h.campaign_id);
  REQUIRE(groups.ok());
  CHECK(groups->empty());
  auto events = h.db->events(h.campaign_id, 0);
  REQUIRE(events.ok());
  CHECK(events->empty());
  // The real launches are served.
  FakeWorker real(h.hub);
  protocol::Hello m;
  m.group = 0;
  m.secret = good0;
  m.incarnation = 1;
  real.send(m);
  CHECK(real.expect<protocol::Welcome>(1s, h));
}

TEST_CASE("restore queues running trials again and keeps finished ones") {
  int64_t running_id = 0;
  {
    Harness h(3);
    FakeWorker fake(h.hub);
    fake.send(hello(0, h));
    REQUIRE(fake.expect<protocol::Welcome>(1s, h));
    fake.send(protocol::Ready{});
    auto a1 = fake.expect<protocol::Assign>(1s, h);
    REQUIRE(a1);
    fake.send(protocol::Done{a1->trial_id, 1, 2, false, {{"score", 0.25}}, {}});
    auto a2 = fake.expect<protocol::Assign>(1s, h);
    REQUIRE(a2);
    running_id = a2->trial_id;
    // "The master dies": rebuild a scheduler over the same store.
    auto searcher = random_searcher(11, 3);
    auto stopper = search::make_stopper(search::StopperSpec{});
    REQUIRE(stopper.ok());
    protocol::InProcHub hub2;
    auto server2 = hub2.server();
    scheduler::SchedulerOptions opt;
    opt.campaign_id = h.campaign_id;
    opt.objectives = {{"score", true}};
    opt.max_trials = 3;
    scheduler::Scheduler again(opt, *server2, *h.db, *searcher, **stopper);
    REQUIRE(again.restore(Clock::now()).ok());
    auto p = again.progress();
    CHECK(p.done == 1);
    CHECK(p.queued == 1);
    CHECK(p.best.has_value());
    auto t = h.db->trial(running_id);
    REQUIRE(t.ok());
    CHECK((*t)->state == TrialState::kQueued);
    CHECK((*t)->attempt == 2);
  }
}

TEST_CASE("dropped frames are counted per peer and logged rate-limited, with a summary") {
  Harness h(1);
  std::vector<std::string> lines;
  h.sched->set_log([&](const std::string& line) { lines.push_back(line); });
  FakeWorker a(h.hub), b(h.hub);
  for (int i = 0; i < 1000; ++i) a.send(protocol::Done{1, 1, 1, false, {{"score", 1.0}}, {}});
  for (int i = 0; i < 10; ++i) REQUIRE(b.client->send("\x01\x02garbage").ok());
  h.pump(300ms, [&] { return h.sched->counters().unregistered + h.sched->counters().malformed == 1010; });
  CHECK(h.sched->counters().unregistered == 1000);
  CHECK(h.sched->counters().malformed == 10);
  h.sched->shutdown_workers("end");  // flushes the summaries of the current window
  auto count = [&](const std::string& needle) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(needle) != std::string::npos; });
  };
  CHECK(count("never said hello") == 3);
  CHECK(count("dropped a malformed frame") == 3);
  CHECK(count("997 more frames dropped") == 1);
  CHECK(count("(997 unregistered)") == 1);
  CHECK(count("(7 malformed)") == 1);
  CHECK(lines.size() == 8);
  auto events = h.db->events(h.campaign_id, 0);
  REQUIRE(events.ok());
  CHECK(events->empty());
}

// --- the steppable master on a manual clock ----------------------------------------------------

namespace {

// A launcher that starts nothing: it records each start (with its credential) and reports the
// exits the test (or a kill) queues.
class FakeLauncher final : public launch::Launcher {
 public:
  std::string name() const override { return "fake"; }
  Status start(int64_t group, const std::string& credential) override {
    credentials[group] = credential;
    alive[group] = true;
    ++starts[group];
    return {};
  }
  launch::GroupState state(int64_t group) const override {
    auto it = alive.find(group);
    if (it == alive.end() || !it->second) return launch::GroupState::kExited;
    return pending_groups.count(group) ? launch::GroupState::kPending : launch::GroupState::kStarting;
  }
  std::vector<launch::GroupExit> poll_exits() override { return std::exchange(exits, {}); }
  void kill(int64_t group) override {
    if (!alive[group]) return;
    alive[group] = false;
    ++kills[group];
    exits.push_back({group, "killed by signal 9 (Killed)", false, ""});
  }
  void stop_all(std::chrono::milliseconds) override {
    for (auto& [g, a] : alive) a = false;
    ++stopped;
  }

  std::map<int64_t, std::string> credentials;
  std::map<int64_t, bool> alive;
  std::map<int64_t, int> starts, kills;
  std::set<int64_t> pending_groups;  // reported pending (a backend that starts them later)
  std::vector<launch::GroupExit> exits;
  int stopped = 0;
};

// A worker the test scripts: it answers heartbeats, runs each assign for `steps` steps of reports
// (one per call of run()), and can be told to go silent.
struct ScriptedWorker {
  ScriptedWorker(protocol::InProcHub& hub, int64_t group, std::string secret, uint64_t incarnation)
      : client(hub.connect()), group(group) {
    protocol::Hello h;
    h.secret = std::move(secret);
    h.incarnation = incarnation;
    h.group = group;
    send(h);
  }
  void send(const protocol::Message& m) { REQUIRE(client->send(protocol::encode(m)).ok()); }
  // Reads what the master sent and answers; call once per simulated turn.
  void run() {
    if (silent) return;
    while (true) {
      auto frame = client->recv(0ms);
      REQUIRE(frame.ok());
      if (!*frame) break;
      auto msg = protocol::decode(**frame);
      REQUIRE(msg.ok());
      if (std::holds_alternative<protocol::Welcome>(*msg)) {
        send(protocol::Ready{});
      } else if (auto* a = std::get_if<protocol::Assign>(&*msg)) {
        current = *a;
        step = 0;
        send(protocol::Report{a->trial_id, a->attempt, 0, {}});
        assigned.push_back(*a);
      } else if (std::holds_alternative<protocol::Heartbeat>(*msg)) {
        ++heartbeats;
        send(protocol::Heartbeat{current ? current->trial_id : 0, current ? current->attempt : 0});
      }
    }
    if (current) {
      ++step;
      const double x = current->params.at("x").get<double>();
      if (step < 3) {
        send(protocol::Report{current->trial_id, current->attempt, step, {{"value", x}}});
      } else {
        send(protocol::Done{current->trial_id, current->attempt, step, false, {{"value", x}}, {}});
        current.reset();
      }
    }
  }
  std::unique_ptr<protocol::ClientTransport> client;
  int64_t group;
  bool silent = false;
  std::optional<protocol::Assign> current;
  int64_t step = 0;
  std::vector<protocol::Assign> assigned;
  int64_t heartbeats = 0;  // received from the master
};

config::CampaignConfig manual_config(int64_t trials, int64_t groups) {
  auto cfg = config::parse_config("name: manual\nseed: 5\nobjective: {metric: value, mode: max}\n"
                                  "search: {algorithm: random, max_trials: " + std::to_string(trials) + "}\n"
                                  "space:\n  x: {type: float, low: 0.0, high: 1.0}\n"
                                  "trainer: {kind: command, command: 'true'}\n"
                                  "resources: {groups: " + std::to_string(groups) +
                                  ", heartbeat_interval: 1s, heartbeat_timeout: 5s, startup_timeout: 30s}\n",
                                  "manual.yaml");
  REQUIRE_MESSAGE(cfg.ok(), (cfg.ok() ? "" : cfg.error().to_string()));
  return cfg.value();
}

// A Master over the in-process transport, an in-memory store and the fake launcher, on a clock
// that only moves when the test says so.
struct ManualMaster {
  ManualMaster(int64_t trials, int64_t groups) {
    auto s = store::Store::open(":memory:");
    REQUIRE(s.ok());
    db = std::move(s).value();
    server = hub.server();
    scheduler::MasterOptions options;
    options.config = manual_config(trials, groups);
    auto prepared = scheduler::prepare_campaign_in(options, *db, ":memory:", wall.unix_s);
    REQUIRE(prepared.ok());
    campaign_id = prepared->campaign_id;
    scheduler::MasterParts parts;
    parts.make_stage = workflow::make_stage;
    parts.transport = server.get();
    parts.store = db.get();
    parts.launcher = &launcher;
    parts.wall = wall;
    parts.log = [this](const std::string& line) { lines.push_back(line); };
    master = std::make_unique<scheduler::Master>(std::move(prepared).value(), std::move(parts));
    REQUIRE(master->start(now).ok());
  }
  // `turns` turns of `dt` each: the master steps, then every worker answers. True once finished.
  bool run(int turns, std::chrono::milliseconds dt) {
    for (int i = 0; i < turns; ++i) {
      now += dt;
      auto finished = master->step(now);
      REQUIRE_MESSAGE(finished.ok(), (finished.ok() ? "" : finished.error().to_string()));
      if (*finished) return true;
      for (auto& w : workers) w->run();
    }
    return false;
  }
  ScriptedWorker& add_worker(int64_t group) {
    workers.push_back(std::make_unique<ScriptedWorker>(hub, group, launcher.credentials.at(group), 500 + next_incarnation++));
    return *workers.back();
  }
  std::vector<store::TrialRow> trials() {
    auto t = db->trials(campaign_id);
    REQUIRE(t.ok());
    return t.value();
  }
  bool has_event(const std::string& kind) {
    auto events = db->events(campaign_id, 0);
    REQUIRE(events.ok());
    for (const auto& e : *events) {
      if (e.kind == kind) return true;
    }
    return false;
  }

  scheduler::WallClock wall{Clock::time_point{} + std::chrono::hours(1), 1'000'000.0};
  Clock::time_point now = wall.at;
  protocol::InProcHub hub;
  std::unique_ptr<protocol::ServerTransport> server;
  std::unique_ptr<store::Store> db;
  FakeLauncher launcher;
  std::unique_ptr<scheduler::Master> master;
  std::vector<std::unique_ptr<ScriptedWorker>> workers;
  std::vector<std::string> lines;
  int64_t campaign_id = 0;
  uint64_t next_incarnation = 0;
};

}  // namespace

TEST_CASE("an assign counts as the master's heartbeat: a busy group gets no heartbeat on top (2048 groups: half the sends)") {
  ManualMaster m(/*trials=*/1000, /*groups=*/1);
  ScriptedWorker& w = m.add_worker(0);
  // Trials of 3 turns of 100 ms: an assign every 400 ms or so, for 5 s, with a heartbeat interval of 1 s.
  m.run(50, 100ms);
  CHECK(w.assigned.size() >= 10);
  CHECK(w.heartbeats == 0);
  // Silent for 2.5 s (below the 5 s timeout): no result, so no assign, and the heartbeats come again.
  w.silent = true;
  m.run(25, 100ms);
  w.silent = false;
  m.run(1, 100ms);
  CHECK(w.heartbeats >= 1);
}

TEST_CASE("a whole campaign on a manual clock: a silent group is lost, killed, restarted and its trial retried") {
  const auto real_start = std::chrono::steady_clock::now();
  ManualMaster m(/*trials=*/4, /*groups=*/2);
  CHECK(m.launcher.starts[0] == 1);
  CHECK(m.launcher.starts[1] == 1);
  CHECK(m.master->group_state(0) == launch::GroupState::kStarting);
  ScriptedWorker& a = m.add_worker(0);
  ScriptedWorker& b = m.add_worker(1);
  for (int i = 0; i < 10 && b.assigned.empty(); ++i) m.run(1, 10ms);
  REQUIRE(b.assigned.size() == 1);
  const int64_t lost_trial = b.assigned[0].trial_id;
  b.silent = true;  // group 1 hangs: no heartbeat, no result
  m.run(6, 10ms);  // the group states follow at each tick (every 50 ms here)
  CHECK(m.master->group_state(0) == launch::GroupState::kRunning);
  CHECK(m.master->group_state(1) == launch::GroupState::kRunning);
  // 4.9 simulated seconds: not yet past the 5 s heartbeat timeout.
  m.run(49, 100ms);
  CHECK(m.launcher.kills[1] == 0);
  // Past it: group 1 is declared lost, killed, its exit seen, restarted with a new credential.
  m.run(10, 100ms);
  CHECK(m.launcher.kills[1] == 1);
  CHECK(m.launcher.starts[1] == 2);
  CHECK(m.has_event("group_lost"));
  CHECK(m.has_event("group_restarted"));
  // Group 0 runs the rest, the lost trial's second attempt included; the campaign ends.
  const bool finished = m.run(200, 100ms);
  REQUIRE(finished);
  auto out = m.master->stop(m.now);
  REQUIRE(out.ok());
  CHECK(out->progress.done == 4);
  CHECK(out->counters.lost_attempts == 1);
  CHECK(out->elapsed_s >= 5.0);  // simulated seconds
  for (const auto& t : m.trials()) {
    CHECK(t.state == TrialState::kDone);
    CHECK(t.attempt == (t.id == lost_trial ? 2 : 1));
    // Timestamps come from the manual clock's anchor, not the real clock.
    CHECK(t.created_at >= 1'000'000.0);
    CHECK(t.finished_at < 1'000'100.0);
  }
  auto attempts = m.db->attempts(lost_trial);
  REQUIRE(attempts.ok());
  REQUIRE(attempts->size() == 2);
  CHECK((*attempts)[0]["state"] == "lost");
  CHECK((*attempts)[1]["state"] == "done");
  CHECK(m.launcher.stopped == 1);
  auto campaign = m.db->load_campaign();
  REQUIRE(campaign.ok());
  CHECK((*campaign)->state == "completed");
  CHECK((*campaign)->finished_at > 1'000'005.0);
  CHECK((*campaign)->finished_at < 1'000'100.0);
  (void)a;
  CHECK(std::chrono::steady_clock::now() - real_start < 1s);
}

TEST_CASE("a group that never connects is killed at its own start-up deadline; none connecting fails the campaign") {
  ManualMaster m(1000, 2);  // more trials than group 0 finishes in the time
  m.add_worker(0);
  // Group 1 never says hello. Its deadline (30 s from its start) passes while group 0 works.
  m.run(5, 10ms);
  CHECK(m.master->group_state(1) == launch::GroupState::kStarting);
  m.run(300, 100ms);
  CHECK(m.launcher.kills[1] == 1);
  CHECK(m.has_event("group_startup_timeout"));

  // No group connects at all: the campaign fails at the deadline with the old message.
  ManualMaster none(2, 2);
  Result<bool> r = false;
  for (int i = 0; i < 400 && r.ok(); ++i) {
    none.now += 100ms;
    r = none.master->step(none.now);
  }
  REQUIRE(!r.ok());
  CHECK(r.error().code() == Errc::kTimeout);
  CHECK(r.error().message().find("no trainer group connected within resources.startup_timeout") != std::string::npos);
  auto campaign = none.db->load_campaign();
  REQUIRE(campaign.ok());
  CHECK((*campaign)->state == "failed");
}

namespace {

// The search source, except that it pauses trial seq 0 at its first report of attempt 1, to resume
// with x = 0.9 from a named checkpoint (what PBT's exploit does).
class PausingSource final : public scheduler::TrialSource {
 public:
  PausingSource(search::Searcher& s, search::EarlyStopper& e) : inner_(s, e) {}
  std::string kind() const override { return "search"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override { return inner_.ask(n); }
  bool exhausted() const override { return inner_.exhausted(); }
  scheduler::Verdict on_report(const scheduler::TrialView& t, int64_t step, double value) override {
    if (t.seq == 0 && t.attempt == 1) {
      seen_dir = t.trial_dir;
      return scheduler::Verdict::pause({{"x", 0.9}}, "/ck/trial-" + std::to_string(t.trial_id) + "/step-1");
    }
    return inner_.on_report(t, step, value);
  }
  void on_attempt_end(int64_t seq) override {
    ++attempt_ends;
    inner_.on_attempt_end(seq);
  }
  void tell(const search::Observation& o) override {
    told.push_back(o);
    inner_.tell(o);
  }
  void restore(const std::vector<search::Record>& h) override { inner_.restore(h); }

  std::vector<search::Observation> told;
  int attempt_ends = 0;
  std::string seen_dir;

 private:
  scheduler::SearchSource inner_;
};

// Handles every frame waiting, without a tick.
void handle_waiting(Harness& h) {
  for (int i = 0; i < 50; ++i) {
    auto env = h.server->recv(i == 0 ? 50ms : 5ms);
    REQUIRE(env.ok());
    if (!*env) return;
    REQUIRE(h.sched->handle((*env)->peer, (*env)->bytes, Clock::now()).ok());
  }
}

}  // namespace

TEST_CASE("pause: the source pauses a trial; it is stored paused, then re-assigned with new parameters and a checkpoint") {
  Harness h(1);
  h.opt.trials_dir = "/runs/x.trials";
  PausingSource source(*h.searcher, *h.stopper);
  h.sched = std::make_unique<scheduler::Scheduler>(h.opt, *h.server, *h.db, source);
  REQUIRE(h.sched->restore(Clock::now()).ok());
  FakeWorker fake(h.hub);
  auto a1 = first_assign(fake, h);
  REQUIRE(a1);
  CHECK(a1->resume_from.empty());
  const int64_t id = a1->trial_id;
  const double x1 = a1->params.at("x").get<double>();
  fake.send(protocol::Report{id, 1, 0, {}});
  fake.send(protocol::Report{id, 1, 1, {{"score", -0.5}}});
  auto stop = fake.expect<protocol::Stop>(1s, h);
  REQUIRE(stop);
  CHECK(stop->reason == protocol::StopReason::kPause);
  CHECK(stop->attempt == 1);
  CHECK(source.seen_dir == "/runs/x.trials/" + std::to_string(id));
  // The worker stops at the end of the step and says so.
  fake.send(protocol::Done{id, 1, 1, true, {{"score", -0.5}}, {{"checkpoint", "/ck/trial-1/step-1", 10}}});
  handle_waiting(h);
  auto t = h.db->trial(id);
  REQUIRE(t.ok());
  CHECK((*t)->state == TrialState::kPaused);
  CHECK((*t)->attempt == 2);
  CHECK((*t)->params == nlohmann::json{{"x", 0.9}});
  CHECK((*t)->resume_from == "/ck/trial-" + std::to_string(id) + "/step-1");
  CHECK(h.sched->progress().paused == 1);
  CHECK(source.told.empty());  // not a result
  CHECK(source.attempt_ends == 1);
  // At the next tick it goes to a free group (the same one here) as attempt 2, and finishes.
  auto a2 = fake.expect<protocol::Assign>(1s, h);
  REQUIRE(a2);
  CHECK(a2->trial_id == id);
  CHECK(a2->attempt == 2);
  CHECK(a2->params == nlohmann::json{{"x", 0.9}});
  CHECK(a2->resume_from == "/ck/trial-" + std::to_string(id) + "/step-1");
  CHECK(a2->seed == a1->seed);
  fake.send(protocol::Report{id, 2, 0, {}});
  fake.send(protocol::Done{id, 2, 3, false, {{"score", -0.36}}, {}});
  h.pump(1s);
  REQUIRE(h.sched->finished());
  t = h.db->trial(id);
  CHECK((*t)->state == TrialState::kDone);
  CHECK((*t)->attempt == 2);
  REQUIRE(source.told.size() == 1);
  CHECK(source.told[0].params == nlohmann::json{{"x", 0.9}});
  CHECK(x1 != 0.9);
  auto attempts = h.db->attempts(id);
  REQUIRE(attempts->size() == 2);
  CHECK((*attempts)[0]["state"] == "paused");
  CHECK((*attempts)[0]["charged"] == false);
  CHECK((*attempts)[1]["state"] == "done");
  auto events = h.db->events(h.campaign_id, 0);
  bool paused_event = false;
  for (const auto& e : *events) {
    if (e.kind != "trial_paused") continue;
    paused_event = true;
    CHECK(e.detail["old_params"]["x"] == x1);
    CHECK(e.detail["params"]["x"] == 0.9);
  }
  CHECK(paused_event);
  CHECK(h.db->artifacts(id)->size() == 1);
}

TEST_CASE("pause with a real worker: the trainer of the resumed attempt gets the new parameters and the checkpoint") {
  {
    std::lock_guard lock(QuadraticTrainer::seen_mu());
    QuadraticTrainer::seen().clear();
  }
  Harness h(1);
  PausingSource source(*h.searcher, *h.stopper);
  h.sched = std::make_unique<scheduler::Scheduler>(h.opt, *h.server, *h.db, source);
  REQUIRE(h.sched->restore(Clock::now()).ok());
  h.add_worker(0, 20ms);
  h.pump(5s);
  REQUIRE(h.sched->finished());
  std::lock_guard lock(QuadraticTrainer::seen_mu());
  const auto& seen = QuadraticTrainer::seen();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].attempt == 1);
  CHECK(seen[0].resume_from.empty());
  CHECK(seen[1].trial_id == seen[0].trial_id);
  CHECK(seen[1].attempt == 2);
  CHECK(seen[1].params == nlohmann::json{{"x", 0.9}});
  CHECK(seen[1].resume_from == "/ck/trial-" + std::to_string(seen[0].trial_id) + "/step-1");
  auto t = h.db->trial(seen[0].trial_id);
  REQUIRE(t.ok());
  CHECK((*t)->state == TrialState::kDone);
}

TEST_CASE("two stages on one pool of groups: each source is asked, trials keep their stage, resume restores each") {
  Harness h(2);
  auto s1 = h.db->create_stage(h.campaign_id, "search", "a", nlohmann::json::object(), 1);
  auto s2 = h.db->create_stage(h.campaign_id, "search", "b", nlohmann::json::object(), 1);
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  auto searcher2 = random_searcher(12, 3);
  scheduler::SearchSource a(*h.searcher, *h.stopper), b(*searcher2, *h.stopper);
  auto two = [&] {
    return std::vector<scheduler::StageSource>{{*s1, &a, 2}, {*s2, &b, 3}};
  };
  h.sched = std::make_unique<scheduler::Scheduler>(h.opt, *h.server, *h.db, two());
  REQUIRE(h.sched->restore(Clock::now()).ok());
  h.add_worker(0);
  h.pump(10s);
  REQUIRE(h.sched->finished());
  auto trials = h.trials();
  REQUIRE(trials.size() == 5);
  int in_a = 0, in_b = 0;
  for (const auto& t : trials) {
    CHECK(t.state == TrialState::kDone);
    in_a += t.stage_id == *s1;
    in_b += t.stage_id == *s2;
  }
  CHECK(in_a == 2);
  CHECK(in_b == 3);
  CHECK(h.sched->progress().max_trials == 5);
  // A resumed scheduler gives each stage its own trials back: nothing left to do.
  scheduler::Scheduler again(h.opt, *h.server, *h.db, two());
  REQUIRE(again.restore(Clock::now()).ok());
  CHECK(again.finished());
  CHECK(again.progress().done == 5);
  // A master that does not run stage b refuses its trials rather than adopting them.
  scheduler::Scheduler one(h.opt, *h.server, *h.db, std::vector<scheduler::StageSource>{{*s1, &a, 2}});
  auto r = one.restore(Clock::now());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("which this master does not run") != std::string::npos);
}

TEST_CASE("stage kinds come from a registry: search is known, anything else names the known kinds") {
  CHECK(workflow::stage_kind_names() == std::vector<std::string>{"search", "ensemble", "pbt", "transfer"});
  const auto cfg = manual_config(2, 1);
  auto plan = scheduler::stage_plan(cfg);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].kind == "search");
  auto ok = workflow::make_stage(plan[0], cfg, std::nullopt);
  REQUIRE(ok.ok());
  CHECK((*ok)->max_trials() == 2);
  CHECK((*ok)->source()->kind() == "search");
  auto bad = workflow::make_stage({"x", "bagging", {}, 0}, cfg, std::nullopt);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kConfig);
  CHECK(bad.error().message() == "unknown stage kind 'bagging' (known: search, ensemble, pbt, transfer)");
}

TEST_CASE("the master's stages: rows created once, found again by name on resume") {
  ManualMaster m(1, 1);
  auto ids = m.master->stage_ids();
  REQUIRE(ids.size() == 1);
  auto rows = m.db->stages(m.campaign_id);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 1);
  CHECK((*rows)[0].id == ids[0]);
  CHECK((*rows)[0].name == "search");
  CHECK((*rows)[0].state == "running");
}

namespace {

// A search whose algorithm fails at its third ask.
class FailingSource final : public scheduler::TrialSource {
 public:
  FailingSource(std::unique_ptr<search::Searcher> s, std::unique_ptr<search::EarlyStopper> e)
      : searcher_(std::move(s)), stopper_(std::move(e)), inner_(*searcher_, *stopper_) {}
  std::string kind() const override { return "search"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override {
    if (++asks_ >= 3) return err(Errc::kInvalidArgument, "the model's kernel matrix is not positive definite");
    return inner_.ask(std::min<std::size_t>(n, 1));
  }
  bool exhausted() const override { return false; }
  scheduler::Verdict on_report(const scheduler::TrialView& t, int64_t step, double v) override {
    return inner_.on_report(t, step, v);
  }
  void on_attempt_end(int64_t seq) override { inner_.on_attempt_end(seq); }
  void tell(const search::Observation& o) override { inner_.tell(o); }
  void restore(const std::vector<search::Record>& h) override { inner_.restore(h); }

 private:
  std::unique_ptr<search::Searcher> searcher_;
  std::unique_ptr<search::EarlyStopper> stopper_;
  scheduler::SearchSource inner_;
  int asks_ = 0;
};

class FailingStage final : public scheduler::StageRuntime {
 public:
  explicit FailingStage(std::unique_ptr<FailingSource> s) : source_(std::move(s)) {}
  scheduler::TrialSource* source() override { return source_.get(); }
  int64_t max_trials() const override { return 10; }

 private:
  std::unique_ptr<FailingSource> source_;
};

}  // namespace

TEST_CASE("an algorithm that fails: logged, recorded as an event, the campaign fails (exit 1), nothing received lost") {
  const auto cfg = manual_config(10, 1);
  auto s = store::Store::open(":memory:");
  REQUIRE(s.ok());
  auto db = std::move(s).value();
  protocol::InProcHub hub;
  auto server = hub.server();
  scheduler::MasterOptions options;
  options.config = cfg;
  const scheduler::WallClock wall{Clock::time_point{} + std::chrono::hours(1), 2'000'000.0};
  auto prepared = scheduler::prepare_campaign_in(options, *db, ":memory:", wall.unix_s);
  REQUIRE(prepared.ok());
  const int64_t campaign_id = prepared->campaign_id;
  FakeLauncher launcher;
  std::vector<std::string> lines;
  scheduler::MasterParts parts;
  parts.transport = server.get();
  parts.store = db.get();
  parts.launcher = &launcher;
  parts.wall = wall;
  parts.log = [&](const std::string& line) { lines.push_back(line); };
  parts.make_stage = [](const scheduler::StagePlan&, const config::CampaignConfig& c,
                        const std::optional<scheduler::WarmStart>&) -> Result<std::unique_ptr<scheduler::StageRuntime>> {
    HPCTUNE_ASSIGN(auto searcher, search::make_searcher(c.search_spec()));
    HPCTUNE_ASSIGN(auto stopper, search::make_stopper(c.stopper_spec()));
    return std::unique_ptr<scheduler::StageRuntime>(
        new FailingStage(std::make_unique<FailingSource>(std::move(searcher), std::move(stopper))));
  };
  scheduler::Master master(std::move(prepared).value(), std::move(parts));
  Clock::time_point now = wall.at;
  REQUIRE(master.start(now).ok());
  ScriptedWorker w(hub, 0, launcher.credentials.at(0), 77);
  Result<bool> r = false;
  for (int i = 0; i < 100 && r.ok(); ++i) {
    now += 20ms;
    r = master.step(now);
    if (r.ok()) w.run();
  }
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kFailed);
  CHECK(r.error().message().find("the search stage failed: the model's kernel matrix is not positive definite") == 0);
  // The two trials the algorithm did propose ran, and their results (received in the failing turn
  // too) are recorded; the failure is in the log and in the store.
  auto trials = db->trials(campaign_id);
  REQUIRE(trials.ok());
  REQUIRE(trials->size() == 2);
  for (const auto& t : *trials) CHECK(t.state == TrialState::kDone);
  bool logged = false;
  for (const auto& l : lines) logged = logged || l.find("the search stage failed") != std::string::npos;
  CHECK(logged);
  auto events = db->events(campaign_id, 0);
  REQUIRE(events.ok());
  int source_failed = 0, campaign_failed = 0;
  for (const auto& e : *events) {
    source_failed += e.kind == "source_failed";
    campaign_failed += e.kind == "campaign_failed";
  }
  CHECK(source_failed == 1);
  CHECK(campaign_failed == 1);
  auto campaign = db->load_campaign();
  REQUIRE(campaign.ok());
  CHECK((*campaign)->state == "failed");
  CHECK(launcher.stopped == 1);
}

TEST_CASE("reports handled in one batch (one `now`) are recorded in the order they were judged in") {
  // The master handles up to a batch of messages with the same `now`. A resumed master replays the
  // recorded reports to its stopper by recorded time: ties would fall back to trial id order, which
  // is not the order the stopper saw them in (ASHA's rungs depend on it).
  Harness h(2);
  FakeWorker w0(h.hub), w1(h.hub);
  auto a0 = first_assign(w0, h);
  REQUIRE(a0);
  w1.send(hello(1, h));
  REQUIRE(w1.expect<protocol::Welcome>(1s, h));
  w1.send(protocol::Ready{});
  auto a1 = w1.expect<protocol::Assign>(1s, h);
  REQUIRE(a1);
  REQUIRE(a0->trial_id < a1->trial_id);
  // The later trial reports first; both are handled at one instant.
  w1.send(protocol::Report{a1->trial_id, 1, 1, {{"score", -0.1}}});
  std::this_thread::sleep_for(20ms);
  w0.send(protocol::Report{a0->trial_id, 1, 1, {{"score", -0.2}}});
  const auto now = Clock::now();
  std::vector<int64_t> handled;
  for (int i = 0; i < 50 && handled.size() < 2; ++i) {
    auto env = h.server->recv(20ms);
    REQUIRE(env.ok());
    if (!*env) continue;
    auto msg = protocol::decode((*env)->bytes);
    REQUIRE(msg.ok());
    if (auto* r = std::get_if<protocol::Report>(&*msg)) handled.push_back(r->trial_id);
    REQUIRE(h.sched->handle((*env)->peer, (*env)->bytes, now).ok());
  }
  REQUIRE(handled == std::vector<int64_t>{a1->trial_id, a0->trial_id});
  auto rows = h.db->campaign_metrics(h.campaign_id, "score");
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 2);
  CHECK((*rows)[0].trial_id == a1->trial_id);
  CHECK((*rows)[1].trial_id == a0->trial_id);
  CHECK((*rows)[0].t < (*rows)[1].t);
  CHECK((*rows)[1].t - (*rows)[0].t < 1e-3);  // no visible shift of the clock
}

namespace {

// A source that records each call it gets and answers each with a value of its own.
class RecordingSource final : public scheduler::TrialSource {
 public:
  explicit RecordingSource(std::vector<std::string>& calls) : calls_(calls) {}
  std::string kind() const override { return note("kind"), "recorded"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override {
    calls_.push_back("ask");
    return std::vector<search::Suggestion>(n);
  }
  bool exhausted() const override { return note("exhausted"), true; }
  scheduler::Verdict on_report(const scheduler::TrialView&, int64_t, double) override {
    calls_.push_back("on_report");
    return scheduler::Verdict::stop();
  }
  void on_attempt_end(int64_t) override { calls_.push_back("on_attempt_end"); }
  bool holds_paused() const override { return note("holds_paused"), true; }
  std::optional<int64_t> resume_next(const std::vector<int64_t>& held) override {
    calls_.push_back("resume_next");
    return held.back();
  }
  Status on_paused(const scheduler::TrialView&, int64_t) override {
    calls_.push_back("on_paused");
    return err(Errc::kInvalidArgument, "recorded");
  }
  void on_result(int64_t, const nlohmann::json&) override { calls_.push_back("on_result"); }
  void tell(const search::Observation&) override { calls_.push_back("tell"); }
  void restore(const std::vector<search::Record>&) override { calls_.push_back("restore"); }
  bool replays_reports() const override { return note("replays_reports"), true; }
  void prepare_dispatch(int64_t, nlohmann::json& params) const override {
    note("prepare_dispatch");
    params["mapped"] = true;
  }
  std::optional<int64_t> step_target(const scheduler::TrialView&) const override { return note("step_target"), 7; }
  std::string report_judge() const override { return note("report_judge"), "recorded judge"; }
  std::optional<int64_t> judged_until() const override { return note("judged_until"), 9; }
  bool replay_report(int64_t, int64_t, double) override { return note("replay_report"), true; }
  nlohmann::json state() const override { return note("state"), nlohmann::json{{"recorded", true}}; }

 private:
  void note(const char* call) const { calls_.push_back(call); }
  std::vector<std::string>& calls_;
};

}  // namespace

TEST_CASE("a forwarding source hands every call of a trial source to the one it wraps, with its answer") {
  std::vector<std::string> calls;
  scheduler::ForwardingSource s(std::make_unique<RecordingSource>(calls));
  nlohmann::json params = {{"lr", 0.1}};
  const scheduler::TrialView view{1, 0, 1, &params, "/runs/1"};
  CHECK(s.kind() == "recorded");
  auto asked = s.ask(3);
  REQUIRE(asked.ok());
  CHECK(asked->size() == 3);
  CHECK(s.exhausted());
  CHECK(s.on_report(view, 1, 0.5).kind == scheduler::Verdict::Kind::kStop);
  s.on_attempt_end(0);
  CHECK(s.holds_paused());
  CHECK(s.resume_next({4, 5}) == std::optional<int64_t>(5));
  CHECK(!s.on_paused(view, 1).ok());
  s.on_result(0, nlohmann::json::object());
  s.tell(search::Observation{});
  s.restore({});
  CHECK(s.replays_reports());
  s.prepare_dispatch(0, params);
  CHECK(params.value("mapped", false));
  CHECK(s.step_target(view) == std::optional<int64_t>(7));
  CHECK(s.report_judge() == "recorded judge");
  CHECK(s.judged_until() == std::optional<int64_t>(9));
  CHECK(s.replay_report(0, 1, 0.5));
  CHECK(s.state().value("recorded", false));
  CHECK(calls == std::vector<std::string>{"kind", "ask", "exhausted", "on_report", "on_attempt_end", "holds_paused",
                                          "resume_next", "on_paused", "on_result", "tell", "restore",
                                          "replays_reports", "prepare_dispatch", "step_target", "report_judge",
                                          "judged_until", "replay_report", "state"});
}
