// bench_gpu_train: one training run of a built-in classifier on Fashion-MNIST on one GPU through
// gpu/gpu_network.h (GpuNetwork, GpuOptimizer, GpuDataset), as the `mlp` / `cnn` trainers'
// `device: gpu` backend runs it. bench/gpu runs it beside bench/gpu_train_torch.py (PyTorch eager,
// same model, batch, optimizer and precision), and as one trial of the separate-processes packing
// mode.
//
//   bench_gpu_train --model mlp|cnn [--data DIR] [--epochs N] [--batch 128] [--precision fp32|tf32|bf16]
//                   [--lr X] [--momentum 0.9] [--seed 1] [--max-train N] [--target 0.90]
//
// Models: mlp = the mlp trainer's default (784-256-10, ReLU); cnn = nn::default_cnn_layer_specs()
// (conv5x5 32 same relu, maxpool 2, conv5x5 64 same relu, maxpool 2, dense 1024 relu, dense 10).
// Parameters are nn::Network's initialisation from --seed; pixels p / 255 (the trainers' default,
// no standardisation); SGD with momentum at a constant lr (defaults: the trainers', mlp 0.05, cnn
// 0.01). Each epoch: the first --max-train training images (all by default) in an order shuffled
// from the seed, full batches only (the last partial batch is dropped, as on the PyTorch side),
// then the whole test set is evaluated. The data set lives on the device.
//
// Prints one JSON line: device, driver, per epoch {train_seconds, images_per_second, train_loss,
// train_accuracy, test_accuracy}, median images/s over the epochs after the first, the training
// seconds (evaluation excluded) until the first epoch whose test accuracy reached --target, or null
// with the best accuracy. Exit 77 with the reason on stderr where there is no GPU or no CUDA
// library; 2 for bad arguments; 1 on any other failure (the message names the step).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_network.h"
#include "nn/layers.h"  // default_cnn_layer_specs
#include "nn/network.h"
#include "trainers/idx_dataset.h"
#include "trainers/classifier_gpu.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

int die(const std::string& why, int code = 1) {
  std::fprintf(stderr, "bench_gpu_train: %s\n", why.c_str());
  return code;
}


}  // namespace

int main(int argc, char** argv) {
  std::string model, data_dir = "/usr/share/datasets/fashion-mnist", precision_name = "fp32";
  int64_t epochs = -1, batch = 128, max_train = 0;
  double lr = -1, momentum = 0.9, target = 0.90;
  uint64_t seed = 1;
  CLI::App app{"bench_gpu_train: one training run of a built-in classifier on Fashion-MNIST on one GPU"};
  app.add_option("--model", model, "mlp or cnn")->required()->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--data", data_dir, "the Fashion-MNIST directory");
  app.add_option("--epochs", epochs, "epochs (default: cnn 15, mlp 30)")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--batch", batch, "minibatch")->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_option("--precision", precision_name, "fp32, tf32 or bf16");
  app.add_option("--lr", lr, "learning rate (default: cnn 0.01, mlp 0.05)")->check(CLI::Range(1e-8, 10.0));
  app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::Range(0.0, 0.999));
  app.add_option("--seed", seed, "seed of the initialisation and the data order");
  app.add_option("--max-train", max_train, "the first N training images")->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app.add_option("--target", target, "test accuracy to time")->check(CLI::Range(0.0, 1.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return die(e.what(), 2);
  }
  if (model != "mlp" && model != "cnn") return die("--model mlp or --model cnn is required", 2);
  auto precision = parse_gpu_precision(precision_name);
  if (!precision.ok()) return die(precision.error().to_string(), 2);
  if (epochs < 0) epochs = model == "cnn" ? 15 : 30;
  if (lr < 0) lr = model == "cnn" ? 0.01 : 0.05;

  auto lib = GpuLibrary::open_default();
  if (!lib.ok()) return die(lib.error().to_string(), built_with_cuda() ? 1 : 77);
  GpuInventory inv = lib->inventory();
  if (inv.devices.empty()) return die(inv.no_device_reason, 77);

  auto loaded = trainers::load_idx_dataset(data_dir);
  if (!loaded.ok()) return die("data: " + loaded.error().to_string());
  const trainers::ImageClassificationData& data = **loaded;
  const int64_t features = data.train.features(), classes = data.num_classes;
  const int64_t train_rows = max_train > 0 ? std::min(max_train, data.train.count) : data.train.count;
  if (train_rows < batch) return die("fewer training images (" + std::to_string(train_rows) + ") than one batch", 2);

  std::vector<nn::LayerSpec> specs;
  if (model == "mlp") specs = {nn::LayerSpec{.kind = "dense", .units = 256}};
  else specs = nn::default_cnn_layer_specs(0.0);
  auto net = nn::Network::create(nn::Shape{1, data.train.rows, data.train.cols}, specs, classes);
  if (!net.ok()) return die(net.error().to_string());
  Rng rng(seed);
  net->init(rng);
  auto layers = trainers::gpu_layers_of(*net, specs);
  if (!layers.ok()) return die(layers.error().to_string());

  auto made_ctx = GpuContext::create(*lib, 0);
  if (!made_ctx.ok()) return die(made_ctx.error().to_string());
  GpuContext ctx = std::move(made_ctx).value();
  const int64_t eval_batch = 500;
  GpuNetworkOptions options;
  options.precision = *precision;
  options.max_batch = std::max(batch, eval_batch);
  auto gnet = GpuNetwork::create(ctx, *layers, classes, net->params(), options);
  if (!gnet.ok()) return die("GpuNetwork: " + gnet.error().to_string());
  GpuOptimizerOptions opt_options;
  opt_options.kind = GpuOptimizerOptions::Kind::kSgd;
  opt_options.momentum = momentum;
  auto opt = GpuOptimizer::create(ctx, gnet->num_params(), opt_options);
  if (!opt.ok()) return die("GpuOptimizer: " + opt.error().to_string());
  std::vector<GpuParamBlock> blocks;
  for (const nn::ParamBlock& b : net->blocks()) blocks.push_back({b.offset, b.size, b.decay, b.frozen, b.lr_scale});
  auto train = GpuDataset::create(ctx, std::span<const float>(data.train.images.data(), size_t(train_rows * features)),
                                  std::span<const int32_t>(data.train.labels.data(), size_t(train_rows)), features, batch);
  if (!train.ok()) return die("GpuDataset (train): " + train.error().to_string());
  auto test_x = ctx.upload(std::span<const float>(data.test.images));
  auto test_y = ctx.upload(std::span<const int32_t>(data.test.labels));
  if (!test_x.ok() || !test_y.ok()) return die("test set upload failed");
  if (auto s = ctx.synchronize(); !s.ok()) return die(s.error().to_string());

  std::vector<int64_t> order(static_cast<size_t>(train_rows));
  std::iota(order.begin(), order.end(), int64_t(0));
  Rng shuffle_rng(seed ^ 0x5bd1e995u);
  const int64_t steps = train_rows / batch;
  nlohmann::json per_epoch = nlohmann::json::array();
  std::vector<double> rates;
  double train_total = 0, best = 0;
  nlohmann::json to_target = nullptr;
  uint64_t dropout_offset = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      if (auto st = train->gather(std::span<const int64_t>(order.data() + s * batch, size_t(batch))); !st.ok())
        return die("gather: " + st.error().to_string());
      if (auto st = gnet->forward_backward(train->batch_x(), train->batch_labels(), batch, 1.0f / float(batch), seed,
                                           dropout_offset++);
          !st.ok())
        return die("forward_backward: " + st.error().to_string());
      if (auto st = opt->step(gnet->d_params(), gnet->d_grads(), blocks, float(lr)); !st.ok())
        return die("optimizer step: " + st.error().to_string());
    }
    auto train_stats = gnet->take_stats();  // waits for the epoch's work
    if (!train_stats.ok()) return die(train_stats.error().to_string());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_total += seconds;
    for (int64_t start = 0; start < data.test.count; start += eval_batch) {
      const int64_t n = std::min(eval_batch, data.test.count - start);
      if (auto st = gnet->evaluate(test_x->as<float>() + start * features, test_y->as<int32_t>() + start, n, nullptr);
          !st.ok())
        return die("evaluate: " + st.error().to_string());
    }
    auto test_stats = gnet->take_stats();
    if (!test_stats.ok()) return die(test_stats.error().to_string());
    const double rate = double(steps * batch) / seconds;
    if (e > 0) rates.push_back(rate);
    const double acc = double(test_stats->correct) / double(std::max<int64_t>(1, test_stats->count));
    best = std::max(best, acc);
    if (to_target.is_null() && acc >= target) to_target = train_total;
    per_epoch.push_back({{"train_seconds", seconds},
                         {"images_per_second", rate},
                         {"train_loss", train_stats->loss_sum / double(std::max<int64_t>(1, train_stats->count))},
                         {"train_accuracy", double(train_stats->correct) / double(std::max<int64_t>(1, train_stats->count))},
                         {"test_accuracy", acc}});
  }
  std::sort(rates.begin(), rates.end());
  const GpuDevice& d = inv.devices.front();
  nlohmann::json out = {
      {"side", "hpctune"},
      {"device", d.name},
      {"compute_capability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
      {"driver", cuda_version_string(inv.driver_version)},
      {"runtime", cuda_version_string(inv.runtime_version)},
      {"model", model},
      {"layers", net->describe()},
      {"batch", batch},
      {"lr", lr},
      {"momentum", momentum},
      {"seed", seed},
      {"precision", gpu_precision_name(*precision)},
      {"train_images", steps * batch},
      {"epochs", per_epoch},
      {"median_images_per_second", rates.empty() ? nullptr : nlohmann::json(rates[rates.size() / 2])},
      {"train_seconds", train_total},
      {"target", target},
      {"seconds_to_target", to_target},
      {"best_test_accuracy", best},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
