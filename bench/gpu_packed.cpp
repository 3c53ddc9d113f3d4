// bench_gpu_packed: a campaign's worth of short `mlp` trials trained k at a time in ONE process as
// one fused batched model (gpu/gpu_packed_mlp.h), for bench/gpu's packing table (issue 23: k
// separate processes, with and without MPS, against one fused process).
//
//   bench_gpu_packed --models K --trials N [--data DIR] [--epochs 3] [--max-train 10000]
//                    [--batch 128] [--precision fp32|tf32] [--seed 1] [--hidden 256]
//   bench_gpu_packed --probe          the GPU, driver and runtime as JSON (exit 77 without a GPU)
//   bench_gpu_packed --trials N --print-lrs   the trials' seeds and lrs as JSON (no GPU needed)
//
// Trial t (0 <= t < N) is the trial bench_gpu_train runs with --seed (seed + t) --lr L_t: the mlp
// trainer's default network (784-hidden-10, ReLU), nn::Network's initialisation from its seed,
// SGD momentum 0.9 at its own lr L_t (log-uniform in [0.01, 0.1], drawn from its seed: see
// trial_lr(), which bench/gpu prints for the separate processes), its own shuffled order of the
// first --max-train training images each epoch, full batches only, the whole test set evaluated
// after every epoch. The trials run in rounds of K models (the last round may hold fewer).
//
// Prints one JSON line: device, K, N, rounds, the wall seconds of the whole process from main()
// (data loading included, as the separate processes' wall time includes theirs), the training
// seconds, and per trial its seed, lr and final and best test accuracy. Exit 77 with the reason
// where there is no GPU; 2 for bad arguments; 1 on any other failure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_packed_mlp.h"
#include "nn/network.h"
#include "trainers/idx_dataset.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

int die(const std::string& why, int code = 1) {
  std::fprintf(stderr, "bench_gpu_packed: %s\n", why.c_str());
  return code;
}

// A trial's learning rate from its seed: log-uniform in [0.01, 0.1].
double trial_lr(uint64_t seed) {
  Rng rng(seed * 0x9e3779b97f4a7c15ull + 17);
  return std::exp(std::log(0.01) + rng.uniform() * (std::log(0.1) - std::log(0.01)));
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  std::string data_dir = "/usr/share/datasets/fashion-mnist", precision = "fp32";
  int64_t models = 0, trials = 0, epochs = 3, max_train = 10000, batch = 128, hidden = 256;
  uint64_t seed = 1;
  bool print_lrs = false, probe = false;
  CLI::App app{"bench_gpu_packed: short mlp trials trained k at a time as one fused batched model"};
  app.add_option("--models", models, "K: trials per round, trained as one model")
      ->check(CLI::Range(int64_t{1}, int64_t{GpuPackedMlp::kMaxModels}));
  app.add_option("--trials", trials, "N: trials in all")->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--data", data_dir, "the Fashion-MNIST directory");
  app.add_option("--epochs", epochs, "epochs of a trial")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--max-train", max_train, "the first N training images")->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app.add_option("--batch", batch, "minibatch")->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_option("--precision", precision, "fp32 or tf32");
  app.add_option("--seed", seed, "trial t's seed is seed + t")->check(CLI::Range(uint64_t{0}, uint64_t{INT64_MAX / 2}));
  app.add_option("--hidden", hidden, "hidden units")->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_flag("--print-lrs", print_lrs, "print the trials' seeds and lrs as JSON (no GPU needed)");
  app.add_flag("--probe", probe, "print the GPU, driver and runtime as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return die(e.what(), 2);
  }
  if (trials < 1 && !probe) return die("--trials N is required", 2);
  if (print_lrs) {
    nlohmann::json lrs = nlohmann::json::array();
    for (int64_t t = 0; t < trials; ++t) lrs.push_back({{"seed", seed + uint64_t(t)}, {"lr", trial_lr(seed + uint64_t(t))}});
    std::printf("%s\n", lrs.dump().c_str());
    return 0;
  }
  if (models < 1 && !probe) return die("--models K is required", 2);
  if (precision != "fp32" && precision != "tf32") return die("--precision is fp32 or tf32 for packed models", 2);

  auto lib = GpuLibrary::open_default();
  if (!lib.ok()) return die(lib.error().to_string(), built_with_cuda() ? 1 : 77);
  GpuInventory inv = lib->inventory();
  if (inv.devices.empty()) return die(inv.no_device_reason, 77);
  if (probe) {
    const GpuDevice& d = inv.devices.front();
    nlohmann::json out = {{"device", d.name},
                          {"devices", inv.devices.size()},
                          {"memory_gib", double(d.memory_bytes) / double(1 << 30)},
                          {"compute_capability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
                          {"driver", cuda_version_string(inv.driver_version)},
                          {"runtime", cuda_version_string(inv.runtime_version)},
                          {"library", inv.library_path}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  auto loaded = trainers::load_idx_dataset(data_dir);
  if (!loaded.ok()) return die("data: " + loaded.error().to_string());
  const trainers::ImageClassificationData& data = **loaded;
  const int64_t features = data.train.features(), classes = data.num_classes;
  const int64_t train_rows = std::min(max_train, data.train.count);
  if (train_rows < batch) return die("fewer training images than one batch", 2);
  const std::vector<int64_t> sizes = {features, hidden, classes};
  const std::vector<nn::LayerSpec> specs = {nn::LayerSpec{.kind = "dense", .units = hidden}};

  auto made_ctx = GpuContext::create(*lib, 0);
  if (!made_ctx.ok()) return die(made_ctx.error().to_string());
  GpuContext ctx = std::move(made_ctx).value();
  if (precision == "tf32")
    if (auto s = ctx.check(ctx.api().set_tf32(ctx.raw(), 1), "set_tf32"); !s.ok()) return die(s.error().to_string());
  auto test_x = ctx.upload(std::span<const float>(data.test.images));
  auto test_y = ctx.upload(std::span<const int32_t>(data.test.labels));
  if (!test_x.ok() || !test_y.ok()) return die("test set upload failed");
  const int64_t eval_batch = 1000;
  const int64_t steps = train_rows / batch;

  nlohmann::json per_trial = nlohmann::json::array();
  double train_seconds = 0;
  int64_t rounds = 0;
  for (int64_t first = 0; first < trials; first += models, ++rounds) {
    const int64_t k = std::min(models, trials - first);
    std::vector<float> params;
    std::vector<GpuPackedTrial> settings;
    std::vector<Rng> shuffles;
    for (int64_t i = 0; i < k; ++i) {
      const uint64_t s = seed + uint64_t(first + i);
      auto net = nn::Network::create(nn::Shape{1, data.train.rows, data.train.cols}, specs, classes);
      if (!net.ok()) return die(net.error().to_string());
      Rng rng(s);
      net->init(rng);
      params.insert(params.end(), net->params().begin(), net->params().end());
      settings.push_back({float(trial_lr(s)), 0.9f, 0.0f});
      shuffles.emplace_back(s ^ 0x5bd1e995u);
    }
    auto packed = GpuPackedMlp::create(ctx, sizes, std::max(batch, eval_batch), params, settings);
    if (!packed.ok()) return die("GpuPackedMlp: " + packed.error().to_string());
    auto set = GpuPackedDataset::create(ctx, std::span<const float>(data.train.images.data(), size_t(train_rows * features)),
                                        std::span<const int32_t>(data.train.labels.data(), size_t(train_rows)), features,
                                        k, batch);
    if (!set.ok()) return die("GpuPackedDataset: " + set.error().to_string());
    std::vector<std::vector<double>> accuracy(static_cast<size_t>(k));
    std::vector<int32_t> orders(static_cast<size_t>(k * train_rows));
    for (int64_t e = 0; e < epochs; ++e) {
      for (int64_t i = 0; i < k; ++i) {
        auto begin = orders.begin() + i * train_rows;
        std::iota(begin, begin + train_rows, int32_t(0));
        std::shuffle(begin, begin + train_rows, shuffles[size_t(i)]);
      }
      auto t0 = std::chrono::steady_clock::now();
      if (auto s = set->set_orders(orders, train_rows); !s.ok()) return die(s.error().to_string());
      for (int64_t step = 0; step < steps; ++step) {
        if (auto s = set->gather(step * batch, batch); !s.ok()) return die(s.error().to_string());
        if (auto s = packed->train_step(set->batch_x(), set->batch_labels(), batch); !s.ok())
          return die(s.error().to_string());
      }
      auto train_stats = packed->take_stats();
      if (!train_stats.ok()) return die(train_stats.error().to_string());
      train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int64_t start = 0; start < data.test.count; start += eval_batch) {
        const int64_t n = std::min(eval_batch, data.test.count - start);
        if (auto s = packed->evaluate(test_x->as<float>() + start * features, test_y->as<int32_t>() + start, n); !s.ok())
          return die(s.error().to_string());
      }
      auto test_stats = packed->take_stats();
      if (!test_stats.ok()) return die(test_stats.error().to_string());
      for (int64_t i = 0; i < k; ++i)
        accuracy[size_t(i)].push_back(double(test_stats->correct[size_t(i)]) / double(test_stats->count));
    }
    for (int64_t i = 0; i < k; ++i) {
      const auto& acc = accuracy[size_t(i)];
      per_trial.push_back({{"seed", seed + uint64_t(first + i)},
                           {"lr", settings[size_t(i)].lr},
                           {"test_accuracy", acc.back()},
                           {"best_test_accuracy", *std::max_element(acc.begin(), acc.end())}});
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const GpuDevice& d = inv.devices.front();
  nlohmann::json out = {{"side", "hpctune packed"},
                        {"device", d.name},
                        {"driver", cuda_version_string(inv.driver_version)},
                        {"models", models},
                        {"trials", trials},
                        {"rounds", rounds},
                        {"epochs", epochs},
                        {"train_images", steps * batch},
                        {"batch", batch},
                        {"precision", precision},
                        {"wall_seconds", wall},
                        {"train_seconds", train_seconds},
                        {"trials_per_hour", double(trials) * 3600.0 / wall},
                        {"per_trial", per_trial}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
