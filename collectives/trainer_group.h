// TrainerGroup: the ranks of the trainer group that runs one trial, as a trainer sees them.
//
// A group has data x model ranks. Ranks are numbered rank = data_rank * model_size + model_rank:
// the model ranks of one pipeline are consecutive, and data replica d holds ranks
// [d * model_size, (d + 1) * model_size). Rank 0 (data 0, model 0) is the leader: it talks to the
// master, and only its reports and result count.
//
// Every rank runs the same trainer code on the same TrialContext (the leader broadcasts it), so
// every rank makes the same calls in the same order; that is what lets the calls below be
// collectives. A one-rank group has no TrainerGroup at all (TrialContext::group is null), and a
// build without MPI never has one.
//
// Errors: a collective that fails or passes its deadline returns kTimeout / kIo / kPeerGone, and
// the group is then unusable (see collectives.h): the trainer returns the error and the worker
// tears the whole group down.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace hpctune::collectives {

class TrainerGroup {
 public:
  virtual ~TrainerGroup() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual int data_rank() const noexcept = 0;
  virtual int data_size() const noexcept = 0;
  virtual int model_rank() const noexcept = 0;
  virtual int model_size() const noexcept = 0;
  bool leader() const noexcept { return rank() == 0; }

  // Collective over the data replicas of this model rank: each buffer becomes its sum over them.
  // A sum, not an average: the engines scale each shard's gradient by 1 / global batch before, so
  // no pass over the buffer is needed after the allreduce.
  virtual Status sum_gradients(std::span<float> grads) = 0;
  // Memory for `count` gradient floats that sum_gradients() reduces without copying them (this
  // rank's slot of the node's shared memory, with `hierarchical`), and what keeps it alive; empty
  // when the group has none, and then any memory works. Collective like sum_gradients().
  struct GradientBuffer {
    std::span<float> data;
    std::shared_ptr<void> owner;
  };
  virtual Result<GradientBuffer> gradient_buffer(size_t count) {
    (void)count;
    return GradientBuffer{};
  }
  // Collective over the whole group: the element-wise sum of `values` on every rank.
  virtual Status sum(std::span<double> values) = 0;
  // Collective over the whole group: the leader's `value` on every rank.
  virtual Result<bool> broadcast_flag(bool value) = 0;
  // Collective over the whole group: the leader's bytes on every rank (resized to match).
  virtual Status broadcast_bytes(std::vector<uint8_t>& bytes) = 0;

  // Point-to-point inside this rank's pipeline (same data replica), to or from another model rank
  // (the GPipe engine uses the neighbours, model_rank +- 1). `tag` distinguishes micro-batches and
  // directions. Each has the group's deadline.
  virtual Status send_to_model_rank(int model_rank, std::span<const float> data, int tag) = 0;
  virtual Status recv_from_model_rank(int model_rank, std::span<float> data, int tag) = 0;

  // Asynchronous messages between the data replicas of this model rank, for the data-parallel
  // modes that do not move in lockstep (trainer.sync: ssp; 1-bit compressed gradients; see
  // trainers/replica_exchange.h). Not collectives: post_to_replica() queues a copy of `bytes` for
  // replica `data_rank` and returns at once (later calls move it on); receive_from_replicas()
  // returns one message that has arrived with `tag` from any replica, or nothing, without waiting.
  // Two messages from one replica with one tag arrive in the order posted. Callers wait with their
  // own deadline (timeout()). Messages are at most kMaxReplicaMessageBytes (kInvalidArgument,
  // kProtocol for a longer one received). kUnavailable where the group has no such channel.
  static constexpr size_t kMaxReplicaMessageBytes = size_t{1} << 30;
  struct ReplicaMessage {
    int from = 0;  // the sender's data rank
    std::vector<uint8_t> bytes;
  };
  virtual Status post_to_replica(int data_rank, int tag, std::vector<uint8_t> bytes) {
    (void)data_rank, (void)tag, (void)bytes;
    return err(Errc::kUnavailable, "this trainer group has no asynchronous messages between replicas");
  }
  virtual Result<std::optional<ReplicaMessage>> receive_from_replicas(int tag) {
    (void)tag;
    return err(Errc::kUnavailable, "this trainer group has no asynchronous messages between replicas");
  }
  // Moves on the messages of post_to_replica() still being sent, without waiting: true when every
  // one of `tag` has gone (its receiver has it whole).
  virtual Result<bool> posts_delivered(int tag) {
    (void)tag;
    return true;
  }
  // How many messages receive_from_replicas() gave up half-received: their sender stopped in the
  // middle of one (it died) and nothing more came within the group's timeout. The modes report it.
  virtual int64_t replica_messages_given_up() const noexcept { return 0; }
  // Gives up every message still arriving, counted as above: the exchange is over, so what has
  // not arrived whole by now comes from a sender that died half-way through it.
  virtual void give_up_arriving() noexcept {}
  // Marks the group broken from this rank (MpiTrainerGroup::broken()): a peer it cannot go on
  // without is gone (a parameter-server shard that never answers, trainers/downpour.h). The group
  // worker then ends the group instead of reporting the trial's error, and the master queues the
  // attempt again (it resumes from the trial's last checkpoint).
  virtual void abandon() noexcept {}

  // The bound on one wait of the group (its calls, and the waits of callers of the two above).
  virtual std::chrono::milliseconds timeout() const noexcept { return std::chrono::minutes(5); }

  // When the group call now running on this rank began; empty when none is. Safe to read from
  // another thread (the group worker's watchdog, which ends a rank whose call runs too long).
  virtual std::optional<std::chrono::steady_clock::time_point> collective_started() const noexcept { return {}; }
};

// Adds a line for the log to `lines` when `group` gave up more half-received replica messages
// than `seen` (then updated): the modes that exchange such messages report each loss.
inline void note_given_up_messages(const TrainerGroup& group, int64_t& seen, std::vector<std::string>& lines) {
  const int64_t now = group.replica_messages_given_up();
  if (now <= seen) return;
  lines.push_back("gave up " + std::to_string(now - seen) + " message(s) from a data replica that stopped half-way " +
                  "through sending (silent for " + std::to_string(group.timeout().count()) + " ms); they are lost");
  seen = now;
}

}  // namespace hpctune::collectives
