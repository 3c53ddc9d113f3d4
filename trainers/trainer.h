// Trainer: what a trainer group runs for one trial.
//
// The worker loop (worker.h) receives `assign`, builds a TrialContext and calls Trainer::run() on a
// trial thread. The trainer calls ctx.report() after every epoch (or step) with its metrics, and
// polls ctx.stop_requested() at least once per epoch; when it returns true the trainer returns
// promptly with TrialResult::stopped = true and its last metrics. Errors are returned, not thrown.
//
// The trial's settings are ctx.settings(): the trainer's fixed settings from the config with the
// searched parameters laid over them (a searched `lr` overrides a fixed `lr`).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "protocol/messages.h"

namespace hpctune::collectives {
class TrainerGroup;  // collectives/trainer_group.h
}

namespace hpctune::trainers {

struct TrialContext {
  int64_t trial_id = 0;
  int64_t attempt = 1;
  uint64_t seed = 0;
  nlohmann::json params = nlohmann::json::object();   // the searched parameters
  nlohmann::json trainer = nlohmann::json::object();  // fixed settings, incl. "kind"
  std::string trial_dir;                              // "" when the trial keeps no files
  // A checkpoint to start from instead of a fresh initialisation (assign's resume_from: a paused
  // trial resumed with new parameters, as PBT's exploit does); "" = none.
  std::string resume_from;
  int threads = 1;                                    // compute threads for this rank
  // The group's ranks when it has more than one (trainer_group.h); null for a one-rank group. On
  // every rank but the leader, report() does nothing, and stop_requested() is a collective that
  // returns the leader's answer: call it at the same points on every rank.
  collectives::TrainerGroup* group = nullptr;
  // The group's process count (data x model) for trainers that start their own processes: the
  // `command` trainer runs its program under mpirun with this many ranks when it is above 1.
  int ranks = 1;

  std::function<void(int64_t step, const protocol::Metrics& metrics)> report = [](int64_t, const protocol::Metrics&) {};
  std::function<bool()> stop_requested = [] { return false; };
  // A descriptor that becomes readable when a stop is requested (the worker's eventfd for the
  // trial; never read nor closed by the trainer), so that a trainer waiting in poll() acts on a
  // stop at once instead of at its next slice; -1 = none (a context built by hand): poll
  // stop_requested() as before.
  int stop_fd = -1;
  // In a group: the leader's own stop flag, without a collective (false on the other ranks), for a
  // trainer that hands it to the other ranks itself once a collective could no longer complete (a
  // rank died: trainers/replica_exchange.h). Without a group: unused.
  std::function<bool()> leader_stop_requested = [] { return false; };

  // trainer settings overlaid with params.
  nlohmann::json settings() const {
    nlohmann::json merged = trainer.is_object() ? trainer : nlohmann::json::object();
    for (auto it = params.begin(); it != params.end(); ++it) merged[it.key()] = it.value();
    return merged;
  }
};

struct TrialResult {
  int64_t step = 0;       // the last step (epoch) reached
  bool stopped = false;   // ended early on a stop request
  protocol::Metrics metrics;
  std::vector<protocol::Artifact> artifacts;
  // Events of the attempt for the store (a data replica that died and was dropped), and how the
  // data replicas combined gradients (trainer.sync; "" for trainers without it): done's fields.
  std::vector<protocol::TrialEvent> events = {};
  std::string sync_mode = "";
  // A rank of the group is gone (it died, and the trial finished on the others): the group must
  // not run another trial. The group worker ends the group once this result is sent; the launcher
  // starts it again (worker/group_worker.h).
  bool group_degraded = false;
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual std::string kind() const = 0;
  virtual Result<TrialResult> run(const TrialContext& ctx) = 0;
};

// Waits until `deadline`, polling ctx.stop_requested() at least every `slice`. Returns true as soon
// as a stop is requested; it is asked at least once, also when the deadline has already passed. For
// trainers that pace their steps (sleep, function).
inline bool wait_unless_stopped(const TrialContext& ctx, std::chrono::steady_clock::time_point deadline,
                                std::chrono::milliseconds slice) {
  for (;;) {
    if (ctx.stop_requested()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(deadline - now, slice));
  }
}

class DatasetCache;     // trainers/idx_dataset.h
class CommandPrograms;  // trainers/command_trainer.h

// What a worker process shares between the trials it runs, handed to every trainer it makes.
// Everything is optional: a null member means each trial fends for itself.
struct TrainerServices {
  std::shared_ptr<DatasetCache> datasets;  // decoded datasets, kept across trials
  // The `command` kind's persistent program (trainer.persistent), kept across trials.
  std::shared_ptr<CommandPrograms> commands;
};

// Builds the trainer for a kind (trainer_factory.h has the built-in kinds'; tests bring their own).
using MakeTrainer = std::function<Result<std::unique_ptr<Trainer>>(const std::string& kind)>;

}  // namespace hpctune::trainers
