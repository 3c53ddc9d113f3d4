// bench_trainers: training throughput and test accuracy of the built-in Network (network.h) on
// Fashion-MNIST, the hpctune side of bench/run-trainers (bench/trainers_torch.py is the PyTorch
// side, with the same models, data, batch size, optimizer, epochs and thread count).
//
// The loop is deliberately minimal and identical to the PyTorch script's: standardised pixels, a
// seeded shuffle per epoch, minibatches of --batch (the last one smaller), SGD with momentum 0.9 at
// a constant rate, no validation split. Training images/s is measured per epoch over the training
// steps only (the gather of a minibatch included, evaluation excluded); the median over epochs is
// reported. Prints one JSON object on stdout.
//
//   bench_trainers --model mlp|cnn [--epochs N] [--threads T] [--batch B] [--lr X] [--dropout P]
//                  [--data DIR] [--seed S] [--max-train N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "trainers/idx_dataset.h"
#include "trainers/layers.h"
#include "trainers/mlp.h"
#include "trainers/network.h"

using namespace hpctune;
using namespace hpctune::trainers;

namespace {

struct Args {
  std::string model = "mlp";
  int epochs = 3;
  int threads = 2;
  int64_t batch = 128;
  double lr = -1.0;
  double dropout = -1.0;
  std::string data = kDefaultDataDir;
  uint64_t seed = 1;
  int64_t max_train = 0;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "bench_trainers: %s\n", msg);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--model") a.model = next();
    else if (k == "--epochs") a.epochs = std::stoi(next());
    else if (k == "--threads") a.threads = std::stoi(next());
    else if (k == "--batch") a.batch = std::stoll(next());
    else if (k == "--lr") a.lr = std::stod(next());
    else if (k == "--dropout") a.dropout = std::stod(next());
    else if (k == "--data") a.data = next();
    else if (k == "--seed") a.seed = std::stoull(next());
    else if (k == "--max-train") a.max_train = std::stoll(next());
    else usage(("unknown argument " + k).c_str());
  }
  if (a.model != "mlp" && a.model != "cnn") usage("--model must be mlp or cnn");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  blas_select_kernels();
  blas_set_threads(args.threads);
  dnnl_set_threads(args.threads);

  auto loaded = load_idx_dataset(args.data, DatasetOptions{.standardize = true});
  if (!loaded.ok()) {
    std::fprintf(stderr, "bench_trainers: %s\n", loaded.error().to_string().c_str());
    return 1;
  }
  const ImageClassificationData& data = **loaded;
  const Dataset& train = data.train;
  const Dataset& test = data.test;
  const int64_t n_train = args.max_train > 0 ? std::min(args.max_train, train.count) : train.count;
  const int64_t features = train.features();

  std::vector<LayerSpec> specs;
  Shape input{1, train.rows, train.cols};
  double lr = args.lr;
  double dropout = args.dropout;
  if (args.model == "mlp") {
    input = {features, 1, 1};
    specs = {LayerSpec{.kind = "dense", .units = 256}, LayerSpec{.kind = "dense", .units = 256}};
    if (lr < 0) lr = 0.05;
    if (dropout < 0) dropout = 0.0;
  } else {
    if (dropout < 0) dropout = 0.4;
    specs = default_cnn_layer_specs(dropout);
    if (lr < 0) lr = 0.02;
  }
  auto created = Network::create(input, specs, data.num_classes);
  if (!created.ok()) {
    std::fprintf(stderr, "bench_trainers: %s\n", created.error().to_string().c_str());
    return 1;
  }
  Network net = std::move(created).value();
  Rng init_rng(derive_seed(args.seed, 0));
  net.init(init_rng);
  SgdMomentum opt(net.num_params(), SgdOptions{.momentum = 0.9});
  Rng shuffle_rng(derive_seed(args.seed, 1));
  Rng dropout_rng(derive_seed(args.seed, 2));

  std::vector<int64_t> order(static_cast<size_t>(n_train));
  for (int64_t i = 0; i < n_train; ++i) order[static_cast<size_t>(i)] = i;
  std::vector<float> xb(static_cast<size_t>(args.batch * features));
  std::vector<int32_t> yb(static_cast<size_t>(args.batch));

  nlohmann::json epochs = nlohmann::json::array();
  std::vector<double> rates;
  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    for (int64_t i = n_train - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(shuffle_rng.next() % static_cast<uint64_t>(i + 1));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
    BatchStats stats;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t start = 0; start < n_train; start += args.batch) {
      const int64_t b = std::min(args.batch, n_train - start);
      for (int64_t r = 0; r < b; ++r) {
        const int64_t idx = order[static_cast<size_t>(start + r)];
        std::memcpy(xb.data() + r * features, train.image(idx), static_cast<size_t>(features) * sizeof(float));
        yb[static_cast<size_t>(r)] = train.labels[static_cast<size_t>(idx)];
      }
      stats += net.forward_backward(xb.data(), yb.data(), b, 1.0f / static_cast<float>(b), dropout_rng);
      opt.step(net.params(), net.grads(), net.blocks(), static_cast<float>(lr));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = static_cast<double>(n_train) / seconds;
    rates.push_back(rate);
    epochs.push_back({{"epoch", epoch + 1}, {"seconds", seconds}, {"images_per_second", rate},
                      {"train_loss", stats.mean_loss()}, {"train_accuracy", stats.accuracy()}});
    std::fprintf(stderr, "hpctune %s epoch %d: %.1f images/s, train loss %.4f acc %.4f\n", args.model.c_str(),
                 epoch + 1, rate, stats.mean_loss(), stats.accuracy());
  }
  BatchStats test_stats;
  const auto te0 = std::chrono::steady_clock::now();
  for (int64_t start = 0; start < test.count; start += 1000) {
    const int64_t b = std::min<int64_t>(1000, test.count - start);
    test_stats += net.evaluate(test.image(start), test.labels.data() + start, b);
  }
  const double test_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - te0).count();
  nlohmann::json out = {
      {"side", "hpctune"},
      {"model", args.model},
      {"network", net.describe()},
      {"params", net.num_params()},
      {"threads", args.threads},
      {"batch", args.batch},
      {"epochs", args.epochs},
      {"lr", lr},
      {"momentum", 0.9},
      {"dropout", dropout},
      {"train_images", n_train},
      {"images_per_second", median(rates)},
      {"per_epoch", epochs},
      {"test_accuracy", test_stats.accuracy()},
      {"test_loss", test_stats.mean_loss()},
      {"test_images_per_second", static_cast<double>(test.count) / test_seconds},
      {"blas_core", blas_core_name()},
      {"dnnl_isa", dnnl_isa_name()},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
