// ReplicaExchange: how the data replicas of a classifier trial share their gradients when they do
// not go through the group's allreduce (data_parallel.h: sync: ssp, and gradient_compression: 1bit
// in either mode). One per rank, over TrainerGroup::post_to_replica / receive_from_replicas.
//
// Clocks. Step c of the trial (the loop's global minibatch counter) is clock c. A replica computes
// its shard's gradient of clock c (the same rows as the allreduce path: rows r*B/D..(r+1)*B/D of
// global batch c, scaled by 1/B), posts it to every other replica (publish) and keeps its own.
// Clock c is *complete* on a replica when it holds all D gradients of c; complete clocks are
// applied in clock order: their sum, added in data-rank order, goes to the caller's apply()
// (the optimizer step at clock c's learning rate). Every replica therefore applies the same sums in
// the same order and holds the same weights after the same clocks.
//
// Staleness. Before computing clock c (begin_step), a replica waits until clocks < c - s are
// applied: a clock is applied only once every replica has published it, so no replica starts clock
// c before the slowest has finished c - s - 1, i.e. runs more than s steps ahead, and the gradient
// of clock c is computed on weights missing at most the s clocks c - s .. c - 1. s = 0 waits for
// every clock before the next: the allreduce path's arithmetic (at two replicas the two-term sums
// are the allreduce's bit for bit: fp addition is commutative). begin_step records c - applied
// (the staleness the gradient is computed with), drain() ends an epoch with every clock applied.
//
// 1-bit: with `onebit`, each replica's gradient travels as a OneBitPacket (onebit_compression.h)
// from its own compressor (its error feedback), and every replica, the sender included, sums the
// decompressed packets, so replicas stay identical. Bytes per step are counted as posted.
//
// Coordinated (options.coordinated: sync: ssp, or backup replicas): the leader (data rank 0) decides
// which gradients make each clock. It completes clock c once it holds its own gradient of c and
// those of need = min(live, max(1, ceil(min_fraction x D))) replicas in all (itself included),
// and posts a commit to every live replica: the clock, the replicas included (a bit mask), the
// replicas dropped so far and the leader's stop flag. Every replica applies clock c once it holds
// c's commit and the included gradients (or, with fraction 1 and no replica dropped so far, every
// replica's gradient, without waiting for the commit, which is checked when it comes: only a
// replica that dies between its sends of one clock can make them differ, and then this replica's
// trial fails with kProtocol): the sum over those, in data-rank order, times D / k for
// k of D included (the mean over the global batch's rows that were trained); with every replica
// included it is the uncoordinated path's sum bit for bit. A gradient that arrives for a clock
// already applied, or that its commit left out, is dropped and counted (late_packets()). A replica
// that begins a clock already applied without it skips it (begin_step answers false): a straggler
// does not set the pace, it catches up. Not deterministic with min_fraction < 1.
//   A replica that the leader has heard nothing from for the group's timeout while it waits for it
// is dropped (it died, or hangs): later clocks complete without it, and it counts again once it is
// heard again. The commits carry the dropped set, so every replica learns at the same clock that
// the group lost one (commit_note): the loop then calls no collective of the group any more.
//
// Waits poll the group's messages with the group's timeout (kTimeout naming the clock and what is
// missing); a malformed message or a clock outside the window a correct replica can send is
// kProtocol. Single-threaded: the training thread calls everything.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/onebit_compression.h"
#include "collectives/trainer_group.h"
#include "common/result.h"
#include "nn/network.h"

namespace hpctune::trainers {

struct ReplicaExchangeOptions {
  int64_t staleness = 0;  // s above; 0..64
  bool onebit = false;
  // With onebit and staleness 0 (sync: allreduce, gradient_compression: 1bit): a compressed
  // allreduce instead of every packet to every replica. Replica j owns slice j of D; each replica
  // sends slice j of its gradient to j as a 1-bit packet (one compressor per slice, its error
  // feedback); j sums the D contributions in rank order (its own uncompressed), compresses the sum
  // with its own compressor (a second error feedback, as DeepSpeed's 1-bit Adam) and sends it to
  // every replica, which all decompress the same packets: 2 (D - 1) / D x 1/32 of the fp32 bytes
  // per replica, as the ring allreduce's 2 (D - 1) / D, where the all-to-all is (D - 1) / 32.
  bool compressed_allreduce = false;
  // Tags every message: a message of another run (left in the queues by an earlier trial on the
  // same group, stopped mid-epoch) is dropped unread.
  uint64_t run_id = 0;
  // The leader decides each clock (see the top); needed for dropping a dead replica and for
  // min_fraction < 1. At most 64 replicas. Not with compressed_allreduce.
  bool coordinated = false;
  double min_fraction = 1.0;  // backup replicas: (0, 1]
  // Coordinated, on the leader: its own stop flag (no collective), sent with every commit.
  std::function<bool()> leader_stop;
};

// What a commit said about the group (coordinated): the replicas dropped by then and the leader's
// stop flag when it committed.
struct CommitNote {
  uint64_t dropped = 0;
  bool stop = false;
};

// One clock-start as recorded by begin_step, and one publish: the evidence that no replica ran
// more than s ahead (tests compare the replicas' logs on the machine's steady clock).
struct ClockEvent {
  int64_t clock = 0;
  int64_t applied = 0;  // begin: clocks applied when clock started; publish: -1
  int64_t t_ns = 0;     // steady_clock since its epoch
};

class ReplicaExchange {
 public:
  // Called for each complete clock, in order, with the sum of its gradients.
  using Apply = std::function<void(int64_t clock, std::span<const float> sum)>;

  // kInvalidArgument for a group of one replica or more than one model rank, or a bad option.
  static Result<std::unique_ptr<ReplicaExchange>> create(collectives::TrainerGroup& group, size_t params,
                                                         const ReplicaExchangeOptions& options);

  // Sets the next clock to apply (the loop's step counter at an epoch start, after a resume too);
  // nothing may be pending.
  Status start_at(int64_t clock);
  // Applies what is complete and waits until every clock < clock - staleness is applied. True:
  // compute and publish clock; false (coordinated, not the leader): clock is applied already
  // without this replica, skip it.
  Result<bool> begin_step(int64_t clock, const Apply& apply);
  // Posts this replica's gradient and stats of `clock` and applies what is then complete.
  Status publish(int64_t clock, std::span<const float> grads, const nn::BatchStats& stats, const Apply& apply);
  // Waits until every clock < end is applied.
  Status drain(int64_t end, const Apply& apply);
  // Adds the stats of each clock applied since the last call to `total`, clock by clock (the
  // allreduce path's order of additions); returns their sum.
  nn::BatchStats take_applied_stats(nn::BatchStats& total);

  int64_t applied() const noexcept { return next_apply_; }
  bool coordinated() const noexcept { return options_.coordinated; }
  // Coordinated: the note of the commit of `clock` when this replica holds it (every replica that
  // has applied `clock` does); nullopt otherwise.
  std::optional<CommitNote> commit_note(int64_t clock) const;
  // Coordinated, the leader: gradients dropped as late; clocks applied; each replica's gradients
  // included; the replicas dropped now; lines for the log about drops (taken).
  int64_t late_packets() const noexcept { return late_; }
  int64_t clocks_applied() const noexcept { return applied_count_; }
  const std::vector<int64_t>& included() const noexcept { return included_; }
  std::vector<int> dropped_now() const;
  std::vector<std::string> take_events();
  int64_t staleness_max() const noexcept { return staleness_max_; }
  double staleness_mean() const noexcept;
  // Bytes this replica posted per published clock.
  double bytes_per_step() const noexcept;
  const std::vector<ClockEvent>& events() const noexcept { return events_; }

 private:
  struct Clock {
    std::vector<std::vector<float>> grads;  // by data rank
    std::vector<nn::BatchStats> stats;
    std::vector<bool> have;
    int count = 0;
  };
  ReplicaExchange(collectives::TrainerGroup& group, size_t params, ReplicaExchangeOptions options)
      : group_(group), params_(params), options_(options) {}
  Status receive_available();
  Status receive_commits();
  void apply_clock(int64_t clock, Clock* c, uint64_t mask, const Apply& apply);
  void apply_coordinated(const Apply& apply);
  Status post_commit(int64_t clock, uint64_t mask, CommitNote note);
  void drop_silent();
  Status store(int from, int64_t clock, std::vector<float> grads, const nn::BatchStats& stats);
  void apply_complete(const Apply& apply);
  // Polls until applied() >= target, or the group's timeout.
  Status wait_applied(int64_t target, const Apply& apply, const char* why);
  Status publish_compressed_allreduce(int64_t clock, std::span<const float> grads, const nn::BatchStats& stats,
                                      const Apply& apply);
  // Waits for one message of `tag` from every other replica, handing each to `take`.
  Status collect(int tag, int64_t clock, const std::function<Status(int from, std::span<const uint8_t> body,
                                                                     const nn::BatchStats& stats)>& take);
  size_t slice_begin(int j) const noexcept;

  collectives::TrainerGroup& group_;
  size_t params_;
  ReplicaExchangeOptions options_;
  std::optional<collectives::OneBitCompressor> compressor_;
  std::vector<collectives::OneBitCompressor> slice_compressors_;  // compressed_allreduce: by slice
  std::optional<collectives::OneBitCompressor> owner_compressor_;  // compressed_allreduce: this slice's sum
  std::map<int64_t, Clock> pending_;
  int64_t next_apply_ = 0;
  int64_t last_begun_ = -1;
  std::vector<nn::BatchStats> applied_stats_;  // per clock applied, not yet taken
  std::vector<float> sum_;
  int64_t staleness_max_ = 0, staleness_total_ = 0, begun_ = 0;
  int64_t bytes_posted_ = 0, published_ = 0;
  std::vector<ClockEvent> events_;
  // Coordinated:
  std::map<int64_t, uint64_t> commits_;     // received, not yet applied: clock -> included mask
  std::map<int64_t, CommitNote> notes_;     // recent commits' notes (the last staleness + 1024 clocks)
  std::vector<bool> dropped_;               // the leader's view
  std::vector<std::chrono::steady_clock::time_point> last_heard_;  // the leader's, by replica
  std::chrono::steady_clock::time_point last_check_{};            // the leader's last drop_silent()
  std::vector<int64_t> included_;           // the leader's count, by replica
  uint64_t known_dropped_ = 0;              // the last commit's dropped set, as received
  int64_t late_ = 0, applied_count_ = 0;
  std::vector<std::string> log_;
  int64_t given_up_seen_ = 0;  // the group's half-received messages already reported
};

}  // namespace hpctune::trainers
