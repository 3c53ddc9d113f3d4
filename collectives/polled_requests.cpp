// Requests: non-blocking MPI operations waited on by polling against a deadline
// (allreduce_detail.h), plus the small helpers the point-to-point allreduces share.
#include <algorithm>
#include <climits>
#include <functional>
#include <string>
#include <thread>

#include "collectives/allreduce_detail.h"
#include "collectives/collectives.h"

namespace hpctune::collectives::detail {

void add_into(float* __restrict dst, const float* __restrict src, size_t count) noexcept {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

Requests::~Requests() noexcept {
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    // A pending send cannot be cancelled portably; freeing the request lets it finish on its own.
    if (is_recv_[i]) MPI_Cancel(&requests_[i]);
    MPI_Request_free(&requests_[i]);
  }
}

Result<size_t> Requests::recv(float* data, size_t count, int source, int tag, MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  HPCTUNE_TRY(mpi_status(
      MPI_Irecv(data, static_cast<int>(count), MPI_FLOAT, source, tag, comm, &request),
      "MPI_Irecv from rank " + std::to_string(source)));
  requests_.push_back(request);
  is_recv_.push_back(true);
  peer_.push_back(source);
  return requests_.size() - 1;
}

Result<size_t> Requests::send(const float* data, size_t count, int dest, int tag, MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  HPCTUNE_TRY(mpi_status(
      MPI_Isend(data, static_cast<int>(count), MPI_FLOAT, dest, tag, comm, &request),
      "MPI_Isend to rank " + std::to_string(dest)));
  requests_.push_back(request);
  is_recv_.push_back(false);
  peer_.push_back(dest);
  return requests_.size() - 1;
}

Status Requests::wait(size_t index) {
  return poll_request(requests_[index], deadline_, yield_, [&] {
    return "rank " + std::to_string(peer_[index]) + (is_recv_[index] ? " to send its part" : " to receive our part");
  });
}

Status poll_request(MPI_Request& request, Clock::time_point deadline, bool yield,
                    const std::function<std::string()>& waiting_for) {
  // MPI_Test drives the progress engine for every pending request, not only this one. The clock is
  // read only every so often, to keep the loop as tight as MPI_Wait's own spin. Yielding is for
  // oversubscribed nodes only (as Open MPI's mpi_yield_when_idle): there the peer may need this
  // very core, while on a node with a core per rank a yield hands the core to unrelated work for a
  // whole scheduler time slice, milliseconds.
  for (unsigned spins = 1;; ++spins) {
    int done = 0;
    HPCTUNE_TRY(mpi_status(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test"));
    if (done) return Status::Ok();
    if (spins % 128 == 0) {
      if (Clock::now() >= deadline) return err(Errc::kTimeout, "deadline passed waiting for " + waiting_for());
      if (yield) std::this_thread::yield();
    }
  }
}

Status wait_request(MPI_Request& request, const Pipeline& pipeline, const char* what) {
  // Collectives cannot be cancelled: after a timeout the caller tears the group down.
  return poll_request(request, pipeline.deadline, pipeline.yield, [what] { return std::string(what); });
}

Status Requests::wait_all() {
  for (size_t i = 0; i < requests_.size(); ++i) HPCTUNE_TRY(wait(i));
  requests_.clear();
  is_recv_.clear();
  peer_.clear();
  return Status::Ok();
}

Status post_segments(Requests& requests, std::vector<size_t>& indices, bool receive, float* data,
                     Range range, size_t segment_floats, int peer, int tag, MPI_Comm comm) {
  for (size_t offset = 0; offset < range.count; offset += segment_floats) {
    const size_t count = std::min(segment_floats, range.count - offset);
    float* segment = data + range.begin + offset;
    HPCTUNE_ASSIGN(size_t index, receive ? requests.recv(segment, count, peer, tag, comm)
                                         : requests.send(segment, count, peer, tag, comm));
    indices.push_back(index);
  }
  return Status::Ok();
}

}  // namespace hpctune::collectives::detail
