// Internals shared by the allreduce implementations (allreduce_*.cpp); not a public interface.
//
// The point-to-point algorithms are written against a Peers (a communicator with its rank and
// size), a Pipeline (message length, deadline, wait policy), and Requests: non-blocking
// operations that are polled, never waited on blindly, so that a missing peer turns into kTimeout
// instead of a hang.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "collectives/collectives.h"

namespace hpctune::collectives::detail {

using Clock = std::chrono::steady_clock;

struct Peers {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};
inline Peers peers_of(const Communicator& comm) noexcept {
  return Peers{comm.handle(), comm.rank(), comm.size()};
}

// How a point-to-point algorithm runs: how long its messages may be, when it must give up, and how
// it waits.
struct Pipeline {
  size_t segment_floats = 1;   // longest message, in floats (>= 1)
  Clock::time_point deadline;  // kTimeout after this
  bool yield = false;          // give the core away while waiting (more ranks than cores)
};

// Part `index` of `count` elements cut into `parts` balanced parts: the first count % parts parts
// have one element more. Parts may be empty when count < parts.
struct Range {
  size_t begin = 0;
  size_t count = 0;
};
inline Range balanced_part(size_t count, int parts, int index) noexcept {
  const size_t p = static_cast<size_t>(parts), i = static_cast<size_t>(index);
  const size_t base = count / p, extra = count % p;
  return Range{i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

inline int modulo(int value, int n) noexcept { return ((value % n) + n) % n; }

// dst[i] += src[i]. The addition order (dst first) is the same on every rank, and fp32 addition is
// commutative, so pairwise exchanges give bit-identical sums on both sides.
void add_into(float* dst, const float* src, size_t count) noexcept;

// A batch of non-blocking operations. wait() polls with MPI_Test until done or the pipeline's
// deadline, spinning, or yielding the core between polls when the pipeline says so. The destructor
// abandons what is still pending (cancels receives, frees the requests): that only happens after an
// error, when the group is being torn down anyway.
class Requests {
 public:
  explicit Requests(const Pipeline& pipeline)
      : deadline_(pipeline.deadline), yield_(pipeline.yield) {}
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;
  ~Requests() noexcept;

  // Posts MPI_Irecv / MPI_Isend of `count` floats and returns its index for wait().
  Result<size_t> recv(float* data, size_t count, int source, int tag, MPI_Comm comm);
  Result<size_t> send(const float* data, size_t count, int dest, int tag, MPI_Comm comm);

  Status wait(size_t index);
  // Waits for every request posted so far, then forgets them all.
  Status wait_all();

  size_t size() const noexcept { return requests_.size(); }

 private:
  std::vector<MPI_Request> requests_;
  std::vector<bool> is_recv_;
  std::vector<int> peer_;
  Clock::time_point deadline_;
  bool yield_ = false;
};

// Polls `request` with MPI_Test until it completes, yielding the core between polls when `yield`;
// kTimeout after `deadline`, saying what it was waiting for.
Status poll_request(MPI_Request& request, Clock::time_point deadline, bool yield,
                    const std::function<std::string()>& waiting_for);
// poll_request() of one collective (a barrier, a broadcast) with the pipeline's deadline and wait
// policy, waiting for `what`.
Status wait_request(MPI_Request& request, const Pipeline& pipeline, const char* what);

// Posts receives (or sends) of data[range] to/from `peer` cut into segments of at most
// segment_floats, appending their request indices to `indices`. Both sides of a transfer cut the
// same range the same way, so segment k of the sender matches segment k of the receiver.
Status post_segments(Requests& requests, std::vector<size_t>& indices, bool receive, float* data,
                     Range range, size_t segment_floats, int peer, int tag, MPI_Comm comm);
inline size_t segment_count(size_t count, size_t segment_floats) noexcept {
  return (count + segment_floats - 1) / segment_floats;
}

// Ring reduce-scatter over `peers` of data[0, count) cut into peers.size balanced parts: on return
// rank r holds the sum over ranks of part r (the other parts hold partial sums). `scratch` holds
// count floats.
Status ring_reduce_scatter(const Peers& peers, float* data, size_t count, float* scratch,
                           const Pipeline& pipeline);
// Ring allgather: on entry rank r holds part r of the balanced partition; on return every rank
// holds every part.
Status ring_allgather(const Peers& peers, float* data, size_t count, const Pipeline& pipeline);
// Reduce-scatter then allgather. `scratch` holds count floats.
Status ring_allreduce(const Peers& peers, float* data, size_t count, float* scratch,
                      const Pipeline& pipeline);

// The butterfly with folding for non-power-of-two sizes. `scratch` holds count floats.
Status recursive_doubling_allreduce(const Peers& peers, float* data, size_t count, float* scratch,
                                    const Pipeline& pipeline);

// The communicators of the hierarchical allreduce.
struct Hierarchy {
  Communicator node;     // the ranks of this node, ordered by rank
  Communicator cross;    // uniform only: the ranks with this local rank, one per node
  Communicator leaders;  // non-uniform only: local rank 0 of every node; null on other ranks
  bool uniform = true;   // every node has the same number of ranks
  int nodes = 1;
  bool node_shares_memory = true;  // every rank of `node` is on this machine (MPI_COMM_TYPE_SHARED)

  // Nodes from MPI_COMM_TYPE_SHARED, or node = rank / ranks_per_node when ranks_per_node > 0.
  // Collective over `comm`.
  static Result<Hierarchy> create(const Communicator& comm, int ranks_per_node);
};

// Reduce-scatter in the node, allreduce across nodes, allgather in the node. `scratch` holds
// count floats.
Status hierarchical_allreduce(const Hierarchy& hierarchy, float* data, size_t count,
                              float* scratch, const Pipeline& pipeline);

// Memory every rank of one node maps: a slot of capacity() floats per local rank, each starting on
// a page boundary (allreduce_shared_memory.cpp). Unmapped when the last owner lets go; no
// collective at teardown.
class SharedSlots {
 public:
  // Collective over `node`, whose ranks must share memory. nullptr (not an error) when the region
  // cannot be made on some rank, with the reason in *why_not; errors only for MPI failures and the
  // pipeline's deadline.
  static Result<std::shared_ptr<SharedSlots>> create(const Communicator& node, size_t capacity,
                                                     const Pipeline& pipeline, std::string* why_not);
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;
  ~SharedSlots() noexcept;

  float* slot(int local_rank) const noexcept { return base_ + static_cast<size_t>(local_rank) * stride_; }
  size_t capacity() const noexcept { return capacity_; }
  int ranks() const noexcept { return ranks_; }
  int rank() const noexcept { return rank_; }

 private:
  SharedSlots() = default;
  float* base_ = nullptr;
  size_t bytes_ = 0, stride_ = 0, capacity_ = 0;
  int ranks_ = 1, rank_ = 0;
};

// MPI_Ibarrier over the node, polled against the pipeline's deadline, between memory fences.
Status node_barrier(const Communicator& node, const Pipeline& pipeline);

// `hierarchical` with its node phases in shared memory: reduce this rank's part of the node sum
// from every slot, allreduce it across nodes, copy the other parts from their slots. When `data`
// is this rank's slot on every rank of the node, nothing is copied in or out; otherwise a small
// buffer goes through the slots, and a large one takes the message path of
// hierarchical_allreduce() (the node decides together; nodes may decide differently, since the
// cross-node phase is the same). Collective over the hierarchy's communicators. `scratch` holds
// count floats.
Status shared_memory_hierarchical_allreduce(const Hierarchy& hierarchy, SharedSlots& slots, float* data,
                                            size_t count, float* scratch, const Pipeline& pipeline);

// MPI_Allreduce(MPI_IN_PLACE, MPI_SUM) in pieces of at most INT_MAX elements. Blocks; no deadline.
Status mpi_allreduce(MPI_Comm comm, float* data, size_t count);

// Message tags, one per phase: a message can only match a receive of the phase it was sent for.
enum Tag : int {
  kTagRingReduceScatter = 101,
  kTagRingAllgather = 102,
  kTagFoldIn = 201,
  kTagButterfly = 202,
  kTagFoldOut = 203,
  kTagGatherToLeader = 301,
  kTagScatterFromLeader = 302,
};

}  // namespace hpctune::collectives::detail
