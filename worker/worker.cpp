#include "worker/worker.h"

#include "common/system.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "common/safe_open.h"
#include "protocol/curve_keys.h"

namespace hpctune::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The trial thread and what it hands back to the loop.
class RunningTrial {
 public:
  RunningTrial(protocol::Assign assign, const WorkerOptions& options, protocol::ClientTransport& transport)
      : assign_(std::move(assign)), transport_(transport) {
    thread_ = std::thread([this, &options] {
      body(options);
      exited_.store(true);  // after the trainer's destructor, which runs once its result is pushed
    });
  }
  // Joins the thread: the owner makes sure first (WorkerLoop::end_trial_or_exit) that it has
  // exited or will exit at once, so that this join has the owner's deadline.
  ~RunningTrial() {
    request_stop();
    if (thread_.joinable()) thread_.join();
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  int64_t trial_id() const { return assign_.trial_id; }
  int64_t attempt() const { return assign_.attempt; }
  void request_stop() {
    {
      std::lock_guard lock(mu_);  // a push() waiting for room sees it
      stop_.store(true);
    }
    room_.notify_all();
    // Wakes a trainer waiting in poll() on ctx.stop_fd (the command trainer) at once.
    if (stop_fd_ >= 0) {
      const uint64_t one = 1;
      (void)!::write(stop_fd_, &one, sizeof one);
    }
  }
  bool finished() const { return finished_.load(); }
  // The thread function has returned: a join returns at once. Later than finished(): a trainer's
  // destructor (a child process reaped, files closed) runs after its result was pushed.
  bool exited() const { return exited_.load(); }

  // Messages produced since the last call (reports, then done/failed last). `final` is set when
  // the result is among them: nothing can follow it.
  std::deque<protocol::Message> take(bool& final) {
    std::deque<protocol::Message> out;
    {
      std::lock_guard lock(mu_);
      out.swap(outbox_);
      report_at_.clear();
      final = finished_.load();
    }
    room_.notify_all();
    return out;
  }

  // Reports waiting in the outbox at most; past it the trial thread waits (a command trainer then
  // stops reading its program's output, and the program blocks on its pipe: back-pressure).
  static constexpr std::size_t kMaxOutbox = 4096;

 private:
  void push(protocol::Message m, bool final = false) {
    {
      std::unique_lock lock(mu_);
      if (auto* r = std::get_if<protocol::Report>(&m)) {
        // At most the latest value per step and metric waits: a report of a step already queued
        // is merged into it.
        if (auto at = report_at_.find(r->step); at != report_at_.end()) {
          auto& queued = std::get<protocol::Report>(outbox_[at->second]);
          for (auto& [name, value] : r->metrics) queued.metrics[name] = value;
          return;
        }
        room_.wait(lock, [this] { return outbox_.size() < kMaxOutbox || stop_.load(); });
        report_at_[r->step] = outbox_.size();
      }
      outbox_.push_back(std::move(m));
      if (final) finished_.store(true);
    }
    transport_.notify();
  }

  // Thread entry point: every error, thrown or returned, becomes a `failed` message.
  void body(const WorkerOptions& options) {
    protocol::Failed failed{assign_.trial_id, assign_.attempt, "", ""};
    try {
      trainers::TrialContext ctx{.trial_id = assign_.trial_id, .attempt = assign_.attempt, .seed = assign_.seed,
                                 .params = assign_.params, .trainer = assign_.trainer, .trial_dir = assign_.trial_dir,
                                 .resume_from = assign_.resume_from, .threads = options.threads > 0 ? options.threads : 1};
      ctx.report = [this](int64_t step, const protocol::Metrics& metrics) {
        push(protocol::Report{assign_.trial_id, assign_.attempt, step, metrics});
      };
      ctx.stop_requested = [this] { return stop_.load(std::memory_order_relaxed); };
      ctx.stop_fd = stop_fd_;
      if (!ctx.trial_dir.empty()) {
        // With the mode of <db>.trials (storage_access). A link planted there (a campaign unpacked
        // from someone else's archive) would take the trial's files elsewhere: refused.
        if (Status made = make_directory_like_parent(ctx.trial_dir); !made.ok()) {
          throw std::runtime_error(made.error().message());
        }
      }
      const std::string kind = ctx.trainer.value("kind", std::string());
      auto trainer = options.make(kind);
      if (!trainer.ok()) {
        failed.error = trainer.error().to_string();
      } else {
        // The trial starts now: a report without metrics tells the master (the trial is `running`
        // from here, and its duration counts from here, not from its first real report).
        push(protocol::Report{assign_.trial_id, assign_.attempt, 0, {}});
        auto result = trainer.value()->run(ctx);
        if (result.ok()) {
          protocol::Done done;
          done.trial_id = assign_.trial_id;
          done.attempt = assign_.attempt;
          done.step = result->step;
          done.stopped = result->stopped;
          done.metrics = result->metrics;
          done.artifacts = result->artifacts;
          done.events = result->events;
          done.sync_mode = result->sync_mode;
          done.group_ends = result->group_degraded;
          // Sizes are read here, where the files are: the master may not see this file system.
          for (auto& artifact : done.artifacts) {
            std::error_code ec;
            const auto bytes = std::filesystem::file_size(artifact.path, ec);
            if (artifact.bytes < 0 && !ec) artifact.bytes = static_cast<int64_t>(bytes);
          }
          push(std::move(done), /*final=*/true);
          return;
        }
        failed.error = result.error().to_string();
      }
    } catch (const std::exception& e) {
      failed.error = std::string("trainer threw: ") + e.what();
    } catch (...) {
      failed.error = "trainer threw an unknown exception";
    }
    push(std::move(failed), /*final=*/true);
  }

  protocol::Assign assign_;
  protocol::ClientTransport& transport_;
  std::atomic<bool> stop_{false};
  // Readable once request_stop() ran (TrialContext::stop_fd); -1 when eventfd failed (the trainer
  // then polls stop_requested()). Made before the thread starts, closed after it is joined.
  int stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::atomic<bool> finished_{false};
  std::atomic<bool> exited_{false};
  std::mutex mu_;
  std::condition_variable room_;
  std::deque<protocol::Message> outbox_;
  std::map<int64_t, std::size_t> report_at_;  // step -> its report's index in outbox_
  std::thread thread_;
};

class WorkerLoop {
 public:
  WorkerLoop(protocol::ClientTransport& transport, const WorkerOptions& options)
      : t_(transport), opt_(options), incarnation_(make_incarnation()) {
    hb_timeout_ = opt_.default_heartbeat_timeout;
  }
  // An error return leaves a trial running: it ends within the same deadline as any other.
  ~WorkerLoop() {
    if (trial_) end_trial_or_exit();
  }

  Status run() {
    Clock::time_point last_contact = Clock::now();
    milliseconds backoff = opt_.reconnect_initial;
    while (!terminating()) {
      // Say hello until a welcome comes back.
      HPCTUNE_TRY(send(hello()));
      auto welcome = await_welcome(backoff);
      if (!welcome.ok()) return std::move(welcome).error();
      if (!*welcome) {
        if (Clock::now() - last_contact > opt_.give_up) {
          return err(Errc::kTimeout, "no master answered at the configured address for " +
                                         std::to_string(opt_.give_up.count() / 1000) + " s");
        }
        log("no answer from the master; trying again in " + std::to_string(backoff.count()) + " ms");
        backoff = std::min(backoff * 2, opt_.reconnect_max);
        HPCTUNE_TRY(t_.reconnect());
        continue;
      }
      backoff = opt_.reconnect_initial;
      auto served = serve();
      if (!served.ok()) return std::move(served).error();
      if (shutdown_ || terminating()) break;
      // The master went silent: start over with a fresh connection.
      last_contact = Clock::now();
      log("lost the master; reconnecting");
      HPCTUNE_TRY(t_.reconnect());
    }
    abandon_trial();
    return {};
  }

 private:
  bool terminating() const { return opt_.terminate && opt_.terminate->load() > 0; }

  void log(const std::string& line) const {
    if (opt_.log) opt_.log(line);
  }

  // The GPUs this process was given: CUDA_VISIBLE_DEVICES (the local backend's, or SLURM's in a
  // step), else SLURM_STEP_GPUS; ids that protocol::Hello would refuse are left out, and said.
  std::vector<std::string> visible_gpus() const {
    const char* from = std::getenv("CUDA_VISIBLE_DEVICES");
    if (from == nullptr || *from == '\0') from = std::getenv("SLURM_STEP_GPUS");
    std::vector<std::string> ids;
    if (from == nullptr) return ids;
    std::string item;
    for (const char* c = from;; ++c) {
      if (*c != ',' && *c != '\0') {
        item += *c;
        continue;
      }
      if (protocol::is_gpu_id(item) && ids.size() < protocol::kMaxGpus) ids.push_back(item);
      else if (!item.empty()) log("worker: GPU id '" + item.substr(0, 64) + "' of the environment is not reported");
      item.clear();
      if (*c == '\0') break;
    }
    return ids;
  }

  protocol::Hello hello() const {
    protocol::Hello h;
    h.secret = opt_.secret;
    h.incarnation = incarnation_;
    h.group = opt_.group;
    h.pid = getpid();
    h.host = host_name();
    h.trainers = opt_.kinds;
    h.gpus = visible_gpus();
    return h;
  }

  // For messages that may be lost without harm (hello, ready and heartbeats are sent again): a full
  // send queue is not an error.
  Status send(const protocol::Message& m) {
    auto s = t_.send(protocol::encode(m));
    if (!s.ok() && s.error().code() != Errc::kBusy) return s;
    return {};
  }

  // Sends what the trial produced, in order, as far as the send queue takes it; the rest waits in
  // unsent_ for the next call (the trial thread's outbox, bounded, holds what comes meanwhile).
  // Returns kTimeout when the queue has stayed full for the heartbeat timeout: the master is not
  // reading (the caller then treats it as lost; what is unsent is sent after the reconnect).
  Status send_unsent() {
    while (!unsent_.empty()) {
      auto s = t_.send(protocol::encode(unsent_.front()));
      if (!s.ok() && s.error().code() != Errc::kBusy) return s;
      if (!s.ok()) {
        if (!blocked_since_) blocked_since_ = Clock::now();
        if (Clock::now() - *blocked_since_ > hb_timeout_)
          return err(Errc::kTimeout, "the master has taken no message for " +
                                         std::to_string(hb_timeout_.count()) + " ms");
        return {};
      }
      blocked_since_.reset();
      unsent_.pop_front();
    }
    return {};
  }

  // Waits for a welcome up to `wait`. nullopt-like false when none came.
  Result<bool> await_welcome(milliseconds wait) {
    const auto deadline = Clock::now() + wait;
    while (Clock::now() < deadline && !terminating()) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      HPCTUNE_ASSIGN(auto frame, t_.recv(std::max(left, milliseconds(1))));
      if (!frame) continue;
      auto msg = protocol::decode(*frame);
      if (!msg.ok()) continue;
      if (auto* w = std::get_if<protocol::Welcome>(&*msg)) {
        hb_interval_ = milliseconds(w->heartbeat_interval_ms);
        hb_timeout_ = milliseconds(w->heartbeat_timeout_ms);
        return true;
      }
      if (auto* s = std::get_if<protocol::Shutdown>(&*msg)) {
        shutdown_ = true;
        return err(Errc::kCancelled, "the master refused this worker: " + s->reason);
      }
    }
    return false;
  }

  // Stops the current trial and sends whatever it produced: if the master is still there it
  // records or ignores it (a late result), and nothing is silently dropped here.
  void abandon_trial() {
    if (trial_) {
      end_trial_or_exit();
      bool final = false;
      for (auto& m : trial_->take(final)) unsent_.push_back(std::move(m));
      trial_.reset();  // joins a thread that has exited
    }
    // One last try (linger is 0: what the queue does not take now is gone with the socket).
    const auto deadline = Clock::now() + std::min(hb_timeout_, milliseconds(2000));
    while (!unsent_.empty() && Clock::now() < deadline) {
      if (!send_unsent().ok()) break;
      if (!unsent_.empty()) std::this_thread::sleep_for(milliseconds(1));
    }
    if (!unsent_.empty()) log("gave up " + std::to_string(unsent_.size()) + " message(s) for the master it lost");
    unsent_.clear();
    blocked_since_.reset();
  }

  // Asks the trial to stop and waits up to stop_grace for its thread to exit, so that the join
  // that follows (trial_.reset()) returns at once. A trial thread still running then can be
  // neither joined (this loop would hang with it) nor detached (it uses this loop's transport and
  // services): the process ends here, saying why; the launcher restarts the group. The thread has
  // exited only when the trainer's destructor has returned too, not merely its result pushed.
  void end_trial_or_exit() {
    const bool had_result = trial_->finished();
    trial_->request_stop();
    const auto asked = Clock::now();
    const auto deadline = asked + opt_.stop_grace;
    // A finished trial's thread exits within microseconds: yield first (no sleep on the path of
    // every trial), then poll.
    while (!trial_->exited() && Clock::now() < deadline) {
      if (Clock::now() - asked < milliseconds(2)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(milliseconds(1));
      }
    }
    if (trial_->exited()) return;
    const std::string why = "trial " + std::to_string(trial_->trial_id()) + " (attempt " +
                            std::to_string(trial_->attempt()) + ") " +
                            (had_result ? "sent its result but its trainer did not finish cleaning up"
                                        : "did not stop") +
                            " within " + std::to_string(opt_.stop_grace.count()) +
                            " ms of being asked to; exiting (status " + std::to_string(kTrialStuckExitCode) + ")";
    if (opt_.log) {
      opt_.log(why);
    } else {
      std::fprintf(stderr, "worker %lld: %s\n", static_cast<long long>(opt_.group), why.c_str());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(kTrialStuckExitCode);
  }

  // Serves one master connection until shutdown, termination or the master's silence.
  Status serve() {
    HPCTUNE_TRY(send(protocol::Ready{}));
    auto last_from_master = Clock::now();
    auto last_hb = Clock::now();
    while (!terminating()) {
      const auto now = Clock::now();
      if (now - last_from_master > hb_timeout_) {
        abandon_trial();
        return {};
      }
      auto wait = std::min(hb_interval_ - std::chrono::duration_cast<milliseconds>(now - last_hb), hb_interval_);
      if (!unsent_.empty()) wait = milliseconds(1);  // the send queue is full: try again soon
      HPCTUNE_ASSIGN(auto frame, t_.recv(std::max(wait, milliseconds(1))));
      if (frame) {
        last_from_master = Clock::now();
        auto msg = protocol::decode(*frame);
        if (!msg.ok()) {
          log("dropped a malformed frame from the master: " + msg.error().message());
        } else {
          HPCTUNE_TRY(on_message(*msg));
          if (shutdown_) {
            abandon_trial();
            return {};
          }
        }
      }
      auto flushed = flush_trial();
      if (!flushed.ok() && flushed.error().code() == Errc::kTimeout) {
        log(flushed.error().message() + "; reconnecting");
        abandon_trial();
        return {};
      }
      HPCTUNE_TRY(flushed);
      // While messages wait, they are the sign of life; a heartbeat must not overtake them either,
      // since it tells the master which trial runs here (and "none" loses the attempt).
      if (Clock::now() - last_hb >= hb_interval_ && unsent_.empty()) {
        last_hb = Clock::now();
        protocol::Heartbeat hb;
        if (trial_) hb = protocol::Heartbeat{trial_->trial_id(), trial_->attempt()};
        HPCTUNE_TRY(send(hb));
      }
    }
    return {};
  }

  Status on_message(const protocol::Message& msg) {
    if (auto* a = std::get_if<protocol::Assign>(&msg)) {
      // A finished trial whose result was just sent. A full send queue is the serve loop's concern.
      if (auto flushed = flush_trial(); !flushed.ok() && flushed.error().code() != Errc::kTimeout) return flushed;
      if (trial_) {
        // The master believes we are idle: tell it this assign cannot run now.
        unsent_.push_back(protocol::Failed{a->trial_id, a->attempt, "the group is already running trial " +
                                                                        std::to_string(trial_->trial_id()), ""});
        return {};
      }
      trial_ = std::make_unique<RunningTrial>(*a, opt_, t_);
      return {};
    }
    if (auto* s = std::get_if<protocol::Stop>(&msg)) {
      if (trial_ && trial_->trial_id() == s->trial_id && trial_->attempt() == s->attempt) trial_->request_stop();
      return {};
    }
    if (std::holds_alternative<protocol::Shutdown>(msg)) {
      shutdown_ = true;
      return {};
    }
    return {};  // heartbeats only refresh last_from_master; a welcome again changes nothing
  }

  // Moves what the trial produced behind the unsent messages and sends as much as goes. The
  // trial's outbox is taken only when little is unsent, so that both stay bounded.
  // A trial whose result is among them is then joined, within stop_grace (after the result is
  // on its way: a trainer stuck cleaning up does not cost the master the result).
  Status flush_trial() {
    bool final = false;
    if (trial_ && unsent_.size() < RunningTrial::kMaxOutbox) {
      for (auto& m : trial_->take(final)) unsent_.push_back(std::move(m));
    }
    Status sent = send_unsent();
    if (final) {
      end_trial_or_exit();
      trial_.reset();
    }
    return sent;
  }

  protocol::ClientTransport& t_;
  const WorkerOptions& opt_;
  uint64_t incarnation_;
  milliseconds hb_interval_{1000};
  milliseconds hb_timeout_{10000};
  std::unique_ptr<RunningTrial> trial_;
  std::deque<protocol::Message> unsent_;           // in order; a done/failed is never dropped
  std::optional<Clock::time_point> blocked_since_;  // since when the send queue is full
  bool shutdown_ = false;
};

}  // namespace

std::string take_worker_secret() {
  char* value = std::getenv(protocol::kSecretEnv);
  if (!value) return "";
  std::string secret = value;
  // The bytes live in the environment block that /proc/PID/environ shows: wipe them there too.
  std::memset(value, 0, std::strlen(value));
  unsetenv(protocol::kSecretEnv);
  return secret;
}

Result<protocol::TransportOptions> take_worker_curve_keys() {
  const char* names[] = {protocol::kCurveServerKeyEnv, protocol::kCurvePublicKeyEnv, protocol::kCurveSecretKeyEnv};
  std::string values[3];
  std::vector<std::string> missing;
  for (int i = 0; i < 3; ++i) {
    char* value = std::getenv(names[i]);
    if (value) {
      values[i] = value;
      std::memset(value, 0, std::strlen(value));  // gone from /proc/PID/environ as well
      unsetenv(names[i]);
    } else {
      missing.push_back(names[i]);
    }
  }
  protocol::TransportOptions options;
  if (missing.size() == 3) return options;
  if (!missing.empty()) {
    std::string list;
    for (const auto& name : missing) list += (list.empty() ? "" : ", ") + name;
    return err(Errc::kConfig, "the worker's CURVE keys are set only in part: " + list +
                                  " missing from the environment (the master's launcher sets all three: " +
                                  protocol::kCurveServerKeyEnv + ", " + protocol::kCurvePublicKeyEnv + ", " +
                                  protocol::kCurveSecretKeyEnv + ")");
  }
  options.security = protocol::TransportOptions::Security::kCurve;
  options.curve_client = {values[1], values[2], values[0]};
  return options;
}

Result<protocol::TransportOptions> take_worker_transport(const std::string& credential) {
  const char* flag = std::getenv(protocol::kPlainAuthEnv);
  const bool plain = flag && std::string(flag) == "1";
  unsetenv(protocol::kPlainAuthEnv);
  HPCTUNE_ASSIGN(protocol::TransportOptions options, take_worker_curve_keys());
  if (plain && options.security == protocol::TransportOptions::Security::kNone && !credential.empty()) {
    options.security = protocol::TransportOptions::Security::kPlain;
    options.plain_password = credential;
  }
  return options;
}

namespace {

// The form of the credential the master's launcher hands a worker (protocol/messages.h, kSecretEnv;
// Scheduler::launch_credential): "<campaign secret>.<launch token>", each random_hex(16).
bool credential_well_formed(std::string_view c) {
  constexpr std::size_t kHexDigits = 32;
  if (c.size() != 2 * kHexDigits + 1 || c[kHexDigits] != '.') return false;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (i != kHexDigits && !((c[i] >= '0' && c[i] <= '9') || (c[i] >= 'a' && c[i] <= 'f'))) return false;
  }
  return true;
}

// Started by hand, or by something other than the master's launcher: the master ignores a hello
// without a credential of its own, so waiting for its welcome until give_up would be waiting for
// nothing. The credential itself is never printed.
Status check_credential(const WorkerOptions& options) {
  if (options.secret.empty()) {
    return err(Errc::kConfig, std::string("no launch credential: the environment variable ") + protocol::kSecretEnv +
                                  " is not set (the master's launcher sets it for each worker it starts, "
                                  "'<campaign secret>.<launch token>'; the master ignores a worker without it)");
  }
  if (!credential_well_formed(options.secret)) {
    return err(Errc::kConfig, std::string("malformed launch credential: the environment variable ") +
                                  protocol::kSecretEnv + " holds " + std::to_string(options.secret.size()) +
                                  " characters for group " + std::to_string(options.group) +
                                  " that are not '<campaign secret>.<launch token>', 32 lower-case hex digits each, "
                                  "as the master's launcher sets it (the master ignores a worker without it)");
  }
  return {};
}

}  // namespace

Status run_worker(protocol::ClientTransport& transport, const WorkerOptions& options) {
  if (!options.make) return err(Errc::kInvalidArgument, "the worker has no trainer factory (WorkerOptions::make)");
  HPCTUNE_TRY(check_credential(options));
  WorkerLoop loop(transport, options);
  return loop.run();
}

Status run_worker_slots(const std::vector<protocol::ClientTransport*>& transports, std::vector<WorkerOptions> options) {
  if (transports.size() != options.size() || options.empty()) {
    return err(Errc::kInvalidArgument, "run_worker_slots: one transport and one set of options per slot");
  }
  // Every slot's credential before any slot says hello.
  for (const WorkerOptions& o : options) HPCTUNE_TRY(check_credential(o));
  const std::atomic<int>* outer = options.front().terminate;
  std::atomic<int> end{0};
  std::atomic<size_t> running{options.size()};
  std::vector<Status> results(options.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < options.size(); ++i) {
    options[i].terminate = &end;
    threads.emplace_back([&, i] {
      results[i] = run_worker(*transports[i], options[i]);
      end.store(1);  // one slot's end is the pack's
      running.fetch_sub(1);
    });
  }
  while (running.load() > 0) {
    if (outer != nullptr && outer->load() > 0) end.store(1);
    std::this_thread::sleep_for(milliseconds(20));
  }
  for (auto& t : threads) t.join();
  for (auto& r : results)
    if (!r.ok()) return r;
  return {};
}

}  // namespace hpctune::worker
