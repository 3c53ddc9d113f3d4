// Issue 37, item 3: a peer lost inside the NCCL gradient allreduce of a data-parallel group on GPUs
// (trainers/classifier_gpu.h). Two ranks under `mpirun --enable-recovery` (tests/mpirun-test with
// HPCTUNE_MPIRUN_EXTRA_ARGS; without it Open MPI ends the job when a rank dies), each on its own
// stand-in GPU of the CPU stand-in library (HPCTUNE_GPU_LIBRARY, HPCTUNE_CPU_REFERENCE_DEVICES=2),
// so the group sums with NCCL. Rank 1 SIGKILLs itself at its 3rd stop poll, 300 ms after rank 0
// has gone into the next minibatch's allreduce: rank 0's allreduce ends with a clear error (the
// stand-in sees the peer's socket close; real NCCL may instead hang until the group's deadline,
// which test_gpu_nccl's silent-peer case checks), its communicator aborted, and the group is
// abandoned (broken()), which is what makes the group worker end the group and the master queue
// the attempt again. Its own main, as test_downpour_kill's: no collective after the kill.
//
// Built a second time as test_gpu_group_pipeline_kill (HPCTUNE_KILL_IN_PIPELINE): the two ranks are
// the stages of a pipeline (data 1 x model 2, trainers/classifier_gpu_pipeline.h) passing activations
// with NCCL send/receive, and stage 1 dies while stage 0 waits on a transfer with it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/trainer_group_mpi.h"
#include "tests/mpi_test_main.h"
#include "tests/synthetic_images.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::collectives;
using Clock = std::chrono::steady_clock;

namespace {
#ifdef HPCTUNE_KILL_IN_PIPELINE
constexpr int kData = 1, kModel = 2;
constexpr const char* kWhere = "a pipeline transfer (NCCL) with stage 1";
const nlohmann::json kHidden = {32, 16};  // a layer for each stage and the output
#else
constexpr int kData = 2, kModel = 1;
constexpr const char* kWhere = "the gradient allreduce (NCCL)";
const nlohmann::json kHidden = {32};
#endif
}  // namespace

TEST_CASE("a peer killed inside an NCCL call of the group (allreduce, or a pipeline's transfers): the other rank fails "
          "the step clearly, group abandoned") {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == 2);
  setenv("CUDA_VISIBLE_DEVICES", std::to_string(rank).c_str(), 1);
  MpiGroupOptions go;
  go.data = kData;
  go.model = kModel;
  go.timeout = std::chrono::seconds(20);
  auto created = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(created.ok());
  MpiTrainerGroup& g = **created;
  const auto data = hpctune::testing::synthetic(600, 60, 8, 4, 7);
  const nlohmann::json settings = {{"kind", "mlp"}, {"device", "gpu"}, {"hidden", kHidden}, {"lr", 0.05},
                                   {"batch_size", 16}, {"epochs", 2}, {"checkpoint", false},
                                   {"save_predictions", false}};
  TrialContext ctx;
  ctx.trial_id = 4;
  ctx.seed = 5;
  ctx.trainer = settings;
  ctx.threads = 1;
  ctx.group = &g;
  ctx.ranks = 2;
  int polls = 0;
  // No collective here: every rank answers false, and rank 1 dies at its 3rd poll (the first is
  // at the epoch's start, then every kStopPollBatches minibatches).
  ctx.stop_requested = [&] {
    if (rank == 1 && ++polls == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is in an NCCL call by now
      kill(getpid(), SIGKILL);
    }
    return false;
  };
  auto s = parse_mlp_settings(settings);
  REQUIRE_MESSAGE(s.ok(), s.error().message());
  const auto start = Clock::now();
  auto r = train_mlp(*s, data, ctx);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  REQUIRE(rank == 0);  // the killed rank never gets here
  REQUIRE_FALSE(r.ok());
  MESSAGE("rank 0 after " << seconds << " s: " << r.error().to_string());
  const std::string why = r.error().to_string();
  CHECK(why.find(kWhere) != std::string::npos);
  CHECK(why.find("communicator aborted") != std::string::npos);
  CHECK((why.find("rank 1 closed its connection") != std::string::npos ||
         r.error().code() == Errc::kTimeout));  // the stand-in's error, or the deadline's
  CHECK(g.broken());                           // the worker ends the group; the master requeues
  CHECK(seconds < 20.0 + 15.0);                // by the group's deadline, not later
}

#ifdef HPCTUNE_KILL_IN_PIPELINE
int main(int argc, char** argv) { hpctune::testing::mpi_kill_test_main(argc, argv, "test_gpu_group_pipeline_kill"); }
#else
int main(int argc, char** argv) { hpctune::testing::mpi_kill_test_main(argc, argv, "test_gpu_group_nccl_kill"); }
#endif
