// What the two files of the CPU stand-in of the CUDA library share (gpu_cpu_reference_library.cpp:
// the table and the arithmetic; gpu_cpu_reference_nccl.cpp: the NCCL entries). Test-only.
#pragma once

#include <cstdint>
#include <string>

#include "gpu/gpu_library_abi.h"

// A "context": the device it was made on (as this process numbers it) and that device's PCI bus id.
struct HpctuneGpuContext {
  int tf32 = 0;
  int32_t device = 0;
  std::string pci_bus_id;
};

namespace cpu_reference {

// Sets this thread's last_error() to `message` and returns -1.
int fail_with(const std::string& message);

int nccl_version(int32_t* version);
int nccl_unique_id(uint8_t* out);
int nccl_comm_init(HpctuneGpuContext* ctx, int32_t nranks, int32_t rank, const uint8_t* id, HpctuneNcclComm** out);
int allreduce_sum_f32(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, float* buf, int64_t count);
int comm_poll(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, int32_t* state);
int comm_abort(HpctuneNcclComm* comm);
int comm_destroy(HpctuneNcclComm* comm);
int nccl_group_start();
int nccl_group_end();
int send_f32(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, const float* buf, int64_t count, int32_t peer);
int recv_f32(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, float* buf, int64_t count, int32_t peer);

}  // namespace cpu_reference
