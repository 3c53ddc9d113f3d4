// The classifier training loop (classifier_training.h) on a 2-rank trainer group, under mpirun
// (tests/mpirun-test 2): for the data-parallel (2 x 1) and the pipeline (1 x 2) layouts, a run
// stopped after epoch 1 and resumed as attempt 2 ends with bit-identical weights and metrics to an
// uninterrupted run; every stage keeps its own checkpoint, written once, and they join into one
// model file that loads into a one-rank network; only the leader reports
// and writes predictions; and without dropout the group trains like one rank. Its own main
// initialises MPI.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/trainer_group_mpi.h"
#include "common/rng.h"
#include "nn/checkpoint.h"
#include "nn/optimizer.h"
#include "tests/mpi_test_main.h"
#include "tests/synthetic_images.h"
#include "trainers/gradient_engine.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using hpctune::testing::SharedTempDir;
using namespace hpctune::trainers;
using namespace hpctune::nn;
using namespace hpctune::collectives;

namespace {

using hpctune::testing::synthetic;
using hpctune::testing::world_rank;

// The 2 ranks as a group of `data_ranks` x `model_ranks`.
std::unique_ptr<TrainerGroup> group_of(int data_ranks, int model_ranks) {
  MpiGroupOptions go;
  go.data = data_ranks;
  go.model = model_ranks;
  auto created = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(created.ok());
  return std::move(created).value();
}

struct Run {
  Result<TrialResult> result = err(Errc::kInternal, "not run");
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
};

Run run(TrainerGroup* g, const nlohmann::json& settings, const ImageClassificationData& data, const std::string& dir,
        int64_t attempt, bool stop_after_first_epoch, const std::string& resume_from = "") {
  Run out;
  TrialContext ctx;
  ctx.resume_from = resume_from;
  ctx.trial_id = 5;
  ctx.attempt = attempt;
  ctx.seed = 9;
  ctx.trainer = settings;
  ctx.trial_dir = dir;
  ctx.threads = 1;
  ctx.group = g;
  ctx.ranks = g != nullptr ? g->size() : 1;
  const bool leader = g == nullptr || g->leader();
  ctx.report = [&](int64_t step, const protocol::Metrics& m) {
    if (leader) out.reports.emplace_back(step, m);
  };
  // As the worker does it: the leader's answer on every rank, a collective.
  ctx.stop_requested = [&]() -> bool {
    const bool mine = stop_after_first_epoch && !out.reports.empty();
    if (g == nullptr) return mine;
    auto flag = g->broadcast_flag(mine);
    REQUIRE(flag.ok());
    return *flag;
  };
  auto s = parse_mlp_settings(settings);
  REQUIRE(s.ok());
  out.result = train_mlp(*s, data, ctx);
  return out;
}

}  // namespace

TEST_CASE("2 ranks: stop after epoch 1 and resume equals an uninterrupted run, per layout") {
  const auto data = synthetic(500, 60, 8, 4, 11);
  const nlohmann::json settings = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"dropout", 0.1}, {"lr", 0.05},
                                   {"batch_size", 32}, {"epochs", 2}, {"optimizer", "sgd"}, {"nesterov", true}};
  for (auto [data_ranks, model_ranks] : {std::pair{2, 1}, std::pair{1, 2}}) {
    CAPTURE(data_ranks);
    CAPTURE(model_ranks);
    auto created = group_of(data_ranks, model_ranks);
    TrainerGroup& g = *created;
    const SharedTempDir full_guard(g, "hpctune-clfgroup"), split_guard(g, "hpctune-clfgroup");
    const std::string &full_dir = full_guard.path, &split_dir = split_guard.path;

    Run full = run(&g, settings, data, full_dir, 1, false);
    REQUIRE_MESSAGE(full.result.ok(), full.result.error().message());
    Run first = run(&g, settings, data, split_dir, 1, true);
    REQUIRE(first.result.ok());
    CHECK(first.result->stopped);
    Run second = run(&g, settings, data, split_dir, 2, false);
    REQUIRE(second.result.ok());
    CHECK(second.result->metrics.at("resumed_epoch") == 1.0);
    for (const char* key : {"val_loss", "val_accuracy", "test_loss", "test_accuracy", "train_loss"}) {
      CAPTURE(key);
      CHECK(second.result->metrics.at(key) == full.result->metrics.at(key));
    }
    // This rank's stage checkpoint: bit-identical weights and optimizer state.
    auto a = read_checkpoint(checkpoint_path(full_dir, g.model_rank()));
    auto b = read_checkpoint(checkpoint_path(split_dir, g.model_rank()));
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(a->epoch == 2);
    CHECK(a->params == b->params);
    CHECK(a->optimizer.buffers == b->optimizer.buffers);
    CHECK(std::filesystem::exists(checkpoint_path(full_dir, model_ranks - 1)));
    CHECK_FALSE(std::filesystem::exists(checkpoint_path(full_dir, model_ranks)));
    if (g.leader()) {
      CHECK(full.reports.size() == 2);
      CHECK(second.reports.size() == 1);
      CHECK(std::filesystem::exists(full_dir + "/test_probs.npy"));
      int checkpoints = 0;
      for (const auto& art : full.result->artifacts) checkpoints += art.kind == "checkpoint";
      CHECK(checkpoints == model_ranks);
      // The stage files join into one model file that loads into a one-rank network, bit for bit;
      // its model identity is the one-rank network's (the layout is no part of it).
      auto whole = read_trial_checkpoint(full_dir);
      REQUIRE_MESSAGE(whole.ok(), whole.error().message());
      auto one = Network::create(Shape{1, 8, 8}, (*parse_mlp_settings(settings)).layers, 4);
      REQUIRE(one.ok());
      CHECK(whole->epoch == 2);
      CHECK(whole->last_layer == one->num_layers());
      CHECK(whole->model_hash == model_identity(manifest_of(*one)));
      REQUIRE(load_model(*one, *whole).ok());
      CHECK(std::vector<float>(one->params().begin(), one->params().end()) == whole->params);
      if (model_ranks == 2) CHECK(b->last_layer < one->num_layers());  // stage 0 held only its layers
    } else {
      CHECK(full.reports.empty());
      CHECK(full.result->artifacts.empty());
    }
  }
}

TEST_CASE("2 ranks without dropout train like one rank") {
  const auto data = synthetic(400, 60, 8, 4, 11);
  const nlohmann::json settings = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 30},
                                   {"epochs", 2}, {"optimizer", "adam"}, {"lr", 0.003}, {"checkpoint", false}};
  Run one = run(nullptr, settings, data, "", 1, false);
  REQUIRE(one.result.ok());
  for (auto [data_ranks, model_ranks] : {std::pair{2, 1}, std::pair{1, 2}}) {
    CAPTURE(data_ranks);
    auto created = group_of(data_ranks, model_ranks);
    Run many = run(created.get(), settings, data, "", 1, false);
    REQUIRE(many.result.ok());
    for (const char* key : {"val_loss", "test_loss", "train_loss"}) {
      CAPTURE(key);
      CHECK(many.result->metrics.at(key) == doctest::Approx(one.result->metrics.at(key)).epsilon(1e-3));
    }
  }
}

TEST_CASE("2 ranks: frozen layers stay frozen in every layout, pipeline stages included") {
  const auto data = synthetic(64, 8, 8, 4, 11);
  const std::vector<LayerSpec> specs = {LayerSpec{.kind = "dense", .units = 24}, LayerSpec{.kind = "dense", .units = 16}};
  for (auto [data_ranks, model_ranks] : {std::pair{2, 1}, std::pair{1, 2}}) {
    CAPTURE(data_ranks);
    auto created = group_of(data_ranks, model_ranks);
    TrainerGroup& g = *created;
    auto made = Network::create(Shape{1, 8, 8}, specs, 4);
    REQUIRE(made.ok());
    Network net = std::move(made).value();
    Rng init(3);
    net.init(init);
    REQUIRE(net.freeze(1).ok());
    const std::vector<float> before(net.params().begin(), net.params().end());
    auto engine = make_gradient_engine(net, &g);
    REQUIRE(engine.ok());
    Optimizer opt((*engine)->params().size(), OptimizerOptions{.kind = OptimizerKind::kSgd, .momentum = 0.9});
    Rng dropout(1);
    for (int step = 0; step < 3; ++step) {
      REQUIRE((*engine)->train_batch(data.train.image(0), data.train.labels.data(), 32, dropout).ok());
      opt.step((*engine)->params(), (*engine)->grads(), (*engine)->blocks(), 0.05f);
    }
    // This rank's layers: the frozen one (held by stage 0) unchanged, the others trained.
    const auto [first, last] = (*engine)->layer_range();
    for (size_t layer = first; layer < last; ++layer) {
      CAPTURE(layer);
      const auto [offset, count] = net.param_range(layer, layer + 1);
      const bool unchanged = std::equal(before.begin() + static_cast<long>(offset),
                                        before.begin() + static_cast<long>(offset + count),
                                        net.params().begin() + static_cast<long>(offset));
      CHECK(unchanged == (layer == 0));
    }
  }
}

// Issue 11: a PBT interval (resume_from) and a transfer (init_from + freeze) on a group, from a
// one-rank source: the same result as on one rank, the frozen layer bit-for-bit the source's.
TEST_CASE("2 ranks: resume_from and init_from with freeze work in every layout") {
  const auto data = synthetic(400, 60, 8, 6, 11);
  const nlohmann::json source = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 32},
                                 {"epochs", 2}, {"lr_schedule", "constant"}, {"classes", {0, 1, 2}}};
  auto world = group_of(2, 1);
  const SharedTempDir src_guard(*world, "hpctune-clfgroup");
  const std::string& src_dir = src_guard.path;
  if (world->leader()) REQUIRE(run(nullptr, source, data, src_dir, 1, false).result.ok());
  MPI_Barrier(MPI_COMM_WORLD);
  auto pbt = source;
  pbt["epochs"] = 3;
  pbt["lr"] = 0.1;
  nlohmann::json transfer = source;
  transfer["classes"] = {3, 4, 5};
  transfer["init_from"] = src_dir;
  transfer["freeze"] = 1;
  Run pbt_one = run(nullptr, pbt, data, "", 1, false, src_dir);
  REQUIRE_MESSAGE(pbt_one.result.ok(), pbt_one.result.error().message());
  auto src = read_trial_checkpoint(src_dir);
  REQUIRE(src.ok());
  for (auto [data_ranks, model_ranks] : {std::pair{2, 1}, std::pair{1, 2}}) {
    CAPTURE(data_ranks);
    auto created = group_of(data_ranks, model_ranks);
    TrainerGroup& g = *created;
    Run many = run(&g, pbt, data, "", 1, false, src_dir);
    REQUIRE_MESSAGE(many.result.ok(), many.result.error().message());
    for (const char* key : {"val_loss", "test_loss", "train_loss"}) {
      CAPTURE(key);
      CHECK(many.result->metrics.at(key) == doctest::Approx(pbt_one.result->metrics.at(key)).epsilon(1e-3));
    }
    if (g.leader()) {
      REQUIRE(many.reports.size() == 1);
      CHECK(many.reports[0].first == 3);
    }
    const SharedTempDir dir_guard(g, "hpctune-clfgroup");
    const std::string& dir = dir_guard.path;
    Run tuned = run(&g, transfer, data, dir, 1, false);
    REQUIRE_MESSAGE(tuned.result.ok(), tuned.result.error().message());
    MPI_Barrier(MPI_COMM_WORLD);
    if (g.leader()) {
      auto whole = read_trial_checkpoint(dir);
      REQUIRE(whole.ok());
      const size_t n0 = whole->manifest.layers[0].num_params();
      CHECK(std::equal(src->params.begin(), src->params.begin() + static_cast<long>(n0), whole->params.begin()));
      CHECK(whole->manifest.layers.back().shapes[0] == std::vector<int64_t>{16, 3});
    }
  }
}

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_classifier_group"); }
