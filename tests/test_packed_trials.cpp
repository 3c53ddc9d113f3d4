// Packed trials (trainers/packed_engine.h, issue 37 item 2) without sockets: k `mlp` trials on
// threads of one process with packing slots train as one fused model, each keeping its own reports,
// checkpoints, predictions and stop; one stopped early leaves the pack, one started late joins it,
// one that does not fit trains alone and says why; each packed trial ends where the same trial
// trained alone on the GPU path ends (the fused model's arithmetic is GpuMlp's).
//
// Needs a GPU or the CPU stand-in of the library (HPCTUNE_GPU_LIBRARY, as tests/CMakeLists.txt
// sets it); without either it exits 77 (skipped), saying why.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_backend.h"
#include "tests/gpu_test_main.h"
#include "tests/synthetic_images.h"
#include "tests/temp_dir.h"
#include "trainers/mlp_trainer.h"
#include "trainers/packed_engine.h"
#include "trainers/trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using hpctune::testing::synthetic;
using hpctune::testing::TempDir;

namespace {

struct Trial {
  uint64_t seed = 1;
  nlohmann::json settings;
  std::string dir;
  int64_t stop_after = 0;  // > 0: asks to stop once this epoch was reported
  // Filled by run():
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
  TrialResult result;
  std::string error;
};

nlohmann::json mlp(double lr, const char* optimizer = "sgd", int epochs = 4) {
  return {{"device", "gpu"},     {"hidden", {32, 16}}, {"epochs", epochs}, {"batch_size", 32},
          {"lr", lr},            {"momentum", 0.9},    {"weight_decay", 1e-4}, {"optimizer", optimizer},
          {"lr_schedule", "cosine"}, {"save_predictions", true}};
}

void run(Trial& t, const ImageClassificationData& data) {
  TrialContext ctx;
  ctx.trial_id = static_cast<int64_t>(t.seed);
  ctx.seed = t.seed;
  ctx.trial_dir = t.dir;
  if (!t.dir.empty()) std::filesystem::create_directories(t.dir);  // as the worker does
  ctx.trainer = t.settings;
  std::atomic<bool> stop{false};
  ctx.report = [&](int64_t step, const protocol::Metrics& m) {
    t.reports.emplace_back(step, m);
    if (t.stop_after > 0 && step >= t.stop_after) stop = true;
  };
  ctx.stop_requested = [&] { return stop.load(); };
  auto s = parse_mlp_settings(t.settings);
  if (!s.ok()) {
    t.error = s.error().to_string();
    return;
  }
  auto r = train_mlp(*s, data, ctx);
  if (!r.ok()) {
    t.error = r.error().to_string();
    return;
  }
  t.result = *r;
}

// Runs `body` with this process's stderr in a file; returns what was written there.
template <class Body>
std::string capture_stderr(const std::string& path, Body body) {
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, 2);
  ::close(fd);
  body();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void check_close(double packed, double alone, const std::string& what) {
  INFO(what << ": packed " << packed << ", alone " << alone);
  CHECK(std::fabs(packed - alone) <= 1e-4 * (std::fabs(alone) + 1e-3));
}

}  // namespace

TEST_CASE("packed mlp trials: own reports, checkpoints, predictions and stops; a late joiner; the same numbers as alone") {
  const auto data = synthetic(600, 200, 8, 4);
  TempDir root;
  const std::string base = root.path;
  // The reference: each trial alone on the GPU path (no packing slots in the process).
  PackEngine::instance().set_slots(0);
  std::vector<Trial> alone(5), packed(5);
  const double lrs[5] = {0.05, 0.02, 0.08, 0.03, 0.05};
  for (size_t i = 0; i < 5; ++i) {
    alone[i].seed = packed[i].seed = 11 + i;
    alone[i].settings = packed[i].settings = mlp(lrs[i], i == 4 ? "adam" : "sgd");
    alone[i].dir = base + "/alone-" + std::to_string(i);
    packed[i].dir = base + "/packed-" + std::to_string(i);
    run(alone[i], data);
    REQUIRE_MESSAGE(alone[i].error.empty(), alone[i].error);
  }
  packed[1].stop_after = 2;  // stopped after its second epoch: leaves the pack
  alone[1].reports.resize(2);

  PackEngine::instance().set_slots(4);
  const std::string log = capture_stderr(base + "/stderr.txt", [&] {
    std::vector<std::thread> threads;
    for (size_t i : {0, 1, 2, 4}) threads.emplace_back([&, i] { run(packed[i], data); });
    // Trial 3 starts once trial 0 has reported its first epoch: it joins a running pack.
    while (packed[0].reports.empty() && packed[0].error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    threads.emplace_back([&] { run(packed[3], data); });
    for (auto& t : threads) t.join();
  });
  PackEngine::instance().set_slots(0);
  INFO("the trials' log:\n" << log);

  for (size_t i = 0; i < 5; ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(packed[i].error.empty(), packed[i].error);
    const size_t epochs = i == 1 ? 2 : 4;
    REQUIRE(packed[i].reports.size() == epochs);
    for (size_t e = 0; e < epochs; ++e) {
      CAPTURE(e);
      CHECK(packed[i].reports[e].first == static_cast<int64_t>(e + 1));
      check_close(packed[i].reports[e].second.at("train_loss"), alone[i].reports[e].second.at("train_loss"), "train_loss");
      check_close(packed[i].reports[e].second.at("val_loss"), alone[i].reports[e].second.at("val_loss"), "val_loss");
      CHECK(packed[i].reports[e].second.at("val_accuracy") == doctest::Approx(alone[i].reports[e].second.at("val_accuracy")).epsilon(1e-9));
    }
    CHECK(std::filesystem::exists(packed[i].dir + "/checkpoint-stage0.bin"));
    if (i == 1) {
      CHECK(packed[i].result.stopped);
      CHECK_FALSE(std::filesystem::exists(packed[i].dir + "/val_probs.npy"));
      continue;
    }
    CHECK_FALSE(packed[i].result.stopped);
    check_close(packed[i].result.metrics.at("test_loss"), alone[i].result.metrics.at("test_loss"), "test_loss");
    check_close(packed[i].result.metrics.at("val_loss"), alone[i].result.metrics.at("val_loss"), "final val_loss");
    CHECK(std::filesystem::exists(packed[i].dir + "/val_probs.npy"));
    CHECK(std::filesystem::exists(packed[i].dir + "/test_probs.npy"));
  }
  // The log says which path each trial took, and why not for the adam trial.
  CHECK(log.find("trial 11 attempt 1: packed with 2 other trials") != std::string::npos);  // 11, 12, 13 from epoch 1
  CHECK(log.find("trial 14 attempt 1: packed with") != std::string::npos);  // the late joiner
  CHECK(log.find("trial 15 attempt 1: not packed: optimizer adam (the packed model trains SGD only)") != std::string::npos);
  CHECK(log.find("trial 15 attempt 1: packed with") == std::string::npos);
}

int main(int argc, char** argv) {
  hpctune::testing::GpuTestSetup gpu = hpctune::testing::open_gpu_for_tests();
  if (gpu.exit_code >= 0) return gpu.exit_code;
  doctest::Context context(argc, argv);
  return context.run();
}

TEST_CASE("a checkpoint written in the pack resumes alone on the GPU and ends where the whole run alone ends") {
  const auto data = synthetic(600, 200, 8, 4);
  TempDir root;
  PackEngine::instance().set_slots(0);
  Trial whole;
  whole.seed = 21;
  whole.settings = mlp(0.05);
  run(whole, data);
  REQUIRE_MESSAGE(whole.error.empty(), whole.error);

  // Two epochs packed beside another trial, then stopped; the same trial resumed alone (its own checkpoint).
  PackEngine::instance().set_slots(2);
  Trial first, other;
  first.seed = 21;
  first.settings = mlp(0.05);
  first.dir = root.path + "/t";
  first.stop_after = 2;
  other.seed = 22;
  other.settings = mlp(0.04);
  std::thread a([&] { run(first, data); });
  std::thread b([&] { run(other, data); });
  a.join();
  b.join();
  PackEngine::instance().set_slots(0);
  REQUIRE_MESSAGE(first.error.empty(), first.error);
  REQUIRE_MESSAGE(other.error.empty(), other.error);
  REQUIRE(first.reports.size() == 2);
  Trial rest;
  rest.seed = 21;
  rest.settings = mlp(0.05);
  rest.dir = first.dir;
  run(rest, data);
  REQUIRE_MESSAGE(rest.error.empty(), rest.error);
  REQUIRE(rest.reports.size() == 2);
  CHECK(rest.reports.front().first == 3);
  check_close(rest.result.metrics.at("test_loss"), whole.result.metrics.at("test_loss"), "test_loss");
  check_close(rest.result.metrics.at("val_loss"), whole.result.metrics.at("val_loss"), "val_loss");
}

TEST_CASE("pack_refusal names what does not fit the packed model") {
  ClassifierSettings s;
  s.gpu = true;
  s.layers = {nn::LayerSpec{.kind = "dense", .units = 8}};
  CHECK(pack_refusal("mlp", s, 1).empty());
  CHECK(pack_refusal("cnn", s, 1) == "kind cnn (the packed model is the mlp's)");
  CHECK(pack_refusal("mlp", s, 2).find("a group of 2 ranks") == 0);
  s.layers.push_back(nn::LayerSpec{.kind = "dropout", .rate = 0.5});
  CHECK(pack_refusal("mlp", s, 1) == "dropout (the packed model has none)");
  s.layers.pop_back();
  s.precision = "bf16";
  CHECK(pack_refusal("mlp", s, 1) == "precision bf16 (the packed model trains fp32 or tf32)");
  s.precision = "fp32";
  s.optimizer.kind = nn::OptimizerKind::kAdamW;
  CHECK(pack_refusal("mlp", s, 1) == "optimizer adamw (the packed model trains SGD only)");
  s.optimizer.kind = nn::OptimizerKind::kSgd;
  s.gpu = false;
  CHECK(pack_refusal("mlp", s, 1) == "device cpu (packing is a GPU path)");
}
