// Integration: the built-in MLP trainer really learns Fashion-MNIST.
// A 784-256-10 ReLU MLP, minibatch SGD with momentum (cosine learning-rate decay, standardized
// pixels), the full 54,000/6,000 train/validation split, 3 full epochs, evaluated on the full
// 10,000-image test set: test accuracy >= 0.85 (about 0.878 here, 0.866 without standardizing).
#include <doctest/doctest.h>

#include <chrono>

#include "trainers/trainer_factory.h"
#include "trainers/idx_dataset.h"
#include "trainers/mlp_trainer.h"
#include "trainers/trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::nn;

namespace {

// One trial of a built-in kind on 2 threads: its result, its reports and its wall time.
struct KindRun {
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
  double seconds = 0;
  TrialResult result;
};

KindRun run_kind(const std::shared_ptr<DatasetCache>& cache, uint64_t seed, const nlohmann::json& settings) {
  TrainerServices services;
  services.datasets = cache;
  auto trainer = make_trainer(settings.at("kind").get<std::string>(), services);
  REQUIRE(trainer.ok());
  KindRun out;
  TrialContext ctx;
  ctx.seed = seed;
  ctx.threads = 2;
  ctx.trainer = settings;
  ctx.report = [&](int64_t step, const protocol::Metrics& m) { out.reports.emplace_back(step, m); };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*trainer)->run(ctx);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  out.result = std::move(*r);
  return out;
}

}  // namespace

TEST_CASE("mlp trainer: 784-256-10 reaches 0.85 test accuracy on Fashion-MNIST in 3 epochs") {
  const auto t_load = std::chrono::steady_clock::now();
  auto cache = std::make_shared<DatasetCache>();
  DatasetOptions standardized;
  standardized.standardize = true;  // what the trial below asks for, so that it finds it cached
  auto data = cache->get(kDefaultDataDir, standardized);
  REQUIRE_MESSAGE(data.ok(), (data.ok() ? "" : data.error().to_string()));
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  REQUIRE((*data)->train.count == 60000);
  REQUIRE((*data)->test.count == 10000);
  REQUIRE((*data)->train.features() == 784);
  REQUIRE((*data)->num_classes == 10);

  const KindRun run = run_kind(cache, 2024,
                               {{"kind", "mlp"},      {"hidden", {256}},   {"activation", "relu"},    {"lr", 0.05},
                                {"momentum", 0.9},    {"batch_size", 128}, {"lr_schedule", "cosine"}, {"standardize", true},
                                {"epochs", 3},        {"val_fraction", 0.1}});
  const auto& reports = run.reports;
  const double seconds = run.seconds;
  const TrialResult* r = &run.result;

  for (const auto& [step, m] : reports) {
    MESSAGE("epoch " << step << ": val_loss " << m.at("val_loss") << " val_accuracy " << m.at("val_accuracy")
                     << " train_loss " << m.at("train_loss") << " epoch_seconds " << m.at("epoch_seconds"));
  }
  MESSAGE("dataset load " << load_seconds << " s; trial " << seconds << " s; train_seconds " << r->metrics.at("train_seconds")
                          << "; images/s " << r->metrics.at("images_per_second") << "; test_accuracy "
                          << r->metrics.at("test_accuracy") << "; test_loss " << r->metrics.at("test_loss"));

  CHECK_FALSE(r->stopped);
  CHECK(r->step == 3);
  REQUIRE(reports.size() == 3);
  CHECK(reports[2].first == 3);
  // It trained all 3 epochs on all 54,000 training images.
  CHECK(r->metrics.at("images_per_second") * r->metrics.at("train_seconds") == doctest::Approx(3.0 * 54000.0).epsilon(1e-6));
  CHECK(r->metrics.at("test_accuracy") >= 0.85);
  CHECK(r->metrics.at("val_accuracy") >= 0.85);
  CHECK(reports[2].second.at("train_loss") < reports[0].second.at("train_loss"));
  CHECK(cache->loads() == 1);
  // About 0.3 s on an idle core, 3.2 s once beside a load of 10: the bound only catches a
  // pathological regression (a speed is measured in bench/, not here).
  CHECK(load_seconds < 30.0);
}

// Integration: the default CNN (conv 5x5 32, pool, conv 5x5 64, pool, dense 1024) learns a small
// Fashion-MNIST subset: 900 training images, 2 epochs, the first 1,000 test images (0.714 test
// accuracy here; lr 0.05, the mlp's default, is too high for this CNN with momentum 0.9).
TEST_CASE("cnn trainer: the default CNN reaches a sane accuracy on a Fashion-MNIST subset in seconds") {
  auto cache = std::make_shared<DatasetCache>();
  const KindRun run = run_kind(cache, 7,
                               {{"kind", "cnn"},         {"lr", 0.01},          {"batch_size", 32},      {"epochs", 2},
                                {"max_train_samples", 1000}, {"max_test_samples", 1000}, {"standardize", true}});
  const auto& reports = run.reports;
  const double seconds = run.seconds;
  const TrialResult* r = &run.result;
  MESSAGE("cnn subset: " << seconds << " s; train_seconds " << r->metrics.at("train_seconds") << "; images/s "
                         << r->metrics.at("images_per_second") << "; test_accuracy " << r->metrics.at("test_accuracy"));
  REQUIRE(reports.size() == 2);
  CHECK(reports[1].second.at("train_loss") < reports[0].second.at("train_loss"));
  CHECK(r->metrics.at("test_accuracy") >= 0.65);
  CHECK(r->metrics.at("images_per_second") * r->metrics.at("train_seconds") == doctest::Approx(2.0 * 900.0).epsilon(1e-6));
}
