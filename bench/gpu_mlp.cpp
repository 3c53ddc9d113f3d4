// bench_gpu_mlp: training images per second of the default MLP (784-256-256-10, ReLU, softmax
// cross-entropy, SGD momentum 0.9) on one GPU through gpu/gpu_mlp.h, the data set on the device.
// bench/gpu runs it beside bench/gpu_mlp_torch.py (PyTorch, same model, batch and precision).
//
//   bench_gpu_mlp [--batch 128] [--epochs 4] [--images 60000] [--tf32] [--seed 1]
//
// The data are synthetic, of Fashion-MNIST's shape (784 inputs, 10 classes): inputs uniform in
// [0, 1), labels the argmax of a fixed random linear map, so the network has something to learn
// (the printed loss falls) while throughput does not depend on the values. Batches are taken in
// order; each epoch is timed from its first step to a stream synchronize after its last. Prints one
// JSON line: the device, driver and runtime, images/s per epoch and the median over epochs after
// the first (warm-up), and each epoch's mean loss and accuracy. Exit 77 with the reason on stderr
// where there is no GPU or no CUDA library; 1 on any other failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_mlp.h"
#include "nn/network.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

int die(const std::string& why, int code = 1) {
  std::fprintf(stderr, "bench_gpu_mlp: %s\n", why.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 128, epochs = 4, images = 60000;
  uint64_t seed = 1;
  bool tf32 = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](int64_t lo, int64_t hi) -> int64_t {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      int64_t v = std::stoll(argv[++i]);
      if (v < lo || v > hi) throw std::runtime_error(a + " out of [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return v;
    };
    try {
      if (a == "--batch") batch = next(1, 65536);
      else if (a == "--epochs") epochs = next(2, 1000);
      else if (a == "--images") images = next(1, 10000000);
      else if (a == "--seed") seed = uint64_t(next(0, INT64_MAX));
      else if (a == "--tf32") tf32 = true;
      else return die("unknown argument " + a + " (see the comment at the top of bench/gpu_mlp.cpp)", 2);
    } catch (const std::exception& e) {
      return die(e.what(), 2);
    }
  }
  batch = std::min(batch, images);

  auto lib = GpuLibrary::open_default();
  if (!lib.ok()) return die(lib.error().to_string(), built_with_cuda() ? 1 : 77);
  GpuInventory inv = lib->inventory();
  if (inv.devices.empty()) return die(inv.no_device_reason, 77);
  auto made_ctx = GpuContext::create(*lib, 0);
  if (!made_ctx.ok()) return die(made_ctx.error().to_string());
  GpuContext ctx = std::move(made_ctx).value();
  if (tf32) {
    if (auto s = ctx.check(ctx.api().set_tf32(ctx.raw(), 1), "set_tf32"); !s.ok()) return die(s.error().to_string());
  }

  const int64_t in = 784, classes = 10;
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(images * in));
  for (auto& v : x) v = float(rng.uniform());
  std::vector<float> map(static_cast<size_t>(in * classes));
  for (auto& v : map) v = float(rng.uniform() * 2.0 - 1.0);
  std::vector<int32_t> labels(static_cast<size_t>(images));
  for (int64_t i = 0; i < images; ++i) {
    float best = -1e30f;
    for (int64_t c = 0; c < classes; ++c) {
      float s = 0;
      for (int64_t j = 0; j < in; ++j) s += (x[size_t(i * in + j)] - 0.5f) * map[size_t(j * classes + c)];
      if (s > best) best = s, labels[size_t(i)] = int32_t(c);
    }
  }

  std::vector<nn::LayerSpec> specs(2);
  specs[0].kind = specs[1].kind = "dense";
  specs[0].units = specs[1].units = 256;
  auto net = nn::Network::create(nn::Shape{in, 1, 1}, specs, classes);
  if (!net.ok()) return die(net.error().to_string());
  net->init(rng);

  auto dx = ctx.upload(std::span<const float>(x));
  if (!dx.ok()) return die(dx.error().to_string());
  auto dy = ctx.upload(std::span<const int32_t>(labels));
  if (!dy.ok()) return die(dy.error().to_string());
  auto mlp = GpuMlp::create(ctx, {in, 256, 256, classes}, batch, net->params(), GpuSgdOptions{0.9f, false, 0.0f});
  if (!mlp.ok()) return die(mlp.error().to_string());
  if (auto s = ctx.synchronize(); !s.ok()) return die(s.error().to_string());

  nlohmann::json per_epoch = nlohmann::json::array();
  std::vector<double> rates;
  for (int64_t e = 0; e < epochs; ++e) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t start = 0; start < images; start += batch) {
      const int64_t n = std::min(batch, images - start);
      if (auto s = mlp->train_step(dx->as<float>() + start * in, dy->as<int32_t>() + start, n, 0.05f); !s.ok())
        return die(s.error().to_string());
    }
    if (auto s = ctx.synchronize(); !s.ok()) return die(s.error().to_string());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto stats = mlp->take_stats();
    if (!stats.ok()) return die(stats.error().to_string());
    const double rate = double(images) / seconds;
    if (e > 0) rates.push_back(rate);
    per_epoch.push_back({{"seconds", seconds},
                         {"images_per_second", rate},
                         {"mean_loss", stats->loss_sum / double(stats->count)},
                         {"accuracy", double(stats->correct) / double(stats->count)}});
  }
  std::sort(rates.begin(), rates.end());
  const GpuDevice& d = inv.devices.front();
  nlohmann::json out = {
      {"side", "hpctune"},
      {"device", d.name},
      {"compute_capability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
      {"driver", cuda_version_string(inv.driver_version)},
      {"runtime", cuda_version_string(inv.runtime_version)},
      {"model", "784-256-256-10 relu"},
      {"batch", batch},
      {"images", images},
      {"precision", tf32 ? "tf32" : "fp32"},
      {"epochs", per_epoch},
      {"median_images_per_second", rates[rates.size() / 2]},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
