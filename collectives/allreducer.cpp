// Allreducer: option checks, per-communicator setup and dispatch to the four implementations
// (allreduce_mpi.cpp, allreduce_ring.cpp, allreduce_recursive_doubling.cpp,
// allreduce_hierarchical.cpp).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/allreduce_detail.h"
#include "collectives/collectives.h"

namespace hpctune::collectives {

struct Allreducer::State {
  Communicator comm;
  AllreduceOptions options;
  detail::Hierarchy hierarchy;  // kHierarchical only
  // kHierarchical: the node's slots, made on first use and again when a larger buffer comes.
  std::shared_ptr<detail::SharedSlots> slots;
  // Why the node phases go by messages; empty while they may use shared memory.
  std::string no_shared_memory;
  std::vector<float> scratch;   // grows to the largest count seen; reused across calls
  bool yield = false;           // WaitPolicy resolved
  bool broken = false;          // set by the first error; see sum()
  // steady_clock ticks when the running collective began; 0 when idle. Read by watchdogs.
  std::atomic<detail::Clock::rep> started{0};
};

namespace {

detail::Pipeline make_pipeline(const AllreduceOptions& options, bool yield, detail::Clock::time_point now) {
  detail::Pipeline pipeline;
  pipeline.segment_floats =
      std::min<size_t>(options.segment_bytes / sizeof(float), static_cast<size_t>(INT_MAX));
  pipeline.deadline = now + options.timeout;
  pipeline.yield = yield;
  return pipeline;
}

// kAuto: yield when the ranks on this node outnumber the cores this process may run on, the rule
// Open MPI applies to its own progress loop. Collective over `comm`.
Result<bool> resolve_wait_policy(WaitPolicy policy, const Communicator& comm) {
  if (policy != WaitPolicy::kAuto) return policy == WaitPolicy::kYield;
  HPCTUNE_ASSIGN(Communicator node, Communicator::split_shared(comm.handle()));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0
                         ? CPU_COUNT(&cpus)
                         : static_cast<int>(std::thread::hardware_concurrency());
  return node.size() > std::max(usable, 1);
}

}  // namespace

// The node's slots with room for `count` floats, made when missing or too small; null when the
// node phases go by messages instead. Collective over the node (every rank asks for the same count).
Result<detail::SharedSlots*> Allreducer::node_slots(size_t count, const detail::Pipeline& pipeline) {
  State& s = *state_;
  if (s.options.algorithm != AllreduceAlgorithm::kHierarchical || !s.no_shared_memory.empty()) return nullptr;
  s.no_shared_memory = !s.options.shared_memory              ? "turned off"
                       : s.hierarchy.node.size() < 2           ? "one rank per node"
                       : !s.hierarchy.node_shares_memory       ? "the node's ranks do not share memory"
                                                               : "";
  if (!s.no_shared_memory.empty()) return nullptr;
  if (s.slots && s.slots->capacity() >= count) return s.slots.get();
  HPCTUNE_ASSIGN(s.slots, detail::SharedSlots::create(s.hierarchy.node, count, pipeline, &s.no_shared_memory));
  return s.slots.get();
}

Allreducer::Allreducer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Allreducer::Allreducer(Allreducer&&) noexcept = default;
Allreducer& Allreducer::operator=(Allreducer&&) noexcept = default;
Allreducer::~Allreducer() noexcept = default;

Result<Allreducer> Allreducer::create(MPI_Comm comm, const AllreduceOptions& options) {
  if (options.segment_bytes < sizeof(float)) {
    return err(Errc::kInvalidArgument, "allreduce segment_bytes must be at least " +
                                           std::to_string(sizeof(float)) + ", got " +
                                           std::to_string(options.segment_bytes));
  }
  if (options.timeout.count() <= 0) {
    return err(Errc::kInvalidArgument, "allreduce timeout must be positive");
  }
  if (options.ranks_per_node < 0) {
    return err(Errc::kInvalidArgument, "allreduce ranks_per_node must be >= 0, got " +
                                           std::to_string(options.ranks_per_node));
  }
  auto state = std::make_unique<State>();
  state->options = options;
  HPCTUNE_ASSIGN(state->comm, Communicator::duplicate(comm));
  HPCTUNE_ASSIGN(state->yield, resolve_wait_policy(options.wait, state->comm));
  if (options.algorithm == AllreduceAlgorithm::kHierarchical) {
    HPCTUNE_ASSIGN(state->hierarchy,
                   detail::Hierarchy::create(state->comm, options.ranks_per_node));
  }
  return Allreducer(std::move(state));
}

Status Allreducer::sum(std::span<float> data) {
  State& s = *state_;
  if (s.broken) {
    return err(Errc::kFailed,
               "allreducer unusable after an earlier collective error; tear the group down");
  }
  if (s.comm.size() == 1 || data.empty()) return Status::Ok();

  const AllreduceAlgorithm algorithm = s.options.algorithm;
  if (algorithm != AllreduceAlgorithm::kMpi && s.scratch.size() < data.size()) {
    s.scratch.resize(data.size());
  }
  const auto now = detail::Clock::now();
  s.started.store(std::max<detail::Clock::rep>(now.time_since_epoch().count(), 1),
                  std::memory_order_relaxed);
  const detail::Pipeline pipeline = make_pipeline(s.options, s.yield, now);
  const detail::Peers peers = detail::peers_of(s.comm);

  Status status;
  switch (algorithm) {
    case AllreduceAlgorithm::kMpi:
      status = detail::mpi_allreduce(s.comm.handle(), data.data(), data.size());
      break;
    case AllreduceAlgorithm::kRing:
      status = detail::ring_allreduce(peers, data.data(), data.size(), s.scratch.data(), pipeline);
      break;
    case AllreduceAlgorithm::kRecursiveDoubling:
      status = detail::recursive_doubling_allreduce(peers, data.data(), data.size(),
                                                    s.scratch.data(), pipeline);
      break;
    case AllreduceAlgorithm::kHierarchical: {
      auto slots = node_slots(data.size(), pipeline);
      if (!slots.ok()) {
        status = std::move(slots).error();
      } else if (*slots != nullptr) {
        status = detail::shared_memory_hierarchical_allreduce(s.hierarchy, **slots, data.data(), data.size(),
                                                              s.scratch.data(), pipeline);
      } else {
        status = detail::hierarchical_allreduce(s.hierarchy, data.data(), data.size(), s.scratch.data(), pipeline);
      }
      break;
    }
  }
  s.started.store(0, std::memory_order_relaxed);
  if (status.ok()) return status;
  // Messages of this call may still be in flight, so no later call could tell them from its own.
  s.broken = true;
  return std::move(status).error().with_context(
      std::string("while allreducing ") + std::to_string(data.size()) + " floats with '" +
      allreduce_algorithm_name(algorithm) + "' on rank " + std::to_string(s.comm.rank()) + " of " +
      std::to_string(s.comm.size()));
}

Result<SharedBuffer> Allreducer::shared_buffer(size_t count) {
  State& s = *state_;
  if (s.broken) return err(Errc::kFailed, "allreducer unusable after an earlier collective error");
  if (s.comm.size() == 1 || count == 0) return SharedBuffer{};
  const detail::Pipeline pipeline = make_pipeline(s.options, s.yield, detail::Clock::now());
  auto slots = node_slots(count, pipeline);
  if (!slots.ok()) {
    s.broken = true;
    return std::move(slots).error().with_context("while mapping the node's shared memory");
  }
  if (*slots == nullptr) return SharedBuffer{};
  return SharedBuffer{std::span<float>(s.slots->slot(s.slots->rank()), count), s.slots};
}

std::string Allreducer::shared_memory() const {
  const State& s = *state_;
  if (s.options.algorithm != AllreduceAlgorithm::kHierarchical) return "not used by '" +
      std::string(allreduce_algorithm_name(s.options.algorithm)) + "'";
  if (s.slots) return "on";
  if (!s.no_shared_memory.empty()) return "off: " + s.no_shared_memory;
  return "not yet mapped";
}

Status Allreducer::average(std::span<float> data) {
  HPCTUNE_TRY(sum(data));
  const float ranks = static_cast<float>(size());
  for (float& value : data) value /= ranks;
  return Status::Ok();
}

std::optional<std::chrono::steady_clock::time_point> Allreducer::collective_started()
    const noexcept {
  const detail::Clock::rep ticks = state_->started.load(std::memory_order_relaxed);
  if (ticks == 0) return std::nullopt;
  return detail::Clock::time_point(detail::Clock::duration(ticks));
}

bool Allreducer::yields_when_idle() const noexcept { return state_->yield; }
int Allreducer::rank() const noexcept { return state_->comm.rank(); }
int Allreducer::size() const noexcept { return state_->comm.size(); }
int Allreducer::nodes() const noexcept {
  return state_->options.algorithm == AllreduceAlgorithm::kHierarchical ? state_->hierarchy.nodes
                                                                        : 1;
}
const AllreduceOptions& Allreducer::options() const noexcept { return state_->options; }

}  // namespace hpctune::collectives
