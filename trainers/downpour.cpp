// Downpour (downpour.h).
#include "trainers/downpour.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace hpctune::trainers {
namespace {

enum Tag : int { kPushTag = 81, kFetchTag = 82, kParamsTag = 83, kDoneTag = 84, kSummaryTag = 85 };
constexpr uint32_t kMagic = 0x50574450;  // "PDWP"

using Clock = std::chrono::steady_clock;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

void pause(unsigned spins) {
  // Spin (MPI progress), giving the core away only now and then (replica_exchange.cpp says why).
  if (spins % 128 == 0) std::this_thread::yield();
}

}  // namespace

// Reads PODs from a received message, refusing to read past its end.
class DownpourReader {
 public:
  explicit DownpourReader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  Result<T> get() {
    if (at_ + sizeof(T) > b_.size()) return err(Errc::kProtocol, "downpour: a truncated message");
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::span<const uint8_t> rest() const { return {b_.data() + at_, b_.size() - at_}; }

 private:
  const std::vector<uint8_t>& b_;
  size_t at_ = 0;
};

struct Downpour::Shard {
  int index = 0;
  size_t begin = 0, end = 0;
  std::vector<float> weights, accum;  // accum: Adagrad's sum of squares
  int64_t updates = 0;
  std::vector<int64_t> pushes, others_since_fetch;
  std::vector<Clock::time_point> last_heard;
  // A replica is done once it said so and its pushes announced there have all arrived: a large
  // push may still be arriving when the small done message is read (another tag).
  std::vector<int64_t> announced;  // pushes the done message counted; -1 before it
  struct Fetch {
    int from;
    int64_t pushes;  // its replica's pushes before it, to be applied before the answer
  };
  std::vector<Fetch> waiting;
  std::vector<bool> done, dropped;
  int64_t stale_max = 0, stale_count = 0;
  double stale_sum = 0.0;
  bool summary_sent = false;
};

Downpour::Downpour(collectives::TrainerGroup& group) : group_(group) {}
Downpour::~Downpour() = default;

Result<std::unique_ptr<Downpour>> Downpour::create(collectives::TrainerGroup& group, std::span<const float> initial,
                                                   const DownpourOptions& options) {
  const int D = group.data_size();
  if (D < 2 || group.model_size() != 1) return err(Errc::kInvalidArgument, "downpour: needs 2 or more data ranks and model: 1");
  std::unique_ptr<Downpour> d(new Downpour(group));
  d->options_ = options;
  d->params_ = initial.size();
  d->shards_ = options.shards > 0 ? options.shards : (options.own_ranks ? 1 : D);
  if (options.own_ranks ? d->shards_ >= D : d->shards_ > D) {
    return err(Errc::kInvalidArgument, "downpour: " + std::to_string(d->shards_) + " parameter-server shards " +
                                           (options.own_ranks ? "on ranks of their own leave no replica among "
                                                              : "do not fit on the replicas' ") +
                                           std::to_string(D) + " data ranks");
  }
  if (static_cast<size_t>(d->shards_) > d->params_) return err(Errc::kInvalidArgument, "downpour: more shards than parameters");
  d->replicas_ = options.own_ranks ? D - d->shards_ : D;
  d->replica_ = group.data_rank() < d->replicas_;
  d->pending_.assign(d->params_, 0.0f);
  for (int s = 0; s < d->shards_; ++s) {
    if (options.onebit) {
      HPCTUNE_ASSIGN(collectives::OneBitCompressor c,
                     collectives::OneBitCompressor::create(d->slice_end(s) - d->slice_begin(s)));
      d->compressors_.push_back(std::move(c));
    }
    if (d->shard_rank(s) != group.data_rank()) continue;
    auto shard = std::make_unique<Shard>();
    shard->index = s;
    shard->begin = d->slice_begin(s);
    shard->end = d->slice_end(s);
    shard->weights.assign(initial.begin() + static_cast<long>(shard->begin), initial.begin() + static_cast<long>(shard->end));
    if (options.adagrad) shard->accum.assign(shard->weights.size(), 0.0f);
    const size_t R = static_cast<size_t>(d->replicas_);
    shard->pushes.assign(R, 0);
    shard->others_since_fetch.assign(R, 0);
    shard->last_heard.assign(R, Clock::now());
    shard->announced.assign(R, -1);
    shard->done.assign(R, false);
    shard->dropped.assign(R, false);
    d->shard_ = std::move(shard);
  }
  return d;
}

size_t Downpour::slice_begin(int shard) const noexcept {
  return params_ * static_cast<size_t>(shard) / static_cast<size_t>(shards_);
}
size_t Downpour::slice_end(int shard) const noexcept { return slice_begin(shard + 1); }
int Downpour::shard_rank(int shard) const noexcept {
  return options_.own_ranks ? group_.data_size() - shards_ + shard : shard;
}

std::vector<uint8_t> Downpour::start_message() const {
  std::vector<uint8_t> m;
  put<uint32_t>(m, kMagic);
  put<uint64_t>(m, options_.run_id);
  return m;
}

// Reads a message's magic and run id: false for another run's message (dropped unread).
Result<bool> Downpour::ours(DownpourReader& in, int from) const {
  HPCTUNE_ASSIGN(const uint32_t magic, in.get<uint32_t>());
  HPCTUNE_ASSIGN(const uint64_t run, in.get<uint64_t>());
  if (magic != kMagic) return err(Errc::kProtocol, "downpour: a malformed message from data rank " + std::to_string(from));
  return run == options_.run_id;
}

Status Downpour::apply_push(int from, const std::vector<uint8_t>& bytes) {
  Shard& sh = *shard_;
  const size_t n = sh.end - sh.begin;
  DownpourReader in(bytes);
  HPCTUNE_ASSIGN(const bool mine, ours(in, from));
  if (!mine) return Status::Ok();  // an earlier trial's leftover
  const uint32_t magic = kMagic;
  HPCTUNE_ASSIGN(const uint32_t shard, in.get<uint32_t>());
  HPCTUNE_ASSIGN(const int64_t clock, in.get<int64_t>());
  HPCTUNE_ASSIGN(const float lr, in.get<float>());
  HPCTUNE_ASSIGN(const uint32_t onebit, in.get<uint32_t>());
  (void)clock;
  if (magic != kMagic || shard != static_cast<uint32_t>(sh.index) || (onebit != 0) != options_.onebit || !std::isfinite(lr)) {
    return err(Errc::kProtocol, "downpour: a malformed push from replica " + std::to_string(from));
  }
  std::vector<float>& g = scratch_;
  g.resize(n);
  if (onebit) {
    HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, collectives::deserialize(in.rest(), n));
    HPCTUNE_TRY(collectives::decompress(packet, g));
  } else {
    if (in.rest().size() != n * sizeof(float)) return err(Errc::kProtocol, "downpour: a push of the wrong size");
    std::memcpy(g.data(), in.rest().data(), n * sizeof(float));
  }
  if (options_.adagrad) {
    for (size_t i = 0; i < n; ++i) {
      sh.accum[i] += g[i] * g[i];
      sh.weights[i] -= lr * g[i] / (std::sqrt(sh.accum[i]) + 1e-8f);
    }
  } else {
    for (size_t i = 0; i < n; ++i) sh.weights[i] -= lr * g[i];
  }
  const size_t r = static_cast<size_t>(from);
  const int64_t stale = sh.others_since_fetch[r];
  sh.stale_max = std::max(sh.stale_max, stale);
  sh.stale_sum += static_cast<double>(stale);
  ++sh.stale_count;
  for (size_t q = 0; q < sh.others_since_fetch.size(); ++q)
    if (q != r) ++sh.others_since_fetch[q];
  ++sh.pushes[r];
  ++sh.updates;
  return Status::Ok();
}

// A replica's message has come: it is alive (and counts again if it was dropped).
Status Downpour::note_heard(int from) {
  if (from < 0 || from >= replicas_) return err(Errc::kProtocol, "downpour: a message from data rank " + std::to_string(from) + ", not a replica");
  Shard& sh = *shard_;
  const size_t r = static_cast<size_t>(from);
  sh.last_heard[r] = Clock::now();
  if (sh.dropped[r]) {  // slow, not dead: it counts again
    sh.dropped[r] = false;
    events_.push_back("downpour: shard " + std::to_string(sh.index) + " hears replica " + std::to_string(from) +
                      " again; it is no longer dropped");
  }
  return Status::Ok();
}

// A message's count of the pushes its replica had sent before it (a fetch's or a done message's).
Result<int64_t> Downpour::pushes_before(DownpourReader& in, int from, const char* what) const {
  HPCTUNE_ASSIGN(const int64_t pushes, in.get<int64_t>());
  if (pushes < 0 || !in.rest().empty())
    return err(Errc::kProtocol, std::string("downpour: a malformed ") + what + " from data rank " + std::to_string(from));
  return pushes;
}

// Fetches are answered once the pushes their replica sent before them have been applied: a replica
// reads its own writes even when a large push is still arriving behind its small fetch request.
Status Downpour::answer_fetches() {
  Shard& sh = *shard_;
  for (;;) {
    HPCTUNE_ASSIGN(auto fetch, group_.receive_from_replicas(kFetchTag));
    if (!fetch) break;
    DownpourReader request(fetch->bytes);
    HPCTUNE_ASSIGN(const bool mine, ours(request, fetch->from));
    if (!mine) continue;
    HPCTUNE_TRY(note_heard(fetch->from));
    HPCTUNE_ASSIGN(const uint32_t shard, request.get<uint32_t>());
    HPCTUNE_ASSIGN(const int64_t pushes, pushes_before(request, fetch->from, "fetch"));
    if (shard != static_cast<uint32_t>(sh.index))
      return err(Errc::kProtocol, "downpour: a fetch of shard " + std::to_string(shard) + " from data rank " +
                                      std::to_string(fetch->from) + " reached shard " + std::to_string(sh.index));
    // A replica waits for its answer before it fetches again: at most one fetch each is waiting.
    if (std::any_of(sh.waiting.begin(), sh.waiting.end(), [&](const Shard::Fetch& f) { return f.from == fetch->from; }))
      return err(Errc::kProtocol, "downpour: a second fetch from data rank " + std::to_string(fetch->from) +
                                      " before the first was answered");
    sh.waiting.push_back({fetch->from, pushes});
  }
  const size_t n = sh.end - sh.begin;
  for (auto it = sh.waiting.begin(); it != sh.waiting.end();) {
    const size_t r = static_cast<size_t>(it->from);
    if (sh.pushes[r] < it->pushes) {
      ++it;
      continue;
    }
    sh.others_since_fetch[r] = 0;
    std::vector<uint8_t> reply = start_message();
    put<uint32_t>(reply, static_cast<uint32_t>(sh.index));
    put<int64_t>(reply, sh.updates);
    const auto* p = reinterpret_cast<const uint8_t*>(sh.weights.data());
    reply.insert(reply.end(), p, p + n * sizeof(float));
    HPCTUNE_TRY(group_.post_to_replica(it->from, kParamsTag, std::move(reply)));
    it = sh.waiting.erase(it);
  }
  return Status::Ok();
}

Status Downpour::handle_shard_messages() {
  if (!shard_) return Status::Ok();
  Shard& sh = *shard_;
  for (;;) {
    HPCTUNE_ASSIGN(auto push, group_.receive_from_replicas(kPushTag));
    if (!push) break;
    HPCTUNE_TRY(note_heard(push->from));
    HPCTUNE_TRY(apply_push(push->from, push->bytes));
  }
  HPCTUNE_TRY(answer_fetches());
  for (;;) {
    HPCTUNE_ASSIGN(auto done, group_.receive_from_replicas(kDoneTag));
    if (!done) break;
    DownpourReader request(done->bytes);
    HPCTUNE_ASSIGN(const bool mine, ours(request, done->from));
    if (!mine) continue;
    HPCTUNE_TRY(note_heard(done->from));
    HPCTUNE_ASSIGN(sh.announced[static_cast<size_t>(done->from)], pushes_before(request, done->from, "done message"));
  }
  for (size_t r = 0; r < sh.done.size(); ++r)
    if (sh.announced[r] >= 0 && sh.pushes[r] >= sh.announced[r]) sh.done[r] = true;
  // A replica silent for the group's timeout is dropped (it died or hangs): the others go on.
  const auto now = Clock::now();
  for (size_t r = 0; r < sh.done.size(); ++r) {
    if (sh.done[r] || sh.dropped[r] || static_cast<int>(r) == group_.data_rank()) continue;
    if (now - sh.last_heard[r] > group_.timeout()) {
      sh.dropped[r] = true;
      events_.push_back("downpour: shard " + std::to_string(sh.index) + " dropped replica " + std::to_string(r) +
                        " (silent for " + std::to_string(group_.timeout().count()) + " ms after " +
                        std::to_string(sh.pushes[r]) + " pushes); training goes on with the others");
    }
  }
  return Status::Ok();
}

bool Downpour::shard_finished() const noexcept {
  if (!shard_) return true;
  // The leader (replica 0) must be done: without it the trial is lost anyway, and a leader only
  // slow for a while (validating, checkpointing on a busy machine) must find its shards serving.
  if (!shard_->done[0]) return false;
  for (size_t r = 0; r < shard_->done.size(); ++r)
    if (!shard_->done[r] && !shard_->dropped[r]) return false;
  return true;
}

Status Downpour::serve() { return handle_shard_messages(); }

Status Downpour::fetch(std::span<float> params) {
  if (!replica_ || params.size() != params_) return err(Errc::kInternal, "downpour: fetch by a non-replica");
  std::vector<bool> have(static_cast<size_t>(shards_), false);
  std::vector<int64_t> updates_fetched(static_cast<size_t>(shards_), 0);
  int missing = shards_;
  for (int s = 0; s < shards_; ++s) {
    if (shard_rank(s) == group_.data_rank()) {
      std::copy(shard_->weights.begin(), shard_->weights.end(), params.begin() + static_cast<long>(shard_->begin));
      updates_fetched[static_cast<size_t>(s)] = shard_->updates;
      shard_->others_since_fetch[static_cast<size_t>(group_.data_rank())] = 0;
      have[static_cast<size_t>(s)] = true;
      --missing;
      continue;
    }
    std::vector<uint8_t> request = start_message();
    put<uint32_t>(request, static_cast<uint32_t>(s));
    put<int64_t>(request, pushes_sent_);
    bytes_posted_ += static_cast<int64_t>(request.size());
    HPCTUNE_TRY(group_.post_to_replica(shard_rank(s), kFetchTag, std::move(request)));
  }
  // Until the replies came and this replica's own pushes have gone whole: a push is never left
  // half-sent behind a fetch (a replica that dies after its fetch has delivered its pushes).
  const auto deadline = Clock::now() + group_.timeout();
  bool delivered = false;
  for (unsigned spins = 1; missing > 0 || !delivered; ++spins) {
    HPCTUNE_TRY(handle_shard_messages());
    if (missing == 0) {  // the pushes, once the replies are in
      HPCTUNE_ASSIGN(delivered, group_.posts_delivered(kPushTag));
    }
    HPCTUNE_ASSIGN(auto reply, group_.receive_from_replicas(kParamsTag));
    if (reply) {
      DownpourReader in(reply->bytes);
      HPCTUNE_ASSIGN(const bool mine, ours(in, reply->from));
      if (!mine) continue;
      const uint32_t magic = kMagic;
      HPCTUNE_ASSIGN(const uint32_t s, in.get<uint32_t>());
      HPCTUNE_ASSIGN(const int64_t updates, in.get<int64_t>());
      if (magic != kMagic || s >= static_cast<uint32_t>(shards_) || shard_rank(static_cast<int>(s)) != reply->from ||
          in.rest().size() != (slice_end(static_cast<int>(s)) - slice_begin(static_cast<int>(s))) * sizeof(float)) {
        return err(Errc::kProtocol, "downpour: a malformed parameter reply from data rank " + std::to_string(reply->from));
      }
      std::memcpy(params.data() + slice_begin(static_cast<int>(s)), in.rest().data(), in.rest().size());
      updates_fetched[s] = updates;
      if (!have[s]) have[s] = true, --missing;
      continue;
    }
    if (spins % 64 == 0 && Clock::now() >= deadline) {
      std::string which;
      for (int s = 0; s < shards_; ++s)
        if (!have[static_cast<size_t>(s)]) which += (which.empty() ? "" : ", ") + std::to_string(s);
      if (which.empty()) which = "holding this replica's pushes";
      group_.abandon();  // the group ends and the attempt runs again, from the last checkpoint
      return err(Errc::kTimeout, "downpour: parameter-server shard(s) " + which + " did not answer a fetch within " +
                                     std::to_string(group_.timeout().count()) + " ms (a dead shard fails the attempt)");
    }
    pause(spins);
  }
  updates_in_params_ = 0;
  for (const int64_t u : updates_fetched) updates_in_params_ += u;
  return Status::Ok();
}

Status Downpour::push(int64_t clock, std::span<const float> grads, float lr) {
  if (!replica_ || grads.size() != params_) return err(Errc::kInternal, "downpour: push by a non-replica");
  for (size_t i = 0; i < params_; ++i) pending_[i] += grads[i];
  ++steps_;
  if (++pending_steps_ < options_.push_interval) return handle_shard_messages();
  pending_steps_ = 0;
  ++pushes_sent_;
  for (int s = 0; s < shards_; ++s) {
    const size_t b = slice_begin(s), e = slice_end(s);
    std::vector<uint8_t> message = start_message();
    put<uint32_t>(message, static_cast<uint32_t>(s));
    put<int64_t>(message, clock);
    put<float>(message, lr);
    put<uint32_t>(message, options_.onebit ? 1u : 0u);
    const std::span<const float> slice(pending_.data() + b, e - b);
    if (options_.onebit) {
      HPCTUNE_ASSIGN(const collectives::OneBitPacket packet, compressors_[static_cast<size_t>(s)].compress(slice));
      const std::vector<uint8_t> body = collectives::serialize(packet);
      message.insert(message.end(), body.begin(), body.end());
    } else {
      const auto* p = reinterpret_cast<const uint8_t*>(slice.data());
      message.insert(message.end(), p, p + slice.size() * sizeof(float));
    }
    if (shard_rank(s) == group_.data_rank()) {
      HPCTUNE_TRY(apply_push(group_.data_rank(), message));  // this rank's own shard: no wire
      continue;
    }
    bytes_posted_ += static_cast<int64_t>(message.size());
    HPCTUNE_TRY(group_.post_to_replica(shard_rank(s), kPushTag, std::move(message)));
  }
  std::fill(pending_.begin(), pending_.end(), 0.0f);
  return handle_shard_messages();
}

Status Downpour::send_summary() {
  Shard& sh = *shard_;
  std::vector<uint8_t> m = start_message();
  put<uint32_t>(m, static_cast<uint32_t>(sh.index));
  put<int64_t>(m, sh.updates);
  put<int64_t>(m, sh.stale_max);
  put<double>(m, sh.stale_sum);
  put<int64_t>(m, sh.stale_count);
  put<uint32_t>(m, static_cast<uint32_t>(replicas_));
  for (size_t r = 0; r < sh.pushes.size(); ++r) {
    put<int64_t>(m, sh.pushes[r]);
    put<uint32_t>(m, sh.dropped[r] ? 1u : 0u);
  }
  // The slice's final weights: every replica is done or dropped, so no push can change them.
  const auto* w = reinterpret_cast<const uint8_t*>(sh.weights.data());
  m.insert(m.end(), w, w + sh.weights.size() * sizeof(float));
  sh.summary_sent = true;
  if (group_.data_rank() == 0) return absorb_summary(0, m);
  return group_.post_to_replica(0, kSummaryTag, std::move(m));
}

Status Downpour::absorb_summary(int from, const std::vector<uint8_t>& bytes) {
  DownpourReader in(bytes);
  HPCTUNE_ASSIGN(const bool mine, ours(in, from));
  if (!mine) return Status::Ok();
  const uint32_t magic = kMagic;
  HPCTUNE_ASSIGN(const uint32_t shard, in.get<uint32_t>());
  HPCTUNE_ASSIGN(const int64_t updates, in.get<int64_t>());
  HPCTUNE_ASSIGN(const int64_t stale_max, in.get<int64_t>());
  HPCTUNE_ASSIGN(const double stale_sum, in.get<double>());
  HPCTUNE_ASSIGN(const int64_t stale_count, in.get<int64_t>());
  HPCTUNE_ASSIGN(const uint32_t replicas, in.get<uint32_t>());
  if (magic != kMagic || shard >= static_cast<uint32_t>(shards_) || shard_rank(static_cast<int>(shard)) != from ||
      replicas != static_cast<uint32_t>(replicas_) || summaries_seen_[shard]) {
    return err(Errc::kProtocol, "downpour: a malformed summary from data rank " + std::to_string(from));
  }
  summaries_seen_[shard] = true;
  summary_.updates += updates;
  summary_.staleness_max = std::max(summary_.staleness_max, stale_max);
  stale_sum_ += stale_sum;
  stale_count_ += stale_count;
  summary_.staleness_mean = stale_count_ > 0 ? stale_sum_ / static_cast<double>(stale_count_) : 0.0;
  for (size_t r = 0; r < replicas; ++r) {
    HPCTUNE_ASSIGN(const int64_t pushes, in.get<int64_t>());
    HPCTUNE_ASSIGN(const uint32_t dropped, in.get<uint32_t>());
    // Every shard receives every push: the counts agree; a replica dropped by any shard is dropped.
    summary_.pushes[r] = std::max(summary_.pushes[r], pushes);
    if (dropped) summary_.dropped[r] = true;
  }
  const size_t b = slice_begin(static_cast<int>(shard)), e = slice_end(static_cast<int>(shard));
  if (in.rest().size() != (e - b) * sizeof(float)) {
    return err(Errc::kProtocol, "downpour: a summary from data rank " + std::to_string(from) + " without its slice's weights");
  }
  std::memcpy(final_.data() + b, in.rest().data(), in.rest().size());
  return Status::Ok();
}

Status Downpour::finish(std::span<float> final_params) {
  if (!final_params.empty() && (group_.data_rank() != 0 || final_params.size() != params_)) {
    return err(Errc::kInternal, "downpour: the final weights go to the leader's whole parameter vector");
  }
  summary_.pushes.assign(static_cast<size_t>(replicas_), 0);
  summary_.dropped.assign(static_cast<size_t>(replicas_), false);
  summaries_seen_.assign(static_cast<size_t>(shards_), false);
  if (group_.data_rank() == 0) final_.assign(params_, 0.0f);
  if (replica_) {
    for (int s = 0; s < shards_; ++s) {
      if (shard_rank(s) == group_.data_rank()) {
        shard_->done[static_cast<size_t>(group_.data_rank())] = true;
        continue;
      }
      std::vector<uint8_t> done = start_message();
      put<int64_t>(done, pushes_sent_);
      HPCTUNE_TRY(group_.post_to_replica(shard_rank(s), kDoneTag, std::move(done)));
    }
  }
  const bool leader = group_.data_rank() == 0;
  int summaries = 0;
  // Serves until every replica is done or dropped (each shard drops a silent replica after the
  // group's timeout), so the wait is bounded by that timeout past the slowest live replica; the
  // leader then waits for the summaries with one more timeout.
  Clock::time_point deadline = Clock::time_point::max();
  for (unsigned spins = 1;; ++spins) {
    HPCTUNE_TRY(handle_shard_messages());
    if (shard_ && !shard_->summary_sent && shard_finished()) HPCTUNE_TRY(send_summary());
    if (leader) {
      for (;;) {
        HPCTUNE_ASSIGN(auto m, group_.receive_from_replicas(kSummaryTag));
        if (!m) break;
        HPCTUNE_TRY(absorb_summary(m->from, m->bytes));
      }
      summaries = static_cast<int>(std::count(summaries_seen_.begin(), summaries_seen_.end(), true));
    }
    // A rank's part is done once its summary (a shard's) has gone and, past the leader, once what
    // it posted here has reached its receivers whole: a summary holds a slice's weights, past MPI's
    // eager limit, so its receiver takes it only while the sender still moves it on.
    const bool sent = !shard_ || shard_->summary_sent;
    bool own_done = sent;
    if (sent && !leader) {
      HPCTUNE_ASSIGN(const bool summary_gone, group_.posts_delivered(kSummaryTag));
      HPCTUNE_ASSIGN(const bool done_gone, group_.posts_delivered(kDoneTag));
      own_done = summary_gone && done_gone;
    }
    if (own_done && (!leader || summaries == shards_)) {
      group_.give_up_arriving();  // from a replica that died half-way through a message
      if (leader && !final_params.empty()) {
        std::copy(final_.begin(), final_.end(), final_params.begin());
        updates_in_params_ = summary_.updates;
      }
      return Status::Ok();
    }
    if (sent && deadline == Clock::time_point::max()) deadline = Clock::now() + 2 * group_.timeout();
    if (spins % 64 == 0 && Clock::now() >= deadline) {
      group_.abandon();
      if (!leader)
        return err(Errc::kTimeout, "downpour: this rank's last messages (done messages, a shard's summary) were not "
                                   "taken within twice the group's timeout (their receiver died)");
      return err(Errc::kTimeout, "downpour: " + std::to_string(shards_ - summaries) +
                                     " parameter-server shard(s) sent no summary (a dead shard fails the attempt)");
    }
    pause(spins);
  }
}

std::vector<std::string> Downpour::take_events() {
  collectives::note_given_up_messages(group_, given_up_seen_, events_);
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

double Downpour::bytes_per_step() const noexcept {
  return steps_ > 0 ? static_cast<double>(bytes_posted_) / static_cast<double>(steps_) : 0.0;
}

}  // namespace hpctune::trainers
