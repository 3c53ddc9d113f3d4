// bench_trainers: training throughput and test accuracy of the built-in `mlp` and `cnn` trainers on
// Fashion-MNIST, the hpctune side of bench/run-trainers (bench/trainers_torch.py is the PyTorch
// side, with the same models, data, batch size, optimizer, epochs and thread count).
//
// The training is the product's: the settings are built as the trainer-settings JSON a config would
// hold, read by parse_mlp_settings / parse_cnn_settings, and run by train_classifier()
// (classifier_training.h) on one rank, exactly as a trial of the `mlp` / `cnn` kind runs. The
// settings match the PyTorch script: standardised pixels, batch --batch, SGD momentum 0.9
// (no Nesterov, no weight decay) at a constant rate (lr_schedule constant, no scaling or warmup),
// checkpoint and save_predictions off. The loop always holds out a validation split of at least one
// image; val_fraction is set so that it is exactly one, so it trains on 59,999 of the 60,000
// training images (with --max-train N: on N - 1 images of a seeded random choice of N, where the
// PyTorch script takes the first N).
//
// Training images/s per epoch is the trained-image count over the epoch's `epoch_seconds` from the
// loop's per-epoch report; that time covers the epoch's shuffle, minibatch gathers and steps and
// the validation pass over the one held-out image (negligible; its total over the run is printed as
// validation_seconds, the reports' epoch_seconds summed less the loop's training-only
// train_seconds). The median over epochs is reported, as on the PyTorch side; the loop's own
// training-only rate over the whole run is printed beside it. The test accuracy is the loop's final
// test_accuracy over the whole test file. Prints one JSON object on stdout.
//
//   bench_trainers --model mlp|cnn [--epochs N] [--threads T] [--batch B] [--lr X] [--dropout P]
//                  [--data DIR] [--seed S] [--max-train N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/blas.h"
#include "trainers/classifier_training.h"
#include "trainers/cnn_trainer.h"
#include "trainers/idx_dataset.h"
#include "nn/layers.h"
#include "trainers/mlp_trainer.h"
#include "nn/network.h"
#include "trainers/trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::nn;
using namespace hpctune::collectives;

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

[[noreturn]] void fail(const Error& e) {
  std::fprintf(stderr, "bench_trainers: %s\n", e.to_string().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);

  // The PyTorch script's defaults: the MLP has no dropout layer; the CNN has dropout 0.4 after FC 1024.
  double lr = args.lr;
  double dropout = args.dropout;
  if (args.model == "mlp") {
    if (lr < 0) lr = 0.05;
    dropout = 0.0;
  } else {
    if (lr < 0) lr = 0.02;
    if (dropout < 0) dropout = 0.4;
  }

  // 0 < val_fraction <= 0.5 / pool makes the loop's validation split exactly one image (its minimum).
  const double val_fraction = 1e-9;
  nlohmann::json settings = {
      {"data", args.data},
      {"standardize", true},
      {"val_fraction", val_fraction},
      {"max_train_samples", args.max_train},
      {"max_test_samples", 0},
      {"optimizer", "sgd"},
      {"momentum", 0.9},
      {"nesterov", false},
      {"weight_decay", 0.0},
      {"lr", lr},
      {"lr_schedule", "constant"},
      {"lr_scaling", "none"},
      {"warmup_epochs", 0.0},
      {"batch_size", args.batch},
      {"epochs", args.epochs},
      {"checkpoint", false},
      {"save_predictions", false},
  };
  ClassifierSettings s;
  if (args.model == "mlp") {
    settings["hidden"] = {256, 256};
    settings["activation"] = "relu";
    settings["dropout"] = dropout;
    auto parsed = parse_mlp_settings(settings);
    if (!parsed.ok()) fail(parsed.error());
    s = *parsed;  // the ClassifierSettings part: layers are filled from hidden/activation/dropout
  } else {
    nlohmann::json layers = default_cnn_layers();
    if (dropout > 0.0) layers.push_back({{"kind", "dropout"}, {"rate", dropout}});
    settings["layers"] = layers;
    auto parsed = parse_cnn_settings(settings);
    if (!parsed.ok()) fail(parsed.error());
    s = *parsed;
  }

  auto loaded = load_idx_dataset(s.data, DatasetOptions{.standardize = s.standardize});
  if (!loaded.ok()) fail(loaded.error());
  const ImageClassificationData& data = **loaded;

  // The same network train_classifier builds, for its description and size only.
  auto described = Network::create(Shape{1, data.train.rows, data.train.cols}, s.layers, data.num_classes);
  if (!described.ok()) fail(described.error());
  const std::string network = described->describe();
  const size_t params = described->num_params();

  // The loop's split, restated to count the trained images: pool, less max(1, round(val_fraction * pool)).
  const int64_t pool = args.max_train > 0 ? std::min(args.max_train, data.train.count) : data.train.count;
  const int64_t n_val = std::max<int64_t>(1, std::llround(val_fraction * static_cast<double>(pool)));
  const int64_t n_train = pool - n_val;

  TrialContext ctx;
  ctx.trial_id = 1;
  ctx.seed = args.seed;
  ctx.threads = args.threads;
  ctx.trainer = settings;
  ctx.trainer["kind"] = args.model;
  nlohmann::json epochs = nlohmann::json::array();
  std::vector<double> rates;
  double epoch_seconds_sum = 0.0;
  ctx.report = [&](int64_t step, const protocol::Metrics& m) {
    const double seconds = m.at("epoch_seconds");
    const double rate = static_cast<double>(n_train) / seconds;
    epoch_seconds_sum += seconds;
    rates.push_back(rate);
    epochs.push_back({{"epoch", step}, {"seconds", seconds}, {"images_per_second", rate},
                      {"train_loss", m.at("train_loss")}, {"train_accuracy", m.at("train_accuracy")},
                      {"val_accuracy", m.at("val_accuracy")}});
    std::fprintf(stderr, "hpctune %s epoch %lld: %.1f images/s, train loss %.4f acc %.4f\n", args.model.c_str(),
                 static_cast<long long>(step), rate, m.at("train_loss"), m.at("train_accuracy"));
  };

  const auto t0 = std::chrono::steady_clock::now();
  auto trained = train_classifier(args.model, s, data, ctx);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!trained.ok()) fail(trained.error());
  const protocol::Metrics& m = trained->metrics;
  if (static_cast<int64_t>(rates.size()) != args.epochs) {
    std::fprintf(stderr, "bench_trainers: %zu epoch reports for %d epochs\n", rates.size(), args.epochs);
    return 1;
  }
  const double train_seconds = m.at("train_seconds");

  nlohmann::json out = {
      {"side", "hpctune"},
      {"trainer", "train_classifier (" + args.model + " trainer kind)"},
      {"settings", settings},
      {"model", args.model},
      {"network", network},
      {"params", params},
      {"threads", args.threads},
      {"seed", args.seed},
      {"batch", args.batch},
      {"epochs", args.epochs},
      {"lr", lr},
      {"momentum", 0.9},
      {"dropout", dropout},
      {"train_images", n_train},
      {"validation_images", n_val},
      {"images_per_second", median(rates)},
      {"per_epoch", epochs},
      {"train_seconds", train_seconds},
      {"train_only_images_per_second", m.at("images_per_second")},
      {"validation_seconds", epoch_seconds_sum - train_seconds},
      {"test_accuracy", m.at("test_accuracy")},
      {"test_loss", m.at("test_loss")},
      {"trainer_wall_seconds", wall},
      {"blas_core", blas_core_name()},
      {"dnnl_isa", dnnl_isa_name()},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
