// MpiTrainerGroup (trainer_group_mpi.h).
#include "collectives/trainer_group_mpi.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <string>
#include <thread>

#include "collectives/allreduce_detail.h"

namespace hpctune::collectives {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The watchdog test's hung rank (see the header): true once, on the chosen rank.
bool test_hang_requested(int rank) {
  const char* file = std::getenv("HPCTUNE_TEST_HANG_FILE");
  if (file == nullptr || *file == '\0') return false;
  const char* which = std::getenv("HPCTUNE_TEST_HANG_RANK");
  if (rank != (which ? std::atoi(which) : 1)) return false;
  std::error_code ec;
  if (std::filesystem::exists(file, ec)) return false;
  std::ofstream(file) << "hung\n";
  return true;
}

}  // namespace

// Marks a call as running for the watchdog, and the group as broken when the call fails.
class MpiTrainerGroup::Scope {
 public:
  explicit Scope(MpiTrainerGroup& group) : group_(group) { group_.started_ns_.store(now_ns()); }
  ~Scope() { group_.started_ns_.store(0); }
  Status done(Status status) {
    if (!status.ok()) group_.broken_.store(true);
    return status;
  }

 private:
  MpiTrainerGroup& group_;
};

Result<std::unique_ptr<MpiTrainerGroup>> MpiTrainerGroup::create(MPI_Comm world, const MpiGroupOptions& options) {
  int world_size = 0, world_rank = 0;
  HPCTUNE_TRY(mpi_status(MPI_Comm_size(world, &world_size), "MPI_Comm_size"));
  HPCTUNE_TRY(mpi_status(MPI_Comm_rank(world, &world_rank), "MPI_Comm_rank"));
  if (options.data < 1 || options.model < 1 || options.data * options.model != world_size) {
    return err(Errc::kInvalidArgument, "a group of " + std::to_string(options.data) + " x " +
                                           std::to_string(options.model) + " ranks does not match the " +
                                           std::to_string(world_size) + " MPI ranks");
  }
  if (options.timeout.count() <= 0) return err(Errc::kInvalidArgument, "the group timeout must be > 0");
  std::unique_ptr<MpiTrainerGroup> group(new MpiTrainerGroup());
  group->options_ = options;
  group->rank_ = world_rank;
  const int data_rank = world_rank / options.model, model_rank = world_rank % options.model;
  HPCTUNE_ASSIGN(group->control_, Communicator::duplicate(world));
  HPCTUNE_ASSIGN(group->pipeline_, Communicator::split(world, data_rank, model_rank));
  HPCTUNE_ASSIGN(group->replicas_, Communicator::split(world, model_rank, data_rank));
  HPCTUNE_ASSIGN(group->messages_, Communicator::duplicate(group->replicas_.handle()));
  if (options.data > 1) {
    AllreduceOptions ao;
    ao.algorithm = options.algorithm;
    ao.timeout = options.timeout;
    HPCTUNE_ASSIGN(Allreducer allreducer, Allreducer::create(group->replicas_.handle(), ao));
    group->allreducer_ = std::make_unique<Allreducer>(std::move(allreducer));
  }
  return group;
}

MpiTrainerGroup::~MpiTrainerGroup() {
  // A send still pending (a replica that stopped receiving) is cancelled; MPI may still read its
  // buffer until the cancel completes, so the buffers stay allocated until the process ends.
  // Receives still arriving, and those given up, may be written until then too.
  (void)progress_posted();
  give_up_arriving();
  if (!unfinished_receives_.empty()) {
    (void)new std::vector<std::vector<uint8_t>>(std::move(unfinished_receives_));  // intentionally never freed
  }
  if (posted_.empty()) return;
  auto* kept = new std::vector<Posted>(std::move(posted_));  // intentionally never freed
  for (Posted& p : *kept) {
    if (p.request == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&p.request);
    MPI_Request_free(&p.request);
  }
}

std::optional<Clock::time_point> MpiTrainerGroup::collective_started() const noexcept {
  const int64_t ns = started_ns_.load();
  if (ns == 0) return std::nullopt;
  return Clock::time_point(std::chrono::nanoseconds(ns));
}

Status MpiTrainerGroup::check_usable() const {
  if (broken_.load()) return err(Errc::kFailed, "the trainer group failed earlier and must be torn down");
  return Status::Ok();
}

// Polls one request to completion or the deadline. Tests in a tight loop first (pipeline messages
// are latency-bound), then yields and finally sleeps briefly: ranks may share cores.
Status MpiTrainerGroup::poll(MPI_Request& request, const char* what, bool receive) {
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  for (unsigned spins = 1;; ++spins) {
    int done = 0;
    Status s = mpi_status(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (!s.ok()) return s;
    if (done) return Status::Ok();
    if (spins < 256) continue;
    const auto now = Clock::now();
    if (now >= deadline) {
      // The group is torn down after this error. A pending receive is cancelled so that nothing
      // lands in its buffer later; collectives cannot be cancelled or freed (MPI forbids it) and
      // pending sends are left to finish: the process ends soon.
      if (receive) {
        MPI_Cancel(&request);
        MPI_Request_free(&request);
      }
      return err(Errc::kTimeout, std::string(what) + ": no answer from the group within " +
                                     std::to_string(options_.timeout.count()) + " ms");
    }
    if (now - start < std::chrono::milliseconds(5)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

Status MpiTrainerGroup::sum_gradients(std::span<float> grads) {
  HPCTUNE_TRY(check_usable());
  Scope scope(*this);
  if (test_hang_requested(rank_)) std::this_thread::sleep_for(std::chrono::hours(1));
  if (!allreducer_) return Status::Ok();  // one replica: the sum is the buffer itself
  return scope.done(allreducer_->sum(grads));
}

Result<TrainerGroup::GradientBuffer> MpiTrainerGroup::gradient_buffer(size_t count) {
  HPCTUNE_TRY(check_usable());
  if (!allreducer_) return GradientBuffer{};
  Scope scope(*this);
  auto shared = allreducer_->shared_buffer(count);
  if (!shared.ok()) return scope.done(std::move(shared).error()).error();
  return GradientBuffer{shared->data, std::move(shared->owner)};
}

std::string MpiTrainerGroup::shared_memory() const {
  return allreducer_ ? allreducer_->shared_memory() : "one replica";
}

Status MpiTrainerGroup::sum(std::span<double> values) {
  HPCTUNE_TRY(check_usable());
  Scope scope(*this);
  if (values.size() > static_cast<size_t>(INT_MAX)) return scope.done(err(Errc::kInvalidArgument, "sum: too many values"));
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = mpi_status(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                                       MPI_SUM, control_.handle(), &request),
                        "MPI_Iallreduce");
  if (s.ok()) s = poll(request, "sum over the group");
  return scope.done(std::move(s));
}

Result<bool> MpiTrainerGroup::broadcast_flag(bool value) {
  HPCTUNE_TRY(check_usable());
  Scope scope(*this);
  int flag = value ? 1 : 0;
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = mpi_status(MPI_Ibcast(&flag, 1, MPI_INT, 0, control_.handle(), &request), "MPI_Ibcast");
  if (s.ok()) s = poll(request, "broadcast of the leader's flag");
  HPCTUNE_TRY(scope.done(std::move(s)));
  return flag != 0;
}

Status MpiTrainerGroup::broadcast_bytes(std::vector<uint8_t>& bytes) {
  HPCTUNE_TRY(check_usable());
  Scope scope(*this);
  uint64_t length = bytes.size();
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = mpi_status(MPI_Ibcast(&length, 1, MPI_UINT64_T, 0, control_.handle(), &request), "MPI_Ibcast");
  if (s.ok()) s = poll(request, "broadcast of a length");
  if (s.ok() && length > static_cast<uint64_t>(INT_MAX)) s = err(Errc::kInvalidArgument, "broadcast_bytes: too long");
  if (s.ok()) {
    bytes.resize(length);
    if (length > 0) {
      s = mpi_status(MPI_Ibcast(bytes.data(), static_cast<int>(length), MPI_BYTE, 0, control_.handle(), &request),
                     "MPI_Ibcast");
      if (s.ok()) s = poll(request, "broadcast of bytes");
    }
  }
  return scope.done(std::move(s));
}

Status MpiTrainerGroup::send_to_model_rank(int model_rank, std::span<const float> data, int tag) {
  HPCTUNE_TRY(check_usable());
  Scope scope(*this);
  if (model_rank < 0 || model_rank >= options_.model || data.size() > static_cast<size_t>(INT_MAX)) {
    return scope.done(err(Errc::kInvalidArgument, "send to model rank " + std::to_string(model_rank)));
  }
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = mpi_status(MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_FLOAT, model_rank, tag,
                                  pipeline_.handle(), &request),
                        "MPI_Isend");
  if (s.ok()) s = poll(request, "send to the next/previous pipeline stage");
  return scope.done(std::move(s));
}

Status MpiTrainerGroup::recv_from_model_rank(int model_rank, std::span<float> data, int tag) {
  HPCTUNE_TRY(check_usable());
  Scope scope(*this);
  if (model_rank < 0 || model_rank >= options_.model || data.size() > static_cast<size_t>(INT_MAX)) {
    return scope.done(err(Errc::kInvalidArgument, "receive from model rank " + std::to_string(model_rank)));
  }
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = mpi_status(MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_FLOAT, model_rank, tag,
                                  pipeline_.handle(), &request),
                        "MPI_Irecv");
  if (s.ok()) s = poll(request, "receive from the next/previous pipeline stage", /*receive=*/true);
  return scope.done(std::move(s));
}

}  // namespace hpctune::collectives

namespace hpctune::collectives {

Status MpiTrainerGroup::progress_posted() {
  for (size_t i = 0; i < posted_.size();) {
    int done = 0;
    HPCTUNE_TRY(mpi_status(MPI_Test(&posted_[i].request, &done, MPI_STATUS_IGNORE), "MPI_Test"));
    if (done) {
      posted_[i] = std::move(posted_.back());
      posted_.pop_back();
    } else {
      ++i;
    }
  }
  return Status::Ok();
}

Status MpiTrainerGroup::post_to_replica(int data_rank, int tag, std::vector<uint8_t> bytes) {
  HPCTUNE_TRY(check_usable());
  if (data_rank < 0 || data_rank >= options_.data || data_rank == this->data_rank() ||
      bytes.size() > kMaxReplicaMessageBytes) {
    return err(Errc::kInvalidArgument, "post to replica " + std::to_string(data_rank) + " (" +
                                           std::to_string(bytes.size()) + " bytes)");
  }
  Posted p;
  p.tag = tag;
  p.bytes = std::move(bytes);
  Status s = mpi_status(MPI_Isend(p.bytes.data(), static_cast<int>(p.bytes.size()), MPI_BYTE, data_rank, tag,
                                  messages_.handle(), &p.request),
                        "MPI_Isend to replica " + std::to_string(data_rank));
  if (!s.ok()) {
    broken_.store(true);
    return s;
  }
  posted_.push_back(std::move(p));
  s = progress_posted();
  if (!s.ok()) broken_.store(true);
  return s;
}

Result<std::optional<TrainerGroup::ReplicaMessage>> MpiTrainerGroup::receive_from_replicas(int tag) {
  HPCTUNE_TRY(check_usable());
  auto fail = [this](Status s) -> Status {
    if (!s.ok()) broken_.store(true);
    return s;
  };
  HPCTUNE_TRY(fail(progress_posted()));
  HPCTUNE_TRY(fail(match_arriving(tag)));
  auto taken = take_arrived(tag);
  if (!taken.ok()) return fail(taken.error()).error();
  return taken;
}

Result<bool> MpiTrainerGroup::posts_delivered(int tag) {
  HPCTUNE_TRY(check_usable());
  Status s = progress_posted();
  if (!s.ok()) {
    broken_.store(true);
    return s.error();
  }
  return std::none_of(posted_.begin(), posted_.end(), [tag](const Posted& p) { return p.tag == tag; });
}

// A matched receive cannot really be cancelled: MPI may still write its buffer, which is kept.
void MpiTrainerGroup::give_up(Arriving& a) noexcept {
  if (a.request != MPI_REQUEST_NULL) {
    MPI_Cancel(&a.request);
    MPI_Request_free(&a.request);
  }
  unfinished_receives_.push_back(std::move(a.bytes));
}

// Only what is still arriving: a message that came whole stays for a later receive (whose reader
// drops another run's leftovers), and MPI_Cancel on its completed request would be an error.
void MpiTrainerGroup::give_up_arriving() noexcept {
  for (size_t i = 0; i < arriving_.size();) {
    Arriving& a = arriving_[i];
    int done = 0;
    if (a.request != MPI_REQUEST_NULL) (void)MPI_Test(&a.request, &done, MPI_STATUS_IGNORE);
    if (a.request == MPI_REQUEST_NULL) {  // arrived whole
      ++i;
      continue;
    }
    give_up(a);
    arriving_.erase(arriving_.begin() + static_cast<long>(i));
  }
}

// Posts a receive (MPI_Imrecv) for each message of `tag` that has come in (at most 64 a call).
// Polled, not MPI_Mrecv: a large message arrives in fragments that its sender pushes.
Status MpiTrainerGroup::match_arriving(int tag) {
  for (int n = 0; n < 64; ++n) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    HPCTUNE_TRY(mpi_status(MPI_Improbe(MPI_ANY_SOURCE, tag, messages_.handle(), &flag, &message, &status), "MPI_Improbe"));
    if (!flag) return Status::Ok();
    int count = 0;
    HPCTUNE_TRY(mpi_status(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count"));
    if (count < 0 || static_cast<size_t>(count) > kMaxReplicaMessageBytes) {
      return err(Errc::kProtocol, "a message of " + std::to_string(count) + " bytes from replica " +
                                      std::to_string(status.MPI_SOURCE));
    }
    Arriving a;
    a.tag = tag;
    a.from = status.MPI_SOURCE;
    a.bytes.resize(static_cast<size_t>(count));
    a.since = Clock::now();
    HPCTUNE_TRY(mpi_status(MPI_Imrecv(a.bytes.data(), count, MPI_BYTE, &message, &a.request), "MPI_Imrecv"));
    arriving_.push_back(std::move(a));
  }
  return Status::Ok();
}

// The first message of `tag` that has arrived whole. Every message still arriving is moved on; a
// sender's later message (of any tag) waits while an earlier one of it is still arriving, as with a
// blocking receive (a downpour replica's last push is applied before its "done"). One still arriving
// after the group's timeout came from a sender that died half-way through it: it is given up.
Result<std::optional<TrainerGroup::ReplicaMessage>> MpiTrainerGroup::take_arrived(int tag) {
  std::vector<int> waiting;  // senders with an earlier message still arriving
  const auto now = Clock::now();
  for (size_t i = 0; i < arriving_.size();) {
    Arriving& a = arriving_[i];
    int done = 0;
    HPCTUNE_TRY(mpi_status(MPI_Test(&a.request, &done, MPI_STATUS_IGNORE), "MPI_Test of a message from a data replica"));
    const bool behind = std::find(waiting.begin(), waiting.end(), a.from) != waiting.end();
    if (done && a.tag == tag && !behind) {
      ReplicaMessage m{a.from, std::move(a.bytes)};
      arriving_.erase(arriving_.begin() + static_cast<long>(i));
      return std::optional<ReplicaMessage>(std::move(m));
    }
    if (!done && now - a.since > options_.timeout) {
      give_up(a);
      arriving_.erase(arriving_.begin() + static_cast<long>(i));
      continue;
    }
    if (!done) waiting.push_back(a.from);
    ++i;
  }
  return std::optional<ReplicaMessage>();
}

}  // namespace hpctune::collectives
