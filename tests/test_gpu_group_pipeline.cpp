// Issue 37, item 3 (second half): a pipeline (model 2) on GPUs trains one stage per rank
// (trainers/classifier_gpu_pipeline.h). Under mpirun on 2 ranks (data 1 x model 2) and on 4 (data
// 2 x model 2: each stage's gradients summed over the replicas) against the CPU stand-in of the
// CUDA library (HPCTUNE_GPU_LIBRARY, HPCTUNE_CPU_REFERENCE_DEVICES=4: stand-in devices with their
// own PCI bus ids; its NCCL is real, over Unix sockets). Each rank's CUDA_VISIBLE_DEVICES is set
// here as the launcher sets it: its rank (its own GPU each: the stages pass activations and
// gradients with NCCL send/receive) or "0" on every rank (one GPU shared: host-staged over MPI).
// Without dropout both train as the CPU pipeline of the same layout and as one GPU alone do; a run
// stopped after epoch 1 and resumed from the stages' checkpoints ends as an uninterrupted one.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "collectives/trainer_group_mpi.h"
#include "nn/checkpoint.h"
#include "tests/capture_stderr.h"
#include "tests/mpi_test_main.h"
#include "tests/synthetic_images.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::collectives;
using hpctune::testing::SharedTempDir;

namespace {

struct Run {
  Result<TrialResult> result = err(Errc::kInternal, "not run");
  std::string log;  // what the trainer wrote to stderr
  int reports = 0;
};


std::unique_ptr<TrainerGroup> pipeline_group() {
  MpiGroupOptions go;
  go.data = hpctune::testing::world_size() / 2;
  go.model = 2;
  go.timeout = std::chrono::seconds(60);
  auto group = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(group.ok());
  return std::move(group).value();
}

const auto& data() {
  static const auto d = hpctune::testing::synthetic(300, 60, 8, 4, 11);
  return d;
}

nlohmann::json settings(const std::string& device, double dropout = 0.0, int64_t epochs = 2) {
  return {{"kind", "mlp"}, {"device", device}, {"hidden", {24, 16}}, {"lr", 0.05}, {"dropout", dropout},
          {"batch_size", 32}, {"epochs", epochs}, {"optimizer", "sgd"}, {"momentum", 0.9},
          {"save_predictions", false}};
}

// The trial on `group` (null: this rank alone) with CUDA_VISIBLE_DEVICES = visible_devices.
Run train(TrainerGroup* group, const std::string& visible_devices, const nlohmann::json& s, const std::string& dir = "",
          int64_t attempt = 1, bool stop_after_first_epoch = false) {
  setenv("CUDA_VISIBLE_DEVICES", visible_devices.c_str(), 1);
  TrialContext ctx;
  ctx.trial_id = 3;
  ctx.attempt = attempt;
  ctx.seed = 9;
  ctx.trainer = s;
  ctx.trainer["checkpoint"] = !dir.empty();
  ctx.trial_dir = dir;
  ctx.threads = 1;
  ctx.group = group;
  ctx.ranks = group != nullptr ? group->size() : 1;
  Run out;
  ctx.report = [&](int64_t, const protocol::Metrics&) { ++out.reports; };
  ctx.stop_requested = [&]() -> bool {  // the leader's answer on every rank, as the worker does it
    const bool mine = stop_after_first_epoch && out.reports > 0;
    if (group == nullptr) return mine;
    auto flag = group->broadcast_flag(mine);
    REQUIRE(flag.ok());
    return *flag;
  };
  auto parsed = parse_mlp_settings(ctx.trainer);
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
  out.log = hpctune::testing::capture_stderr([&] { out.result = train_mlp(*parsed, data(), ctx); });
  unsetenv("CUDA_VISIBLE_DEVICES");
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr const char* kKeys[] = {"train_loss", "val_loss", "test_loss", "val_accuracy", "test_accuracy"};

}  // namespace

TEST_CASE("model 2 on a GPU each passes activations with NCCL, on one shared GPU host-staged; both train as the CPU "
          "pipeline and as one GPU alone") {
  const int rank = hpctune::testing::world_rank();
  auto group = pipeline_group();
  Run nccl = train(group.get(), std::to_string(rank), settings("gpu"));  // each rank its own stand-in GPU
  REQUIRE_MESSAGE(nccl.result.ok(), nccl.result.error().to_string());
  Run shared = train(group.get(), "0", settings("gpu"));  // both ranks on stand-in GPU 0
  REQUIRE_MESSAGE(shared.result.ok(), shared.result.error().to_string());
  Run cpu = train(group.get(), "0", settings("cpu"));
  REQUIRE_MESSAGE(cpu.result.ok(), cpu.result.error().to_string());
  Run alone = train(nullptr, "0", settings("gpu"));  // every rank the whole network alone
  REQUIRE_MESSAGE(alone.result.ok(), alone.result.error().to_string());
  if (rank == 0) {  // the leader (stage 0) logs its stage and the path
    CHECK_MESSAGE(contains(nccl.log, "training stage 0 of 2 (layers [0, 1), 4 micro-batches)"), nccl.log);
    CHECK_MESSAGE(contains(nccl.log, "the 2 stages pass activations and gradients with NCCL send/receive on the devices"),
                  nccl.log);
    CHECK_FALSE(contains(nccl.log, "pass activations and gradients host-staged"));
    CHECK_MESSAGE(contains(shared.log, "pass activations and gradients host-staged"), shared.log);
    CHECK_MESSAGE(contains(shared.log, "ranks 0 and 1 share a GPU (PCI bus id 0000:01:00.0)"), shared.log);
    CHECK(contains(nccl.log, "2 replicas of the pipeline sum each stage's gradients host-staged") ==
          (group->data_size() == 2));
  }
  // The stand-in computes in fp32 as the CPU does but in another order: the paths agree to 1e-6
  // (transfers move the same floats), the CPU pipeline and one GPU to a tolerance that allows
  // another summation order over two epochs, not another training.
  for (const char* key : kKeys) {
    CAPTURE(key);
    const double a = nccl.result->metrics.at(key);
    CHECK(std::isfinite(a));
    CHECK(a == doctest::Approx(shared.result->metrics.at(key)).epsilon(1e-6));
    CHECK(a == doctest::Approx(cpu.result->metrics.at(key)).epsilon(1e-3));
    CHECK(a == doctest::Approx(alone.result->metrics.at(key)).epsilon(1e-3));
  }
  CHECK(nccl.result->metrics.at("test_accuracy") > 0.4);  // it trained (4 classes)
}

TEST_CASE("a GPU pipeline stopped after epoch 1 and resumed from its stages' checkpoints ends as an uninterrupted run") {
  const int rank = hpctune::testing::world_rank();
  auto group = pipeline_group();
  const nlohmann::json s = settings("gpu", 0.1);  // dropout: the masks follow the epoch, not the attempt
  // Removed when the case ends, after every rank has read its checkpoint (SharedTempDir's barrier).
  const SharedTempDir full_guard(*group, "hpctune-gpupipe"), split_guard(*group, "hpctune-gpupipe");
  const std::string &full_dir = full_guard.path, &split_dir = split_guard.path;
  Run full = train(group.get(), std::to_string(rank), s, full_dir);
  REQUIRE_MESSAGE(full.result.ok(), full.result.error().to_string());
  Run first = train(group.get(), std::to_string(rank), s, split_dir, 1, true);
  REQUIRE_MESSAGE(first.result.ok(), first.result.error().to_string());
  CHECK(first.result->stopped);
  Run second = train(group.get(), std::to_string(rank), s, split_dir, 2);
  REQUIRE_MESSAGE(second.result.ok(), second.result.error().to_string());
  CHECK(second.result->metrics.at("resumed_epoch") == 1.0);
  for (const char* key : kKeys) {
    CAPTURE(key);
    CHECK(second.result->metrics.at(key) == doctest::Approx(full.result->metrics.at(key)).epsilon(1e-9));
  }
  // Each stage wrote its own checkpoint: this rank's layers, in the CPU's format.
  auto mine = nn::read_checkpoint(nn::checkpoint_path(full_dir, group->model_rank()));
  REQUIRE_MESSAGE(mine.ok(), mine.error().to_string());
  CHECK(std::filesystem::exists(nn::checkpoint_path(full_dir, 1)));
  CHECK_FALSE(std::filesystem::exists(nn::checkpoint_path(full_dir, 2)));
}

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_gpu_group_pipeline"); }
