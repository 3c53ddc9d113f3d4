// The start of every test that needs a GPU (test_gpu_backend, _network, _packed, _trainer, _nccl):
// find the CUDA library and a device, or say why not. Without CUDA in the build or without a device
// the test runs nothing and exits 77, which ctest shows as skipped (SKIP_RETURN_CODE) with the
// reason printed; a CUDA library that exists but does not load is a failure (exit 1).
// HPCTUNE_GPU_LIBRARY may name another implementation of the table (the CPU stand-in,
// tests/gpu_cpu_reference_library.cpp), which then runs the same cases on any machine.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "gpu/gpu_backend.h"

namespace hpctune::testing {

inline constexpr int kGpuTestSkipped = 77;

struct GpuTestSetup {
  std::optional<gpu::GpuLibrary> library;
  gpu::GpuInventory inventory;
  int exit_code = -1;  // >= 0: return this from main() now (77 skipped, 1 failed)
};

inline GpuTestSetup open_gpu_for_tests() {
  using namespace hpctune::gpu;
  GpuTestSetup out;
  if (!built_with_cuda() && std::getenv("HPCTUNE_GPU_LIBRARY") == nullptr) {
    std::printf("SKIPPED: hpctune was built without CUDA (HPCTUNE_CUDA=OFF or no toolkit): no GPU code to test\n");
    out.exit_code = kGpuTestSkipped;
    return out;
  }
  auto lib = GpuLibrary::open_default();
  if (!lib.ok()) {
    std::fprintf(stderr, "FAILED: the CUDA library of this build does not load: %s\n", lib.error().to_string().c_str());
    out.exit_code = 1;
    return out;
  }
  out.inventory = lib->inventory();
  if (out.inventory.devices.empty()) {
    std::printf("SKIPPED: %s (library %s, CUDA runtime %s, driver %s)\n", out.inventory.no_device_reason.c_str(),
                out.inventory.library_path.c_str(), cuda_version_string(out.inventory.runtime_version).c_str(),
                cuda_version_string(out.inventory.driver_version).c_str());
    out.exit_code = kGpuTestSkipped;
    return out;
  }
  const GpuDevice& d = out.inventory.devices.front();
  std::printf("device 0: %s, %.1f GiB, sm_%d%d, driver %s, runtime %s (%zu device(s))\n", d.name.c_str(),
              double(d.memory_bytes) / (1 << 30), d.compute_major, d.compute_minor,
              cuda_version_string(out.inventory.driver_version).c_str(),
              cuda_version_string(out.inventory.runtime_version).c_str(), out.inventory.devices.size());
  out.library = *lib;
  return out;
}

}  // namespace hpctune::testing
