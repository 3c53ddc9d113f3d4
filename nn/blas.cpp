#include "nn/blas.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

// OpenBLAS entry points, declared here rather than through a cblas.h flavour. The dynamic-arch
// ones exist only in DYNAMIC_ARCH builds, hence weak: blas_select_kernels() checks for them.
extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace hpctune::nn {

void blas_set_threads(int threads) noexcept { openblas_set_num_threads(std::max(1, threads)); }

std::string blas_core_name() {
  const char* name = openblas_get_corename != nullptr ? openblas_get_corename() : nullptr;
  return name != nullptr ? name : "unknown";
}

void blas_select_kernels() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_get_corename == nullptr || gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user chose; OpenBLAS honoured it at load
    const char* core = openblas_get_corename();
    if (core == nullptr || std::string(core) != "Prescott") return;  // recognised, or really that old
    const char* target = nullptr;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd")) {
      target = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      target = "Haswell";
    }
    if (target == nullptr) return;
    // OpenBLAS reads OPENBLAS_CORETYPE only inside gotoblas_dynamic_init(); set it for that call
    // alone so that child processes keep the environment they were given.
    setenv("OPENBLAS_CORETYPE", target, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  });
}

}  // namespace hpctune::nn
