// NCCL for the trainer groups on GPUs: the allreduce of a data-parallel group and the send/receive
// of a pipeline's stages, with the watchdog contract of issue 23: nothing blocks inside a
// collective. The communicator is non-blocking; every wait polls the library's comm_poll
// (ncclCommGetAsyncError + cudaStreamQuery) against a deadline, and on an error or when the
// deadline passes the communicator is aborted (ncclCommAbort) and the call returns an Error
// (kFailed or kTimeout), so the attempt fails cleanly and the scheduler queues it again.
//
// The unique id travels over the existing control path, not a file: the group's rank 0 calls
// NcclUniqueId::create() and sends to_hex() (256 hex digits) through the master or MPI; the other
// ranks parse it with from_hex(); a trainer group sends the bytes with TrainerGroup::broadcast_bytes
// (trainers/classifier_gpu.cpp).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "gpu/gpu_context.h"

namespace hpctune::gpu {

struct NcclUniqueId {
  std::array<uint8_t, HPCTUNE_NCCL_UNIQUE_ID_BYTES> bytes{};

  // ncclGetUniqueId through the library; kUnavailable when it was built without NCCL, kFailed
  // with NCCL's message otherwise.
  static Result<NcclUniqueId> create(const GpuLibrary& library);
  std::string to_hex() const;
  // Exactly 256 hex digits; kInvalidArgument naming what is wrong otherwise.
  static Result<NcclUniqueId> from_hex(std::string_view hex);
};

class NcclCommunicator {
 public:
  using Clock = std::chrono::steady_clock;

  // Joins the group (nranks, rank) of `id` on the context's device and waits, polling, until every
  // rank has joined or `deadline` passes (then aborts: kTimeout). The context must outlive it.
  // create() is start() and then wait_ready().
  static Result<NcclCommunicator> create(const GpuContext& context, int nranks, int rank, const NcclUniqueId& id,
                                         Clock::time_point deadline);
  // Starts joining and returns at once (the join is non-blocking): a rank whose start failed can tell
  // the others over another path before they wait for it, and they abort() instead of waiting.
  static Result<NcclCommunicator> start(const GpuContext& context, int nranks, int rank, const NcclUniqueId& id);
  // Waits for a started join, as create() does.
  Status wait_ready(Clock::time_point deadline);
  NcclCommunicator(NcclCommunicator&& other) noexcept;
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator();  // destroys a healthy communicator, aborts one with work still running

  // In-place sum of buffer's first `count` floats over the ranks. Polls until done; on an NCCL or
  // CUDA error (kFailed) or at the deadline (kTimeout) aborts the communicator, which is then unusable
  // (aborted() is true and every later call is kFailed).
  Status allreduce(const DeviceBuffer& buffer, size_t count, Clock::time_point deadline);
  // The same on `count` floats of device memory at d_data (a network's gradients).
  Status allreduce(float* d_data, size_t count, Clock::time_point deadline);

  // Point to point (a pipeline's activations and gradients): every transfer, sends to and receives
  // from peers of this communicator, started together (one NCCL group) and waited for as allreduce
  // is, with its watchdog. A send meets the peer's receive from this rank of the same count, in
  // the order posted.
  struct PeerTransfer {
    int peer = 0;
    bool send = false;
    float* d_data = nullptr;
    size_t count = 0;
  };
  Status exchange(std::span<const PeerTransfer> transfers, Clock::time_point deadline);

  int rank() const noexcept { return rank_; }
  int nranks() const noexcept { return nranks_; }
  bool aborted() const noexcept { return comm_ == nullptr; }

 private:
  NcclCommunicator(const GpuContext* context, HpctuneNcclComm* comm, int nranks, int rank)
      : context_(context), comm_(comm), nranks_(nranks), rank_(rank) {}
  // Polls comm_poll until done; aborts and returns the error otherwise.
  Status wait(Clock::time_point deadline, const std::string& what);
  void abort() noexcept;
  const GpuContext* context_ = nullptr;  // not owned
  HpctuneNcclComm* comm_ = nullptr;
  int nranks_ = 1, rank_ = 0;
};

}  // namespace hpctune::gpu
