// The allreduce implementations against an independent reference, run as an MPI program:
//   tests/mpirun-test <ranks> test_allreduce        (ctest runs it on 1, 2, 3 and 4 ranks)
//
// Every rank draws every rank's input from a seed (the input of rank r comes from
// derive_seed(seed, r)), so each rank computes the expected sum by itself, in double precision,
// without trusting any collective. A result passes when every element is within the fp32 rounding
// bound of a p-term sum, (p + 1) * 2^-24 * sum_r |x_r|, and when all ranks hold the same bits.
//
// Collective discipline: every rank runs the same test cases and the same calls in the same order.
// Checks whose outcome may differ between ranks use CHECK, never REQUIRE, so one rank's failure
// cannot leave the others waiting in a collective that it skipped; REQUIRE guards only conditions
// that every rank shares. A hang is still bounded by mpirun's --timeout (tests/mpirun-test).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>
#include <sys/wait.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/rng.h"
#include "tests/mpi_test_main.h"
#include "collectives/collectives.h"

namespace hpctune::collectives {
namespace {

using hpctune::testing::world_rank;
using hpctune::testing::world_size;

constexpr uint64_t kSeed = 20240917;
constexpr size_t kSizes[] = {1, 7, 1000, 1000003};

// The rank count mpirun hands its ranks (Open MPI, else MPICH's PMI); 1 without mpirun. Read from
// the environment because doctest evaluates decorators before main initialises MPI. A case that is
// meaningless on one rank carries `* doctest::skip(one_rank())`: doctest counts it as skipped (so
// the 1-rank run shows it), where a `return` in its body would count it as passed.
bool one_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name); value && *value) return std::atoi(value) < 2;
  }
  return true;
}


// The input of `rank`: mostly N(0, 1), every 7th element 1000x larger, so that the reduction order
// matters and a wrong order or a lost term shows up as a large error.
std::vector<float> make_input(uint64_t seed, int rank, size_t count) {
  Rng rng(derive_seed(seed, static_cast<uint64_t>(rank)));
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>(rng.normal() * (i % 7 == 3 ? 1000.0 : 1.0));
  }
  return values;
}

struct Reference {
  std::vector<double> sum;      // exact enough: p fp32 terms summed in double
  std::vector<double> abs_sum;  // sum of |x|, scales the fp32 rounding bound
};

Reference reference(uint64_t seed, int ranks, size_t count) {
  Reference ref{std::vector<double>(count, 0.0), std::vector<double>(count, 0.0)};
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> input = make_input(seed, r, count);
    for (size_t i = 0; i < count; ++i) {
      ref.sum[i] += input[i];
      ref.abs_sum[i] += std::fabs(static_cast<double>(input[i]));
    }
  }
  return ref;
}

// Elements of `got` outside the fp32 bound of reference / divisor.
size_t count_mismatches(std::span<const float> got, const Reference& ref, int ranks,
                        double divisor) {
  const double unit = std::ldexp(1.0, -24);
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected = ref.sum[i] / divisor;
    const double bound = (ranks + 1) * unit * ref.abs_sum[i] / divisor + 1e-30;
    if (!(std::fabs(got[i] - expected) <= bound)) ++bad;  // a NaN counts as a mismatch
  }
  return bad;
}

// True when every rank holds exactly the same bytes (FNV-1a over the buffer, min == max).
bool identical_on_all_ranks(std::span<const float> data) {
  uint64_t hash = 1469598103934665603ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  for (size_t i = 0; i < data.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;
  uint64_t lowest = hash, highest = hash;
  MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &highest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lowest == highest;
}

// Runs sum() (or average()) of `count` seeded elements and checks the result on this rank.
void check_allreduce(Allreducer& allreducer, size_t count, uint64_t seed, bool average) {
  const int ranks = world_size();
  std::vector<float> data = make_input(seed, world_rank(), count);
  const Status status = average ? allreducer.average(data) : allreducer.sum(data);
  CHECK(status.ok());
  if (!status.ok()) MESSAGE(status.error().to_string());
  CHECK(count_mismatches(data, reference(seed, ranks, count), ranks, average ? ranks : 1.0) == 0);
  CHECK(identical_on_all_ranks(data));
}

// A hang in an implementation should fail as kTimeout long before mpirun's --timeout.
AllreduceOptions options_for(AllreduceAlgorithm algorithm) {
  AllreduceOptions options;
  options.algorithm = algorithm;
  options.timeout = std::chrono::seconds(30);
  return options;
}

Allreducer make_allreducer(const AllreduceOptions& options) {
  auto created = Allreducer::create(MPI_COMM_WORLD, options);
  if (!created.ok()) FAIL(created.error().to_string());  // only for errors every rank shares
  return std::move(created).value();
}

TEST_CASE("every allreduce equals the reference sum for every size") {
  for (AllreduceAlgorithm algorithm : kAllreduceAlgorithms) {
    AllreduceOptions options = options_for(algorithm);
    Allreducer allreducer = make_allreducer(options);
    CHECK(allreducer.size() == world_size());
    CHECK(allreducer.rank() == world_rank());
    for (size_t count : kSizes) {
      const std::string algorithm_name = allreduce_algorithm_name(algorithm);
      CAPTURE(algorithm_name);
      CAPTURE(count);
      check_allreduce(allreducer, count, kSeed + count, /*average=*/false);
    }
  }
}

TEST_CASE("short segments pipeline correctly, including a length that is not a float multiple") {
  for (AllreduceAlgorithm algorithm :
       {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling,
        AllreduceAlgorithm::kHierarchical}) {
    for (size_t segment_bytes : {size_t{4}, size_t{102}, size_t{4096}}) {
      AllreduceOptions options = options_for(algorithm);
      options.segment_bytes = segment_bytes;
      Allreducer allreducer = make_allreducer(options);
      for (size_t count : kSizes) {
        // 10^6 tiny messages would be slow and reach no path that the shorter buffers miss.
        if (count > 1000 && segment_bytes < 4096) continue;
        const std::string algorithm_name = allreduce_algorithm_name(algorithm);
        CAPTURE(algorithm_name);
        CAPTURE(segment_bytes);
        CAPTURE(count);
        check_allreduce(allreducer, count, kSeed + 17 * count, /*average=*/false);
      }
    }
  }
}

TEST_CASE("average divides the sum by the rank count") {
  for (AllreduceAlgorithm algorithm : kAllreduceAlgorithms) {
    AllreduceOptions options = options_for(algorithm);
    Allreducer allreducer = make_allreducer(options);
    const std::string algorithm_name = allreduce_algorithm_name(algorithm);
    CAPTURE(algorithm_name);
    check_allreduce(allreducer, 1000, kSeed + 99, /*average=*/true);
  }
}

TEST_CASE("hierarchical with forced node splits, uniform and uneven") {
  // ranks_per_node = 2 on 4 ranks: two nodes of two (the cross-node shard path); on 3 ranks: nodes
  // of 2 and 1 (the leader path); 3 on 4 ranks: nodes of 3 and 1; 1: every rank its own node.
  // The node phases through shared memory and through messages.
  for (bool shared_memory : {true, false}) {
    for (int ranks_per_node : {1, 2, 3}) {
      AllreduceOptions options = options_for(AllreduceAlgorithm::kHierarchical);
      options.ranks_per_node = ranks_per_node;
      options.segment_bytes = 8192;
      options.shared_memory = shared_memory;
      Allreducer allreducer = make_allreducer(options);
      CAPTURE(shared_memory);
      CAPTURE(ranks_per_node);
      CHECK(allreducer.nodes() == (world_size() + ranks_per_node - 1) / ranks_per_node);
      for (size_t count : kSizes) {
        CAPTURE(count);
        check_allreduce(allreducer, count, kSeed + 31 * count, /*average=*/false);
      }
      // Shared memory is used exactly when asked for and this rank's node has more than one rank.
      const int node_first = world_rank() / ranks_per_node * ranks_per_node;
      const bool node_of_several = std::min(ranks_per_node, world_size() - node_first) > 1;
      const std::string state = allreducer.shared_memory();
      CAPTURE(state);
      CHECK((state == "on") == (shared_memory && node_of_several));
    }
  }
}

TEST_CASE("shared memory that cannot be had falls back to messages on every rank of the node") {
  Allreducer allreducer = make_allreducer(options_for(AllreduceAlgorithm::kHierarchical));
  // 2^40 floats per rank: more than any /dev/shm holds, so reserving them fails on local rank 0.
  // One rank has nothing to share: no buffer either, and the sums below are still exact.
  auto buffer = allreducer.shared_buffer(size_t{1} << 40);
  REQUIRE(buffer.ok());
  CHECK(buffer->data.empty());
  const std::string state = allreducer.shared_memory();
  CAPTURE(state);
  CHECK(state != "on");
  if (world_size() > 1) CHECK(state.rfind("off: ", 0) == 0);
  for (size_t count : kSizes) {
    CAPTURE(count);
    check_allreduce(allreducer, count, kSeed + 41 * count, /*average=*/false);
  }
  CHECK(allreducer.shared_memory() == state);
}

TEST_CASE("regions left in /dev/shm by dead processes are removed, those of live ones kept" *
          doctest::description("needs 2 or more ranks: one rank maps no shared memory, so never sweeps") *
          doctest::skip(one_rank())) {
  REQUIRE(world_size() >= 2);
  // A pid that is surely gone: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  const std::string dead = "/dev/shm/hpctune-allreduce-" + std::to_string(child) + "-0-0-r" + std::to_string(world_rank());
  const std::string live = "/dev/shm/hpctune-allreduce-" + std::to_string(getpid()) + "-0-0-r" + std::to_string(world_rank());
  std::fclose(std::fopen(dead.c_str(), "w"));
  std::fclose(std::fopen(live.c_str(), "w"));
  REQUIRE(access(dead.c_str(), F_OK) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  {
    Allreducer allreducer = make_allreducer(options_for(AllreduceAlgorithm::kHierarchical));
    check_allreduce(allreducer, 1000, kSeed + 13, /*average=*/false);
    CHECK(allreducer.shared_memory() == "on");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(access(dead.c_str(), F_OK) != 0);
  CHECK(access(live.c_str(), F_OK) == 0);
  unlink(live.c_str());
  // Nothing of this process's own regions is left once they are mapped.
  MPI_Barrier(MPI_COMM_WORLD);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    CHECK(name.rfind("hpctune-allreduce-" + std::to_string(getpid()) + "-", 0) != 0);
  }
}

TEST_CASE("a buffer in the node's shared memory is summed in place, and stays usable after a remap") {
  Allreducer allreducer = make_allreducer(options_for(AllreduceAlgorithm::kHierarchical));
  auto buffer = allreducer.shared_buffer(1000003);
  REQUIRE(buffer.ok());
  // One rank has no node to share with: no buffer, and its sums use ordinary memory.
  CHECK(buffer->data.empty() == (world_size() == 1));
  if (world_size() > 1) {
    CHECK(buffer->data.size() == 1000003);
    CHECK(allreducer.shared_memory() == "on");
    for (size_t count : {size_t{1000003}, size_t{7}, size_t{1000}}) {
      CAPTURE(count);
      std::span<float> data = buffer->data.first(count);
      const std::vector<float> input = make_input(kSeed + 3 * count, world_rank(), count);
      std::copy(input.begin(), input.end(), data.begin());
      REQUIRE(allreducer.sum(data).ok());
      CHECK(count_mismatches(data, reference(kSeed + 3 * count, world_size(), count), world_size(), 1.0) == 0);
      CHECK(identical_on_all_ranks(data));
    }
  }
  // A larger sum maps a larger region (on several ranks); the old buffer is ordinary memory now,
  // still summed right.
  check_allreduce(allreducer, 1500000, kSeed + 11, /*average=*/false);
  if (world_size() > 1) {
    const std::vector<float> input = make_input(kSeed + 12, world_rank(), 1000);
    std::copy(input.begin(), input.end(), buffer->data.begin());
    REQUIRE(allreducer.sum(buffer->data.first(1000)).ok());
    CHECK(count_mismatches(buffer->data.first(1000), reference(kSeed + 12, world_size(), 1000), world_size(), 1.0) == 0);
  }
  if (world_size() == 1) CHECK(allreducer.shared_memory() != "on");
  // Other algorithms have no such buffer.
  Allreducer ring = make_allreducer(options_for(AllreduceAlgorithm::kRing));
  auto none = ring.shared_buffer(1000);
  REQUIRE(none.ok());
  CHECK(none->data.empty());
}

TEST_CASE("waiting by spinning and by yielding give the same sums") {
  for (WaitPolicy wait : {WaitPolicy::kSpin, WaitPolicy::kYield}) {
    for (AllreduceAlgorithm algorithm :
         {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling}) {
      AllreduceOptions options = options_for(algorithm);
      options.wait = wait;
      Allreducer allreducer = make_allreducer(options);
      CHECK(allreducer.yields_when_idle() == (wait == WaitPolicy::kYield));
      check_allreduce(allreducer, 1000003, kSeed + 7, /*average=*/false);
    }
  }
  // kAuto yields exactly when this node has more ranks than usable cores (all ranks are local).
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  REQUIRE(sched_getaffinity(0, sizeof cpus, &cpus) == 0);
  Allreducer automatic = make_allreducer(options_for(AllreduceAlgorithm::kRing));
  CHECK(automatic.yields_when_idle() == (world_size() > CPU_COUNT(&cpus)));
}

TEST_CASE("hierarchical finds one node on one machine") {
  AllreduceOptions options = options_for(AllreduceAlgorithm::kHierarchical);
  Allreducer allreducer = make_allreducer(options);
  CHECK(allreducer.nodes() == 1);
}

TEST_CASE("an allreducer is reusable across calls of different sizes") {
  AllreduceOptions options = options_for(AllreduceAlgorithm::kRing);
  Allreducer allreducer = make_allreducer(options);
  for (size_t count : {size_t{1000003}, size_t{7}, size_t{1000}, size_t{0}, size_t{1}}) {
    CAPTURE(count);
    check_allreduce(allreducer, count, kSeed + 5 * count, /*average=*/false);
  }
}

TEST_CASE("a peer that never joins gives kTimeout, then the allreducer refuses further calls" *
          doctest::description("needs 2 or more ranks: a peer to be missing") * doctest::skip(one_rank())) {
  REQUIRE(world_size() >= 2);
  for (AllreduceAlgorithm algorithm :
       {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling,
        AllreduceAlgorithm::kHierarchical}) {
    const std::string algorithm_name = allreduce_algorithm_name(algorithm);
    CAPTURE(algorithm_name);
    AllreduceOptions options = options_for(algorithm);
    options.timeout = std::chrono::milliseconds(300);
    Allreducer allreducer = make_allreducer(options);
    if (world_rank() == 0) {
      std::vector<float> data(64, 1.0f);  // small: the abandoned sends complete eagerly
      CHECK_FALSE(allreducer.collective_started().has_value());
      // A watchdog thread sees the stuck collective and when it began.
      std::atomic<bool> seen{false};
      std::thread watchdog([&] {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (!seen && std::chrono::steady_clock::now() < give_up) {
          seen = allreducer.collective_started().has_value();
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      });
      const auto start = std::chrono::steady_clock::now();
      const Status status = allreducer.sum(data);
      const auto waited = std::chrono::steady_clock::now() - start;
      watchdog.join();
      CHECK(seen);
      CHECK_FALSE(allreducer.collective_started().has_value());
      CHECK_FALSE(status.ok());
      if (!status.ok()) CHECK(status.error().code() == Errc::kTimeout);
      CHECK(waited >= std::chrono::milliseconds(300));
      CHECK(waited < std::chrono::seconds(5));
      const Status again = allreducer.sum(data);
      CHECK_FALSE(again.ok());
      if (!again.ok()) CHECK(again.error().code() == Errc::kFailed);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("bad options are kInvalidArgument before any communication") {
  AllreduceOptions tiny_segments;
  tiny_segments.segment_bytes = 2;
  auto a = Allreducer::create(MPI_COMM_WORLD, tiny_segments);
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().code() == Errc::kInvalidArgument);

  AllreduceOptions no_timeout;
  no_timeout.timeout = std::chrono::milliseconds(0);
  auto b = Allreducer::create(MPI_COMM_WORLD, no_timeout);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().code() == Errc::kInvalidArgument);

  AllreduceOptions negative_split;
  negative_split.ranks_per_node = -1;
  auto c = Allreducer::create(MPI_COMM_WORLD, negative_split);
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code() == Errc::kInvalidArgument);
}

TEST_CASE("trainer.allreduce names parse, and an unknown name lists the valid ones") {
  for (AllreduceAlgorithm algorithm : kAllreduceAlgorithms) {
    auto parsed = parse_allreduce_algorithm(allreduce_algorithm_name(algorithm));
    REQUIRE(parsed.ok());
    CHECK(*parsed == algorithm);
  }
  CHECK(*parse_allreduce_algorithm("recursive_doubling") == AllreduceAlgorithm::kRecursiveDoubling);
  auto unknown = parse_allreduce_algorithm("rign");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code() == Errc::kConfig);
  // The message is the feature here: it must name the bad value and every valid one.
  const std::string& message = unknown.error().message();
  CHECK(message.find("'rign'") != std::string::npos);
  CHECK(message.find("mpi, ring, recursive_doubling, hierarchical") != std::string::npos);
  CHECK_FALSE(parse_allreduce_algorithm("Ring").ok());
  CHECK_FALSE(parse_allreduce_algorithm("").ok());
}

TEST_CASE("Communicator duplicates, moves and closes once") {
  auto dup = Communicator::duplicate(MPI_COMM_WORLD);
  REQUIRE(dup.ok());
  CHECK(dup->rank() == world_rank());
  CHECK(dup->size() == world_size());
  int comparison = MPI_UNEQUAL;
  MPI_Comm_compare(dup->handle(), MPI_COMM_WORLD, &comparison);
  CHECK(comparison == MPI_CONGRUENT);  // same group, distinct context: messages never cross

  Communicator moved = std::move(dup.value());
  CHECK(dup->handle() == MPI_COMM_NULL);
  CHECK(moved.handle() != MPI_COMM_NULL);
  CHECK(moved.close().ok());
  CHECK(moved.handle() == MPI_COMM_NULL);
  CHECK(moved.close().ok());  // idempotent

  // Split into odd and even ranks.
  auto halves = Communicator::split(MPI_COMM_WORLD, world_rank() % 2, world_rank());
  REQUIRE(halves.ok());
  CHECK(halves->size() == (world_size() + 1 - world_rank() % 2) / 2);
  CHECK(halves->rank() == world_rank() / 2);
}

TEST_CASE("mpi_status turns an MPI error code into kIo with MPI's text") {
  CHECK(mpi_status(MPI_SUCCESS, "x").ok());
  const Status status = mpi_status(MPI_ERR_TRUNCATE, "MPI_Recv");
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code() == Errc::kIo);
  CHECK(status.error().message().rfind("MPI_Recv: ", 0) == 0);
  CHECK(status.error().message().size() > std::strlen("MPI_Recv: "));
}

// --- GradientAverager ---------------------------------------------------------------------------

// Fills `buffers` (sizes given) with rank-dependent seeded values and checks their average.
void check_gradient_average(GradientAverager& averager, const std::vector<size_t>& sizes,
                            uint64_t seed) {
  const int ranks = world_size();
  std::vector<std::vector<float>> storage;
  std::vector<std::span<float>> buffers;
  for (size_t b = 0; b < sizes.size(); ++b) {
    storage.push_back(make_input(seed + b, world_rank(), sizes[b]));
  }
  for (auto& buffer : storage) buffers.emplace_back(buffer);
  const Status status = averager.average(buffers);
  CHECK(status.ok());
  if (!status.ok()) MESSAGE(status.error().to_string());
  for (size_t b = 0; b < sizes.size(); ++b) {
    CAPTURE(b);
    CHECK(count_mismatches(storage[b], reference(seed + b, ranks, sizes[b]), ranks, ranks) == 0);
    CHECK(identical_on_all_ranks(storage[b]));
  }
}

TEST_CASE("GradientAverager fuses small buffers and averages every one") {
  const std::vector<size_t> sizes = {3, 0, 1, 1000, 17, 5000, 2};
  for (AllreduceAlgorithm algorithm : kAllreduceAlgorithms) {
    const std::string algorithm_name = allreduce_algorithm_name(algorithm);
    CAPTURE(algorithm_name);
    AllreduceOptions options = options_for(algorithm);
    {  // one fused buffer by default
      GradientAverager averager(make_allreducer(options));
      check_gradient_average(averager, sizes, kSeed + 1000);
      CHECK(averager.allreduce_calls() == 1);
    }
    {  // buckets of at most 1024 floats:
      // {3, 0, 1, 1000, 17} = 1021 floats fused; 5000 > 1024 in place; {2} alone in place.
      GradientAverager averager(make_allreducer(options), 1024 * sizeof(float));
      check_gradient_average(averager, sizes, kSeed + 2000);
      CHECK(averager.allreduce_calls() == 3);
      check_gradient_average(averager, sizes, kSeed + 3000);  // the fused buffer is reused
      CHECK(averager.allreduce_calls() == 6);
    }
    {  // no fusion at all
      GradientAverager averager(make_allreducer(options), 0);
      check_gradient_average(averager, sizes, kSeed + 4000);
      CHECK(averager.allreduce_calls() == 6);  // one per non-empty buffer
    }
  }
}

TEST_CASE("GradientAverager with nothing to do issues no allreduce") {
  GradientAverager averager(make_allreducer(options_for(AllreduceAlgorithm::kRing)));
  CHECK(averager.average({}).ok());
  std::vector<float> empty;
  std::vector<std::span<float>> buffers = {std::span<float>(empty), std::span<float>(empty)};
  CHECK(averager.average(buffers).ok());
  CHECK(averager.allreduce_calls() == 0);
}

}  // namespace
}  // namespace hpctune::collectives

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_allreduce"); }
