// MpiEnvironment, Communicator and the MPI error conversion (declared in collectives.h).
#include <mpi.h>

#include <string>
#include <utility>

#include "collectives/collectives.h"

namespace hpctune::collectives {
namespace {

// The error class of a failed process exists only in MPI libraries with ULFM (Open MPI 5); others
// end the whole job through mpirun when a rank dies.
#ifdef MPIX_ERR_PROC_FAILED
constexpr int kProcFailedClass = MPIX_ERR_PROC_FAILED;
#else
constexpr int kProcFailedClass = -1;
#endif

bool mpi_finalized() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

Status mpi_status(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  int error_class = MPI_ERR_UNKNOWN;
  MPI_Error_class(rc, &error_class);
  const Errc code = error_class == kProcFailedClass ? Errc::kPeerGone : Errc::kIo;
  std::string message(what);
  message += ": ";
  message += length > 0 ? std::string(text, static_cast<size_t>(length))
                        : "MPI error " + std::to_string(rc);
  return err(code, std::move(message));
}

Result<MpiEnvironment> MpiEnvironment::init(int* argc, char*** argv, int required_thread_level) {
  int initialized = 0;
  HPCTUNE_TRY(mpi_status(MPI_Initialized(&initialized), "MPI_Initialized"));
  int provided = MPI_THREAD_SINGLE;
  bool owns = false;
  if (initialized) {
    HPCTUNE_TRY(mpi_status(MPI_Query_thread(&provided), "MPI_Query_thread"));
  } else {
    HPCTUNE_TRY(mpi_status(MPI_Init_thread(argc, argv, required_thread_level, &provided),
                           "MPI_Init_thread"));
    owns = true;
  }
  MpiEnvironment environment(owns, provided);
  if (provided < required_thread_level) {
    return err(Errc::kUnavailable, "MPI provides thread level " + std::to_string(provided) +
                                       ", hpctune needs " + std::to_string(required_thread_level));
  }
  return environment;
}

MpiEnvironment::~MpiEnvironment() noexcept {
  if (owns_ && !mpi_finalized()) MPI_Finalize();
}

Result<Communicator> Communicator::adopt(MPI_Comm comm) {
  Communicator owned;
  owned.comm_ = comm;
  if (comm == MPI_COMM_NULL) return owned;
  HPCTUNE_TRY(
      mpi_status(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  HPCTUNE_TRY(mpi_status(MPI_Comm_rank(comm, &owned.rank_), "MPI_Comm_rank"));
  HPCTUNE_TRY(mpi_status(MPI_Comm_size(comm, &owned.size_), "MPI_Comm_size"));
  return owned;
}

Result<Communicator> Communicator::duplicate(MPI_Comm parent) {
  MPI_Comm comm = MPI_COMM_NULL;
  HPCTUNE_TRY(mpi_status(MPI_Comm_dup(parent, &comm), "MPI_Comm_dup"));
  return adopt(comm);
}

Result<Communicator> Communicator::split(MPI_Comm parent, int color, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  HPCTUNE_TRY(mpi_status(MPI_Comm_split(parent, color, key, &comm), "MPI_Comm_split"));
  return adopt(comm);
}

Result<Communicator> Communicator::split_shared(MPI_Comm parent) {
  int rank = 0;
  HPCTUNE_TRY(mpi_status(MPI_Comm_rank(parent, &rank), "MPI_Comm_rank"));
  MPI_Comm comm = MPI_COMM_NULL;
  HPCTUNE_TRY(
      mpi_status(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &comm),
                 "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)"));
  return adopt(comm);
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(std::exchange(other.rank_, 0)),
      size_(std::exchange(other.size_, 0)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    (void)close();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = std::exchange(other.rank_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Communicator::~Communicator() noexcept { (void)close(); }

Status Communicator::close() {
  if (comm_ == MPI_COMM_NULL) return Status::Ok();
  MPI_Comm comm = std::exchange(comm_, MPI_COMM_NULL);
  rank_ = size_ = 0;
  if (mpi_finalized()) return Status::Ok();
  return mpi_status(MPI_Comm_free(&comm), "MPI_Comm_free");
}

}  // namespace hpctune::collectives
