// The ranks of a multi-rank trainer group over MPI: leader, followers, watchdog (group_worker.h).
#include "worker/group_worker.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <mutex>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/trainer_group_mpi.h"
#include "trainers/trainer.h"

namespace hpctune::worker {

using Clock = std::chrono::steady_clock;
using trainers::MakeTrainer;

namespace {

void log_line(const WorkerOptions& worker, const std::string& line) {
  if (worker.log) {
    worker.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

// Whether mpirun runs this group with --enable-recovery (launch::kGroupRecoveryEnv, "1"): a rank
// that dies, or exits, then does not end the others.
bool rank_recovery() {
  const char* v = std::getenv("HPCTUNE_GROUP_RECOVERY");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Ends this rank at once: the group is unusable. mpirun takes the other ranks down with it; under
// --enable-recovery it would not, so this rank asks mpirun (its parent) to end the job first.
[[noreturn]] void end_group(const WorkerOptions& worker, const std::string& why) {
  log_line(worker, "ending the trainer group: " + why);
  std::fflush(stdout);
  std::fflush(stderr);
  if (rank_recovery() && getppid() != 1) ::kill(getppid(), SIGTERM);
  _exit(kGroupBrokenExitCode);
}

// Watches the group call now running on this rank (and the worker's own control broadcasts); one
// running past `limit` ends the rank. Reads atomics only: it makes no MPI call.
class Watchdog {
 public:
  Watchdog(const WorkerOptions& worker, std::chrono::milliseconds limit) : worker_(worker), limit_(limit) {
    thread_ = std::thread([this] { body(); });
  }
  ~Watchdog() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  void watch(const collectives::TrainerGroup* group) {
    std::lock_guard lock(mu_);
    group_ = group;
  }
  // Marks a call of the worker itself (context broadcast, group creation) as running, or not.
  void own_call(bool running) { own_started_ns_.store(running ? now_ns() : 0); }

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }
  void body() {
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::optional<Clock::time_point> started;
      {
        std::lock_guard lock(mu_);
        if (group_ != nullptr) started = group_->collective_started();
      }
      const int64_t own = own_started_ns_.load();
      if (own != 0) {
        const Clock::time_point t{std::chrono::nanoseconds(own)};
        if (!started || t < *started) started = t;
      }
      if (started && Clock::now() - *started > limit_) {
        end_group(worker_, "a group call has been running for more than " + std::to_string(limit_.count()) +
                               " ms (a rank is hung or gone)");
      }
    }
  }

  const WorkerOptions& worker_;
  std::chrono::milliseconds limit_;
  std::mutex mu_;
  const collectives::TrainerGroup* group_ = nullptr;
  std::atomic<int64_t> own_started_ns_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Polls one request to completion. Gives up at `deadline` (kTimeout) or, when `terminate` is given
// and set, `terminate_grace` after it was seen. Sleeps between polls: this is the idle wait.
Status poll_request(MPI_Request& request, Clock::time_point deadline, const std::atomic<int>* terminate,
                    std::chrono::milliseconds terminate_grace, const char* what) {
  std::optional<Clock::time_point> terminate_seen;
  for (;;) {
    int done = 0;
    HPCTUNE_TRY(collectives::mpi_status(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what));
    if (done) return Status::Ok();
    const auto now = Clock::now();
    if (terminate && terminate->load() > 0 && !terminate_seen) terminate_seen = now;
    if (now >= deadline || (terminate_seen && now - *terminate_seen > terminate_grace)) {
      return err(terminate_seen ? Errc::kCancelled : Errc::kTimeout, std::string(what) + ": gave up waiting");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The leader's message to the followers: a trial's context, or shutdown.
Status broadcast_message(MPI_Comm comm, std::string& message, Clock::time_point deadline,
                         const std::atomic<int>* terminate, std::chrono::milliseconds terminate_grace) {
  uint64_t length = message.size();
  MPI_Request request = MPI_REQUEST_NULL;
  HPCTUNE_TRY(collectives::mpi_status(MPI_Ibcast(&length, 1, MPI_UINT64_T, 0, comm, &request), "MPI_Ibcast"));
  HPCTUNE_TRY(poll_request(request, deadline, terminate, terminate_grace, "the leader's message"));
  if (length > (1u << 30)) return err(Errc::kInvalidArgument, "the leader's message is too long");
  message.resize(length);
  HPCTUNE_TRY(collectives::mpi_status(MPI_Ibcast(message.data(), static_cast<int>(length), MPI_CHAR, 0, comm, &request),
                         "MPI_Ibcast"));
  // The length came, so the rest follows at once.
  return poll_request(request, Clock::now() + std::chrono::minutes(1), nullptr, {}, "the leader's message");
}

std::string encode_context(const trainers::TrialContext& ctx) {
  nlohmann::json j{{"type", "trial"},         {"trial_id", ctx.trial_id}, {"attempt", ctx.attempt},
                   {"seed", ctx.seed},        {"params", ctx.params},     {"trainer", ctx.trainer},
                   {"trial_dir", ctx.trial_dir}, {"threads", ctx.threads},
                   {"resume_from", ctx.resume_from}};
  return j.dump();
}

Result<collectives::MpiGroupOptions> group_options(const trainers::TrialContext& ctx, const GroupWorkerOptions& options) {
  collectives::MpiGroupOptions g;
  g.data = options.ranks_data;
  g.model = options.ranks_model;
  g.timeout = options.collective_limit;
  const nlohmann::json settings = ctx.settings();
  const auto it = settings.find("allreduce");
  if (it != settings.end()) {
    if (!it->is_string()) return err(Errc::kInvalidArgument, "trainer setting allreduce: expected a string");
    HPCTUNE_ASSIGN(g.algorithm, collectives::parse_allreduce_algorithm(it->get<std::string>()));
  }
  return g;
}

// Builds the trial's group (collective over the world) under the watchdog.
Result<std::unique_ptr<collectives::MpiTrainerGroup>> make_group(const collectives::MpiGroupOptions& g, Watchdog& watchdog) {
  watchdog.own_call(true);
  auto group = collectives::MpiTrainerGroup::create(MPI_COMM_WORLD, g);
  watchdog.own_call(false);
  return group;
}

// Runs `trainer` on this rank with the group; the stop flag is the leader's.
Result<trainers::TrialResult> run_in_group(trainers::Trainer& trainer, const trainers::TrialContext& ctx, collectives::MpiTrainerGroup& group, Watchdog& watchdog,
                                 const WorkerOptions& worker) {
  trainers::TrialContext c = ctx;
  c.group = &group;
  c.ranks = group.size();
  auto leader_stop = ctx.stop_requested;
  if (group.leader()) c.leader_stop_requested = leader_stop;
  c.stop_requested = [&group, leader_stop] {
    auto flag = group.broadcast_flag(leader_stop());
    return !flag.ok() || *flag;  // a failed broadcast stops the trainer; the group is then broken
  };
  watchdog.watch(&group);
  auto result = trainer.run(c);
  watchdog.watch(nullptr);
  // The allreduce falls back to messages inside the node when its shared memory cannot be made
  // (a full /dev/shm, say): slower, so say why.
  const std::string shared_memory = group.shared_memory();
  if (group.leader() && shared_memory.rfind("off: ", 0) == 0) {
    log_line(worker, "trial " + std::to_string(ctx.trial_id) + ": the gradient allreduce runs without shared memory (" +
                         shared_memory.substr(5) + ")");
  }
  if (group.broken()) {
    end_group(worker, "a group call failed" + (result.ok() ? std::string() : ": " + result.error().to_string()));
  }
  return result;
}

// The leader's wrapper around each trainer.
class LeaderTrainer final : public trainers::Trainer {
 public:
  LeaderTrainer(std::unique_ptr<trainers::Trainer> inner, const GroupWorkerOptions& options, MPI_Comm control,
                Watchdog& watchdog, std::atomic<int>& leave, std::atomic<bool>& degraded)
      : inner_(std::move(inner)), options_(options), control_(control), watchdog_(watchdog), leave_(leave),
        degraded_(degraded) {}
  std::string kind() const override { return inner_->kind(); }

  Result<trainers::TrialResult> run(const trainers::TrialContext& ctx) override {
    std::string message = encode_context(ctx);
    watchdog_.own_call(true);
    Status sent = broadcast_message(control_, message, Clock::now() + options_.collective_limit, nullptr, {});
    watchdog_.own_call(false);
    if (!sent.ok()) end_group(options_.worker, "cannot hand the trial to the other ranks: " + sent.error().to_string());
    HPCTUNE_ASSIGN(collectives::MpiGroupOptions g, group_options(ctx, options_));  // every rank sees the same error
    auto group = make_group(g, watchdog_);
    if (!group.ok()) end_group(options_.worker, "cannot build the trial's group: " + group.error().to_string());
    auto result = run_in_group(*inner_, ctx, **group, watchdog_, options_.worker);
    if (result.ok() && result->group_degraded) {
      // A rank died and the trial finished on the others: its result goes to the master, then the
      // worker loop ends (the leave flag is its `terminate`) and run_leader ends the group.
      log_line(options_.worker, "trial " + std::to_string(ctx.trial_id) +
                                    ": a rank of the group is gone; the group ends once the result is sent");
      degraded_.store(true);
      leave_.store(2);
    }
    return result;
  }

 private:
  std::unique_ptr<trainers::Trainer> inner_;
  const GroupWorkerOptions& options_;
  MPI_Comm control_;
  Watchdog& watchdog_;
  std::atomic<int>& leave_;
  std::atomic<bool>& degraded_;
};

Status run_leader(const GroupWorkerOptions& options, MPI_Comm control, Watchdog& watchdog) {
  if (!options.connect) return err(Errc::kInvalidArgument, "no way to connect to the master");
  WorkerOptions worker = options.worker;
  const MakeTrainer make = options.worker.make;
  // The loop's `terminate`: the process's (SIGTERM), mirrored, or 2 once a trial left the group
  // without one of its ranks (LeaderTrainer): the loop then sends that result and ends.
  std::atomic<int> leave{0};
  std::atomic<bool> mirroring{true};
  std::thread mirror([&] {
    while (mirroring.load()) {
      if (options.worker.terminate && options.worker.terminate->load() > 0 && leave.load() == 0) leave.store(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::atomic<bool> degraded{false};
  worker.terminate = &leave;
  worker.make = [&options, make, control, &watchdog, &leave, &degraded](const std::string& kind) -> Result<std::unique_ptr<trainers::Trainer>> {
    HPCTUNE_ASSIGN(auto inner, make(kind));
    return std::unique_ptr<trainers::Trainer>(
        std::make_unique<LeaderTrainer>(std::move(inner), options, control, watchdog, leave, degraded));
  };
  Status status = [&]() -> Status {
    HPCTUNE_ASSIGN(auto transport, options.connect());
    Status s = run_worker(*transport, worker);
    // The loop handed the result to the socket, which drops what it has not sent when it closes
    // (linger 0): give it a moment on the way out of a group that lost a rank.
    if (degraded.load()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return s;
  }();
  mirroring.store(false);
  mirror.join();
  if (degraded.load()) {
    // No broadcast reaches every rank now: mpirun (under --enable-recovery) ends the job.
    end_group(options.worker, "a rank of the group died during the last trial (its result was sent); the "
                              "launcher starts the group again");
  }
  // Whatever ended the loop, the followers end too.
  std::string shutdown = nlohmann::json{{"type", "shutdown"}}.dump();
  watchdog.own_call(true);
  Status sent = broadcast_message(control, shutdown, Clock::now() + std::chrono::seconds(30), nullptr, {});
  watchdog.own_call(false);
  if (!sent.ok()) log_line(options.worker, "the other ranks did not take the shutdown: " + sent.error().to_string());
  return status;
}

Status run_follower(const GroupWorkerOptions& options, MPI_Comm control, Watchdog& watchdog) {
  const MakeTrainer make = options.worker.make;
  for (;;) {
    std::string message;
    // Idle: wait for the leader. After SIGTERM, wait a little longer for its shutdown message (it
    // is stopping too), so that every rank reaches MPI_Finalize.
    HPCTUNE_TRY(broadcast_message(control, message, Clock::now() + options.follower_idle_limit,
                                  options.worker.terminate, std::chrono::seconds(10)));
    nlohmann::json j = nlohmann::json::parse(message, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return err(Errc::kIo, "malformed message from the group leader");
    if (j.value("type", std::string()) == "shutdown") return Status::Ok();
    trainers::TrialContext ctx;
    ctx.trial_id = j.value("trial_id", int64_t{0});
    ctx.attempt = j.value("attempt", int64_t{1});
    ctx.seed = j.value("seed", uint64_t{0});
    ctx.params = j.value("params", nlohmann::json::object());
    ctx.trainer = j.value("trainer", nlohmann::json::object());
    ctx.trial_dir = j.value("trial_dir", std::string());
    ctx.resume_from = j.value("resume_from", std::string());
    ctx.threads = j.value("threads", 1);
    ctx.stop_requested = [] { return false; };  // the leader's flag is what counts
    auto g = group_options(ctx, options);
    if (!g.ok()) continue;  // the leader fails the trial with the same error
    auto group = make_group(*g, watchdog);
    if (!group.ok()) end_group(options.worker, "cannot build the trial's group: " + group.error().to_string());
    auto trainer = make(ctx.trainer.value("kind", std::string()));
    if (!trainer.ok()) {
      // The leader fails the trial the same way before any group call.
      log_line(options.worker, "trial " + std::to_string(ctx.trial_id) + ": " + trainer.error().to_string());
      continue;
    }
    try {
      auto result = run_in_group(**trainer, ctx, **group, watchdog, options.worker);
      if (!result.ok()) {
        log_line(options.worker, "trial " + std::to_string(ctx.trial_id) + " ended on this rank with: " +
                                     result.error().to_string());
      }
    } catch (const std::exception& e) {
      end_group(options.worker, std::string("the trainer threw: ") + e.what());
    }
  }
}

}  // namespace

Status run_group_rank(const GroupWorkerOptions& options) {
  int size = 0, rank = 0;
  HPCTUNE_TRY(collectives::mpi_status(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  HPCTUNE_TRY(collectives::mpi_status(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
  if (options.ranks_data < 1 || options.ranks_model < 1 || options.ranks_data * options.ranks_model != size) {
    return err(Errc::kInvalidArgument, "--ranks-data " + std::to_string(options.ranks_data) + " x --ranks-model " +
                                           std::to_string(options.ranks_model) + " does not match the " +
                                           std::to_string(size) + " ranks mpirun started");
  }
  HPCTUNE_ASSIGN(collectives::Communicator control, collectives::Communicator::duplicate(MPI_COMM_WORLD));
  Watchdog watchdog(options.worker, options.collective_limit + std::chrono::seconds(5));
  if (rank == 0) return run_leader(options, control.handle(), watchdog);
  Status status = run_follower(options, control.handle(), watchdog);
  if (!status.ok()) {
    // A pending broadcast (MPI forbids cancelling it) would keep MPI_Finalize waiting: leave now.
    log_line(options.worker, "leaving the group: " + status.error().to_string());
    std::fflush(stderr);
    _exit(status.error().code() == Errc::kCancelled ? 0 : kGroupBrokenExitCode);
  }
  return status;
}

}  // namespace hpctune::worker
