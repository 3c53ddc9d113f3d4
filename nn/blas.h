// BLAS set-up: OpenBLAS keeps its kernel choice and thread count per process; these functions
// adjust that state and are the only places hpctune touches it. The dense layers (layers.h) run
// their GEMMs on whatever these functions configured.
#pragma once

#include <string>

namespace hpctune::nn {

// Sets the number of OpenBLAS threads (values < 1 mean 1). Call between trials, not during one.
void blas_set_threads(int threads) noexcept;

// Makes sure OpenBLAS runs kernels this CPU supports well. OpenBLAS 0.3.21 (Debian 12) does not
// recognise recent Xeons (Sapphire/Emerald Rapids) and falls back to its SSE3 "Prescott"
// kernels, which run SGEMM about 4-5x slower here. When OpenBLAS reports that fallback,
// OPENBLAS_CORETYPE is unset and the CPU has AVX-512 (or AVX2+FMA), this re-runs OpenBLAS's own
// dynamic-arch selection with the SkylakeX (or Haswell) kernels. A no-op in every other case
// (and for a BLAS built without DYNAMIC_ARCH). Runs once per process; thread-safe; call it before
// the first GEMM of a trial, never while another thread is inside BLAS.
void blas_select_kernels() noexcept;

// The OpenBLAS kernel family in use ("SkylakeX", "Haswell", ...; "unknown" if not reported).
std::string blas_core_name();

}  // namespace hpctune::nn
