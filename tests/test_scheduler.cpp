// The scheduler's trial lifecycle over the in-process transport: real worker loops on threads,
// scripted fake workers for the failure cases, an in-memory SQLite store. No sockets; one case
// forks, to see a worker process end.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "scheduler/scheduler.h"
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
  explicit QuadraticTrainer(std::chrono::milliseconds delay = 0ms) : delay_(delay) {}
  std::string kind() const override { return "quadratic"; }
  Result<trainers::TrialResult> run(const trainers::TrialContext& ctx) override {
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

struct Harness {
  explicit Harness(int64_t max_trials, int64_t max_attempts = 3, std::chrono::milliseconds hb_timeout = 400ms) {
    auto s = store::Store::open(":memory:");
    REQUIRE(s.ok());
    db = std::move(s).value();
    store::CampaignRow row;
    row.name = "test";
    row.created_at = 1;
    auto id = db->create_campaign(row);
    REQUIRE(id.ok());
    campaign_id = id.value();

    search::SearchSpec spec;
    spec.algorithm = "random";
    spec.space = one_dim_space();
    spec.objectives = {{"score", true}};
    spec.seed = 11;
    spec.max_trials = max_trials;
    auto searcher_r = search::make_searcher(spec);
    REQUIRE(searcher_r.ok());
    searcher = std::move(searcher_r).value();
    auto stopper_r = search::make_stopper(search::StopperSpec{});
    REQUIRE(stopper_r.ok());
    stopper = std::move(stopper_r).value();

    server = hub.server();
    scheduler::SchedulerOptions opt;
    opt.campaign_id = campaign_id;
    opt.seed = 11;
    opt.objectives = {{"score", true}};
    opt.max_trials = max_trials;
    opt.max_attempts = max_attempts;
    opt.trainer = {{"kind", "quadratic"}};
    opt.heartbeat_interval = 50ms;
    opt.heartbeat_timeout = hb_timeout;
    sched = std::make_unique<scheduler::Scheduler>(opt, *server, *db, *searcher, *stopper);
    REQUIRE(sched->restore(Clock::now()).ok());
  }

  ~Harness() {
    terminate = 1;
    for (auto& t : threads) t.join();
  }

  void add_worker(int64_t group, std::chrono::milliseconds delay = 0ms) {
    auto client = std::shared_ptr<protocol::ClientTransport>(hub.connect());
    const std::string secret = credential(group);
    threads.emplace_back([this, client, group, delay, secret] {
      worker::WorkerOptions o;
      o.group = group;
      o.secret = secret;
      o.terminate = &terminate;
      o.reconnect_initial = 20ms;
      o.make = [delay](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
        return std::unique_ptr<trainers::Trainer>(new QuadraticTrainer(delay));
      };
      (void)worker::run_worker(*client, o);
    });
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
      auto client = std::shared_ptr<protocol::ClientTransport>(h.hub.connect());
      const std::string secret = h.credential(0);
      std::thread([&h, client, secret] {
        worker::WorkerOptions o;
        o.group = 0;
        o.secret = secret;
        o.terminate = &h.terminate;
        o.stop_grace = 100ms;
        o.log = [](const std::string&) {};
        o.make = [](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
          return std::unique_ptr<trainers::Trainer>(new StuckTrainer());
        };
        (void)worker::run_worker(*client, o);
      }).detach();
      h.pump(3s, [&h] { return !h.trials().empty() && h.trials()[0].state == TrialState::kRunning; });
      code = h.trials()[0].state == TrialState::kRunning ? 97 : 96;
      std::this_thread::sleep_for(15s);  // the master is gone: nobody answers the worker any more
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() - started < 5s) std::this_thread::sleep_for(5ms);
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("the worker process did not end within 5 s");
  }
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
      auto client = std::shared_ptr<protocol::ClientTransport>(h.hub.connect());
      const std::string secret = h.credential(0);
      std::thread([&h, client, secret] {
        worker::WorkerOptions o;
        o.group = 0;
        o.secret = secret;
        o.terminate = &h.terminate;
        o.stop_grace = 500ms;  // time enough for the master to record the result first
        o.log = [](const std::string&) {};
        o.make = [](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
          return std::unique_ptr<trainers::Trainer>(new StuckInCleanupTrainer());
        };
        (void)worker::run_worker(*client, o);
      }).detach();
      h.pump(3s, [&h] { return !h.trials().empty() && h.trials()[0].state == TrialState::kDone; });
      const char done = !h.trials().empty() && h.trials()[0].state == TrialState::kDone ? 'd' : 'x';
      (void)!write(report[1], &done, 1);
      std::this_thread::sleep_for(15s);  // the worker thread ends the process before this
    } catch (...) {
    }
    _exit(98);
  }
  close(report[1]);
  int status = 0;
  pid_t ended = 0;
  while ((ended = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() - started < 5s) std::this_thread::sleep_for(5ms);
  if (ended == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  char done = 0;
  const bool said = read(report[0], &done, 1) == 1;
  close(report[0]);
  REQUIRE_MESSAGE(ended != 0, "the worker process did not end within 5 s");
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
    search::SearchSpec spec;
    spec.algorithm = "random";
    spec.space = one_dim_space();
    spec.objectives = {{"score", true}};
    spec.seed = 11;
    spec.max_trials = 3;
    auto searcher = search::make_searcher(spec);
    REQUIRE(searcher.ok());
    auto stopper = search::make_stopper(search::StopperSpec{});
    REQUIRE(stopper.ok());
    protocol::InProcHub hub2;
    auto server2 = hub2.server();
    scheduler::SchedulerOptions opt;
    opt.campaign_id = h.campaign_id;
    opt.objectives = {{"score", true}};
    opt.max_trials = 3;
    scheduler::Scheduler again(opt, *server2, *h.db, **searcher, **stopper);
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
