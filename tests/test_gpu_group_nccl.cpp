// Issue 37, item 3: a data-parallel group on GPUs sums its gradients with NCCL on the devices when
// every rank has its own GPU, host-staged where ranks share one, and the trial's log says which and
// why (trainers/classifier_gpu.h). Two ranks under mpirun (tests/mpirun-test 2) against the CPU
// stand-in of the CUDA library (HPCTUNE_GPU_LIBRARY, HPCTUNE_CPU_REFERENCE_DEVICES=2: two stand-in
// devices with their own PCI bus ids; its NCCL is real, over Unix sockets). Each rank's
// CUDA_VISIBLE_DEVICES is set here as the launcher sets it (common/device_list.h): "0" and "1"
// (its own GPU each) or "0" on both (one GPU shared).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "collectives/trainer_group_mpi.h"
#include "tests/capture_stderr.h"
#include "tests/mpi_test_main.h"
#include "tests/synthetic_images.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::collectives;

namespace {

struct Run {
  Result<TrialResult> result = err(Errc::kInternal, "not run");
  std::string log;  // what the trainer wrote to stderr
};


// A data 2 x model 1 group trains the mlp on the GPU this rank sees as CUDA_VISIBLE_DEVICES.
Run train_on(const std::string& visible_devices, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  setenv("CUDA_VISIBLE_DEVICES", visible_devices.c_str(), 1);
  MpiGroupOptions go;
  go.data = 2;
  go.timeout = timeout;
  auto group = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(group.ok());
  const auto data = hpctune::testing::synthetic(300, 60, 8, 4, 11);
  const nlohmann::json settings = {{"kind", "mlp"}, {"device", "gpu"}, {"hidden", {24, 16}}, {"lr", 0.05},
                                   {"batch_size", 32}, {"epochs", 2}, {"optimizer", "sgd"}, {"momentum", 0.9},
                                   {"checkpoint", false}, {"save_predictions", false}};
  TrialContext ctx;
  ctx.trial_id = 3;
  ctx.seed = 9;
  ctx.trainer = settings;
  ctx.threads = 1;
  ctx.group = group->get();
  ctx.ranks = 2;
  ctx.stop_requested = [] { return false; };
  Run out;
  auto s = parse_mlp_settings(settings);
  REQUIRE_MESSAGE(s.ok(), s.error().message());
  out.log = hpctune::testing::capture_stderr([&] { out.result = train_mlp(*s, data, ctx); });
  unsetenv("CUDA_VISIBLE_DEVICES");
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("data 2 on two GPUs sums with NCCL, ranks sharing a GPU host-staged; both train to the same metrics") {
  const int rank = hpctune::testing::world_rank();
  Run nccl = train_on(std::to_string(rank));  // each rank its own stand-in GPU
  REQUIRE_MESSAGE(nccl.result.ok(), nccl.result.error().to_string());
  Run shared = train_on("0");  // both ranks on stand-in GPU 0
  REQUIRE_MESSAGE(shared.result.ok(), shared.result.error().to_string());
  if (rank == 0) {  // the leader logs the path
    CHECK_MESSAGE(contains(nccl.log, "2 data-parallel replicas sum their gradients with NCCL on the devices"), nccl.log);
    CHECK_FALSE(contains(nccl.log, "host-staged"));
    CHECK_MESSAGE(contains(shared.log, "sum their gradients host-staged"), shared.log);
    CHECK_MESSAGE(contains(shared.log, "ranks 0 and 1 share a GPU (PCI bus id 0000:01:00.0)"), shared.log);
  }
  // The stand-in's NCCL sums in rank order (a + b for 2 ranks), as the host-staged sum does; the
  // tolerance allows another summation order (1e-6 relative), not another training.
  for (const char* key : {"train_loss", "val_loss", "test_loss", "val_accuracy", "test_accuracy"}) {
    CAPTURE(key);
    const double a = nccl.result->metrics.at(key), b = shared.result->metrics.at(key);
    CHECK(std::isfinite(a));
    CHECK(a == doctest::Approx(b).epsilon(1e-6));
  }
  CHECK(nccl.result->metrics.at("test_accuracy") > 0.4);  // it trained (4 classes)
}

TEST_CASE("a rank whose NCCL join fails at once: both fall back to host-staged sums now, not at the group's deadline") {
  const int rank = hpctune::testing::world_rank();
  setenv("HPCTUNE_CPU_REFERENCE_NCCL_FAIL_RANK", "1", 1);
  const auto t0 = std::chrono::steady_clock::now();
  Run run = train_on(std::to_string(rank), std::chrono::seconds(240));  // each rank its own GPU
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsetenv("HPCTUNE_CPU_REFERENCE_NCCL_FAIL_RANK");
  REQUIRE_MESSAGE(run.result.ok(), run.result.error().to_string());
  if (rank == 0) {
    CHECK_MESSAGE(contains(run.log, "sum their gradients host-staged"), run.log);
    CHECK_MESSAGE(contains(run.log, "the NCCL communicator could not be started on 1 rank(s)"), run.log);
  }
  // Rank 0's join waited for rank 1 until the group's deadline (240 s) before; now the trial takes
  // seconds. A loaded machine stays far below the bound.
  MESSAGE("the trial took " << seconds << " s");
  CHECK(seconds < 120.0);
  CHECK(run.result->metrics.at("test_accuracy") > 0.4);
}

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_gpu_group_nccl"); }
