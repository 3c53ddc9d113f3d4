// The pure rules of transfer learning (transfer/transfer_plan.h): sources ranked by the objective,
// a target's and its twin's params, and the paired comparison.
#include <doctest/doctest.h>

#include "transfer/transfer_plan.h"

using hpctune::transfer::Candidate;
using hpctune::transfer::Pair;
using hpctune::transfer::StartSettings;
using json = nlohmann::json;
namespace transfer = hpctune::transfer;

TEST_CASE("sources: best objective first in its direction, ties to the lower trial id") {
  const std::vector<Candidate> c = {{7, 0.80}, {3, 0.91}, {9, 0.91}, {2, 0.50}, {4, 0.80}};
  std::vector<int64_t> order;
  for (const auto& x : transfer::rank_candidates(c, /*maximize=*/true)) order.push_back(x.trial);
  CHECK(order == std::vector<int64_t>{3, 9, 4, 7, 2});
  order.clear();
  for (const auto& x : transfer::rank_candidates(c, /*maximize=*/false)) order.push_back(x.trial);
  CHECK(order == std::vector<int64_t>{2, 4, 7, 3, 9});
  CHECK(transfer::rank_candidates({}, true).empty());
}

TEST_CASE("a target keeps the source's params, less the stage's own keys, under the nested search's") {
  const StartSettings start{.init_setting = "init_from", .source_trial_setting = "", .freeze_setting = "freeze",
                            .twin_resets = {{"head_epochs", 0}, {"body_lr_scale", 1.0}}};
  const json source = {{"lr", 0.1}, {"hidden", {256, 128}}, {"epochs", 4}, {"init_from", "/old"}, {"dropout", 0.3}};
  SUBCASE("no nested search: the stage's freeze, the source's checkpoint") {
    const json t = transfer::target_params(source, {"epochs"}, nullptr, nullptr, {"/runs/7", 7, 1}, start);
    CHECK(t == json{{"lr", 0.1}, {"hidden", {256, 128}}, {"init_from", "/runs/7"}, {"dropout", 0.3}, {"freeze", 1}});
  }
  SUBCASE("the nested search's values win, its freeze too; the target data's params last") {
    const json t = transfer::target_params(source, {}, {{"lr", 0.01}, {"freeze", 2}, {"classes", {1, 2}}},
                                           {{"classes", {5, 6}}}, {"/runs/7", 7, 1}, start);
    CHECK(t["lr"] == 0.01);
    CHECK(t["freeze"] == 2);
    CHECK(t["epochs"] == 4);
    CHECK(t["init_from"] == "/runs/7");
    CHECK(t["classes"] == json{5, 6});
  }
  SUBCASE("a program's kind: the source trial by its own name, never taken over from the source's params") {
    const StartSettings program{.init_setting = "src_ckpt", .source_trial_setting = "src_trial",
                                .freeze_setting = "freeze", .twin_resets = json::object()};
    const json from = {{"lr", 0.1}, {"src_ckpt", "/runs/2/checkpoint"}, {"src_trial", 2}};
    json t = transfer::target_params(from, {}, nullptr, nullptr, {"/runs/7/checkpoint", 7, 0}, program);
    CHECK(t == json{{"lr", 0.1}, {"src_ckpt", "/runs/7/checkpoint"}, {"src_trial", 7}, {"freeze", 0}});
    // A checkpoint file the config names: no source trial.
    t = transfer::target_params(from, {}, nullptr, nullptr, {"/models/a", 0, 0}, program);
    CHECK_FALSE(t.contains("src_trial"));
    const json twin = transfer::twin_params(t, json::object(), program);
    CHECK(twin == json{{"lr", 0.1}, {"freeze", 0}});
  }
}

TEST_CASE("a twin: the target without its start, every layer trained, the refinements reset") {
  const StartSettings start{.init_setting = "init_from", .source_trial_setting = "", .freeze_setting = "freeze",
                            .twin_resets = {{"head_epochs", 0}, {"body_lr_scale", 1.0}}};
  const json target = {{"lr", 0.05}, {"init_from", "/runs/7"}, {"freeze", 2}, {"head_epochs", 3}};
  SUBCASE("reset where the target has it") {
    const json t = transfer::twin_params(target, json::object(), start);
    CHECK(t == json{{"lr", 0.05}, {"freeze", 0}, {"head_epochs", 0}});
  }
  SUBCASE("or where the stage's trainer sets it") {
    const json t = transfer::twin_params(target, {{"body_lr_scale", 0.3}}, start);
    CHECK(t["body_lr_scale"] == 1.0);
    CHECK(t["head_epochs"] == 0);
    CHECK_FALSE(t.contains("init_from"));
  }
}

TEST_CASE("pairs: the mean of the targets against the mean of their twins, in the objective's direction") {
  CHECK_FALSE(transfer::summarize_pairs({}, true).has_value());
  const std::vector<Pair> acc = {{0.90, 0.88}, {0.85, 0.86}, {0.92, 0.89}};
  auto s = transfer::summarize_pairs(acc, /*maximize=*/true);
  REQUIRE(s.has_value());
  CHECK(s->pairs == 3);
  CHECK(s->wins == 2);
  CHECK(s->target_mean == doctest::Approx(0.89));
  CHECK(s->baseline_mean == doctest::Approx(0.87666666));
  CHECK(s->gain == doctest::Approx(0.0133333333));
  // A loss: lower is better, so a target with the smaller loss wins and the gain is positive.
  const std::vector<Pair> loss = {{0.30, 0.40}, {0.50, 0.45}};
  s = transfer::summarize_pairs(loss, /*maximize=*/false);
  REQUIRE(s.has_value());
  CHECK(s->wins == 1);
  CHECK(s->gain == doctest::Approx(0.025));
  CHECK(transfer::gain_of(0.3, 0.4, false) == doctest::Approx(0.1));
}
