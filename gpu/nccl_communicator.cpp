// NcclUniqueId and NcclCommunicator (nccl_communicator.h).
#include "gpu/nccl_communicator.h"

#include <thread>
#include <utility>

namespace hpctune::gpu {

namespace {

// How often a wait asks the library; short next to a collective's time, long next to a poll's cost.
constexpr auto kPollInterval = std::chrono::microseconds(200);

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<NcclUniqueId> NcclUniqueId::create(const GpuLibrary& library) {
  NcclUniqueId id;
  if (library.api().nccl_unique_id(id.bytes.data()) != 0) {
    std::string why = library.last_error();
    return err(why.find("built without NCCL") != std::string::npos ? Errc::kUnavailable : Errc::kFailed,
               "NCCL unique id: " + why);
  }
  return id;
}

std::string NcclUniqueId::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Result<NcclUniqueId> NcclUniqueId::from_hex(std::string_view hex) {
  NcclUniqueId id;
  if (hex.size() != id.bytes.size() * 2)
    return err(Errc::kInvalidArgument, "NCCL unique id: " + std::to_string(hex.size()) + " characters, expected " +
                                           std::to_string(id.bytes.size() * 2) + " hex digits");
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return err(Errc::kInvalidArgument,
                 "NCCL unique id: not a hex digit at character " + std::to_string(hi < 0 ? 2 * i + 1 : 2 * i + 2));
    id.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return id;
}

Result<NcclCommunicator> NcclCommunicator::create(const GpuContext& context, int nranks, int rank,
                                                  const NcclUniqueId& id, Clock::time_point deadline) {
  HPCTUNE_ASSIGN(NcclCommunicator out, start(context, nranks, rank, id));
  HPCTUNE_TRY(out.wait_ready(deadline));
  return out;
}

Status NcclCommunicator::wait_ready(Clock::time_point deadline) {
  return wait(deadline, "NCCL communicator init (rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) + ")");
}

Result<NcclCommunicator> NcclCommunicator::start(const GpuContext& context, int nranks, int rank, const NcclUniqueId& id) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return err(Errc::kInvalidArgument,
               "NCCL communicator: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " ranks");
  HpctuneNcclComm* comm = nullptr;
  if (context.api().nccl_comm_init(context.raw(), nranks, rank, id.bytes.data(), &comm) != 0 || comm == nullptr) {
    // The context's library is the one that failed; its check() carries the message.
    Status failed = context.check(-1, "NCCL communicator init");
    std::string why = failed.error().message();
    return err(why.find("built without NCCL") != std::string::npos ? Errc::kUnavailable : Errc::kFailed, why);
  }
  return NcclCommunicator(&context, comm, nranks, rank);
}

NcclCommunicator::NcclCommunicator(NcclCommunicator&& other) noexcept
    : context_(other.context_), comm_(std::exchange(other.comm_, nullptr)), nranks_(other.nranks_), rank_(other.rank_) {}

NcclCommunicator& NcclCommunicator::operator=(NcclCommunicator&& other) noexcept {
  if (this != &other) {
    abort();
    context_ = other.context_;
    comm_ = std::exchange(other.comm_, nullptr);
    nranks_ = other.nranks_, rank_ = other.rank_;
  }
  return *this;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  int32_t state = HPCTUNE_NCCL_ERROR;
  if (context_->api().comm_poll(comm_, context_->raw(), &state) == 0 && state == HPCTUNE_NCCL_DONE)
    context_->api().comm_destroy(std::exchange(comm_, nullptr));
  else
    abort();
}

void NcclCommunicator::abort() noexcept {
  if (comm_ != nullptr) context_->api().comm_abort(std::exchange(comm_, nullptr));
}

Status NcclCommunicator::allreduce(const DeviceBuffer& buffer, size_t count, Clock::time_point deadline) {
  if (count == 0 || count > buffer.bytes() / sizeof(float))
    return err(Errc::kInvalidArgument, "NCCL allreduce: " + std::to_string(count) + " floats in a buffer of " +
                                           std::to_string(buffer.bytes()) + " bytes");
  return allreduce(buffer.as<float>(), count, deadline);
}

Status NcclCommunicator::allreduce(float* d_data, size_t count, Clock::time_point deadline) {
  if (comm_ == nullptr) return err(Errc::kFailed, "NCCL allreduce: the communicator was aborted by an earlier failure");
  if (count == 0 || d_data == nullptr) return err(Errc::kInvalidArgument, "NCCL allreduce: no buffer or 0 floats");
  if (context_->api().allreduce_sum_f32(comm_, context_->raw(), d_data, static_cast<int64_t>(count)) != 0) {
    Status failed = context_->check(-1, "NCCL allreduce");
    abort();
    return failed;
  }
  return wait(deadline, "NCCL allreduce of " + std::to_string(count) + " floats");
}

Status NcclCommunicator::exchange(std::span<const PeerTransfer> transfers, Clock::time_point deadline) {
  if (comm_ == nullptr) return err(Errc::kFailed, "NCCL send/receive: the communicator was aborted by an earlier failure");
  std::string what = "NCCL send/receive (rank " + std::to_string(rank_) + ":";
  for (const PeerTransfer& t : transfers) {
    if (t.peer < 0 || t.peer >= nranks_ || t.peer == rank_ || t.count == 0 || t.d_data == nullptr)
      return err(Errc::kInvalidArgument, "NCCL send/receive: peer " + std::to_string(t.peer) + " of " +
                                             std::to_string(nranks_) + " ranks (this is " + std::to_string(rank_) +
                                             "), " + std::to_string(t.count) + " floats");
    what += std::string(t.send ? " send " : " receive ") + std::to_string(t.count) + (t.send ? " to " : " from ") +
            std::to_string(t.peer);
  }
  what += ")";
  if (transfers.empty()) return Status::Ok();
  const HpctuneGpuApi& api = context_->api();
  int rc = api.nccl_group_start();
  for (size_t i = 0; rc == 0 && i < transfers.size(); ++i) {
    const PeerTransfer& t = transfers[i];
    rc = t.send ? api.send_f32(comm_, context_->raw(), t.d_data, static_cast<int64_t>(t.count), t.peer)
                : api.recv_f32(comm_, context_->raw(), t.d_data, static_cast<int64_t>(t.count), t.peer);
  }
  Status posted = context_->check(rc, what.c_str());
  // The group is closed even when a post failed (NCCL's rule), then the communicator aborted.
  const int end_rc = api.nccl_group_end();
  if (posted.ok()) posted = context_->check(end_rc, what.c_str());
  if (!posted.ok()) {
    abort();
    return posted;
  }
  return wait(deadline, what);
}

Status NcclCommunicator::wait(Clock::time_point deadline, const std::string& what) {
  for (;;) {
    int32_t state = HPCTUNE_NCCL_ERROR;
    if (context_->api().comm_poll(comm_, context_->raw(), &state) != 0 || state == HPCTUNE_NCCL_ERROR) {
      Status failed = context_->check(-1, what.c_str());
      abort();
      return err(Errc::kFailed, failed.error().message() + "; communicator aborted");
    }
    if (state == HPCTUNE_NCCL_DONE) return Status::Ok();
    if (Clock::now() >= deadline) {
      abort();
      return err(Errc::kTimeout, "GPU " + what +
                                     ": deadline passed with the collective still running (a peer that never "
                                     "joined or died); communicator aborted");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace hpctune::gpu
