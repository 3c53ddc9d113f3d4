// Collectives for data-parallel trainer groups: an MPI runtime handle, an RAII communicator, the
// four `trainer.allreduce` implementations behind one Allreducer, and a GradientAverager that
// fuses many gradient buffers into few allreduces.
//
// Built only where MPI is found (target hpctune_collectives, which defines HPCTUNE_HAVE_MPI=1); a
// build without MPI has one-rank groups only and never includes this header.
//
// Data model: fp32 buffers, reduced in place, summed (Allreducer::sum) or averaged over the ranks
// (Allreducer::average). ring, recursive_doubling and hierarchical leave bit-identical results on
// all ranks (each element is reduced along one chain and then copied, or added pairwise in
// commutative order), so replicas of a model never drift apart. The MPI standard only recommends
// that for MPI_Allreduce; Open MPI 4.1 does it in tests/test_allreduce.cpp, which checks all four.
//
// Algorithms (AllreduceAlgorithm, see allreduce_algorithm.h), for p ranks and n bytes:
//   mpi                 MPI_Allreduce with MPI_SUM; Open MPI picks its own algorithm.
//   ring                reduce-scatter then allgather around the ring rank -> rank+1: 2(p-1)
//                       steps moving n/p bytes each, 2(p-1)/p * n per rank, the bandwidth optimum.
//                       Each chunk is cut into segments of segment_bytes; a segment is reduced and
//                       forwarded as soon as it arrives, so the steps overlap (pipelining).
//                       (allreduce_ring.cpp)
//   recursive_doubling  the butterfly: log2(p) exchanges of the whole buffer with rank ^ 2^k.
//                       Fewest messages, n*log2(p) bytes per rank; best for small buffers. A rank
//                       count that is not a power of two is folded first: of the first 2r ranks
//                       (r = p - 2^floor(log2 p)) the even ones hand their data to their odd
//                       neighbour, sit out the butterfly and get the result back at the end.
//                       (allreduce_recursive_doubling.cpp)
//   hierarchical        ring reduce-scatter inside each node, then each rank allreduces its node
//                       shard (ring) with the ranks of the same local rank on the other nodes,
//                       then ring allgather inside the node: the slow inter-node links carry
//                       n/L bytes per rank for L ranks per node. Nodes come from
//                       MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). When the nodes have different
//                       rank counts, the node shards are first gathered on each node's leader
//                       (local rank 0), the leaders allreduce across nodes, and the leaders scatter
//                       the shards back. (allreduce_hierarchical.cpp)
//                       Inside a node the ranks share memory, so by default (shared_memory) the
//                       node phases move no messages: each rank maps one region holding a slot per
//                       local rank, reduces its part by reading that part of every slot, and copies
//                       the other parts from the slots that hold their totals, between barriers.
//                       A buffer that already lives in this rank's slot (shared_buffer(); the
//                       data-parallel engine computes its gradients there) is not even copied in
//                       or out: per rank, 3 small collectives' worth of latency plus reading the
//                       buffer once and writing it once, against 4 copies of it through Open MPI's
//                       shared-memory queues. Other buffers go through the slots up to 128 KiB,
//                       and by messages above. (allreduce_shared_memory.cpp)
//
// Deadlines and hung peers. MPI itself has no timeouts. The ring, recursive-doubling and
// hierarchical implementations only post non-blocking operations and poll them (MPI_Test) until
// AllreduceOptions::timeout has passed, then return kTimeout. `mpi` blocks inside MPI_Allreduce
// and cannot be interrupted. Either way a collective that fails or times out leaves the
// communicator, and any buffer that had a receive posted into it, in an undefined state: messages
// may still be in flight. The only safe continuation is to tear the whole group down; an
// Allreducer refuses every call after its first error.
//
// The contract with the group worker (group_worker.h): a collective error ends the group, and so
// does a collective that has been running for longer than the worker's collective limit, which a
// watchdog thread on every rank sees through Allreducer::collective_started(). Ending the group
// means that the rank logs the reason and _exits with kGroupBrokenExitCode (no MPI_Abort: MPI may
// be wedged inside the very call that hung); mpirun then kills every rank of the job, the group's
// heartbeats stop, and the master declares the group lost after its heartbeat timeout and queues
// the trial again. A peer that dies is normally noticed by mpirun, which then ends every rank;
// MPI libraries with ULFM report it as kPeerGone.
//
// Threads: one collective at a time per Allreducer, and MPI must be initialised with at least
// MPI_THREAD_SERIALIZED when the calls come from a thread other than the one that called MPI_Init.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "collectives/allreduce_algorithm.h"

namespace hpctune::collectives {

// Ok for MPI_SUCCESS; otherwise kIo (kPeerGone where MPI reports a failed process) with
// "<what>: <MPI_Error_string>".
Status mpi_status(int rc, std::string_view what);

// The MPI runtime for the life of the process: MPI_Init_thread on init(), MPI_Finalize in the
// destructor, unless MPI was already initialised by someone else (then it leaves both alone).
// Create it on the main thread before any Communicator, and destroy it after the last one.
class MpiEnvironment {
 public:
  // kUnavailable when MPI provides a lower thread level than `required_thread_level`.
  static Result<MpiEnvironment> init(int* argc, char*** argv,
                                     int required_thread_level = MPI_THREAD_SERIALIZED);

  MpiEnvironment(MpiEnvironment&& other) noexcept : owns_(other.owns_) { other.owns_ = false; }
  MpiEnvironment& operator=(MpiEnvironment&&) = delete;
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  ~MpiEnvironment() noexcept;

  int thread_level() const noexcept { return thread_level_; }

 private:
  MpiEnvironment(bool owns, int thread_level) : owns_(owns), thread_level_(thread_level) {}
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
};

// An owned MPI communicator (never MPI_COMM_WORLD itself): move-only, MPI_Comm_free in close() and
// in the noexcept destructor. Its error handler is MPI_ERRORS_RETURN, so MPI errors on it come back
// as Status values instead of aborting the job.
class Communicator {
 public:
  Communicator() = default;  // the null communicator: handle() == MPI_COMM_NULL

  // MPI_Comm_dup of `parent`. Collective over `parent`.
  static Result<Communicator> duplicate(MPI_Comm parent = MPI_COMM_WORLD);
  // MPI_Comm_split of `parent`: ranks with the same color form one communicator, ordered by key.
  // Collective over `parent`.
  static Result<Communicator> split(MPI_Comm parent, int color, int key);
  // The ranks of `parent` that share memory with this one (one node). Collective over `parent`.
  static Result<Communicator> split_shared(MPI_Comm parent);

  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() noexcept;

  // Frees the communicator; idempotent. After MPI_Finalize it only forgets the handle.
  Status close();

  MPI_Comm handle() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  static Result<Communicator> adopt(MPI_Comm comm);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
};

// How ring, recursive_doubling and hierarchical wait for a message (`mpi` follows Open MPI's own
// mpi_yield_when_idle).
enum class WaitPolicy {
  kAuto,   // kYield when this node runs more ranks than this process may use cores, else kSpin
  kSpin,   // poll without pause: lowest latency when every rank has a core
  kYield,  // poll, giving the core away between polls: lets an oversubscribed peer run
};

struct AllreduceOptions {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kHierarchical;
  // Pipelining granularity of ring, recursive_doubling and hierarchical: messages are at most this
  // long, and each is reduced as soon as it arrives. At least sizeof(float). Over shared memory
  // Open MPI copies a message inside the receiver's progress call, so copy and reduction cannot
  // overlap there and fewer, longer messages win: 2 MiB beat 64 KiB to 512 KiB and 8 MiB on 2
  // ranks (bench/allreduce.cpp, --segment-bytes); networks overlap and may prefer shorter ones.
  size_t segment_bytes = 2u << 20;
  // Bound on one collective call (not enforced by `mpi`, see the top of this file). > 0.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  WaitPolicy wait = WaitPolicy::kAuto;
  // Test-only: > 0 groups ranks into nodes of this many consecutive ranks (node = rank / k)
  // instead of asking MPI which ranks share memory, so one machine can exercise the multi-node
  // path of `hierarchical`. 0: MPI_COMM_TYPE_SHARED.
  int ranks_per_node = 0;
  // `hierarchical`: run the node phases through shared memory (see the top of this file) when the
  // node's ranks share memory and the region can be made; otherwise they go by messages.
  bool shared_memory = true;
};

// This rank's slot of the node's shared memory (Allreducer::shared_buffer), and what keeps it
// mapped: hold `owner` for as long as `data` is used. Empty where the algorithm has none.
struct SharedBuffer {
  std::span<float> data;
  std::shared_ptr<void> owner;
};

namespace detail {
class SharedSlots;
struct Pipeline;
}  // namespace detail

// One communicator's allreduce, with its chosen algorithm, sub-communicators and scratch memory
// created once and reused. Every rank of the communicator must make the same calls, in the same
// order, with the same element count.
class Allreducer {
 public:
  // Duplicates `comm` (so collective traffic never matches the caller's own messages) and, for
  // `hierarchical`, splits it into node and cross-node communicators. Collective over `comm`.
  // kInvalidArgument for bad options.
  static Result<Allreducer> create(MPI_Comm comm, const AllreduceOptions& options = {});

  Allreducer(Allreducer&&) noexcept;
  Allreducer& operator=(Allreducer&&) noexcept;
  ~Allreducer() noexcept;

  // data[i] = sum over ranks of data[i], in place. kTimeout past options().timeout; kIo / kPeerGone
  // for MPI errors. After any error this Allreducer refuses further calls (kFailed): the group must
  // be torn down (see the top of this file).
  Status sum(std::span<float> data);
  // sum() then division by size().
  Status average(std::span<float> data);

  // `count` floats of memory that sum() reduces without copying them in or out: this rank's slot
  // of the node's shared memory (`hierarchical` with shared_memory). Empty for the other
  // algorithms, on one rank, or where the region cannot be made; the caller then uses its own
  // memory, which works as well, with copies. Collective over the node: every rank asks for the
  // same count. A later sum() of more floats maps a larger region; the old one stays valid for
  // as long as its owner is held, but is no longer shared.
  Result<SharedBuffer> shared_buffer(size_t count);
  // Whether the node phases run in shared memory: "on", "off: <reason>", "not yet mapped" (before
  // the first call), or "not used by '<algorithm>'".
  std::string shared_memory() const;

  // When the collective now running on this Allreducer began; nullopt when none is running. For a
  // watchdog on another thread; safe to call concurrently with sum() while the Allreducer lives.
  std::optional<std::chrono::steady_clock::time_point> collective_started() const noexcept;

  int rank() const noexcept;
  int size() const noexcept;
  // Whether waits yield the core (WaitPolicy, with kAuto resolved at create()).
  bool yields_when_idle() const noexcept;
  // Nodes seen by `hierarchical` (1 for the other algorithms).
  int nodes() const noexcept;
  const AllreduceOptions& options() const noexcept;

 private:
  struct State;
  explicit Allreducer(std::unique_ptr<State> state);
  Result<detail::SharedSlots*> node_slots(size_t count, const detail::Pipeline& pipeline);
  std::unique_ptr<State> state_;
};

// Averages the gradients of a data-parallel model: packs consecutive buffers into a fused buffer of
// at most max_fused_bytes, allreduces it with one call, and unpacks while dividing by the rank
// count. A buffer larger than max_fused_bytes, or alone in its bucket, is reduced in place without
// copying. Many small allreduces cost a latency each; fusion pays that latency once per bucket.
class GradientAverager {
 public:
  static constexpr size_t kDefaultMaxFusedBytes = 64u << 20;

  explicit GradientAverager(Allreducer allreducer, size_t max_fused_bytes = kDefaultMaxFusedBytes);

  // Replaces each buffer by its average over the ranks. Every rank passes buffers of the same
  // sizes in the same order. Errors as Allreducer::sum.
  Status average(std::span<const std::span<float>> gradients);

  // Allreduce calls issued so far (one per bucket); for tests and metrics.
  int64_t allreduce_calls() const noexcept { return allreduce_calls_; }
  Allreducer& allreducer() noexcept { return allreducer_; }

 private:
  Status reduce_bucket(std::span<const std::span<float>> bucket, size_t floats);

  Allreducer allreducer_;
  size_t max_fused_floats_;
  std::vector<float> fused_;
  int64_t allreduce_calls_ = 0;
};

}  // namespace hpctune::collectives
