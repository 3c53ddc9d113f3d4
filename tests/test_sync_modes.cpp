// trainer.sync on one rank and in a campaign config (issue 26): hogwild with one thread is the
// plain loop bit for bit, with two threads it trains; the sync settings' bad values and
// combinations are refused naming the place (file:line:column in a config, the setting in a trial).
// The multi-rank modes are in test_async_data_parallel (under mpirun).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "common/rng.h"
#include "config/config.h"
#include "nn/checkpoint.h"
#include "tests/synthetic_images.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;

namespace {

using hpctune::testing::synthetic;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hpctune-sync-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

Result<TrialResult> train(const nlohmann::json& settings, const ImageClassificationData& data, const std::string& dir,
                          int threads) {
  TrialContext ctx;
  ctx.trial_id = 4;
  ctx.seed = 21;
  ctx.trainer = settings;
  ctx.trial_dir = dir;
  ctx.threads = threads;
  auto s = parse_mlp_settings(settings);
  REQUIRE_MESSAGE(s.ok(), s.error().message());
  return train_mlp(*s, data, ctx);
}

const nlohmann::json kBase = {{"kind", "mlp"}, {"hidden", {32}}, {"lr", 0.05}, {"batch_size", 16}, {"epochs", 2},
                              {"optimizer", "sgd"}, {"momentum", 0.9}, {"dropout", 0.1}};

std::string config_error(const std::string& trainer_lines) {
  const std::string text = "name: c\nobjective: {metric: val_loss}\nsearch: {max_trials: 2}\ntrainer:\n  kind: mlp\n" +
                           trainer_lines;
  auto parsed = config::parse_config(text, "test.yaml");
  REQUIRE_MESSAGE(!parsed.ok(), "parsed although it should not:\n" << text);
  return parsed.error().message();
}

}  // namespace

TEST_CASE("hogwild with one thread is plain SGD bit for bit; with two threads it trains") {
  const auto data = synthetic(400, 80, 8, 4, 3);
  TempDir plain_dir, hog_dir;
  nlohmann::json hog = kBase;
  hog["sync"] = "hogwild";
  auto plain = train(kBase, data, plain_dir.path, 1);
  REQUIRE_MESSAGE(plain.ok(), plain.error().message());
  auto one = train(hog, data, hog_dir.path, 1);
  REQUIRE_MESSAGE(one.ok(), one.error().message());
  for (const char* key : {"val_loss", "val_accuracy", "train_loss", "test_loss", "test_accuracy"}) {
    CAPTURE(key);
    CHECK(one->metrics.at(key) == plain->metrics.at(key));
  }
  auto a = nn::read_checkpoint(nn::checkpoint_path(plain_dir.path, 0));
  auto b = nn::read_checkpoint(nn::checkpoint_path(hog_dir.path, 0));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->params == b->params);
  CHECK(a->optimizer.buffers == b->optimizer.buffers);
  CHECK(a->step == b->step);

  // Two threads share the weights: not the same numbers, but it learns as well.
  auto two = train(hog, data, "", 2);
  REQUIRE_MESSAGE(two.ok(), two.error().message());
  CHECK(two->metrics.at("val_accuracy") > plain->metrics.at("val_accuracy") - 0.15);
  CHECK(two->metrics.at("val_accuracy") > 0.5);
}

TEST_CASE("sync settings: bad values name file:line:column in a config, combinations name the setting") {
  CHECK(config_error("  sync: bogus\n").find("test.yaml:6:3: trainer.sync: unknown value 'bogus'") == 0);
  CHECK(config_error("  staleness: -1\n").find("test.yaml:6:3: trainer.staleness: -1 is below the minimum 0") == 0);
  CHECK(config_error("  gradient_compression: 2bit\n").find("test.yaml:6:3: trainer.gradient_compression: unknown value") == 0);
  // Backup replicas: a fraction in (0, 1]; below 1 taken by ssp and allreduce, ignored by downpour.
  CHECK(config_error("  min_replica_fraction: 0\n").find("test.yaml:6:3: trainer.min_replica_fraction") == 0);
  for (const char* sync : {"ssp", "allreduce", "downpour"}) {
    nlohmann::json s = kBase;
    s["sync"] = sync;
    s["min_replica_fraction"] = 0.75;
    auto parsed = parse_mlp_settings(s);
    REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
  }
  nlohmann::json gpu = kBase;
  gpu["sync"] = "ssp";
  gpu["device"] = "gpu";
  CHECK_FALSE(parse_mlp_settings(gpu).ok());
}
