// ReplicaExchange (replica_exchange.h).
#include "trainers/replica_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

namespace hpctune::trainers {
namespace {

constexpr int kGradientTag = 71;
constexpr int kCommitTag = 74;
// Coordinated: how far past the next clock to apply a gradient may be (a straggler that has not
// read its commits for a while sees the others' later clocks).
constexpr int64_t kCoordinatedWindow = 4096;
constexpr uint32_t kMagic = 0x58455248;  // "HREX"
// magic, onebit, clock, the 3 stats, the run id (ReplicaExchangeOptions::run_id); then the body.
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 3 * 8 + 8;
constexpr size_t kRunOffset = 40;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

Result<std::unique_ptr<ReplicaExchange>> ReplicaExchange::create(collectives::TrainerGroup& group, size_t params,
                                                                 const ReplicaExchangeOptions& options) {
  if (group.data_size() < 2 || group.model_size() != 1) {
    return err(Errc::kInvalidArgument, "replica exchange: needs 2 or more data replicas of one model rank each");
  }
  if (options.staleness < 0 || options.staleness > 64) return err(Errc::kInvalidArgument, "replica exchange: staleness 0..64");
  if (params == 0 || params > collectives::kOneBitMaxValues) return err(Errc::kInvalidArgument, "replica exchange: parameter count");
  std::unique_ptr<ReplicaExchange> x(new ReplicaExchange(group, params, options));
  if (options.coordinated && (options.compressed_allreduce || group.data_size() > 64 || !(options.min_fraction > 0.0) ||
                              options.min_fraction > 1.0)) {
    return err(Errc::kInvalidArgument, "replica exchange: coordinated needs at most 64 replicas, a fraction in (0, 1] "
                                       "and no compressed allreduce");
  }
  if (!options.coordinated && options.min_fraction != 1.0) {
    return err(Errc::kInvalidArgument, "replica exchange: backup replicas need the coordinated exchange");
  }
  if (options.compressed_allreduce && (!options.onebit || options.staleness != 0 ||
                                       params < static_cast<size_t>(group.data_size()))) {
    return err(Errc::kInvalidArgument, "replica exchange: the compressed allreduce needs onebit, staleness 0 and a "
                                       "parameter per replica");
  }
  if (options.compressed_allreduce) {
    for (int j = 0; j < group.data_size(); ++j) {
      HPCTUNE_ASSIGN(collectives::OneBitCompressor c,
                     collectives::OneBitCompressor::create(x->slice_begin(j + 1) - x->slice_begin(j)));
      x->slice_compressors_.push_back(std::move(c));
    }
    const int self = group.data_rank();
    HPCTUNE_ASSIGN(collectives::OneBitCompressor c,
                   collectives::OneBitCompressor::create(x->slice_begin(self + 1) - x->slice_begin(self)));
    x->owner_compressor_.emplace(std::move(c));
  } else if (options.onebit) {
    HPCTUNE_ASSIGN(collectives::OneBitCompressor c, collectives::OneBitCompressor::create(params));
    x->compressor_.emplace(std::move(c));
  }
  x->sum_.resize(params);
  const size_t D = static_cast<size_t>(group.data_size());
  x->dropped_.assign(D, false);
  x->last_heard_.assign(D, std::chrono::steady_clock::now());
  x->included_.assign(D, 0);
  return x;
}

Status ReplicaExchange::start_at(int64_t clock) {
  // A faster replica's first clocks may have arrived already (received while draining).
  if (!pending_.empty() && pending_.begin()->first < clock) {
    return err(Errc::kInternal, "replica exchange: clocks before " + std::to_string(clock) + " still pending");
  }
  next_apply_ = clock;
  last_begun_ = clock - 1;
  std::fill(last_heard_.begin(), last_heard_.end(), std::chrono::steady_clock::now());
  return Status::Ok();
}

Status ReplicaExchange::store(int from, int64_t clock, std::vector<float> grads, const nn::BatchStats& stats) {
  const int D = group_.data_size();
  if (options_.coordinated && from >= 0 && from < D) {
    last_heard_[static_cast<size_t>(from)] = std::chrono::steady_clock::now();
    if (dropped_[static_cast<size_t>(from)] && group_.data_rank() == 0) {
      dropped_[static_cast<size_t>(from)] = false;  // slow, not dead: it counts again
      log_.push_back("replica exchange: replica " + std::to_string(from) + " is heard again at clock " +
                     std::to_string(clock) + "; it is no longer dropped");
    }
    const auto commit = commits_.find(clock);
    if (clock < next_apply_ || (commit != commits_.end() && (commit->second >> from & 1u) == 0)) {
      ++late_;  // its clock was applied, or committed, without it
      return Status::Ok();
    }
    if (clock > next_apply_ + kCoordinatedWindow) {
      return err(Errc::kProtocol, "replica exchange: replica " + std::to_string(from) + " sent clock " +
                                      std::to_string(clock) + ", far past clock " + std::to_string(next_apply_));
    }
  }
  // A correct replica sends clock c only once this replica has published c - s - 1.
  if (!options_.coordinated && (clock < next_apply_ || clock > last_begun_ + options_.staleness + 1 || from < 0 || from >= D)) {
    return err(Errc::kProtocol, "replica exchange: replica " + std::to_string(from) + " sent clock " +
                                    std::to_string(clock) + " outside the window [" + std::to_string(next_apply_) +
                                    ", " + std::to_string(last_begun_ + options_.staleness + 1) + "]");
  }
  Clock& c = pending_[clock];
  if (c.have.empty()) {
    c.grads.resize(static_cast<size_t>(D));
    c.stats.resize(static_cast<size_t>(D));
    c.have.assign(static_cast<size_t>(D), false);
  }
  const size_t r = static_cast<size_t>(from);
  if (r >= static_cast<size_t>(D)) return err(Errc::kProtocol, "replica exchange: a message from data rank " + std::to_string(from));
  if (c.have[r]) return err(Errc::kProtocol, "replica exchange: replica " + std::to_string(from) + " sent clock " + std::to_string(clock) + " twice");
  c.grads[r] = std::move(grads);
  c.stats[r] = stats;
  c.have[r] = true;
  ++c.count;
  return Status::Ok();
}

Status ReplicaExchange::receive_available() {
  if (options_.coordinated && group_.data_rank() != 0) HPCTUNE_TRY(receive_commits());
  for (;;) {
    HPCTUNE_ASSIGN(auto message, group_.receive_from_replicas(kGradientTag));
    if (!message) return Status::Ok();
    const std::vector<uint8_t>& b = message->bytes;
    if (b.size() >= kHeaderBytes && get<uint32_t>(b.data()) == kMagic && get<uint64_t>(b.data() + kRunOffset) != options_.run_id) {
      continue;  // left over from an earlier trial on this group (one stopped mid-epoch): not ours
    }
    if (b.size() < kHeaderBytes || get<uint32_t>(b.data()) != kMagic) {
      return err(Errc::kProtocol, "replica exchange: a malformed message from replica " + std::to_string(message->from));
    }
    const bool onebit = get<uint32_t>(b.data() + 4) != 0;
    const int64_t clock = get<int64_t>(b.data() + 8);
    nn::BatchStats stats;
    stats.loss_sum = get<double>(b.data() + 16);
    stats.correct = static_cast<int64_t>(get<double>(b.data() + 24));
    stats.count = static_cast<int64_t>(get<double>(b.data() + 32));
    const std::span<const uint8_t> body(b.data() + kHeaderBytes, b.size() - kHeaderBytes);
    std::vector<float> grads(params_);
    if (onebit != options_.onebit) return err(Errc::kProtocol, "replica exchange: replicas disagree on compression");
    if (onebit) {
      HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, collectives::deserialize(body, params_));
      HPCTUNE_TRY(collectives::decompress(packet, grads));
    } else {
      if (body.size() != params_ * sizeof(float)) {
        return err(Errc::kProtocol, "replica exchange: a gradient of " + std::to_string(body.size()) + " bytes from replica " +
                                        std::to_string(message->from) + ", expected " + std::to_string(params_ * sizeof(float)));
      }
      std::memcpy(grads.data(), body.data(), body.size());
    }
    HPCTUNE_TRY(store(message->from, clock, std::move(grads), stats));
  }
}

void ReplicaExchange::apply_complete(const Apply& apply) {
  if (options_.coordinated) return apply_coordinated(apply);
  const size_t D = static_cast<size_t>(group_.data_size());
  for (auto it = pending_.begin(); it != pending_.end() && it->first == next_apply_ && it->second.count == static_cast<int>(D);
       it = pending_.erase(it)) {
    Clock& c = it->second;
    // In data-rank order: sum = g0 + g1 + ... (the allreduce's two-term sum at two replicas).
    std::memcpy(sum_.data(), c.grads[0].data(), params_ * sizeof(float));
    for (size_t r = 1; r < D; ++r) {
      const float* g = c.grads[r].data();
      float* s = sum_.data();
      for (size_t i = 0; i < params_; ++i) s[i] += g[i];
    }
    nn::BatchStats total;
    double loss = c.stats[0].loss_sum;
    for (size_t r = 1; r < D; ++r) loss += c.stats[r].loss_sum;
    for (size_t r = 0; r < D; ++r) total.correct += c.stats[r].correct, total.count += c.stats[r].count;
    total.loss_sum = loss;
    applied_stats_.push_back(total);
    apply(it->first, sum_);
    ++next_apply_;
  }
}

Status ReplicaExchange::wait_applied(int64_t target, const Apply& apply, const char* why) {
  const bool leader = options_.coordinated && group_.data_rank() == 0;
  // Coordinated: the leader drops a replica silent for the timeout, then goes on; the others wait
  // for its commits past that (their wait may have begun before the leader last heard the dead one).
  const auto deadline = std::chrono::steady_clock::now() + (leader ? 2 : options_.coordinated ? 3 : 1) * group_.timeout();
  for (unsigned spins = 1;; ++spins) {
    HPCTUNE_TRY(receive_available());
    apply_complete(apply);
    if (next_apply_ >= target) return Status::Ok();
    if (leader && spins % 64 == 0) {
      drop_silent();
      apply_complete(apply);
      if (next_apply_ >= target) return Status::Ok();
    }
    if (spins % 64 == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        auto it = pending_.find(next_apply_);
        for (int r = 0; r < group_.data_size(); ++r) {
          if (it == pending_.end() || !it->second.have[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        return err(Errc::kTimeout, std::string("replica exchange: ") + why + ": no gradient of clock " +
                                       std::to_string(next_apply_) + " from replica(s) " + missing + " within " +
                                       std::to_string(group_.timeout().count()) + " ms");
      }
    }
    // Spin (MPI progress) and give the core away only now and then: a yield on a busy machine can
    // cost a whole scheduler time slice, milliseconds, per step; a replica on its own core never
    // needs it, an oversubscribed one still gets its turn. A wait that lasts (a straggler that
    // skips the steps done without it waits for every commit) sleeps between polls instead, so
    // that it does not take a core from the replicas that compute.
    if (spins % 128 == 0) {
      if (spins > 8192) std::this_thread::sleep_for(std::chrono::microseconds(50));
      else std::this_thread::yield();
    }
  }
}

Result<bool> ReplicaExchange::begin_step(int64_t clock, const Apply& apply) {
  if (clock != last_begun_ + 1) return err(Errc::kInternal, "replica exchange: clocks out of order");
  // With backup replicas the leader seldom waits, so it looks for silent replicas at every step
  // too: a dead one must be dropped (and the others told) even when nobody waits for it.
  if (options_.coordinated && group_.data_rank() == 0) drop_silent();
  HPCTUNE_TRY(wait_applied(clock - options_.staleness, apply, "waiting for the slowest replica"));
  if (options_.coordinated && group_.data_rank() != 0 && next_apply_ > clock) {
    last_begun_ = clock;  // applied without this replica: a straggler skips to the others' clock
    return false;
  }
  const int64_t stale = clock - next_apply_;
  staleness_max_ = std::max(staleness_max_, stale);
  staleness_total_ += stale;
  ++begun_;
  last_begun_ = clock;
  events_.push_back({clock, next_apply_, now_ns()});
  return true;
}

size_t ReplicaExchange::slice_begin(int j) const noexcept {
  return params_ * static_cast<size_t>(j) / static_cast<size_t>(group_.data_size());
}

Status ReplicaExchange::collect(int tag, int64_t clock,
                                const std::function<Status(int, std::span<const uint8_t>, const nn::BatchStats&)>& take) {
  const int D = group_.data_size();
  std::vector<bool> have(static_cast<size_t>(D), false);
  have[static_cast<size_t>(group_.data_rank())] = true;
  int missing = D - 1;
  const auto deadline = std::chrono::steady_clock::now() + group_.timeout();
  for (unsigned spins = 1; missing > 0; ++spins) {
    HPCTUNE_ASSIGN(auto message, group_.receive_from_replicas(tag));
    if (message) {
      const std::vector<uint8_t>& b = message->bytes;
      const size_t from = static_cast<size_t>(message->from);
      if (b.size() >= kHeaderBytes && get<uint32_t>(b.data()) == kMagic &&
          get<uint64_t>(b.data() + kRunOffset) != options_.run_id) {
        continue;  // left over from an earlier trial on this group
      }
      if (b.size() < kHeaderBytes || get<uint32_t>(b.data()) != kMagic || get<int64_t>(b.data() + 8) != clock ||
          from >= have.size() || have[from]) {
        return err(Errc::kProtocol, "replica exchange: an unexpected compressed-allreduce message from replica " +
                                        std::to_string(message->from));
      }
      nn::BatchStats st;
      st.loss_sum = get<double>(b.data() + 16);
      st.correct = static_cast<int64_t>(get<double>(b.data() + 24));
      st.count = static_cast<int64_t>(get<double>(b.data() + 32));
      HPCTUNE_TRY(take(message->from, std::span<const uint8_t>(b.data() + kHeaderBytes, b.size() - kHeaderBytes), st));
      have[from] = true;
      --missing;
      continue;
    }
    if (spins % 64 == 0 && std::chrono::steady_clock::now() >= deadline) {
      return err(Errc::kTimeout, "replica exchange: compressed allreduce of clock " + std::to_string(clock) + ": " +
                                     std::to_string(missing) + " replica(s) sent nothing within " +
                                     std::to_string(group_.timeout().count()) + " ms");
    }
    if (spins % 128 == 0) std::this_thread::yield();
  }
  return Status::Ok();
}

Status ReplicaExchange::publish_compressed_allreduce(int64_t clock, std::span<const float> grads,
                                                     const nn::BatchStats& stats, const Apply& apply) {
  constexpr int kScatterTag = 72, kGatherTag = 73;
  const int D = group_.data_size(), self = group_.data_rank();
  auto header = [&](const nn::BatchStats& st) {
    std::vector<uint8_t> m;
    put<uint32_t>(m, kMagic);
    put<uint32_t>(m, 1u);
    put<int64_t>(m, clock);
    put<double>(m, st.loss_sum);
    put<double>(m, static_cast<double>(st.correct));
    put<double>(m, static_cast<double>(st.count));
    put<uint64_t>(m, options_.run_id);
    return m;
  };
  // Phase 1: slice j of this gradient to its owner j. The publish is logged before the first post,
  // as in publish(): another replica may begin its next clock before this one has collected.
  events_.push_back({clock, -1, now_ns()});
  for (int j = 0; j < D; ++j) {
    if (j == self) continue;
    const std::span<const float> slice = grads.subspan(slice_begin(j), slice_begin(j + 1) - slice_begin(j));
    HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, slice_compressors_[static_cast<size_t>(j)].compress(slice));
    std::vector<uint8_t> m = header(stats);
    const std::vector<uint8_t> body = collectives::serialize(packet);
    m.insert(m.end(), body.begin(), body.end());
    bytes_posted_ += static_cast<int64_t>(m.size());
    HPCTUNE_TRY(group_.post_to_replica(j, kScatterTag, std::move(m)));
  }
  const size_t b0 = slice_begin(self), n = slice_begin(self + 1) - b0;
  std::vector<std::vector<float>> parts(static_cast<size_t>(D));
  std::vector<nn::BatchStats> all_stats(static_cast<size_t>(D));
  parts[static_cast<size_t>(self)].assign(grads.begin() + static_cast<long>(b0), grads.begin() + static_cast<long>(b0 + n));
  all_stats[static_cast<size_t>(self)] = stats;
  HPCTUNE_TRY(collect(kScatterTag, clock, [&](int from, std::span<const uint8_t> body, const nn::BatchStats& st) -> Status {
    HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, collectives::deserialize(body, n));
    parts[static_cast<size_t>(from)].resize(n);
    all_stats[static_cast<size_t>(from)] = st;
    return collectives::decompress(packet, parts[static_cast<size_t>(from)]);
  }));
  // This slice's sum, in rank order, compressed once more and sent to every replica.
  std::vector<float> slice_sum(parts[0]);
  for (int r = 1; r < D; ++r) {
    const std::vector<float>& p = parts[static_cast<size_t>(r)];
    for (size_t i = 0; i < n; ++i) slice_sum[i] += p[i];
  }
  HPCTUNE_ASSIGN(const collectives::OneBitPacket sum_packet, owner_compressor_->compress(slice_sum));
  HPCTUNE_TRY(collectives::decompress(sum_packet, std::span<float>(sum_.data() + b0, n)));
  {
    const std::vector<uint8_t> body = collectives::serialize(sum_packet);
    for (int r = 0; r < D; ++r) {
      if (r == self) continue;
      std::vector<uint8_t> m = header(stats);
      m.insert(m.end(), body.begin(), body.end());
      bytes_posted_ += static_cast<int64_t>(m.size());
      HPCTUNE_TRY(group_.post_to_replica(r, kGatherTag, std::move(m)));
    }
  }
  // Phase 2: every other slice's compressed sum from its owner.
  HPCTUNE_TRY(collect(kGatherTag, clock, [&](int from, std::span<const uint8_t> body, const nn::BatchStats&) -> Status {
    const size_t f0 = slice_begin(from), fn = slice_begin(from + 1) - f0;
    HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, collectives::deserialize(body, fn));
    return collectives::decompress(packet, std::span<float>(sum_.data() + f0, fn));
  }));
  nn::BatchStats total;
  double loss = all_stats[0].loss_sum;
  for (int r = 1; r < D; ++r) loss += all_stats[static_cast<size_t>(r)].loss_sum;
  for (const auto& st : all_stats) total.correct += st.correct, total.count += st.count;
  total.loss_sum = loss;
  applied_stats_.push_back(total);
  ++published_;
  apply(clock, sum_);
  ++next_apply_;
  return Status::Ok();
}

Status ReplicaExchange::publish(int64_t clock, std::span<const float> grads, const nn::BatchStats& stats,
                                const Apply& apply) {
  if (clock != last_begun_ || grads.size() != params_) return err(Errc::kInternal, "replica exchange: publish out of order");
  if (options_.compressed_allreduce) return publish_compressed_allreduce(clock, grads, stats, apply);
  std::vector<uint8_t> message;
  std::vector<float> own(params_);
  put<uint32_t>(message, kMagic);
  put<uint32_t>(message, options_.onebit ? 1u : 0u);
  put<int64_t>(message, clock);
  put<double>(message, stats.loss_sum);
  put<double>(message, static_cast<double>(stats.correct));
  put<double>(message, static_cast<double>(stats.count));
  put<uint64_t>(message, options_.run_id);
  if (compressor_) {
    HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, compressor_->compress(grads));
    HPCTUNE_TRY(collectives::decompress(packet, own));  // the sender sums what the others receive
    const std::vector<uint8_t> body = collectives::serialize(packet);
    message.insert(message.end(), body.begin(), body.end());
  } else {
    std::memcpy(own.data(), grads.data(), params_ * sizeof(float));
    const auto* p = reinterpret_cast<const uint8_t*>(grads.data());
    message.insert(message.end(), p, p + params_ * sizeof(float));
  }
  const int self = group_.data_rank();
  // The time is taken before the first post: a receiver may begin its next clock before the post
  // returns here, and the log's publish must not come after what it made possible.
  events_.push_back({clock, -1, now_ns()});
  for (int r = 0; r < group_.data_size(); ++r) {
    if (r == self) continue;
    bytes_posted_ += static_cast<int64_t>(message.size());
    HPCTUNE_TRY(group_.post_to_replica(r, kGradientTag, message));
  }
  ++published_;
  HPCTUNE_TRY(store(self, clock, std::move(own), stats));
  HPCTUNE_TRY(receive_available());
  apply_complete(apply);
  return Status::Ok();
}

Status ReplicaExchange::drain(int64_t end, const Apply& apply) {
  return wait_applied(end, apply, "ending the epoch");
}

nn::BatchStats ReplicaExchange::take_applied_stats(nn::BatchStats& total) {
  nn::BatchStats sum;
  for (const nn::BatchStats& b : applied_stats_) total += b, sum += b;
  applied_stats_.clear();
  return sum;
}

double ReplicaExchange::staleness_mean() const noexcept {
  return begun_ > 0 ? static_cast<double>(staleness_total_) / static_cast<double>(begun_) : 0.0;
}

double ReplicaExchange::bytes_per_step() const noexcept {
  return published_ > 0 ? static_cast<double>(bytes_posted_) / static_cast<double>(published_) : 0.0;
}

// --- coordinated (replica_exchange.h) ----------------------------------------------------------

Status ReplicaExchange::receive_commits() {
  for (;;) {
    HPCTUNE_ASSIGN(auto message, group_.receive_from_replicas(kCommitTag));
    if (!message) return Status::Ok();
    const std::vector<uint8_t>& b = message->bytes;
    constexpr size_t kCommitBytes = 4 + 8 + 8 + 8 + 8 + 4;
    if (b.size() != kCommitBytes || get<uint32_t>(b.data()) != kMagic || message->from != 0) {
      return err(Errc::kProtocol, "replica exchange: a malformed commit from replica " + std::to_string(message->from));
    }
    if (get<uint64_t>(b.data() + 4) != options_.run_id) continue;  // an earlier trial's
    const int64_t clock = get<int64_t>(b.data() + 12);
    const uint64_t mask = get<uint64_t>(b.data() + 20);
    CommitNote note{get<uint64_t>(b.data() + 28), get<uint32_t>(b.data() + 36) != 0};
    if (commits_.count(clock) > 0 || mask == 0 || (mask & 1u) == 0) {
      return err(Errc::kProtocol, "replica exchange: an unexpected commit of clock " + std::to_string(clock));
    }
    known_dropped_ = note.dropped;
    notes_[clock] = note;
    if (clock < next_apply_) {
      // Applied ahead of its commit with every replica's gradient (apply_coordinated): the commit
      // must say the same, or this replica's weights are no longer the others'.
      const uint64_t all = group_.data_size() == 64 ? ~uint64_t{0} : (uint64_t{1} << group_.data_size()) - 1;
      if (mask != all) {
        return err(Errc::kProtocol, "replica exchange: clock " + std::to_string(clock) + " was applied with every "
                                    "replica's gradient, but the leader left one out (a replica died while sending)");
      }
      continue;
    }
    commits_[clock] = mask;
    // The clocks the loop may still ask about: staleness + 1 back from the next to apply, and a margin.
    while (!notes_.empty() && notes_.begin()->first < next_apply_ - options_.staleness - 1024) notes_.erase(notes_.begin());
  }
}

Status ReplicaExchange::post_commit(int64_t clock, uint64_t mask, CommitNote note) {
  std::vector<uint8_t> m;
  put<uint32_t>(m, kMagic);
  put<uint64_t>(m, options_.run_id);
  put<int64_t>(m, clock);
  put<uint64_t>(m, mask);
  put<uint64_t>(m, note.dropped);
  put<uint32_t>(m, note.stop ? 1u : 0u);
  for (int r = 1; r < group_.data_size(); ++r) {
    if (dropped_[static_cast<size_t>(r)]) continue;
    HPCTUNE_TRY(group_.post_to_replica(r, kCommitTag, m));
  }
  notes_[clock] = note;
  while (!notes_.empty() && notes_.begin()->first < clock - options_.staleness - 1024) notes_.erase(notes_.begin());
  return Status::Ok();
}

void ReplicaExchange::apply_clock(int64_t clock, Clock* c, uint64_t mask, const Apply& apply) {
  const size_t D = static_cast<size_t>(group_.data_size());
  bool first = true;
  size_t k = 0;
  nn::BatchStats total;
  double loss = 0.0;
  for (size_t r = 0; r < D; ++r) {
    if ((mask >> r & 1u) == 0) continue;
    const float* g = c->grads[r].data();
    float* s = sum_.data();
    if (first) std::memcpy(s, g, params_ * sizeof(float));
    else for (size_t i = 0; i < params_; ++i) s[i] += g[i];
    loss = first ? c->stats[r].loss_sum : loss + c->stats[r].loss_sum;
    total.correct += c->stats[r].correct, total.count += c->stats[r].count;
    first = false;
    ++k;
    ++included_[r];
  }
  if (k < D) {  // the mean over the rows trained: the D shards' sum scaled as if all had come
    const float scale = static_cast<float>(D) / static_cast<float>(k);
    for (size_t i = 0; i < params_; ++i) sum_[i] *= scale;
  }
  total.loss_sum = loss;
  applied_stats_.push_back(total);
  apply(clock, sum_);
  ++next_apply_;
  ++applied_count_;
}

void ReplicaExchange::apply_coordinated(const Apply& apply) {
  const size_t D = static_cast<size_t>(group_.data_size());
  const bool leader = group_.data_rank() == 0;
  for (;;) {
    auto it = pending_.find(next_apply_);
    uint64_t mask = 0;
    if (leader) {
      if (it == pending_.end() || !it->second.have[0]) return;  // the leader's own gradient first
      size_t live = 0, have = 0;
      for (size_t r = 0; r < D; ++r) {
        live += dropped_[r] ? 0 : 1;
        if (it->second.have[r]) mask |= uint64_t{1} << r, ++have;
      }
      const size_t want = std::max<size_t>(1, static_cast<size_t>(std::ceil(options_.min_fraction * static_cast<double>(D) - 1e-9)));
      if (have < std::min(live, want)) return;
      CommitNote note;
      for (size_t r = 0; r < D; ++r) note.dropped |= dropped_[r] ? uint64_t{1} << r : 0;
      note.stop = options_.leader_stop && options_.leader_stop();
      // A failed post breaks the group; the next group call (or the loop's) then fails.
      if (!post_commit(next_apply_, mask, note).ok()) return;
    } else {
      if (it == pending_.end()) return;
      auto commit = commits_.find(next_apply_);
      if (commit == commits_.end()) {
        // Every replica's gradient is here, all of them count (fraction 1) and none was ever
        // dropped: the leader's commit can only include them all, so apply it now rather than a
        // message later (the commit, when it comes, is checked against it).
        if (options_.min_fraction < 1.0 || known_dropped_ != 0 || it->second.count != static_cast<int>(D)) return;
        mask = D == 64 ? ~uint64_t{0} : (uint64_t{1} << D) - 1;
      } else {
        mask = commit->second;
        for (size_t r = 0; r < D; ++r)
          if ((mask >> r & 1u) != 0 && !it->second.have[r]) return;  // an included gradient still on its way
        commits_.erase(commit);
      }
    }
    // Gradients the commit left out were computed in vain.
    for (size_t r = 0; r < D; ++r)
      if ((mask >> r & 1u) == 0 && it->second.have[r]) ++late_;
    apply_clock(it->first, &it->second, mask, apply);
    pending_.erase(it);
  }
}

void ReplicaExchange::drop_silent() {
  const auto now = std::chrono::steady_clock::now();
  // The leader was away itself (validating, writing a checkpoint): the others' silence since then
  // proves nothing; they count from now.
  if (last_check_ != std::chrono::steady_clock::time_point{} && now - last_check_ > group_.timeout() / 2) {
    std::fill(last_heard_.begin(), last_heard_.end(), now);
  }
  last_check_ = now;
  auto it = pending_.find(next_apply_);
  for (size_t r = 1; r < dropped_.size(); ++r) {
    if (dropped_[r] || (it != pending_.end() && it->second.have[r])) continue;
    if (now - last_heard_[r] > group_.timeout()) {
      dropped_[r] = true;
      log_.push_back("replica exchange: dropped replica " + std::to_string(r) + " at clock " + std::to_string(next_apply_) +
                     " (silent for " + std::to_string(group_.timeout().count()) + " ms); training goes on with the others");
    }
  }
}

std::optional<CommitNote> ReplicaExchange::commit_note(int64_t clock) const {
  auto it = notes_.find(clock);
  if (it == notes_.end()) return std::nullopt;
  return it->second;
}

std::vector<int> ReplicaExchange::dropped_now() const {
  std::vector<int> out;
  for (size_t r = 0; r < dropped_.size(); ++r)
    if (dropped_[r]) out.push_back(static_cast<int>(r));
  return out;
}

std::vector<std::string> ReplicaExchange::take_events() {
  collectives::note_given_up_messages(group_, given_up_seen_, log_);
  std::vector<std::string> out;
  out.swap(log_);
  return out;
}

}  // namespace hpctune::trainers
