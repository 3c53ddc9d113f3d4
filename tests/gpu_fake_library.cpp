// Stand-ins for libhpctune_gpu_cuda.so in test_gpu_loader: built as two MODULEs, one exporting
// nothing of ours (a library that is not hpctune's), one exporting hpctune_gpu_api() with another
// ABI version (a library from another checkout).
#include "gpu/gpu_library_abi.h"

#ifdef HPCTUNE_FAKE_WRONG_ABI
extern "C" __attribute__((visibility("default"))) const HpctuneGpuApi* hpctune_gpu_api(void) {
  static HpctuneGpuApi api{};
  api.abi_version = HPCTUNE_GPU_ABI_VERSION + 100;
  api.struct_size = sizeof(HpctuneGpuApi);
  return &api;
}
#else
extern "C" __attribute__((visibility("default"))) int not_hpctune_gpu(void) { return 0; }
#endif
