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

#include "trainers/allreduce_detail.h"
#include "trainers/collectives.h"

namespace hpctune::trainers {

struct Allreducer::State {
  Communicator comm;
  AllreduceOptions options;
  detail::Hierarchy hierarchy;  // kHierarchical only
  std::vector<float> scratch;   // grows to the largest count seen; reused across calls
  bool yield = false;           // WaitPolicy resolved
  bool broken = false;          // set by the first error; see sum()
  // steady_clock ticks when the running collective began; 0 when idle. Read by watchdogs.
  std::atomic<detail::Clock::rep> started{0};
};

namespace {

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
  detail::Pipeline pipeline;
  pipeline.segment_floats =
      std::min<size_t>(s.options.segment_bytes / sizeof(float), static_cast<size_t>(INT_MAX));
  pipeline.deadline = now + s.options.timeout;
  pipeline.yield = s.yield;
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
    case AllreduceAlgorithm::kHierarchical:
      status = detail::hierarchical_allreduce(s.hierarchy, data.data(), data.size(),
                                              s.scratch.data(), pipeline);
      break;
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

}  // namespace hpctune::trainers
