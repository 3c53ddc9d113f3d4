// workflow/: the ensemble stage driven directly through begin()/finish() over a store in a temp
// directory, with hand-made trials whose predictions (npy artifacts) have worked-out answers: the
// methods' members and weights, the blend written as the weighted average of its members, rows
// that do not line up, inputs without predictions, and the retrain source across a restart.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/npy.h"
#include "common/rng.h"
#include "config/config.h"
#include "scheduler/stages.h"
#include "store/store.h"
#include "stage_fixture.h"
#include "temp_dir.h"
#include "workflow/ensemble_stage.h"
#include "workflow/stages.h"

using namespace hpctune;
using nlohmann::json;
using store::TrialState;

namespace {

using hpctune::testing::require_ok;

// Two classes; a member is its probability of class 0 on each row. On validation every label is
// 0 (as tests/test_ensemble.cpp): A is right and sure on rows 0-1, wrong on 2-3; B the other way
// round and a little better (log loss 0.5776 against A's 0.6547); C knows nothing (0.6931).
// Greedy with 2 picks takes B, then A (0.4904 beats B again, 0.5776, and C, 0.6060): A and B,
// half each. The test rows are labelled 0, 1, 0.
struct Member {
  std::vector<double> val0, test0;
};
const Member kA{{0.9, 0.9, 0.3, 0.3}, {0.8, 0.4, 0.7}};
const Member kB{{0.35, 0.35, 0.9, 0.9}, {0.6, 0.3, 0.2}};
const Member kC{{0.5, 0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}};
const std::vector<int64_t> kValIndices = {11, 42, 7, 3};
const std::vector<int64_t> kValLabels = {0, 0, 0, 0};
const std::vector<int64_t> kTestLabels = {0, 1, 0};

std::vector<float> two_class(const std::vector<double>& p0) {
  std::vector<float> out;
  for (double x : p0) out.push_back(static_cast<float>(x)), out.push_back(static_cast<float>(1 - x));
  return out;
}

// A campaign with a search stage `tune` and an ensemble stage `blend` over it, in a temp dir.
struct Campaign {
  testing::TempDir dir;
  std::unique_ptr<store::Store> db;
  int64_t campaign = 0, tune = 0, blend = 0, other = 0;
  std::string run_dir;
  double t = 1000;

  Campaign() {
    testing::StageStore made(dir.file("c.db"), "demo", 7, 0);
    db = std::move(made.db);
    campaign = made.campaign;
    tune = stage("search", "tune");
    blend = stage("ensemble", "blend");
    other = stage("search", "other");
    run_dir = dir.file("c.db.trials");
  }
  int64_t stage(const std::string& kind, const std::string& name) {
    auto id = db->create_stage(campaign, kind, name, json::object(), t);
    require_ok(id);
    return *id;
  }

  // A trial of `stage` that ends `state` with val_accuracy `acc`; `seq` is its index in the stage.
  int64_t trial(int64_t stage_id, int64_t seq, double acc, TrialState state = TrialState::kDone,
                json meta = json::object()) {
    store::TrialRow row;
    row.campaign_id = campaign;
    row.stage_id = stage_id;
    row.seq = seq;
    row.params = {{"lr", 0.01 * static_cast<double>(seq + 1)}, {"hidden", 64}};
    row.meta = std::move(meta);
    row.created_at = ++t;
    auto id = db->insert_trial(row);
    require_ok(id);
    require_ok(db->mark_assigned(*id, 1, 0, 1, ++t));
    require_ok(db->mark_running(*id, 1, ++t));
    require_ok(db->finish_trial(*id, 1, state, {{"val_accuracy", acc}}, acc, 3, "", ++t));
    return *id;
  }

  // Writes the five prediction files of `m` into the trial's directory and records them as
  // artifacts of `attempt` (paths absolute, or relative to the trial directory).
  void predictions(int64_t trial_id, const Member& m, bool relative = false, int64_t attempt = 1,
                   std::vector<int64_t> val_indices = kValIndices, std::vector<int64_t> val_labels = kValLabels,
                   std::vector<int64_t> test_labels = kTestLabels) {
    const std::string d = run_dir + "/" + std::to_string(trial_id);
    std::filesystem::create_directories(d);
    const auto val = two_class(m.val0), test = two_class(m.test0);
    require_ok(write_npy_f32(d + "/val_probs.npy", val.data(), static_cast<int64_t>(m.val0.size()), 2));
    require_ok(write_npy_f32(d + "/test_probs.npy", test.data(), static_cast<int64_t>(m.test0.size()), 2));
    require_ok(write_npy_i64(d + "/val_indices.npy", val_indices.data(), static_cast<int64_t>(val_indices.size())));
    require_ok(write_npy_i64(d + "/val_labels.npy", val_labels.data(), static_cast<int64_t>(val_labels.size())));
    require_ok(write_npy_i64(d + "/test_labels.npy", test_labels.data(), static_cast<int64_t>(test_labels.size())));
    for (const char* kind : {"val_probs", "test_probs", "val_indices", "val_labels", "test_labels"}) {
      const std::string file = std::string(kind) + ".npy";
      require_ok(db->add_artifact(trial_id, attempt, kind, relative ? file : d + "/" + file, 64, t));
    }
  }

  // Regression (one output): writes val_pred/test_pred and val_targets/test_targets (rows x 1) into
  // the trial's directory and records them.
  void regression(int64_t trial_id, const std::vector<float>& val_pred, const std::vector<float>& test_pred,
                  const std::vector<float>& val_targets, const std::vector<float>& test_targets) {
    const std::string d = run_dir + "/" + std::to_string(trial_id);
    std::filesystem::create_directories(d);
    const std::pair<const char*, const std::vector<float>*> files[] = {
        {"val_pred", &val_pred}, {"test_pred", &test_pred}, {"val_targets", &val_targets}, {"test_targets", &test_targets}};
    for (const auto& [kind, values] : files) {
      const std::string path = d + "/" + kind + ".npy";
      require_ok(write_npy_f32(path, values->data(), static_cast<int64_t>(values->size()), 1));
      require_ok(db->add_artifact(trial_id, 1, kind, path, 64, t));
    }
  }

  scheduler::StageContext ctx() const {
    scheduler::StageContext c;
    c.store = db.get();
    c.campaign_id = campaign;
    c.stage_id = blend;
    c.inputs = {tune};
    c.run_dir = run_dir;
    c.now = t;
    return c;
  }
};

// The campaign config: objective val_accuracy (max), seed 7, stages tune (search) and blend.
config::CampaignConfig campaign_config(json settings) {
  config::CampaignConfig cfg;
  cfg.name = "demo";
  cfg.seed = 7;
  cfg.objectives = {{"val_accuracy", true}};
  cfg.trainer = {{"kind", "mlp"}, {"epochs", 3}, {"save_predictions", false}};
  config::StageConfig tune{"tune", "search", {}, json::object(), true, nullptr, {}};
  auto tune_view = std::make_shared<config::CampaignConfig>(cfg);
  tune_view->trainer = {{"kind", "mlp"}, {"epochs", 5}, {"save_predictions", true}};
  tune.own = tune_view;
  config::StageConfig blend{"blend", "ensemble", {"tune"}, std::move(settings), false, nullptr, {}};
  cfg.stages = {tune, blend};
  return cfg;
}

std::unique_ptr<scheduler::StageRuntime> ensemble_stage(json settings) {
  const auto cfg = campaign_config(std::move(settings));
  auto made = workflow::make_stage({"blend", "ensemble", {"tune"}, 1}, cfg, std::nullopt);
  require_ok(made);
  return std::move(made).value();
}

std::vector<double> read_f64(const std::string& path, std::vector<int64_t>& dims) {
  auto bytes = npy_detail::read(path, "<f8", sizeof(double), dims);
  require_ok(bytes);
  return npy_detail::as_values<double>(*bytes);
}

// The weighted average of the members' probabilities as stored (float32), in double.
std::vector<double> average(const std::vector<std::pair<const Member*, double>>& parts, bool test) {
  std::vector<double> out;
  for (const auto& [m, w] : parts) {
    const auto p = two_class(test ? m->test0 : m->val0);
    out.resize(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) out[i] += w * static_cast<double>(p[i]);
  }
  return out;
}

double log_loss0(const std::vector<double>& probs, const std::vector<int64_t>& labels) {
  double total = 0;
  for (std::size_t r = 0; r < labels.size(); ++r) total -= std::log(probs[r * 2 + static_cast<std::size_t>(labels[r])]);
  return total / static_cast<double>(labels.size());
}

}  // namespace

// Issue 36, item 8: D has the better validation accuracy (0.75 against 0.5) and reports it as its
// objective, but E has the lower validation log loss (0.7136 against D's 1.2303: D is sure and wrong
// on row 3), the loss the blend minimises; on the test rows E is the better member too. The best
// single member is E, with its loss and its objective reported beside the blend's.
TEST_CASE("ensemble stage: the best single member is the lowest validation log loss, not the best objective") {
  const Member kD{{0.9, 0.9, 0.9, 0.01}, {0.9, 0.9, 0.01}};
  const Member kE{{0.6, 0.6, 0.4, 0.4}, {0.6, 0.4, 0.6}};
  Campaign c;
  const int64_t d = c.trial(c.tune, 0, 0.75), e = c.trial(c.tune, 1, 0.5);
  c.predictions(d, kD);
  c.predictions(e, kE);
  auto stage = ensemble_stage({{"method", "greedy"}, {"max_size", 2}, {"bags", 0}, {"k", 5}, {"retrain", nullptr}});
  auto ctx = c.ctx();
  require_ok(stage->begin(ctx));
  auto result = stage->finish(ctx);
  require_ok(result);
  const json& r = *result;
  CAPTURE(r.dump());
  const json& single = r["best_single"];
  CHECK(single["trial"] == e);
  CHECK(single["chosen_by"] == "val_log_loss");
  CHECK(single["val_accuracy"] == 0.5);
  CHECK(single["val_log_loss"].get<double>() ==
        doctest::Approx(-(2 * std::log(0.6) + 2 * std::log(0.4)) / 4).epsilon(1e-6));
  CHECK(single["objective"] == json{{"metric", "val_accuracy"}, {"value", 0.5}});
  // The blend's objective, beside the member's: the blend is scored by val_accuracy.
  CHECK(r["objective"]["metric"] == "val_accuracy");
  CHECK(r["objective"]["value"] == r["val_accuracy"]);
  // D, which the objective would have chosen, is worse by the loss on validation and on test.
  const double d_val = -(3 * std::log(0.9) + std::log(0.01)) / 4;
  CHECK(single["val_log_loss"].get<double>() < d_val);
  CHECK(single["test_log_loss"].get<double>() ==
        doctest::Approx(log_loss0(average({{&kE, 1.0}}, true), kTestLabels)).epsilon(1e-6));
  CHECK(single["test_log_loss"].get<double>() < log_loss0(average({{&kD, 1.0}}, true), kTestLabels));
}

TEST_CASE("ensemble stage, greedy: the known members and weights, and the written blend is their weighted average") {
  Campaign c;
  const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.5), cc = c.trial(c.tune, 2, 0.4);
  c.predictions(a, kA);
  c.predictions(b, kB, /*relative=*/true);  // relative to the trial directory
  c.predictions(cc, kC);
  c.trial(c.tune, 3, 0.9);                                  // done, no predictions: skipped, counted
  c.predictions(c.trial(c.tune, 4, 0.9, TrialState::kFailed), kA);  // not done: not a candidate
  c.predictions(c.trial(c.other, 0, 0.9), kA);              // another stage: not an input
  auto stage = ensemble_stage({{"method", "greedy"}, {"max_size", 2}, {"bags", 0}, {"k", 5}, {"retrain", nullptr}});
  CHECK(stage->source() == nullptr);
  CHECK(stage->max_trials() == 0);
  std::vector<std::string> logged;
  auto ctx = c.ctx();
  ctx.log = [&](const std::string& line) { logged.push_back(line); };
  require_ok(stage->begin(ctx));
  REQUIRE(logged.size() == 1);
  CHECK(logged[0] == "ensemble 'blend': 1 of the done trials saved no predictions (trainer.save_predictions) and are "
                     "left out");
  auto result = stage->finish(ctx);
  require_ok(result);
  const json& r = *result;
  CHECK(r["method"] == "greedy");
  CHECK(r["candidates"] == 3);
  CHECK(r["skipped"] == 1);
  CHECK(r["retrained"] == 0);
  CHECK(r["members"] == json::array({{{"trial", a}, {"weight", 0.5}}, {{"trial", b}, {"weight", 0.5}}}));
  // A and B together are right on every validation row; the blend's log loss is theirs averaged.
  const auto val = average({{&kA, 0.5}, {&kB, 0.5}}, false), test = average({{&kA, 0.5}, {&kB, 0.5}}, true);
  CHECK(r["val_accuracy"] == 1.0);
  CHECK(r["val_log_loss"].get<double>() == doctest::Approx(log_loss0(val, kValLabels)).epsilon(1e-12));
  CHECK(r["val_log_loss"].get<double>() == doctest::Approx(0.4904).epsilon(1e-3));
  // Test rows: blend p0 = 0.7, 0.35, 0.45 for labels 0, 1, 0: right, right, wrong.
  CHECK(r["test_accuracy"].get<double>() == doctest::Approx(2.0 / 3));
  CHECK(r["test_log_loss"].get<double>() == doctest::Approx(log_loss0(test, kTestLabels)).epsilon(1e-12));
  // The best single member: A and B tie on val_accuracy 0.5; B has the lower validation log loss.
  CHECK(r["best_single"]["trial"] == b);
  CHECK(r["best_single"]["val_accuracy"] == 0.5);
  CHECK(r["best_single"]["val_log_loss"].get<double>() == doctest::Approx(0.5776).epsilon(1e-3));
  CHECK(r["best_single"]["test_log_loss"].get<double>() ==
        doctest::Approx(log_loss0(average({{&kB, 1.0}}, true), kTestLabels)).epsilon(1e-12));
  CHECK(r["val_log_loss"].get<double>() < r["best_single"]["val_log_loss"].get<double>());

  // The files: the blend's probabilities, float64, equal to the weighted average of the members'.
  const std::string dir = workflow::ensemble_output_dir(c.run_dir, c.blend);
  CHECK(r["files"]["val_probs"] == dir + "/val_probs.npy");
  CHECK(r["files"]["test_probs"] == dir + "/test_probs.npy");
  std::vector<int64_t> dims;
  const auto val_file = read_f64(dir + "/val_probs.npy", dims);
  CHECK(dims == std::vector<int64_t>{4, 2});
  REQUIRE(val_file.size() == val.size());
  for (std::size_t i = 0; i < val.size(); ++i) CHECK(val_file[i] == doctest::Approx(val[i]).epsilon(1e-12));
  const auto test_file = read_f64(dir + "/test_probs.npy", dims);
  CHECK(dims == std::vector<int64_t>{3, 2});
  REQUIRE(test_file.size() == test.size());
  for (std::size_t i = 0; i < test.size(); ++i) CHECK(test_file[i] == doctest::Approx(test[i]).epsilon(1e-12));

  // finish() again (a master that died before committing it): the same result, the same files.
  auto again = ensemble_stage({{"method", "greedy"}, {"max_size", 2}, {"bags", 0}, {"k", 5}, {"retrain", nullptr}});
  require_ok(again->begin(ctx));
  auto second = again->finish(ctx);
  require_ok(second);
  CHECK(*second == r);
  CHECK(read_f64(dir + "/test_probs.npy", dims) == test_file);
}

TEST_CASE("ensemble stage, top_k and weighted on the same members") {
  Campaign c;
  const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.5), cc = c.trial(c.tune, 2, 0.4);
  c.predictions(a, kA);
  c.predictions(b, kB);
  c.predictions(cc, kC);
  const auto ctx = c.ctx();
  auto run = [&](json settings) {
    auto stage = ensemble_stage(std::move(settings));
    require_ok(stage->begin(ctx));
    auto r = stage->finish(ctx);
    require_ok(r);
    return *r;
  };
  // top 1: B (the lowest validation log loss) alone, which is also the best single member.
  const json one = run({{"method", "top_k"}, {"k", 1}});
  CHECK(one["method"] == "top_k");
  CHECK(one["members"] == json::array({{{"trial", b}, {"weight", 1.0}}}));
  CHECK(one["test_log_loss"] == one["best_single"]["test_log_loss"]);
  // top 2: B and A, half each (ties in weight: the lower trial id first): greedy's answer here.
  const json two = run({{"method", "top_k"}, {"k", 2}});
  CHECK(two["members"] == json::array({{{"trial", a}, {"weight", 0.5}}, {{"trial", b}, {"weight", 0.5}}}));
  CHECK(two["val_log_loss"].get<double>() == doctest::Approx(0.4904).epsilon(1e-3));
  // weighted: log loss fitted on the simplex, at least as low as any fixed mix; C gets almost
  // nothing, A and B most of it, and the weights listed add up to 1.
  const json w = run({{"method", "weighted"}});
  CHECK(w["method"] == "weighted");
  CHECK(w["val_log_loss"].get<double>() <= two["val_log_loss"].get<double>() + 1e-9);
  double total = 0, weight_c = 0;
  for (const auto& m : w["members"]) {
    total += m["weight"].get<double>();
    if (m["trial"] == cc) weight_c = m["weight"].get<double>();
  }
  CHECK(total == doctest::Approx(1.0));
  CHECK(weight_c < 0.05);
  CHECK(w["members"][0]["weight"].get<double>() >= w["members"][1]["weight"].get<double>());  // descending
}

TEST_CASE("ensemble stage: members whose rows do not line up, and artifacts outside the trial, are errors naming them") {
  SUBCASE("other validation images") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.5);
    c.predictions(a, kA);
    c.predictions(b, kB, false, 1, {11, 42, 7, 4});
    auto stage = ensemble_stage({{"method", "greedy"}});
    require_ok(stage->begin(c.ctx()));
    auto r = stage->finish(c.ctx());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kFailed);
    CHECK(r.error().message() == "ensemble 'blend': member trial " + std::to_string(b) + " is refused: its " +
                                     "predictions do not line up with trial " + std::to_string(a) + "'s: " +
                                     "validation row 3: image (val_indices) 4, not 3; every member must hold out " +
                                     "the same validation images (one trainer.data_seed; a program draws them from " +
                                     "HPCTUNE_DATA_SEED) and predict the same test set");
  }
  SUBCASE("other labels: the member and the first row that differs are named") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.5), cc = c.trial(c.tune, 2, 0.4);
    c.predictions(a, kA);
    c.predictions(b, kB);
    c.predictions(cc, kC, false, 1, kValIndices, {0, 0, 1, 1});
    auto stage = ensemble_stage({{"method", "top_k"}, {"k", 2}});
    require_ok(stage->begin(c.ctx()));
    auto r = stage->finish(c.ctx());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kFailed);
    CHECK(r.error().message().find("member trial " + std::to_string(cc) + " is refused: its predictions do not " +
                                   "line up with trial " + std::to_string(a) + "'s: validation row 2: label 1, " +
                                   "not 0;") != std::string::npos);
  }
  SUBCASE("other test labels: the test row is named") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.5);
    c.predictions(a, kA);
    c.predictions(b, kB, false, 1, kValIndices, kValLabels, {0, 0, 0});
    auto stage = ensemble_stage({{"method", "greedy"}});
    require_ok(stage->begin(c.ctx()));
    auto r = stage->finish(c.ctx());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("member trial " + std::to_string(b) + " is refused: its predictions do not " +
                                   "line up with trial " + std::to_string(a) + "'s: test row 1: label 0, not 1;") !=
          std::string::npos);
  }
  SUBCASE("an artifact path outside the trial's directory") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5);
    c.predictions(a, kA);
    // The latest attempt's files are the ones read; its val_probs points out of the trial.
    for (const std::string kind : {"val_probs", "test_probs", "val_indices", "val_labels", "test_labels"})
      require_ok(c.db->add_artifact(a, 2, kind, kind == "val_probs" ? "../../../etc/passwd" : kind + ".npy", 10, c.t));
    auto stage = ensemble_stage({{"method", "greedy"}});
    auto st = stage->begin(c.ctx());
    REQUIRE_FALSE(st.ok());
    // A relative path is relative to the trial's directory; the store gives it spelled from there.
    const std::string dir = c.run_dir + "/" + std::to_string(a);
    CHECK(st.error().message() == "ensemble 'blend': trial " + std::to_string(a) + "'s val_probs artifact " + dir +
                                      "/../../../etc/passwd is outside its trial directory " + dir);
  }
}

// Regression: targets y; A errs by +e and B by -e (equal and opposite), C by +2 everywhere. Any
// blend of A and B half each is exactly y: greedy, top_k (2) and weighted all reach MSE ~0 with
// weights 0.5 / 0.5. A and B tie on validation MSE (the loss the blend minimises); the trials report
// val_accuracy 0.5, 0.6, 0.4, which breaks the tie: the best single member is B, whose MSEs are the
// mean of e^2: 0.390625 on validation, 0.18667 on test.
namespace {
const std::vector<float> kValY = {1, 2, 3, 4}, kTestY = {5, 6, 7};
const std::vector<float> kValE = {0.5f, -0.5f, 0.25f, 1}, kTestE = {0.2f, 0.4f, -0.6f};
std::vector<float> shifted(const std::vector<float>& y, const std::vector<float>& e, float factor, float offset) {
  std::vector<float> out;
  for (std::size_t i = 0; i < y.size(); ++i) out.push_back(y[i] + factor * e[i] + offset);
  return out;
}
}  // namespace

// A program's prediction files (a command trainer's): in the trial directory, recorded as no
// artifact, probabilities as float64 and labels as int32 (NumPy's defaults for such arrays), and no
// val_indices.npy.
void program_predictions(const std::string& run_dir, int64_t trial_id, const Member& m,
                         std::vector<int32_t> val_labels = {0, 0, 0, 0}) {
  const std::string d = run_dir + "/" + std::to_string(trial_id);
  std::filesystem::create_directories(d);
  for (const auto& [name, p0] : {std::pair<const char*, const std::vector<double>*>{"val_probs", &m.val0},
                                 {"test_probs", &m.test0}}) {
    std::vector<double> values;
    for (double x : *p0) values.push_back(x), values.push_back(1 - x);
    std::string shape = "(";  // appended: GCC 12 warns falsely on "..." + ... (-Wrestrict, PR 105329)
    shape.append(std::to_string(p0->size())).append(", 2)");
    require_ok(npy_detail::write(d + "/" + name + ".npy", "<f8", shape, values.data(), values.size() * sizeof(double)));
  }
  const std::vector<int32_t> test_labels = {0, 1, 0};
  for (const auto& [name, labels] : {std::pair<const char*, const std::vector<int32_t>*>{"val_labels", &val_labels},
                                     {"test_labels", &test_labels}}) {
    std::string shape = "(";
    shape.append(std::to_string(labels->size())).append(",)");
    require_ok(npy_detail::write(d + "/" + name + ".npy", "<i4", shape, labels->data(), labels->size() * sizeof(int32_t)));
  }
}

TEST_CASE("ensemble stage: a program's prediction files in its trial directory (no artifacts, NumPy's dtypes, no val_indices)") {
  SUBCASE("blended as the trainers' are") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.6), cc = c.trial(c.tune, 2, 0.4);
    program_predictions(c.run_dir, a, kA);
    program_predictions(c.run_dir, b, kB);
    program_predictions(c.run_dir, cc, kC);
    auto stage = ensemble_stage({{"method", "greedy"}, {"max_size", 2}});
    require_ok(stage->begin(c.ctx()));
    auto r = stage->finish(c.ctx());
    require_ok(r);
    CHECK((*r)["candidates"] == 3);
    CHECK((*r)["members"] == json::array({{{"trial", a}, {"weight", 0.5}}, {{"trial", b}, {"weight", 0.5}}}));
  }
  SUBCASE("labels that differ: the member and the row are named") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.6);
    program_predictions(c.run_dir, a, kA);
    program_predictions(c.run_dir, b, kB, {0, 0, 0, 1});
    auto stage = ensemble_stage({{"method", "greedy"}});
    require_ok(stage->begin(c.ctx()));
    auto r = stage->finish(c.ctx());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("member trial " + std::to_string(b) + " is refused: its predictions do not line " +
                                   "up with trial " + std::to_string(a) + "'s: validation row 3: label 1, not 0;") !=
          std::string::npos);
  }
  SUBCASE("logits or scores instead of probabilities, and a label that is no class: the trial, file and row named") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.6);
    program_predictions(c.run_dir, a, kA);
    program_predictions(c.run_dir, b, kB);
    const std::string d = c.run_dir + "/" + std::to_string(b);
    auto stage = ensemble_stage({{"method", "greedy"}});
    auto finish = [&] {
      require_ok(stage->begin(c.ctx()));
      auto r = stage->finish(c.ctx());
      REQUIRE_FALSE(r.ok());
      return r.error().message();
    };
    SUBCASE("logits") {
      const std::vector<double> logits = {2.5, -1.0, 0.1, 0.3, 1.0, 0.0, 0.2, 0.8};  // row 0 holds -1
      require_ok(npy_detail::write(d + "/val_probs.npy", "<f8", "(4, 2)", logits.data(), logits.size() * sizeof(double)));
      const std::string m = finish();
      CHECK_MESSAGE(m.find("trial " + std::to_string(b) + "'s " + d + "/val_probs.npy: row 0 holds 2.5 in column 0") !=
                        std::string::npos, m);
      CHECK(m.find("not logits or scores") != std::string::npos);
    }
    SUBCASE("scores in [0, 1] that are not a distribution") {
      const std::vector<float> scores = {0.5f, 0.5f, 0.9f, 0.8f, 0.5f, 0.5f, 0.5f, 0.5f};  // row 1 sums to 1.7
      require_ok(npy_detail::write(d + "/val_probs.npy", "<f4", "(4, 2)", scores.data(), scores.size() * sizeof(float)));
      const std::string m = finish();
      CHECK_MESSAGE(m.find("val_probs.npy: row 1 sums to 1.7") != std::string::npos, m);
    }
    SUBCASE("a label past the classes, and one beyond an int's range") {
      for (const int64_t label : {int64_t{2}, (int64_t{1} << 32) + 1}) {
        CAPTURE(label);
        const std::vector<int64_t> labels = {0, 1, label};
        require_ok(npy_detail::write(d + "/test_labels.npy", "<i8", "(3,)", labels.data(), labels.size() * sizeof(int64_t)));
        const std::string m = finish();
        CHECK_MESSAGE(m.find("test_labels.npy: row 2 is label " + std::to_string(label) + ", not one of the 2 classes") !=
                          std::string::npos, m);
      }
    }
  }
  SUBCASE("a member whose predictions hold NaN (its training diverged) is left out and named; the others blend") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.6), cc = c.trial(c.tune, 2, 0.4);
    program_predictions(c.run_dir, a, kA);
    program_predictions(c.run_dir, b, kB);
    program_predictions(c.run_dir, cc, kC);
    const std::string d = c.run_dir + "/" + std::to_string(b);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> diverged = {0.5, 0.5, 0.5, 0.5, nan, nan, 0.5, 0.5};
    require_ok(npy_detail::write(d + "/val_probs.npy", "<f8", "(4, 2)", diverged.data(), diverged.size() * sizeof(double)));
    auto stage = ensemble_stage({{"method", "greedy"}, {"max_size", 2}});
    require_ok(stage->begin(c.ctx()));
    auto r = stage->finish(c.ctx());
    require_ok(r);
    CHECK((*r)["candidates"] == 2);
    REQUIRE((*r)["left_out"].size() == 1);
    CHECK((*r)["left_out"][0]["trial"] == b);
    CHECK((*r)["left_out"][0]["reason"] == "its " + d + "/val_probs.npy holds NaN in row 2 (a training that diverged)");
    for (const auto& m : (*r)["members"]) CHECK(m["trial"] != b);
    // Every member diverged: the stage fails naming the first.
    for (const int64_t t : {a, cc})
      require_ok(npy_detail::write(c.run_dir + "/" + std::to_string(t) + "/test_probs.npy", "<f8", "(3, 2)", diverged.data(),
                                   6 * sizeof(double)));
    auto none = ensemble_stage({{"method", "greedy"}});
    require_ok(none->begin(c.ctx()));
    auto failed = none->finish(c.ctx());
    REQUIRE_FALSE(failed.ok());
    CHECK_MESSAGE(failed.error().message().find("every member was left out; the first, trial " + std::to_string(a) +
                                                ": its ") != std::string::npos, failed.error().message());
  }
  SUBCASE("a file that is a link planted in the trial directory is refused, naming it") {
    Campaign c;
    const int64_t a = c.trial(c.tune, 0, 0.5);
    program_predictions(c.run_dir, a, kA);
    const std::string d = c.run_dir + "/" + std::to_string(a);
    std::filesystem::rename(d + "/val_probs.npy", c.dir.file("elsewhere.npy"));
    std::filesystem::create_symlink(c.dir.file("elsewhere.npy"), d + "/val_probs.npy");
    auto stage = ensemble_stage({{"method", "greedy"}});
    auto begun = stage->begin(c.ctx());
    REQUIRE_FALSE(begun.ok());
    CHECK(begun.error().message().find("ensemble 'blend': trial " + std::to_string(a) + "'s " + d +
                                       "/val_probs.npy is refused") != std::string::npos);
  }
}

TEST_CASE("ensemble stage, task regression: greedy, top_k and weighted blend by MSE to the known answer") {
  Campaign c;
  const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.6), cc = c.trial(c.tune, 2, 0.4);
  c.regression(a, shifted(kValY, kValE, 1, 0), shifted(kTestY, kTestE, 1, 0), kValY, kTestY);
  c.regression(b, shifted(kValY, kValE, -1, 0), shifted(kTestY, kTestE, -1, 0), kValY, kTestY);
  c.regression(cc, shifted(kValY, kValE, 0, 2), shifted(kTestY, kTestE, 0, 2), kValY, kTestY);
  const auto ctx = c.ctx();
  auto run = [&](json settings) {
    settings["task"] = "regression";
    auto stage = ensemble_stage(std::move(settings));
    require_ok(stage->begin(ctx));
    auto r = stage->finish(ctx);
    require_ok(r);
    return *r;
  };
  const double val_e2 = (0.25 + 0.25 + 0.0625 + 1) / 4, test_e2 = (0.04 + 0.16 + 0.36) / 3;
  for (const std::string method : {"greedy", "top_k", "weighted"}) {
    CAPTURE(method);
    const json r = run({{"method", method}, {"max_size", 2}, {"k", 2}});
    CHECK(r["task"] == "regression");
    CHECK(r["method"] == method);
    CHECK(r["candidates"] == 3);
    std::map<int64_t, double> weight;  // by trial (the list is heaviest first)
    for (const auto& m : r["members"]) weight[m["trial"].get<int64_t>()] = m["weight"].get<double>();
    CHECK(weight[a] == doctest::Approx(0.5).epsilon(1e-3));
    CHECK(weight[b] == doctest::Approx(0.5).epsilon(1e-3));
    CHECK(weight[cc] < 1e-3);
    CHECK(r["val_mse"].get<double>() < 1e-6);
    CHECK(r["test_mse"].get<double>() < 1e-6);
    CHECK(r["best_single"]["trial"] == b);
    CHECK(r["best_single"]["val_mse"].get<double>() == doctest::Approx(val_e2).epsilon(1e-6));
    CHECK(r["best_single"]["test_mse"].get<double>() == doctest::Approx(test_e2).epsilon(1e-6));
    CHECK_FALSE(r.contains("test_accuracy"));
    // The blend's predictions are written as rows x outputs.
    std::vector<int64_t> dims;
    const auto test_pred = read_f64(r["files"]["test_pred"].get<std::string>(), dims);
    CHECK(dims == std::vector<int64_t>{3, 1});
    for (std::size_t i = 0; i < 3; ++i) CHECK(test_pred[i] == doctest::Approx(kTestY[i]).epsilon(1e-3));
  }
  // Exactly: greedy and top_k give half each (the weighted fit converges to it).
  CHECK(run({{"method", "greedy"}, {"max_size", 2}})["members"] ==
        json::array({{{"trial", a}, {"weight", 0.5}}, {{"trial", b}, {"weight", 0.5}}}));
  CHECK(run({{"method", "top_k"}, {"k", 2}})["members"] ==
        json::array({{{"trial", a}, {"weight", 0.5}}, {{"trial", b}, {"weight", 0.5}}}));
}

TEST_CASE("ensemble stage, task regression: a member whose targets differ is refused, naming it and the row") {
  Campaign c;
  const int64_t a = c.trial(c.tune, 0, 0.5), b = c.trial(c.tune, 1, 0.6);
  c.regression(a, kValY, kTestY, kValY, kTestY);
  c.regression(b, kValY, kTestY, kValY, {5, 6, 8});
  auto stage = ensemble_stage({{"task", "regression"}});
  require_ok(stage->begin(c.ctx()));
  auto r = stage->finish(c.ctx());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("member trial " + std::to_string(b) + " is refused: its predictions do not line " +
                                 "up with trial " + std::to_string(a) + "'s: test row 2: target 8, not 7;") != std::string::npos);
  // Classification files alone are not a regression member: none of the trials saved predictions.
  Campaign d;
  const int64_t x = d.trial(d.tune, 0, 0.5);
  d.predictions(x, kA);
  auto s2 = ensemble_stage({{"task", "regression"}});
  CHECK_FALSE(s2->begin(d.ctx()).ok());
}

TEST_CASE("ensemble stage: inputs without predictions fail with the stage and the setting named") {
  Campaign c;
  for (int64_t i = 0; i < 3; ++i) c.trial(c.tune, i, 0.5);
  c.trial(c.tune, 3, 0.5, TrialState::kPruned);
  auto stage = ensemble_stage({{"method", "greedy"}});
  auto st = stage->begin(c.ctx());
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == Errc::kFailed);
  CHECK(st.error().message() ==
        "ensemble 'blend': none of the 3 done trials of stage 'tune' saved predictions (trainer.save_predictions; a program writes them into its "
          "HPCTUNE_TRIAL_DIR)");
  auto r = stage->finish(c.ctx());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message() == st.error().message());
  // No done trial at all.
  Campaign empty;
  auto none = ensemble_stage({{"method", "greedy"}})->begin(empty.ctx());
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message() == "ensemble 'blend': stage 'tune' finished no trial (no done trials to blend)");
  // Settings out of range are config errors naming the stage.
  const auto cfg = campaign_config({{"method", "best"}});
  auto bad = workflow::make_stage({"blend", "ensemble", {"tune"}, 1}, cfg, std::nullopt);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kConfig);
  CHECK(bad.error().message() == "stage 'blend': method: must be one of greedy, top_k, weighted, got \"best\"");
}

TEST_CASE("ensemble stage, retrain: the top k configurations under n new seeds, with lineage, across a restart") {
  Campaign c;
  // val_accuracy: trial 2 best, then 0, then 1 and 3 (which has no predictions: it is still
  // retrained, its configuration being among the best).
  const int64_t t0 = c.trial(c.tune, 0, 0.7), t1 = c.trial(c.tune, 1, 0.5), t2 = c.trial(c.tune, 2, 0.8);
  c.trial(c.tune, 3, 0.6);
  c.predictions(t0, kA);
  c.predictions(t1, kB);
  c.predictions(t2, kC);
  const json settings = {{"method", "greedy"}, {"max_size", 2}, {"retrain", {{"top", 2}, {"seeds", 3}}}};
  auto stage = ensemble_stage(settings);
  REQUIRE(stage->source() != nullptr);
  CHECK(stage->source()->kind() == "ensemble");
  CHECK(stage->max_trials() == 6);
  // Retrained members train as the input stage's trials did, saving their predictions.
  CHECK(stage->trainer() == json{{"kind", "mlp"}, {"epochs", 5}, {"save_predictions", true}});
  CHECK_FALSE(stage->source()->ask(6).ok());  // not before begin()
  require_ok(stage->begin(c.ctx()));
  auto asked = stage->source()->ask(100);
  require_ok(asked);
  REQUIRE(asked->size() == 6);
  CHECK(stage->source()->exhausted());
  auto trial_params = [&](int64_t id) { return (*c.db->trial(id))->params; };
  std::set<uint64_t> seeds;
  for (std::size_t i = 0; i < 6; ++i) {
    const auto& s = (*asked)[i];
    const int64_t source = i < 3 ? t2 : t0;
    CHECK(s.seq == static_cast<int64_t>(i));
    CHECK(s.params == trial_params(source));
    CHECK(s.meta["lineage"] == json::array({{{"trial", source}, {"relation", "retrain_of"}}}));
    REQUIRE(s.meta["seed"].is_number_unsigned());
    seeds.insert(s.meta["seed"].get<uint64_t>());
  }
  CHECK(seeds.size() == 6);  // every retrained member its own seed
  // The seeds derive from the campaign's seed: a stage built again proposes the same.
  auto again = ensemble_stage(settings);
  require_ok(again->begin(c.ctx()));
  auto same = again->source()->ask(6);
  require_ok(same);
  for (std::size_t i = 0; i < 6; ++i) CHECK((*same)[i].meta == (*asked)[i].meta);

  // A restarted master hands back the recorded suggestions 0, 2 and 3 (before or after begin()):
  // only 1, 4 and 5 are proposed.
  for (bool restore_first : {true, false}) {
    CAPTURE(restore_first);
    auto resumed = ensemble_stage(settings);
    std::vector<search::Record> history;
    for (int64_t seq : {0, 2, 3}) history.push_back({(*asked)[static_cast<std::size_t>(seq)], std::nullopt});
    if (restore_first) resumed->source()->restore(history);
    require_ok(resumed->begin(c.ctx()));
    if (!restore_first) resumed->source()->restore(history);
    CHECK_FALSE(resumed->source()->exhausted());
    auto first = resumed->source()->ask(2);
    require_ok(first);
    auto rest = resumed->source()->ask(10);
    require_ok(rest);
    REQUIRE(first->size() == 2);
    REQUIRE(rest->size() == 1);
    CHECK((*first)[0].seq == 1);
    CHECK((*first)[1].seq == 4);
    CHECK((*rest)[0].seq == 5);
    CHECK((*rest)[0].meta == (*asked)[5].meta);
    CHECK(resumed->source()->exhausted());
    auto nothing = resumed->source()->ask(10);
    require_ok(nothing);
    CHECK(nothing->empty());
  }

  // The retrained trials (of this stage) join the originals as members; the result says which.
  const int64_t r0 = c.trial(c.blend, 0, 0.9, TrialState::kDone, (*asked)[0].meta);
  const int64_t r1 = c.trial(c.blend, 1, 0.9, TrialState::kDone, (*asked)[1].meta);
  c.trial(c.blend, 3, 0.9, TrialState::kDone, (*asked)[3].meta);  // saved nothing: skipped
  c.predictions(r0, kA);
  c.predictions(r1, kB);
  auto result = stage->finish(c.ctx());
  require_ok(result);
  CHECK((*result)["candidates"] == 5);
  CHECK((*result)["retrained"] == 2);
  CHECK((*result)["skipped"] == 2);  // input trial 3 and the retrained seq 3
  // Greedy's two picks: B (t1, the first of the equal B's) then A (t0): originals, no retrain_of.
  CHECK((*result)["members"] == json::array({{{"trial", t0}, {"weight", 0.5}}, {{"trial", t1}, {"weight", 0.5}}}));
  // With top 5 every candidate is a member, and the retrained ones name their source.
  auto all = ensemble_stage({{"method", "top_k"}, {"k", 5}, {"retrain", {{"top", 2}, {"seeds", 3}}}});
  require_ok(all->begin(c.ctx()));
  auto every = all->finish(c.ctx());
  require_ok(every);
  int retrained = 0;
  for (const auto& m : (*every)["members"]) {
    if (m["trial"] == r0 || m["trial"] == r1) {
      CHECK(m["retrain_of"] == t2);
      ++retrained;
    } else {
      CHECK_FALSE(m.contains("retrain_of"));
    }
  }
  CHECK(retrained == 2);
  // The best single member by validation log loss: r1 (B's predictions) has the lowest.
  CHECK((*every)["best_single"]["trial"] == r1);
}
