// AllreduceAlgorithm: the value of `trainer.allreduce`, parsed without needing MPI.
//
// Kept apart from collectives.h (which includes <mpi.h>) so that config validation can check the
// setting in a build without MPI, where only one-rank groups exist.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hpctune::collectives {

enum class AllreduceAlgorithm {
  kMpi,                // MPI_Allreduce (the library's own choice of algorithm)
  kRing,               // reduce-scatter then allgather around a ring; bandwidth-optimal
  kRecursiveDoubling,  // the butterfly; log2(p) rounds of whole-buffer exchanges, latency-optimal
  kHierarchical,       // ring within a node, allreduce across nodes, ring allgather within a node
};

inline constexpr std::array<AllreduceAlgorithm, 4> kAllreduceAlgorithms = {
    AllreduceAlgorithm::kMpi, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling,
    AllreduceAlgorithm::kHierarchical};

// The config spelling: "mpi", "ring", "recursive_doubling", "hierarchical".
inline const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case AllreduceAlgorithm::kMpi: return "mpi";
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kRecursiveDoubling: return "recursive_doubling";
    case AllreduceAlgorithm::kHierarchical: return "hierarchical";
  }
  return "unknown";
}

// Parses a config spelling (exact, lower case). kConfig naming every valid spelling otherwise:
//   unknown trainer.allreduce 'rign' (valid: mpi, ring, recursive_doubling, hierarchical)
inline Result<AllreduceAlgorithm> parse_allreduce_algorithm(std::string_view name) {
  std::string valid;
  for (AllreduceAlgorithm algorithm : kAllreduceAlgorithms) {
    if (name == allreduce_algorithm_name(algorithm)) return algorithm;
    if (!valid.empty()) valid += ", ";
    valid += allreduce_algorithm_name(algorithm);
  }
  return err(Errc::kConfig,
             "unknown trainer.allreduce '" + std::string(name) + "' (valid: " + valid + ")");
}

}  // namespace hpctune::collectives
