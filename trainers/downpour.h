// Downpour: trainer.sync: downpour (Dean et al., "Large Scale Distributed Deep Networks", NIPS
// 2012) for the classifier loop (classifier_training.h), over TrainerGroup::post_to_replica /
// receive_from_replicas between the data ranks of a group with model: 1.
//
// Roles. The parameter vector is cut into `shards` contiguous slices; each lives on one data rank,
// which applies the pushed gradients to it with the shard optimizer (sgd: w -= lr g; adagrad:
// h += g^2, w -= lr g / (sqrt(h) + 1e-8), DistBelief's choice) and answers fetches.
//   ps_placement: replicas   the shards on data ranks 0..shards-1, which are replicas too; a shard
//                            answers between its rank's minibatches (and while that rank waits).
//   ps_placement: own_ranks  the shards on the last `shards` data ranks, which only serve; the
//                            other ranks are the replicas.
// Replica i of R trains the minibatches i, i + R, i + 2R, ... of each epoch's global order (its own
// part of the data, a whole minibatch each, so every push is a whole step's gradient); every
// fetch_interval of its steps it fetches every slice (waiting, with the group's timeout: a shard
// that does not answer fails the attempt), and every push_interval steps it pushes the sum of its
// gradients since the last push, at the learning rate of its current step, without waiting.
// With gradient_compression: 1bit each slice travels as a 1-bit packet (its own error feedback).
//
// A replica that dies: no replica waits for another, so the others go on. A shard counts a
// replica that sent nothing for the group's timeout (and is not done) as dropped (and counts it
// again if it speaks again), and ends when the leader is done and every other replica is done or
// dropped. A replica is done when its done message, which counts its pushes, and every one of those
// pushes have arrived (the small done message can overtake a large push). The shard then sends the
// leader (replica 0) a summary: its updates, the staleness it saw (a push's staleness: the updates
// from other replicas the shard applied since that replica's last fetch of it), each replica's
// pushes and whether it was dropped, and its slice's final weights. The leader waits for every
// shard's summary in finish() and ends on those weights, so the model it evaluates and saves holds
// the slowest replica's last pushes too. Open MPI ends the whole job when a rank dies unless mpirun
// runs with --enable-recovery, which the launcher passes when the
// campaign can run a downpour or ssp trial (launch/launcher.h, GroupResources::rank_recovery); the
// trial then finishes on the others, its result names the dropped replicas (a replica_dropped event
// each) and says the group lost a rank (TrialResult::group_degraded): the group worker ends the
// group after sending it, and the launcher starts it again.
//
// A shard that dies: a fetch (or the leader's wait for the summaries) that gets no answer within
// the group's timeout abandons the group (TrainerGroup::abandon): the group ends without a result,
// and the master queues the attempt again, which resumes from the trial's last checkpoint.
//
// Not deterministic. Single-threaded: everything runs on the training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/onebit_compression.h"
#include "collectives/trainer_group.h"
#include "common/result.h"

namespace hpctune::trainers {

struct DownpourOptions {
  int shards = 0;  // 0: one per data rank (replicas) or 1 (own_ranks)
  bool own_ranks = false;
  int64_t push_interval = 1;
  int64_t fetch_interval = 1;
  bool adagrad = true;
  bool onebit = false;
  uint64_t run_id = 0;  // tags every message; another run's leftovers are dropped unread
};

struct DownpourSummary {
  int64_t updates = 0;
  int64_t staleness_max = 0;
  double staleness_mean = 0.0;
  std::vector<int64_t> pushes;  // by replica
  std::vector<bool> dropped;    // by replica
};

class DownpourReader;  // reads a received message (downpour.cpp)

class Downpour {
 public:
  // kInvalidArgument for a layout the options do not fit (own_ranks needs a replica left over).
  static Result<std::unique_ptr<Downpour>> create(collectives::TrainerGroup& group, std::span<const float> initial,
                                                  const DownpourOptions& options);

  ~Downpour();
  bool replica() const noexcept { return replica_; }
  int replicas() const noexcept { return replicas_; }
  int replica_index() const noexcept { return group_.data_rank(); }  // replicas are data ranks 0..R-1

  // Replica: every slice into `params` (serving this rank's shard while waiting), each with every
  // push this replica sent before applied (a shard holds its answer until they have arrived).
  Status fetch(std::span<float> params);
  // Replica: adds `grads` to the pending sum; posts it every push_interval calls at `lr`.
  Status push(int64_t clock, std::span<const float> grads, float lr);
  // Answers what has arrived for this rank's shard; never waits.
  Status serve();
  // Replica: says it is done, serves its shard until every replica is done or dropped, and (the
  // leader) waits for every shard's summary. A rank that is only a shard serves here until then.
  // Each summary carries its slice's final weights: the leader's `final_params`, if given (its
  // whole parameter vector), end holding every push of every replica, the slowest's last ones too.
  Status finish(std::span<float> final_params = {});

  bool due_fetch(int64_t local_step) const noexcept { return local_step % options_.fetch_interval == 0; }
  double bytes_per_step() const noexcept;
  // The leader's view after finish(): the shards' summaries combined.
  const DownpourSummary& summary() const noexcept { return summary_; }
  // The shards' updates held by the weights this replica fetched last (or finish() gave it).
  int64_t updates_in_params() const noexcept { return updates_in_params_; }
  // Dropped replicas seen by this rank's shard so far, as lines for the log.
  std::vector<std::string> take_events();

 private:
  explicit Downpour(collectives::TrainerGroup& group);
  struct Shard;
  std::vector<uint8_t> start_message() const;
  Result<bool> ours(DownpourReader& in, int from) const;
  size_t slice_begin(int shard) const noexcept;
  size_t slice_end(int shard) const noexcept;
  int shard_rank(int shard) const noexcept;
  Status handle_shard_messages();
  Status note_heard(int from);
  Result<int64_t> pushes_before(DownpourReader& in, int from, const char* what) const;
  Status answer_fetches();
  Status apply_push(int from, const std::vector<uint8_t>& bytes);
  Status send_summary();
  Status absorb_summary(int from, const std::vector<uint8_t>& bytes);
  bool shard_finished() const noexcept;

  collectives::TrainerGroup& group_;
  DownpourOptions options_;
  size_t params_ = 0;
  int shards_ = 0, replicas_ = 0;
  bool replica_ = true;
  std::unique_ptr<Shard> shard_;  // this rank's shard, if any
  std::vector<float> pending_;    // gradients summed since the last push
  int64_t pending_steps_ = 0;
  int64_t pushes_sent_ = 0;  // push rounds: one message to every shard each
  std::vector<collectives::OneBitCompressor> compressors_;  // one per shard (1bit)
  int64_t bytes_posted_ = 0, steps_ = 0;
  DownpourSummary summary_;
  std::vector<bool> summaries_seen_;  // the leader's, by shard
  std::vector<float> final_;          // the leader's: the shards' final weights, from their summaries
  int64_t updates_in_params_ = 0;
  double stale_sum_ = 0.0;
  int64_t stale_count_ = 0;
  std::vector<float> scratch_;
  std::vector<std::string> events_;
  int64_t given_up_seen_ = 0;  // the group's half-received messages already reported
};

}  // namespace hpctune::trainers
