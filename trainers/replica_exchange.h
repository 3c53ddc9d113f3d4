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
  // Applies what is complete and waits until every clock < clock - staleness is applied.
  Status begin_step(int64_t clock, const Apply& apply);
  // Posts this replica's gradient and stats of `clock` and applies what is then complete.
  Status publish(int64_t clock, std::span<const float> grads, const nn::BatchStats& stats, const Apply& apply);
  // Waits until every clock < end is applied.
  Status drain(int64_t end, const Apply& apply);
  // Adds the stats of each clock applied since the last call to `total`, clock by clock (the
  // allreduce path's order of additions); returns their sum.
  nn::BatchStats take_applied_stats(nn::BatchStats& total);

  int64_t applied() const noexcept { return next_apply_; }
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
};

}  // namespace hpctune::trainers
