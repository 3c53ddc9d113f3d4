// NCCL through the CUDA library on a GPU (issue 23, acceptance 2: "NCCL allreduce equals the
// reference; the watchdog aborts a collective whose peer is gone"): gpu/nccl_communicator.h's
// NcclCommunicator against a CPU sum with 1 rank (and 2 ranks on 2 threads with 2 GPUs), and the
// watchdog: a peer that never joins, and (2 GPUs) a peer that joins but never calls allreduce; the
// waiting rank returns kTimeout at its deadline, its communicator aborted. Send/receive (ABI 4) on
// 2 GPUs, and two ranks on one GPU refused. test_gpu_nccl_cpu_library runs every case against the
// CPU stand-in's NCCL (tests/gpu_cpu_reference_nccl.cpp) with 2 stand-in devices.
//
// Needs a GPU (and NCCL in the library). Without one it runs nothing and exits 77, which ctest shows as
// skipped (SKIP_RETURN_CODE), printing why. Cases that need 2 GPUs say so and pass nothing off on 1.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <span>
#include <thread>
#include <vector>

#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/nccl_communicator.h"
#include "tests/gpu_test_main.h"

using namespace hpctune;
using namespace hpctune::gpu;
using Clock = std::chrono::steady_clock;

namespace {

std::optional<GpuLibrary> g_library;
int g_devices = 0;

std::vector<float> rank_values(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float(rank + 1) * 0.25f * float(i % 1000) - float(rank) * 3.0f;
  return v;
}

// One rank: its own context on `device`, joins, allreduces `count` floats, returns what it got.
Result<std::vector<float>> run_rank(int device, int nranks, int rank, const NcclUniqueId& id, size_t count) {
  HPCTUNE_ASSIGN(GpuContext ctx, GpuContext::create(*g_library, device));
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  HPCTUNE_ASSIGN(NcclCommunicator comm, NcclCommunicator::create(ctx, nranks, rank, id, deadline));
  std::vector<float> values = rank_values(rank, count);
  HPCTUNE_ASSIGN(DeviceBuffer buffer, ctx.upload(std::span<const float>(values)));
  HPCTUNE_TRY(comm.allreduce(buffer, count, deadline));
  return buffer.read<float>();
}

void check_sum(const std::vector<float>& got, int nranks, size_t count) {
  REQUIRE(got.size() == count);
  std::vector<std::vector<float>> values;
  for (int r = 0; r < nranks; ++r) values.push_back(rank_values(r, count));
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < nranks; ++r) want += values[size_t(r)][i];
    if (std::fabs(got[i] - want) > 1e-5 * (1 + std::fabs(want))) ++bad;
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("a 1-rank NCCL allreduce returns the buffer (the sum over one rank)") {
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE_MESSAGE(id.ok(), (id.ok() ? std::string() : id.error().to_string()));
  auto got = run_rank(0, 1, 0, *id, 4099);
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? std::string() : got.error().to_string()));
  check_sum(*got, 1, 4099);
}

TEST_CASE("a 2-rank NCCL allreduce on 2 GPUs, one thread per rank, equals the CPU sum") {
  if (g_devices < 2) {
    MESSAGE("not run: needs 2 GPUs, this machine has " << g_devices);
    return;
  }
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  // The id goes through text, as it would through the master or MPI.
  auto received = NcclUniqueId::from_hex(id->to_hex());
  REQUIRE(received.ok());
  std::optional<Result<std::vector<float>>> other;
  std::thread peer([&] { other.emplace(run_rank(1, 2, 1, *received, 1 << 20)); });
  auto mine = run_rank(0, 2, 0, *id, 1 << 20);
  peer.join();
  REQUIRE_MESSAGE(mine.ok(), (mine.ok() ? std::string() : mine.error().to_string()));
  REQUIRE_MESSAGE(other->ok(), (other->ok() ? std::string() : other->error().to_string()));
  check_sum(*mine, 2, 1 << 20);
  check_sum(**other, 2, 1 << 20);
}

// Point to point (ABI 4): each rank sends its values to the other and receives the other's in one
// group, twice (the second with another count), as a pipeline's stages swap activations and gradients.
namespace {
Result<std::vector<float>> swap_with_peer(int device, int rank, const NcclUniqueId& id, size_t count) {
  HPCTUNE_ASSIGN(GpuContext ctx, GpuContext::create(*g_library, device));
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  HPCTUNE_ASSIGN(NcclCommunicator comm, NcclCommunicator::create(ctx, 2, rank, id, deadline));
  std::vector<float> values = rank_values(rank, count);
  HPCTUNE_ASSIGN(DeviceBuffer mine, ctx.upload(std::span<const float>(values)));
  HPCTUNE_ASSIGN(DeviceBuffer theirs, ctx.allocate(count * sizeof(float)));
  const int peer = 1 - rank;
  for (size_t n : {count / 3, count}) {
    const NcclCommunicator::PeerTransfer t[2] = {{peer, true, mine.as<float>(), n}, {peer, false, theirs.as<float>(), n}};
    HPCTUNE_TRY(comm.exchange(t, deadline));
  }
  return theirs.read<float>();
}
}  // namespace

TEST_CASE("send/receive on 2 GPUs: each rank gets the other's buffer, both ways in one group") {
  if (g_devices < 2) {
    MESSAGE("not run: needs 2 GPUs, this machine has " << g_devices);
    return;
  }
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  const size_t count = 300007;
  std::optional<Result<std::vector<float>>> other;
  std::thread peer([&] { other.emplace(swap_with_peer(1, 1, *id, count)); });
  auto mine = swap_with_peer(0, 0, *id, count);
  peer.join();
  REQUIRE_MESSAGE(mine.ok(), (mine.ok() ? std::string() : mine.error().to_string()));
  REQUIRE_MESSAGE(other->ok(), (other->ok() ? std::string() : other->error().to_string()));
  CHECK(*mine == rank_values(1, count));
  CHECK(**other == rank_values(0, count));
}

TEST_CASE("send/receive: a peer that is not in the communicator is kInvalidArgument, nothing posted") {
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  auto ctx = GpuContext::create(*g_library, 0);
  REQUIRE(ctx.ok());
  auto comm = NcclCommunicator::create(*ctx, 1, 0, *id, Clock::now() + std::chrono::seconds(30));
  REQUIRE(comm.ok());
  auto buffer = ctx->allocate(64 * sizeof(float));
  REQUIRE(buffer.ok());
  const NcclCommunicator::PeerTransfer self[1] = {{0, true, buffer->as<float>(), 64}};
  Status st = comm->exchange(self, Clock::now() + std::chrono::seconds(5));
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == Errc::kInvalidArgument);
  CHECK_FALSE(comm->aborted());
}

TEST_CASE("two ranks on one GPU: the join fails (NCCL refuses a GPU twice in a communicator), both aborted") {
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  std::optional<Status> second;
  std::thread peer([&] {
    auto ctx = GpuContext::create(*g_library, 0);
    if (!ctx.ok()) return second.emplace(ctx.error()), void();
    auto comm = NcclCommunicator::create(*ctx, 2, 1, *id, Clock::now() + std::chrono::seconds(5));
    second.emplace(comm.ok() ? Status::Ok() : Status(comm.error()));
  });
  auto ctx = GpuContext::create(*g_library, 0);
  REQUIRE(ctx.ok());
  auto comm = NcclCommunicator::create(*ctx, 2, 0, *id, Clock::now() + std::chrono::seconds(5));
  peer.join();
  REQUIRE_FALSE(comm.ok());
  MESSAGE("rank 0: " << comm.error().to_string());
  CHECK((comm.error().code() == Errc::kFailed || comm.error().code() == Errc::kTimeout));
  REQUIRE(second.has_value());
  CHECK_FALSE(second->ok());
}

TEST_CASE("watchdog: a peer that never joins; init returns kTimeout at its deadline, aborted") {
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  auto ctx = GpuContext::create(*g_library, 0);
  REQUIRE(ctx.ok());
  const auto start = Clock::now();
  auto comm = NcclCommunicator::create(*ctx, 2, 0, *id, start + std::chrono::seconds(2));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.error().code() == Errc::kTimeout);
  CHECK(comm.error().message().find("communicator aborted") != std::string::npos);
  CHECK(waited >= 2.0);
  CHECK(waited < 12.0);  // the abort itself is bounded
  // The context is still usable after the abort.
  CHECK(ctx->synchronize().ok());
}

TEST_CASE("watchdog: 2 ranks on 2 GPUs, one never calls allreduce; the other's returns kTimeout, aborted") {
  if (g_devices < 2) {
    MESSAGE("not run: needs 2 GPUs (NCCL refuses two ranks on one GPU), this machine has " << g_devices);
    return;
  }
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  std::optional<Status> joined;
  std::thread silent([&] {
    auto ctx = GpuContext::create(*g_library, 1);
    if (!ctx.ok()) return joined.emplace(ctx.error()), void();
    auto comm = NcclCommunicator::create(*ctx, 2, 1, *id, Clock::now() + std::chrono::seconds(60));
    joined.emplace(comm.ok() ? Status::Ok() : Status(comm.error()));
    std::this_thread::sleep_for(std::chrono::seconds(5));  // the silent peer: alive, never reduces
  });
  auto ctx = GpuContext::create(*g_library, 0);
  REQUIRE(ctx.ok());
  auto comm = NcclCommunicator::create(*ctx, 2, 0, *id, Clock::now() + std::chrono::seconds(60));
  REQUIRE_MESSAGE(comm.ok(), (comm.ok() ? std::string() : comm.error().to_string()));
  std::vector<float> values = rank_values(0, 1024);
  auto buffer = ctx->upload(std::span<const float>(values));
  REQUIRE(buffer.ok());
  const auto start = Clock::now();
  Status st = comm->allreduce(*buffer, 1024, start + std::chrono::seconds(2));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  silent.join();
  REQUIRE(joined.has_value());
  CHECK(joined->ok());
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == Errc::kTimeout);
  CHECK(comm->aborted());
  CHECK(waited >= 2.0);
  CHECK(waited < 12.0);
  CHECK(comm->allreduce(*buffer, 1024, Clock::now() + std::chrono::seconds(1)).error().code() == Errc::kFailed);
}

// A peer in another process, SIGKILLed: this rank's wait ends in an error (NCCL's, or the deadline's
// kTimeout), its communicator aborted, within a bounded time. The peer is this binary run with
// --peer=RANK:DEVICE:HEXID; it joins and then never reduces. With 2 GPUs it joins on GPU 1 and is
// killed while this rank waits in the allreduce. With 1 GPU NCCL refuses two ranks on one GPU, so
// the peer is killed before it joins, and this rank's join is what the watchdog ends.
namespace {
pid_t spawn_peer(int device, bool join, const NcclUniqueId& id) {
  const std::string arg = std::string("--peer=") + (join ? "join" : "wait") + ":" + std::to_string(device) + ":" + id.to_hex();
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_gpu_nccl", arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}
void kill_peer(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}
}  // namespace

TEST_CASE("watchdog: a peer process SIGKILLed; this rank's wait ends with an error, its communicator aborted") {
  auto id = NcclUniqueId::create(*g_library);
  REQUIRE(id.ok());
  const bool two_gpus = g_devices >= 2;
  const pid_t peer = spawn_peer(two_gpus ? 1 : 0, two_gpus, *id);
  REQUIRE(peer > 0);
  auto ctx = GpuContext::create(*g_library, 0);
  REQUIRE(ctx.ok());
  if (!two_gpus) {
    // Killed before it joins: the join waits for a rank that is gone.
    std::thread killer([peer] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      kill_peer(peer);
    });
    const auto start = Clock::now();
    auto comm = NcclCommunicator::create(*ctx, 2, 0, *id, start + std::chrono::seconds(3));
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    killer.join();
    REQUIRE_FALSE(comm.ok());
    MESSAGE("1 GPU: the join after the peer was killed: " << comm.error().to_string() << " after " << waited << " s");
    CHECK((comm.error().code() == Errc::kTimeout || comm.error().code() == Errc::kFailed));
    CHECK(comm.error().message().find("aborted") != std::string::npos);
    CHECK(waited < 15.0);
    CHECK(ctx->synchronize().ok());
    return;
  }
  auto comm = NcclCommunicator::create(*ctx, 2, 0, *id, Clock::now() + std::chrono::seconds(60));
  REQUIRE_MESSAGE(comm.ok(), (comm.ok() ? std::string() : comm.error().to_string()));
  std::vector<float> values = rank_values(0, 1 << 16);
  auto buffer = ctx->upload(std::span<const float>(values));
  REQUIRE(buffer.ok());
  std::thread killer([peer] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill_peer(peer);
  });
  const auto start = Clock::now();
  Status st = comm->allreduce(*buffer, 1 << 16, start + std::chrono::seconds(5));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  killer.join();
  REQUIRE_FALSE(st.ok());
  MESSAGE("2 GPUs: the allreduce whose peer was killed: " << st.error().to_string() << " after " << waited << " s");
  CHECK(comm->aborted());
  CHECK(waited < 15.0);
}

// The peer of the case above: joins as rank 1 (or only waits), then sleeps until it is killed.
int run_peer(const std::string& spec) {
  const size_t a = spec.find(':'), b = spec.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos) return 2;
  const bool join = spec.substr(0, a) == "join";
  const int device = std::atoi(spec.substr(a + 1, b - a - 1).c_str());
  auto lib = GpuLibrary::open_default();
  auto id = lib.ok() ? NcclUniqueId::from_hex(spec.substr(b + 1)) : Result<NcclUniqueId>(lib.error());
  if (!id.ok()) return 3;
  if (join) {
    auto ctx = GpuContext::create(*lib, device);
    if (!ctx.ok()) return 4;
    auto comm = NcclCommunicator::create(*ctx, 2, 1, *id, Clock::now() + std::chrono::seconds(60));
    std::fprintf(stderr, "peer: %s\n", comm.ok() ? "joined" : comm.error().to_string().c_str());
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::seconds(120));
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]).rfind("--peer=", 0) == 0) return run_peer(std::string(argv[1]).substr(7));
  hpctune::testing::GpuTestSetup gpu = hpctune::testing::open_gpu_for_tests();
  if (gpu.exit_code >= 0) return gpu.exit_code;
  int32_t version = 0;
  if (gpu.library->api().nccl_version(&version) != 0) {
    std::printf("SKIPPED: %s\n", gpu.library->last_error().c_str());
    return hpctune::testing::kGpuTestSkipped;
  }
  g_devices = static_cast<int>(gpu.inventory.devices.size());
  std::printf("NCCL %d\n", version);
  g_library = *gpu.library;
  doctest::Context context(argc, argv);
  return context.run();
}
