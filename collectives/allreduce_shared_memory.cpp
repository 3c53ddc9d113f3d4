// The node phases of `hierarchical` through memory the node's ranks share (see collectives.h):
// every rank of a node maps one region with a slot per rank, reduces its part of the buffer by
// reading that part of every slot, and copies the other parts from their owners' slots. No message
// carries the data; the ranks only meet at barriers.
//
// The region is a POSIX shared-memory object (shm_open), created by local rank 0 under a fresh
// name that it broadcasts, opened and mapped by the others, and unlinked as soon as every rank has
// mapped it, so nothing is left in /dev/shm even when a rank dies later. Space is reserved with
// posix_fallocate, so a full /dev/shm is an error at creation instead of a SIGBUS on first touch.
// A rank killed between creating and unlinking leaves its region behind; the next creation on the
// machine removes the regions of processes that no longer exist (the name holds the pid).
// Unmapping is local (no collective at teardown, which could hang on a dead peer).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "collectives/allreduce_detail.h"

namespace hpctune::collectives::detail {
namespace {

constexpr size_t kSlotAlignFloats = 4096 / sizeof(float);  // slots start on page boundaries
constexpr size_t kNameLength = 64;
// A buffer outside the slots goes through them (copied in and out) up to this size; above it the
// node phases send messages instead, which costs fewer passes over memory than the two copies
// (bench/results/allreduce.md: copying through the slots wins up to 128 KiB on 2 ranks).
constexpr size_t kCopyThroughSlotsMaxBytes = 128u << 10;

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A name no other region on this machine has: pid, time and a random number.
constexpr char kNamePrefix[] = "hpctune-allreduce-";

std::string fresh_name() {
  static std::atomic<unsigned> counter{0};
  std::random_device device;
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  return "/" + std::string(kNamePrefix) + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(static_cast<unsigned long long>(ticks) % 1000000007ull) + "-" + std::to_string(device());
}

// Unlinks the regions left in /dev/shm by processes that are gone.
void remove_orphaned_regions() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  const size_t prefix = sizeof(kNamePrefix) - 1;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix, kNamePrefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) shm_unlink(("/" + name).c_str());
  }
  closedir(dir);
}

// Maps `bytes` of the object `name`; creates and reserves it when `create`. nullptr on failure,
// with the reason in `why`.
void* map_region(const std::string& name, size_t bytes, bool create, std::string& why) {
  const int fd = shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) {
    why = "shm_open(" + name + "): " + std::strerror(errno);
    return nullptr;
  }
  if (create) {
    // More than the machine's memory cannot be reserved; a tmpfs without a size limit would try.
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes / static_cast<size_t>(page) >= static_cast<size_t>(pages)) {
      why = "reserving " + std::to_string(bytes) + " bytes of shared memory: more than this machine's memory";
      close(fd);
      shm_unlink(name.c_str());
      return nullptr;
    }
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      why = "reserving " + std::to_string(bytes) + " bytes of shared memory: " + std::strerror(rc);
      close(fd);
      shm_unlink(name.c_str());
      return nullptr;
    }
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    why = std::string("mmap of the shared region: ") + std::strerror(errno);
    if (create) shm_unlink(name.c_str());
    return nullptr;
  }
  return base;
}

// out = slot(0) + slot(1) + ... + slot(L-1) over `range`, added in rank order on whichever rank
// computes it, so every element has one well-defined value. `out` may be one of the slots: a block
// is summed into a small buffer first.
void reduce_slots(const SharedSlots& slots, Range range, float* out) noexcept {
  constexpr size_t kBlock = 1024;
  alignas(64) float acc[kBlock];
  const int L = slots.ranks();
  for (size_t b = range.begin, end = range.begin + range.count; b < end; b += kBlock) {
    const size_t n = std::min(kBlock, end - b);
    std::memcpy(acc, slots.slot(0) + b, n * sizeof(float));
    for (int j = 1; j < L; ++j) add_into(acc, slots.slot(j) + b, n);
    std::memcpy(out + b, acc, n * sizeof(float));
  }
}

}  // namespace

SharedSlots::~SharedSlots() noexcept {
  if (base_ != nullptr) munmap(base_, bytes_);
}

Result<std::shared_ptr<SharedSlots>> SharedSlots::create(const Communicator& node, size_t capacity,
                                                         const Pipeline& pipeline, std::string* why_not) {
  auto slots = std::shared_ptr<SharedSlots>(new SharedSlots());
  slots->ranks_ = node.size();
  slots->rank_ = node.rank();
  slots->stride_ = round_up(std::max<size_t>(capacity, 1), kSlotAlignFloats);
  slots->capacity_ = capacity;
  slots->bytes_ = slots->stride_ * sizeof(float) * static_cast<size_t>(node.size());

  // Local rank 0 creates the region and broadcasts its name ("" when it could not).
  char name[kNameLength] = {};
  std::string why;
  void* base = nullptr;
  if (node.rank() == 0) {
    remove_orphaned_regions();
    const std::string fresh = fresh_name();
    base = map_region(fresh, slots->bytes_, /*create=*/true, why);
    if (base != nullptr) std::snprintf(name, sizeof name, "%s", fresh.c_str());
  }
  MPI_Request request = MPI_REQUEST_NULL;
  HPCTUNE_TRY(mpi_status(MPI_Ibcast(name, static_cast<int>(kNameLength), MPI_CHAR, 0, node.handle(), &request),
                         "MPI_Ibcast(shared region name)"));
  HPCTUNE_TRY(wait_request(request, pipeline, "the name of the node's shared region"));
  if (node.rank() != 0) {
    if (name[0] != '\0') {
      base = map_region(name, slots->bytes_, /*create=*/false, why);
    } else {
      why = "local rank 0 could not create the region";
    }
  }

  // Everyone mapped it, or nobody uses it. The allreduce is also the barrier before the unlink.
  int mapped = base != nullptr ? 1 : 0;
  HPCTUNE_TRY(mpi_status(MPI_Iallreduce(MPI_IN_PLACE, &mapped, 1, MPI_INT, MPI_MIN, node.handle(), &request),
                         "MPI_Iallreduce(shared region mapped)"));
  const Status agreed = wait_request(request, pipeline, "every rank of the node to map the shared region");
  if (node.rank() == 0 && name[0] != '\0') shm_unlink(name);
  HPCTUNE_TRY(agreed);
  if (!mapped) {
    if (base != nullptr) munmap(base, slots->bytes_);
    if (why_not != nullptr) {
      *why_not = why.empty() ? "another rank of the node could not map the shared region" : why;
    }
    return std::shared_ptr<SharedSlots>();
  }
  slots->base_ = static_cast<float*>(base);
  return slots;
}

Status node_barrier(const Communicator& node, const Pipeline& pipeline) {
  // The barrier orders the slot writes before it against the reads after it on every rank.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  MPI_Request request = MPI_REQUEST_NULL;
  HPCTUNE_TRY(mpi_status(MPI_Ibarrier(node.handle(), &request), "MPI_Ibarrier(node)"));
  HPCTUNE_TRY(wait_request(request, pipeline, "the other ranks of the node"));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return Status::Ok();
}

Status shared_memory_hierarchical_allreduce(const Hierarchy& hierarchy, SharedSlots& slots, float* data,
                                            size_t count, float* scratch, const Pipeline& pipeline) {
  const int L = slots.ranks(), me = slots.rank();
  float* mine = slots.slot(me);
  // Through the slots when every rank's buffer is its slot, or when copying is cheap; the node
  // agrees on it in a collective that is also the barrier after the copies in.
  const bool in_place = data == mine;
  const bool small = count * sizeof(float) <= kCopyThroughSlotsMaxBytes;  // the same on every rank
  if (!in_place && small) std::memmove(mine, data, count * sizeof(float));  // data may lie in a slot
  int through_slots = in_place || small ? 1 : 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  MPI_Request request = MPI_REQUEST_NULL;
  HPCTUNE_TRY(mpi_status(MPI_Iallreduce(MPI_IN_PLACE, &through_slots, 1, MPI_INT, MPI_MIN, hierarchy.node.handle(),
                                        &request),
                         "MPI_Iallreduce(node buffers in place)"));
  HPCTUNE_TRY(wait_request(request, pipeline, "the other ranks of the node"));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!through_slots) return hierarchical_allreduce(hierarchy, data, count, scratch, pipeline);
  // Reduce-scatter: this rank's part of the node sum, into its own slot.
  const Range part = balanced_part(count, L, me);
  reduce_slots(slots, part, mine);
  if (hierarchy.uniform) {
    // Across nodes: the part with the same local rank on every node (a no-op on one node).
    HPCTUNE_TRY(ring_allreduce(peers_of(hierarchy.cross), mine + part.begin, part.count, scratch, pipeline));
  } else {
    // Nodes cut the buffer differently: the leader collects the node sum in its slot and the
    // leaders allreduce the whole buffer.
    HPCTUNE_TRY(node_barrier(hierarchy.node, pipeline));
    if (me == 0) {
      for (int j = 1; j < L; ++j) {
        const Range r = balanced_part(count, L, j);
        std::memcpy(mine + r.begin, slots.slot(j) + r.begin, r.count * sizeof(float));
      }
      HPCTUNE_TRY(ring_allreduce(peers_of(hierarchy.leaders), mine, count, scratch, pipeline));
    }
  }
  HPCTUNE_TRY(node_barrier(hierarchy.node, pipeline));
  // Allgather: every part from the slot that holds its total.
  for (int j = 0; j < L; ++j) {
    const Range r = balanced_part(count, L, j);
    const float* source = slots.slot(hierarchy.uniform ? j : 0) + r.begin;
    if (source != data + r.begin) std::memmove(data + r.begin, source, r.count * sizeof(float));
  }
  // Nobody writes its slot again (the next call, or a backward pass into it) before every rank
  // has copied out of it.
  return node_barrier(hierarchy.node, pipeline);
}

}  // namespace hpctune::collectives::detail
