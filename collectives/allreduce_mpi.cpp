// The `mpi` allreduce: MPI_Allreduce(MPI_IN_PLACE, MPI_SUM), whatever algorithm the library picks.
#include <mpi.h>

#include <algorithm>
#include <climits>

#include "collectives/allreduce_detail.h"

namespace hpctune::collectives::detail {

Status mpi_allreduce(MPI_Comm comm, float* data, size_t count) {
  // MPI counts are int: larger buffers go in pieces.
  constexpr size_t kMaxPiece = static_cast<size_t>(INT_MAX);
  for (size_t offset = 0; offset < count; offset += kMaxPiece) {
    const int n = static_cast<int>(std::min(kMaxPiece, count - offset));
    HPCTUNE_TRY(mpi_status(MPI_Allreduce(MPI_IN_PLACE, data + offset, n, MPI_FLOAT, MPI_SUM, comm),
                           "MPI_Allreduce"));
  }
  return Status::Ok();
}

}  // namespace hpctune::collectives::detail
