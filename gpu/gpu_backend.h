// The GPU backend as the rest of hpctune sees it: find and load the CUDA library
// (libhpctune_gpu_cuda.so, gpu/cuda_library.cu) with dlopen() when a GPU is asked for, and list
// the devices. Nothing here links CUDA: a binary built with HPCTUNE_CUDA=OFF, or run on a machine
// without a driver or a GPU, gets answers, never a crash.
//
//   "no GPU" is a value: GpuInventory with no devices and no_device_reason saying why
//             ("cudaGetDeviceCount: CUDA driver version is insufficient ... (code 35)").
//   a library that cannot be used is an Error: kNotFound (no such file, or none of the default
//             places has it), kUnavailable (dlopen failed, not our library, another ABI version, or
//             hpctune built without CUDA).
//
// Where the library is looked for (default_gpu_library_candidates()): $HPCTUNE_GPU_LIBRARY when set
// (then only there), beside the running executable, ../lib/hpctune/ from it (cmake --install), and
// the build tree it was built in.
//
// Loaded libraries stay loaded for the life of the process (no dlclose: the CUDA runtime does not
// support being unloaded while its threads run), so a GpuLibrary is a cheap copyable handle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_library_abi.h"

namespace hpctune::gpu {

struct GpuDevice {
  int index = 0;  // as CUDA numbers it in this process (after CUDA_VISIBLE_DEVICES)
  std::string name;
  uint64_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;
};

struct GpuInventory {
  std::string library_path;
  int driver_version = 0;   // 13000 for 13.0; 0 when no driver is installed
  int runtime_version = 0;  // the CUDA runtime the library was built against
  std::vector<GpuDevice> devices;
  std::string no_device_reason;  // set exactly when devices is empty
};

class GpuLibrary {
 public:
  // Loads the library at `path`, checks that it exports hpctune_gpu_api() with this ABI.
  static Result<GpuLibrary> open(const std::string& path);
  // The first default candidate that exists; kNotFound listing every place tried, or kUnavailable
  // when hpctune was built without CUDA and HPCTUNE_GPU_LIBRARY is not set.
  static Result<GpuLibrary> open_default();

  const HpctuneGpuApi& api() const noexcept { return *api_; }
  const std::string& path() const noexcept { return path_; }
  // The devices, the driver and runtime versions; no device is an answer (no_device_reason).
  GpuInventory inventory() const;
  // "what: message (code N)" of this thread's latest failure in the library.
  std::string last_error() const;

 private:
  GpuLibrary(std::string path, const HpctuneGpuApi* api) : path_(std::move(path)), api_(api) {}
  std::string path_;
  const HpctuneGpuApi* api_;
};

// Where open_default() looks, in order.
std::vector<std::string> default_gpu_library_candidates();
// Whether this binary was built with the CUDA library (HPCTUNE_CUDA ON, or AUTO with a toolkit).
bool built_with_cuda() noexcept;

// "13.0" from 13000; "none" from 0.
std::string cuda_version_string(int version);

}  // namespace hpctune::gpu
