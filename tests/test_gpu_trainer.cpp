// The mlp and cnn trainers with `device: gpu` (trainers/classifier_gpu.h; issue 23, acceptance 2):
// the same loop on the GPU follows the CPU's (fp32), a checkpoint written on the GPU resumes on the
// CPU and the reverse, deterministic mode repeats bit for bit, tf32 and bf16 train close to fp32.
//
// Needs a GPU. Without one it runs nothing and exits 77, which ctest shows as skipped
// (SKIP_RETURN_CODE), printing why; what a GPU-less machine can check of `device: gpu` (the
// settings, the clear failure) is in test_classifier_training.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu/gpu_backend.h"
#include "tests/synthetic_images.h"
#include "tests/temp_dir.h"
#include "trainers/cnn_trainer.h"
#include "trainers/mlp_trainer.h"
#include "trainers/trainer.h"
#include "tests/gpu_test_main.h"

using namespace hpctune;
using namespace hpctune::trainers;
using hpctune::testing::synthetic;
using hpctune::testing::TempDir;

namespace {


struct Run {
  TrialResult result;
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
};

Run run_kind(const std::string& kind, nlohmann::json settings, const ImageClassificationData& data,
             const std::string& dir = "", const std::string& resume_from = "", uint64_t seed = 5) {
  Run out;
  TrialContext ctx;
  ctx.trial_id = 1;
  ctx.seed = seed;
  ctx.trial_dir = dir;
  ctx.resume_from = resume_from;
  ctx.trainer = settings;
  ctx.report = [&out](int64_t step, const protocol::Metrics& m) { out.reports.emplace_back(step, m); };
  Result<TrialResult> r = [&]() -> Result<TrialResult> {
    if (kind == "mlp") {
      HPCTUNE_ASSIGN(MlpSettings s, parse_mlp_settings(settings));
      return train_mlp(s, data, ctx);
    }
    HPCTUNE_ASSIGN(CnnSettings s, parse_cnn_settings(settings));
    return train_classifier("cnn", s, data, ctx);
  }();
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.error().to_string()));
  out.result = *r;
  return out;
}

double metric(const Run& r, const char* key) { return r.result.metrics.at(key); }

nlohmann::json mlp_settings(const char* device, int epochs) {
  return {{"device", device}, {"hidden", {64, 32}}, {"epochs", epochs}, {"batch_size", 32}, {"lr", 0.05},
          {"lr_schedule", "constant"}, {"save_predictions", false}};
}

void check_close(double gpu, double cpu, double rel, const char* what) {
  INFO(what << ": gpu " << gpu << ", cpu " << cpu);
  CHECK(std::fabs(gpu - cpu) <= rel * (std::fabs(cpu) + 1e-3));
}

}  // namespace

TEST_CASE("mlp on the GPU follows the CPU (fp32): every epoch's losses within 1%") {
  const auto data = synthetic(600, 200, 8, 4);
  const Run cpu = run_kind("mlp", mlp_settings("cpu", 3), data);
  const Run gpu = run_kind("mlp", mlp_settings("gpu", 3), data);
  REQUIRE(cpu.reports.size() == 3);
  REQUIRE(gpu.reports.size() == 3);
  for (size_t e = 0; e < 3; ++e) {
    CAPTURE(e);
    check_close(gpu.reports[e].second.at("train_loss"), cpu.reports[e].second.at("train_loss"), 0.01, "train_loss");
    check_close(gpu.reports[e].second.at("val_loss"), cpu.reports[e].second.at("val_loss"), 0.01, "val_loss");
  }
  check_close(metric(gpu, "test_loss"), metric(cpu, "test_loss"), 0.01, "test_loss");
  CHECK(std::fabs(metric(gpu, "test_accuracy") - metric(cpu, "test_accuracy")) <= 0.02);
  CHECK(metric(gpu, "val_loss") < gpu.reports.front().second.at("val_loss"));  // it learns
}

TEST_CASE("cnn on the GPU (cuDNN) follows the CPU (oneDNN), fp32") {
  const auto data = synthetic(400, 100, 12, 4);
  nlohmann::json layers = nlohmann::json::parse(R"([
      {"kind": "conv", "filters": 8, "kernel": 5}, {"kind": "maxpool", "size": 2},
      {"kind": "conv", "filters": 16, "kernel": 3}, {"kind": "maxpool", "size": 2},
      {"kind": "dense", "units": 32}])");
  auto settings = [&](const char* device) {
    return nlohmann::json{{"device", device}, {"layers", layers}, {"epochs", 2}, {"batch_size", 32}, {"lr", 0.02},
                          {"lr_schedule", "constant"}, {"save_predictions", false}};
  };
  const Run cpu = run_kind("cnn", settings("cpu"), data);
  const Run gpu = run_kind("cnn", settings("gpu"), data);
  for (size_t e = 0; e < 2; ++e) {
    CAPTURE(e);
    check_close(gpu.reports[e].second.at("train_loss"), cpu.reports[e].second.at("train_loss"), 0.01, "train_loss");
    check_close(gpu.reports[e].second.at("val_loss"), cpu.reports[e].second.at("val_loss"), 0.01, "val_loss");
  }
  CHECK(std::fabs(metric(gpu, "test_accuracy") - metric(cpu, "test_accuracy")) <= 0.03);
}

TEST_CASE("a checkpoint written on the GPU resumes on the CPU, and the reverse") {
  const auto data = synthetic(600, 200, 8, 4);
  // 4 epochs on the CPU from scratch: where a run moved after epoch 2 should end.
  const Run whole = run_kind("mlp", mlp_settings("cpu", 4), data);
  for (const auto& [first, second] : {std::pair{"gpu", "cpu"}, std::pair{"cpu", "gpu"}}) {
    CAPTURE(first);
    TempDir a_dir, b_dir;
    const Run a = run_kind("mlp", mlp_settings(first, 2), data, a_dir.path);
    REQUIRE(std::filesystem::exists(std::filesystem::path(a_dir.path) / "checkpoint-stage0.bin"));
    // Continued from it on the other backend (resume_from: weights, optimizer state, counters).
    const Run b = run_kind("mlp", mlp_settings(second, 4), data, b_dir.path, a_dir.path);
    REQUIRE(b.result.metrics.count("resumed_epoch") == 1);
    CHECK(b.result.metrics.at("resumed_epoch") == 2.0);
    REQUIRE(b.reports.size() == 2);  // epochs 3 and 4 only
    CHECK(b.reports.front().first == 3);
    check_close(metric(b, "val_loss"), metric(whole, "val_loss"), 0.02, "val_loss after the move");
    check_close(metric(b, "train_loss"), metric(whole, "train_loss"), 0.02, "train_loss after the move");
    // Without the state (a fresh start of 2 epochs on the second backend) it would be far off.
    const Run fresh = run_kind("mlp", mlp_settings(second, 2), data);
    CHECK(std::fabs(metric(fresh, "train_loss") - metric(whole, "train_loss")) >
          std::fabs(metric(b, "train_loss") - metric(whole, "train_loss")));
  }
  // A crash resume of the same run (same settings) on the other backend: its own checkpoint, not a restart.
  TempDir dir;
  run_kind("mlp", mlp_settings("gpu", 2), data, dir.path);
  const Run again = run_kind("mlp", mlp_settings("cpu", 2), data, dir.path);
  CHECK(again.result.metrics.count("resumed_epoch") == 1);
  CHECK(again.reports.size() == 1);  // the last epoch's report, sent again; nothing trained
}

TEST_CASE("deterministic mode: two GPU runs of the default CNN's layers end bit-identical") {
  const auto data = synthetic(256, 64, 28, 10);
  auto settings = nlohmann::json{{"device", "gpu"}, {"deterministic", true}, {"epochs", 1}, {"batch_size", 32},
                                 {"save_predictions", false}, {"max_train_samples", 256}};
  const Run a = run_kind("cnn", settings, data);
  const Run b = run_kind("cnn", settings, data);
  CHECK(metric(a, "val_loss") == metric(b, "val_loss"));
  CHECK(metric(a, "train_loss") == metric(b, "train_loss"));
  CHECK(metric(a, "test_loss") == metric(b, "test_loss"));
}

TEST_CASE("tf32 and bf16 train the mlp close to fp32") {
  const auto data = synthetic(600, 200, 8, 4);
  const Run fp32 = run_kind("mlp", mlp_settings("gpu", 3), data);
  for (const char* precision : {"tf32", "bf16"}) {
    CAPTURE(precision);
    auto s = mlp_settings("gpu", 3);
    s["precision"] = precision;
    const Run r = run_kind("mlp", s, data);
    check_close(metric(r, "val_loss"), metric(fp32, "val_loss"), 0.05, "val_loss");
    CHECK(metric(r, "val_loss") < r.reports.front().second.at("val_loss") + 1e-9);
  }
}

int main(int argc, char** argv) {
  hpctune::testing::GpuTestSetup gpu = hpctune::testing::open_gpu_for_tests();
  if (gpu.exit_code >= 0) return gpu.exit_code;
  doctest::Context context(argc, argv);
  return context.run();
}
