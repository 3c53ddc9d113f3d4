// The transfer stage (workflow/transfer_stage.h) driven directly: a store in a temp dir with a
// source stage of hand-made done trials (params, objective, fake checkpoint files), then begin(),
// ask(), tell(), restore() and finish() as the master calls them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/rng.h"
#include "config/config.h"
#include "scheduler/stages.h"
#include "search/space.h"
#include "store/store.h"
#include "temp_dir.h"
#include "workflow/stages.h"
#include "workflow/transfer_stage.h"
#include "stage_fixture.h"

using namespace hpctune;
using json = nlohmann::json;
using store::TrialState;
namespace fs = std::filesystem;

namespace {

using hpctune::testing::require_ok;

void touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << "fake checkpoint";
}

// A trial recorded done (or failed) with `metrics`; its objective is metrics["val_accuracy"].
int64_t add_trial(store::Store& db, int64_t campaign, int64_t stage, int64_t seq, const json& params, const json& meta,
                  const json& metrics, TrialState state = TrialState::kDone) {
  store::TrialRow row;
  row.campaign_id = campaign;
  row.stage_id = stage;
  row.seq = seq;
  row.params = params;
  row.meta = meta;
  row.created_at = 100;
  auto id = db.insert_trial(row);
  require_ok(id);
  require_ok(db.mark_assigned(*id, 1, 0, 1, 101));
  require_ok(db.mark_running(*id, 1, 101));
  std::optional<double> objective;
  if (metrics.contains("val_accuracy")) objective = metrics["val_accuracy"].get<double>();
  require_ok(db.finish_trial(*id, 1, state, metrics, objective, 3, state == TrialState::kFailed ? "boom" : "", 102));
  return *id;
}

// A campaign with a search stage "tune" of five finished trials:
//   seq 0: val 0.80, checkpoint in its trial directory        (run_dir/<id>/checkpoint-stage0.bin)
//   seq 1: val 0.90, checkpoint artifact elsewhere            (dir/elsewhere/checkpoint-stage0.bin)
//   seq 2: val 0.85, no checkpoint at all                      (never a source)
//   seq 3: val 0.70, checkpoint in its trial directory
//   seq 4: failed (val 0.99 in its metrics, but not done)
// and the transfer stage "move" that reads it.
struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<store::Store> db;
  int64_t campaign = 0, tune = 0, move = 0;
  std::string run_dir;
  std::vector<int64_t> ids;  // the tune trials by seq
  std::string elsewhere;
  config::CampaignConfig cfg;
  std::vector<std::string> logged;

  Fixture() {
    testing::StageStore made(dir.file("c.db"), "t", 7);
    tune = made.add_stage("search", "tune");
    move = made.add_stage("transfer", "move");
    db = std::move(made.db);
    campaign = made.campaign;
    run_dir = dir.file("c.db.trials");
    const double vals[] = {0.80, 0.90, 0.85, 0.70, 0.99};
    for (int seq = 0; seq < 5; ++seq) {
      json params = {{"hidden", json::array({64, 32})}, {"activation", "relu"}, {"lr", 0.01 * (seq + 1)}};
      ids.push_back(add_trial(*db, campaign, tune, seq, params, {{"generation", 0}}, {{"val_accuracy", vals[seq]}},
                              seq == 4 ? TrialState::kFailed : TrialState::kDone));
    }
    touch(run_dir + "/" + std::to_string(ids[0]) + "/checkpoint-stage0.bin");
    elsewhere = dir.file("elsewhere");
    touch(elsewhere + "/checkpoint-stage0.bin");
    require_ok(db->add_artifact(ids[1], 1, "checkpoint", elsewhere + "/checkpoint-stage0.bin", 15, 102));
    touch(run_dir + "/" + std::to_string(ids[3]) + "/checkpoint-stage0.bin");
    touch(run_dir + "/" + std::to_string(ids[4]) + "/checkpoint-stage0.bin");

    cfg.name = "t";
    cfg.seed = 7;
    cfg.objectives = {{"val_accuracy", true}};
    cfg.trainer = {{"kind", "mlp"}, {"epochs", 3}, {"classes", json::array()}};
    cfg.algorithm = "random";
    cfg.max_trials = 1;
  }

  scheduler::StageContext ctx() {
    scheduler::StageContext c;
    c.store = db.get();
    c.campaign_id = campaign;
    c.stage_id = move;
    c.inputs = {tune};
    c.run_dir = run_dir;
    c.now = 200;
    c.log = [this](const std::string& line) { logged.push_back(line); };
    return c;
  }

  // The transfer stage's config; `nested` gives it a search of its own over lr (and freeze).
  config::StageConfig stage(json settings, bool nested = false, bool nested_freeze = false,
                            const std::string& algorithm = "random", json search_settings = {{"init", "uniform"}}) const {
    config::StageConfig st;
    st.name = "move";
    st.kind = "transfer";
    st.from = {"tune"};
    st.settings = std::move(settings);
    auto own = std::make_shared<config::CampaignConfig>(cfg);
    if (nested) {
      std::vector<search::ParamSpec> specs(1);
      specs[0].name = "lr";
      specs[0].type = search::ParamType::kFloat;
      specs[0].low = 1e-4;
      specs[0].high = 1e-1;
      specs[0].log = true;
      if (nested_freeze) {
        search::ParamSpec f;
        f.name = "freeze";
        f.type = search::ParamType::kInt;
        f.low = 0;
        f.high = 2;
        specs.push_back(f);
      }
      auto space = search::Space::create(specs);
      require_ok(space);
      own->space = *space;
      own->algorithm = algorithm;
      own->search_settings = std::move(search_settings);
      own->max_trials = 4;
      st.own_search = true;
    }
    st.own = own;
    return st;
  }

  std::unique_ptr<scheduler::StageRuntime> make(const config::StageConfig& st) const {
    auto made = workflow::make_transfer_stage(st, cfg);
    require_ok(made);
    return std::move(made).value();
  }
};

std::vector<search::Suggestion> ask(scheduler::StageRuntime& stage, std::size_t n) {
  auto got = stage.source()->ask(n);
  require_ok(got);
  return std::move(got).value();
}

int64_t lineage_of(const search::Suggestion& s) {
  REQUIRE(s.meta.contains("lineage"));
  REQUIRE(s.meta["lineage"].size() == 1);
  CHECK(s.meta["lineage"][0]["relation"] == "transfer_source");
  return s.meta["lineage"][0]["trial"].get<int64_t>();
}

search::Observation observed(const search::Suggestion& s, double val) {
  search::Observation o;
  o.seq = s.seq;
  o.params = s.params;
  o.values = {val};
  o.step = 3;
  return o;
}

}  // namespace

TEST_CASE("transfer: the sources are the best done trials with checkpoints, by the objective") {
  Fixture f;
  auto stage = f.make(f.stage({{"sources", 2}, {"seeds", 1}, {"freeze", 1}}));
  CHECK(stage->max_trials() == 2);
  CHECK(stage->source()->kind() == "transfer");
  // Before begin() (its inputs incomplete) it proposes nothing, and is not exhausted.
  CHECK(ask(*stage, 4).empty());
  CHECK_FALSE(stage->source()->exhausted());
  require_ok(stage->begin(f.ctx()));
  auto trials = ask(*stage, 10);
  REQUIRE(trials.size() == 2);
  CHECK(stage->source()->exhausted());
  // 0.99 failed, 0.90 is first (its checkpoint an artifact), 0.85 has no checkpoint, then 0.80.
  CHECK(lineage_of(trials[0]) == f.ids[1]);
  CHECK(lineage_of(trials[1]) == f.ids[0]);
  CHECK(trials[0].params["init_from"] == fs::absolute(f.elsewhere).lexically_normal().string());
  CHECK(trials[1].params["init_from"] == f.run_dir + "/" + std::to_string(f.ids[0]));
  // The source's architecture and settings, plus init_from and freeze.
  CHECK(trials[0].params["hidden"] == json::array({64, 32}));
  CHECK(trials[0].params["activation"] == "relu");
  CHECK(trials[0].params["lr"].get<double>() == doctest::Approx(0.02));
  CHECK(trials[1].params["lr"].get<double>() == doctest::Approx(0.01));
  CHECK(trials[0].params["freeze"] == 1);
  CHECK(trials[0].params.size() == 5);
  CHECK(trials[0].seq == 0);
  CHECK(trials[1].seq == 1);
  for (const auto& t : trials) {
    CHECK(t.meta["role"] == "target");
    CHECK(t.meta["seed"].is_number_unsigned());
  }
  CHECK(trials[0].meta["seed"] != trials[1].meta["seed"]);
  CHECK(trials[0].meta["source"] == 0);
  CHECK(trials[1].meta["source"] == 1);
  CHECK(stage->source()->state()["sources"] == json::array({f.ids[1], f.ids[0]}));

  SUBCASE("the stage's own trainer keys are its fine-tuning: they win over the source's searched values") {
    config::StageConfig st = f.stage({{"sources", 2}, {"seeds", 1}});
    st.trainer_keys = {"lr", "epochs"};
    auto tuned = f.make(st);
    require_ok(tuned->begin(f.ctx()));
    auto t = ask(*tuned, 2);
    REQUIRE(t.size() == 2);
    for (const auto& trial : t) {
      CHECK_FALSE(trial.params.contains("lr"));  // the stage's trainer.lr applies
      CHECK(trial.params["hidden"] == json::array({64, 32}));  // the architecture stays the source's
      CHECK(trial.params["activation"] == "relu");
    }
  }

  SUBCASE("a minimized objective takes the lowest") {
    f.cfg.objectives = {{"val_accuracy", false}};
    auto low = f.make(f.stage({{"sources", 1}}));
    require_ok(low->begin(f.ctx()));
    auto t = ask(*low, 3);
    REQUIRE(t.size() == 1);
    CHECK(lineage_of(t[0]) == f.ids[3]);
  }
}

TEST_CASE("transfer: baseline twins share the seed and the params, without init_from and frozen layers") {
  Fixture f;
  const json settings = {{"sources", 1},          {"seeds", 2},
                         {"freeze", 2},           {"baseline", true},
                         {"classes", {5, 6, 7}}, {"max_train_samples", 500}};
  auto stage = f.make(f.stage(settings));
  CHECK(stage->max_trials() == 4);
  // The trials' trainer: the stage's, with the target data.
  const json trainer = stage->trainer();
  CHECK(trainer["kind"] == "mlp");
  CHECK(trainer["epochs"] == 3);
  CHECK(trainer["classes"] == json::array({5, 6, 7}));
  CHECK(trainer["max_train_samples"] == 500);
  require_ok(stage->begin(f.ctx()));
  auto trials = ask(*stage, 10);
  REQUIRE(trials.size() == 4);
  for (int i = 0; i < 2; ++i) {
    const auto& target = trials[2 * i];
    const auto& twin = trials[2 * i + 1];
    CHECK(target.seq == 2 * i);
    CHECK(twin.seq == 2 * i + 1);
    CHECK(target.meta["role"] == "target");
    CHECK(lineage_of(target) == f.ids[1]);
    CHECK(target.params["freeze"] == 2);
    // freeze is the stage's setting, not a searched value: the views show it as a run setting
    // (classes and max_train_samples are the mlp's settings here, not parameters).
    CHECK(target.meta["stage_settings"] == json::array({"freeze"}));
    CHECK(twin.meta["stage_settings"] == json::array({"freeze"}));
    CHECK(twin.meta["role"] == "baseline");
    CHECK(twin.meta["baseline_of"] == target.seq);
    CHECK(twin.meta["seed"] == target.meta["seed"]);
    CHECK_FALSE(twin.meta.contains("lineage"));
    CHECK_FALSE(twin.params.contains("init_from"));
    CHECK(twin.params["freeze"] == 0);
    json expected = target.params;
    expected.erase("init_from");
    expected["freeze"] = 0;
    CHECK(twin.params == expected);
  }
  CHECK(trials[0].meta["seed"] != trials[2].meta["seed"]);
  // The seeds: (campaign seed, stage, target index), the same in any build of the stage.
  auto again = f.make(f.stage(settings));
  require_ok(again->begin(f.ctx()));
  // One at a time: a target's twin waits for the next ask, nothing is lost or reordered.
  std::vector<search::Suggestion> one_by_one;
  for (int i = 0; i < 6; ++i) {
    for (auto& s : ask(*again, 1)) one_by_one.push_back(std::move(s));
  }
  REQUIRE(one_by_one.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(one_by_one[i].seq == trials[i].seq);
    CHECK(one_by_one[i].params == trials[i].params);
    CHECK(one_by_one[i].meta == trials[i].meta);
  }
  CHECK(again->source()->exhausted());
}

TEST_CASE("transfer: twins train every layer at one rate, whatever LP-FT or body rate the targets use") {
  Fixture f;
  auto st = f.stage({{"seeds", 2}, {"baseline", true}, {"classes", {5, 6, 7}}});
  auto own = std::make_shared<config::CampaignConfig>(*st.own);
  own->trainer["head_epochs"] = 2;
  own->trainer["body_lr_scale"] = 0.3;
  st.own = own;
  auto stage = f.make(st);
  CHECK(stage->trainer()["head_epochs"] == 2);  // the targets' refinements come from the trainer
  require_ok(stage->begin(f.ctx()));
  auto trials = ask(*stage, 10);
  REQUIRE(trials.size() == 4);
  for (int i = 0; i < 2; ++i) {
    const auto& target = trials[2 * i];
    const auto& twin = trials[2 * i + 1];
    CHECK_FALSE(target.params.contains("head_epochs"));
    CHECK(twin.params["head_epochs"] == 0);
    CHECK(twin.params["body_lr_scale"] == 1.0);
  }
  // Without them in the trainer the twins' params are the targets' (minus init_from, freeze 0).
  auto plain = f.make(f.stage({{"seeds", 1}, {"baseline", true}}));
  require_ok(plain->begin(f.ctx()));
  auto pair = ask(*plain, 2);
  REQUIRE(pair.size() == 2);
  CHECK_FALSE(pair[1].params.contains("head_epochs"));
  CHECK_FALSE(pair[1].params.contains("body_lr_scale"));
}

TEST_CASE("transfer: a nested search's suggestions go to the sources round-robin") {
  Fixture f;
  auto stage = f.make(f.stage({{"sources", 2}, {"freeze", 1}, {"baseline", true}}, /*nested=*/true));
  CHECK(stage->max_trials() == 8);
  require_ok(stage->begin(f.ctx()));
  auto trials = ask(*stage, 100);
  REQUIRE(trials.size() == 8);
  CHECK(stage->source()->exhausted());
  std::set<double> lrs;
  for (int i = 0; i < 4; ++i) {
    const auto& target = trials[2 * i];
    CHECK(target.meta["role"] == "target");
    CHECK(lineage_of(target) == (i % 2 == 0 ? f.ids[1] : f.ids[0]));
    CHECK(target.meta["source"] == i % 2);
    // The nested search's lr over the source's; the rest of the source's params kept.
    const double lr = target.params["lr"].get<double>();
    CHECK(lr >= 1e-4);
    CHECK(lr <= 1e-1);
    lrs.insert(lr);
    CHECK(target.params["hidden"] == json::array({64, 32}));
    CHECK(target.params["freeze"] == 1);
    CHECK(trials[2 * i + 1].meta["baseline_of"] == target.seq);
    CHECK(trials[2 * i + 1].params["lr"] == target.params["lr"]);
  }
  CHECK(lrs.size() == 4);
  // The outcomes: the nested searcher hears of targets only (a twin is ignored), under its own
  // seqs, with only the params it suggested.
  for (int i = 0; i < 4; ++i) {
    stage->source()->tell(observed(trials[2 * i + 1], 0.99));  // a twin may finish first
    stage->source()->tell(observed(trials[2 * i], 0.5 + 0.1 * i));
  }
  const json searched = stage->source()->state()["search"];
  CHECK(searched["observed"] == 4);
  CHECK(searched["best"]["seq"] == 3);
  CHECK(searched["best"]["value"].get<double>() == doctest::Approx(0.8));
  CHECK(searched["best"]["params"] == json{{"lr", trials[6].params["lr"]}});

  SUBCASE("freeze searched by the nested search wins over the setting; baselines still train every layer") {
    auto searched = f.make(f.stage({{"sources", 1}, {"freeze", 1}, {"baseline", true}}, true, /*nested_freeze=*/true));
    require_ok(searched->begin(f.ctx()));
    auto t = ask(*searched, 100);
    REQUIRE(t.size() == 8);
    std::set<int64_t> freezes;
    for (int i = 0; i < 4; ++i) {
      freezes.insert(t[2 * i].params["freeze"].get<int64_t>());
      CHECK(t[2 * i + 1].params["freeze"] == 0);
    }
    CHECK(freezes.size() >= 2);  // drawn, not the setting's 1 everywhere
  }
}

TEST_CASE("transfer: a genetic nested search breeds from targets, its parents named by the stage's seqs") {
  Fixture f;
  const json ga = {{"population", 2}, {"elitism", 0}, {"init", "uniform"}, {"mutation_rate", 1.0}};
  const json settings = {{"sources", 1}, {"baseline", true}};
  auto stage = f.make(f.stage(settings, true, false, "genetic", ga));
  require_ok(stage->begin(f.ctx()));
  auto gen0 = ask(*stage, 100);
  REQUIRE(gen0.size() == 4);  // two targets (seqs 0 and 2), each with its twin
  CHECK(ask(*stage, 100).empty());  // the next generation waits for the first
  CHECK_FALSE(stage->source()->exhausted());
  const double values[] = {0.1, 0.95, 0.9, 0.1};  // target 1 is the best; a twin's 0.95 is not the search's
  for (std::size_t i = 0; i < 4; ++i) stage->source()->tell(observed(gen0[i], values[i]));
  auto gen1 = ask(*stage, 100);
  REQUIRE(gen1.size() == 4);
  CHECK(stage->source()->exhausted());
  std::set<int64_t> parents;
  for (std::size_t i : {0u, 2u}) {
    CHECK(gen1[i].meta["generation"] == 1);
    CHECK(gen1[i].meta["role"] == "target");
    for (const json& p : gen1[i].meta["parents"]) parents.insert(p.get<int64_t>());
    CHECK(gen1[i + 1].meta["baseline_of"] == gen1[i].seq);
  }
  CHECK_FALSE(parents.empty());
  for (int64_t p : parents) CHECK((p == 0 || p == 2));  // targets' seqs, never a twin's
  CHECK(parents.count(2) == 1);  // the nested searcher's seq 1 is the stage's seq 2

  // Resumed after gen 0 and one target of gen 1 were recorded: the rest, as uninterrupted.
  std::vector<search::Record> history;
  for (std::size_t i = 0; i < 4; ++i) history.push_back({gen0[i], observed(gen0[i], values[i])});
  history.push_back({gen1[0], std::nullopt});
  auto resumed = f.make(f.stage(settings, true, false, "genetic", ga));
  resumed->source()->restore(history);
  require_ok(resumed->begin(f.ctx()));
  auto rest = ask(*resumed, 100);
  REQUIRE(rest.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(rest[i].seq == gen1[i + 1].seq);
    CHECK(rest[i].params == gen1[i + 1].params);
    CHECK(rest[i].meta == gen1[i + 1].meta);
  }
}

TEST_CASE("transfer: restore after some trials were recorded proposes only the rest") {
  Fixture f;
  for (bool nested : {false, true}) {
    CAPTURE(nested);
    const json settings = {{"sources", 2}, {"seeds", 2}, {"baseline", true}};
    // The uninterrupted stage: every trial.
    auto whole = f.make(f.stage(settings, nested));
    require_ok(whole->begin(f.ctx()));
    auto all = ask(*whole, 100);
    REQUIRE(all.size() == 8);
    // A stage that recorded three (target 0 and its twin finished, target 1 queued), then died.
    auto first = f.make(f.stage(settings, nested));
    require_ok(first->begin(f.ctx()));
    auto early = ask(*first, 3);
    REQUIRE(early.size() == 3);
    std::vector<search::Record> history;
    for (std::size_t i = 0; i < early.size(); ++i) {
      CHECK(early[i].params == all[i].params);
      search::Record r;
      r.suggestion = early[i];
      if (i < 2) r.observation = observed(early[i], 0.6);
      history.push_back(r);
    }
    // The resumed master: restore (before begin, as the master does), then begin again.
    auto resumed = f.make(f.stage(settings, nested));
    resumed->source()->restore(history);
    CHECK_FALSE(resumed->source()->exhausted());
    auto ctx = f.ctx();
    ctx.resuming = true;
    require_ok(resumed->begin(ctx));
    auto rest = ask(*resumed, 100);
    REQUIRE(rest.size() == 5);
    CHECK(resumed->source()->exhausted());
    // First the twin of the queued target, then the rest, exactly as the uninterrupted stage.
    CHECK(rest[0].meta["role"] == "baseline");
    CHECK(rest[0].meta["baseline_of"] == 2);
    for (std::size_t i = 0; i < rest.size(); ++i) {
      CHECK(rest[i].seq == all[i + 3].seq);
      CHECK(rest[i].params == all[i + 3].params);
      CHECK(rest[i].meta == all[i + 3].meta);
    }
    CHECK(resumed->source()->state()["targets"] == 4);
    if (nested) {
      // Told again of target 0 only (its twin's outcome is not the nested search's).
      CHECK(resumed->source()->state()["search"]["observed"] == 1);
      CHECK(resumed->source()->state()["search"]["best"]["params"] == json{{"lr", early[0].params["lr"]}});
    }
    CHECK(resumed->source()->state()["baselines"] == 4);
  }
}

TEST_CASE("transfer: no usable source is an error naming the stage and why") {
  Fixture f;
  SUBCASE("no done trial has a checkpoint") {
    for (int64_t id : {f.ids[0], f.ids[3]}) fs::remove_all(f.run_dir + "/" + std::to_string(id));
    fs::remove_all(f.elsewhere);
    auto stage = f.make(f.stage({{"sources", 2}}));
    auto begun = stage->begin(f.ctx());
    REQUIRE_FALSE(begun.ok());
    CHECK(begun.error().code() == Errc::kFailed);
    const std::string msg = begun.error().message();
    CHECK(msg.find("stage 'move'") != std::string::npos);
    CHECK(msg.find("no source") != std::string::npos);
    CHECK(msg.find("none of the 4 done trials of stage 'tune' has a checkpoint") != std::string::npos);
    CHECK(ask(*stage, 3).empty());
  }
  SUBCASE("the input stage finished no trial") {
    auto ctx = f.ctx();
    ctx.inputs = {f.move};
    auto stage = f.make(f.stage({}));
    auto begun = stage->begin(ctx);
    REQUIRE_FALSE(begun.ok());
    CHECK(begun.error().message().find("stage 'move': no source: stage 'move' finished no trial") != std::string::npos);
  }
  SUBCASE("a checkpoint file that does not exist") {
    auto stage = f.make(f.stage({{"checkpoint", f.dir.file("missing.bin")}}));
    auto begun = stage->begin(f.ctx());
    REQUIRE_FALSE(begun.ok());
    CHECK(begun.error().message().find("the checkpoint file '" + f.dir.file("missing.bin") + "' does not exist") !=
          std::string::npos);
  }
  SUBCASE("a checkpoint file is the one source, without lineage") {
    const std::string file = f.dir.file("pretrained.bin");
    touch(file);
    auto stage = f.make(f.stage({{"checkpoint", file}, {"seeds", 2}}));
    CHECK(stage->max_trials() == 2);
    require_ok(stage->begin(f.ctx()));
    auto t = ask(*stage, 5);
    REQUIRE(t.size() == 2);
    CHECK(t[0].params["init_from"] == file);
    CHECK(t[0].params["freeze"] == 0);
    CHECK_FALSE(t[0].meta.contains("lineage"));
    CHECK(t[0].params.size() == 2);
  }
  SUBCASE("bad settings are config errors") {
    auto made = workflow::make_transfer_stage(f.stage({{"sources", 0}}), f.cfg);
    REQUIRE_FALSE(made.ok());
    CHECK(made.error().code() == Errc::kConfig);
    CHECK(made.error().message() == "stage 'move': sources: must be in [1, 1000], got 0");
  }
}

TEST_CASE("transfer: from a command trainer's program, asked of its capabilities") {
  // A command trainer's checkpoint is the directory <trial dir>/checkpoint its program filled; the
  // target gets it (and the source's id) through the kind's own parameters, which its trainer turns
  // into HPCTUNE_SOURCE_CHECKPOINT and HPCTUNE_SOURCE_TRIAL; classes and max_train_samples, not
  // settings of the kind, are parameters of every trial.
  Fixture f;
  f.cfg.trainer = {{"kind", "command"}, {"command", "./train"}, {"provides", json::array({"checkpoints"})}};
  fs::remove_all(f.elsewhere);  // seq 1's artifact: gone, not a source
  const std::string source_dir = f.run_dir + "/" + std::to_string(f.ids[0]) + "/checkpoint";
  touch(source_dir + "/model.pt");
  fs::create_directories(f.run_dir + "/" + std::to_string(f.ids[3]) + "/checkpoint");  // empty: not a source
  SUBCASE("sources, targets and twins") {
    auto stage = f.make(f.stage({{"sources", 2}, {"classes", json::array({5, 6})}, {"max_train_samples", 300},
                                 {"freeze", 1}, {"baseline", true}}));
    CHECK_FALSE(stage->trainer().contains("classes"));
    CHECK_FALSE(stage->trainer().contains("max_train_samples"));
    require_ok(stage->begin(f.ctx()));
    CHECK(stage->source()->state()["sources"] == json::array({f.ids[0]}));
    auto t = ask(*stage, 2);
    REQUIRE(t.size() == 2);
    CHECK(t[0].meta["role"] == "target");
    CHECK(t[0].params["hpctune_source_checkpoint"] == fs::absolute(source_dir).lexically_normal().string());
    CHECK(t[0].params["hpctune_source_trial"] == f.ids[0]);
    CHECK_FALSE(t[0].params.contains("init_from"));
    CHECK(t[0].params["lr"] == json(0.01));  // the source's
    for (const auto& s : t) {
      CHECK(s.params["classes"] == json::array({5, 6}));
      CHECK(s.params["max_train_samples"] == 300);
    }
    CHECK(t[0].params["freeze"] == 1);
    CHECK(t[1].meta["role"] == "baseline");
    CHECK_FALSE(t[1].params.contains("hpctune_source_checkpoint"));
    CHECK_FALSE(t[1].params.contains("hpctune_source_trial"));
    CHECK(t[1].params["freeze"] == 0);
  }
  SUBCASE("a checkpoint directory that is a link is refused, naming the trial") {
    const std::string other = f.dir.file("other");
    touch(other + "/model.pt");
    fs::create_directories(f.run_dir + "/" + std::to_string(f.ids[2]));
    fs::create_directory_symlink(other, f.run_dir + "/" + std::to_string(f.ids[2]) + "/checkpoint");
    auto stage = f.make(f.stage({{"sources", 2}}));
    auto begun = stage->begin(f.ctx());
    REQUIRE_FALSE(begun.ok());
    CHECK(begun.error().message().find("stage 'move': trial " + std::to_string(f.ids[2]) +
                                       ": its checkpoint directory is refused") != std::string::npos);
  }
  SUBCASE("a checkpoint: directory is a source for a program") {
    const std::string pretrained = f.dir.file("pretrained");
    touch(pretrained + "/weights.bin");
    auto stage = f.make(f.stage({{"checkpoint", pretrained}}));
    require_ok(stage->begin(f.ctx()));
    auto t = ask(*stage, 1);
    REQUIRE(t.size() == 1);
    CHECK(t[0].params["hpctune_source_checkpoint"] == pretrained);
    CHECK_FALSE(t[0].params.contains("hpctune_source_trial"));
  }
  SUBCASE("a target kind that cannot start from a checkpoint is a config error") {
    f.cfg.trainer = {{"kind", "sleep"}};
    auto made = workflow::make_transfer_stage(f.stage({}), f.cfg);
    REQUIRE_FALSE(made.ok());
    CHECK(made.error().code() == Errc::kConfig);
    CHECK(made.error().message() ==
          "stage 'move': trainer kind 'sleep' cannot start a trial from a checkpoint (a transfer needs one that can)");
  }
}

TEST_CASE("transfer: finish records the best target, its baseline twin and the gain") {
  Fixture f;
  auto stage = f.make(f.stage({{"sources", 1}, {"seeds", 2}, {"baseline", true}}));
  require_ok(stage->begin(f.ctx()));
  auto t = ask(*stage, 10);
  REQUIRE(t.size() == 4);
  const json metrics[] = {
      {{"val_accuracy", 0.70}, {"test_accuracy", 0.68}},  // target 0
      {{"val_accuracy", 0.60}, {"test_accuracy", 0.61}},  // its twin
      {{"val_accuracy", 0.75}, {"test_accuracy", 0.74}},  // target 1: the best by val_accuracy
      {{"val_accuracy", 0.65}, {"test_accuracy", 0.62}},  // its twin, also the best baseline
  };
  std::vector<int64_t> ids;
  for (std::size_t i = 0; i < 4; ++i) ids.push_back(add_trial(*f.db, f.campaign, f.move, t[i].seq, t[i].params, t[i].meta, metrics[i]));
  auto result = stage->finish(f.ctx());
  require_ok(result);
  const json& r = *result;
  CHECK(r["sources"] == json::array({f.ids[1]}));
  CHECK(r["target"]["trial"] == ids[2]);
  CHECK(r["target"]["val_accuracy"].get<double>() == doctest::Approx(0.75));
  CHECK(r["target"]["test_accuracy"].get<double>() == doctest::Approx(0.74));
  CHECK(r["baseline"]["trial"] == ids[3]);
  CHECK(r["baseline"]["test_accuracy"].get<double>() == doctest::Approx(0.62));
  CHECK(r["best_baseline"]["trial"] == ids[3]);
  CHECK(r["targets"] == 2);
  CHECK(r["baselines"] == 2);
  CHECK(r["gain"].get<double>() == doctest::Approx(0.12));
  // The stage as a whole: both targets against their twins, (0.68 + 0.74) / 2 against (0.61 + 0.62) / 2.
  CHECK(r["paired"]["pairs"] == 2);
  CHECK(r["paired"]["wins"] == 2);
  CHECK(r["paired"]["target_test_accuracy"].get<double>() == doctest::Approx(0.71));
  CHECK(r["paired"]["baseline_test_accuracy"].get<double>() == doctest::Approx(0.615));
  CHECK(r["paired"]["gain"].get<double>() == doctest::Approx(0.095));
  CHECK(r["compare_metric"] == "test_accuracy");  // the objective's val_accuracy, as its held-out figure

  SUBCASE("read by a stage that was never begun (a restarted master): sources from the lineage") {
    auto fresh = f.make(f.stage({{"sources", 1}, {"seeds", 2}, {"baseline", true}}));
    auto again = fresh->finish(f.ctx());
    require_ok(again);
    CHECK(*again == r);
  }
}

TEST_CASE("transfer: targets are compared with their twins by the objective's held-out figure, or compare_metric") {
  Fixture f;
  // A loss objective: lower is better, so a target below its twin gains.
  f.cfg.objectives = {{"val_loss", false}};
  const json metrics[] = {
      {{"val_loss", 0.40}, {"test_loss", 0.42}, {"test_f1", 0.70}, {"test_accuracy", 0.10}},  // target
      {{"val_loss", 0.50}, {"test_loss", 0.55}, {"test_f1", 0.60}, {"test_accuracy", 0.90}},  // its twin
  };
  const auto run = [&](const json& extra) {
    json given = {{"sources", 1}, {"seeds", 1}, {"baseline", true}};
    given.update(extra);
    auto stage = f.make(f.stage(given));
    require_ok(stage->begin(f.ctx()));
    auto t = ask(*stage, 10);
    REQUIRE(t.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) add_trial(*f.db, f.campaign, f.move, t[i].seq, t[i].params, t[i].meta, metrics[i]);
    auto result = stage->finish(f.ctx());
    require_ok(result);
    return *result;
  };
  SUBCASE("by default: val_loss's test_loss, lower is better") {
    const json r = run(json::object());
    CHECK(r["compare_metric"] == "test_loss");
    CHECK(r["target"]["test_loss"].get<double>() == doctest::Approx(0.42));
    CHECK(r["baseline"]["test_loss"].get<double>() == doctest::Approx(0.55));
    CHECK_FALSE(r["target"].contains("test_accuracy"));  // no figure the objective did not ask for
    CHECK(r["gain"].get<double>() == doctest::Approx(0.13));
    CHECK(r["paired"]["wins"] == 1);
    CHECK(r["paired"]["target_test_loss"].get<double>() == doctest::Approx(0.42));
    CHECK(r["paired"]["gain"].get<double>() == doctest::Approx(0.13));
  }
  SUBCASE("compare_metric names the figure") {
    const json r = run({{"compare_metric", "test_f1"}});
    CHECK(r["compare_metric"] == "test_f1");
    CHECK(r["target"]["test_f1"].get<double>() == doctest::Approx(0.70));
    // Better in the objective's direction (minimize): a higher test_f1 counts as a loss here.
    CHECK(r["gain"].get<double>() == doctest::Approx(-0.10));
    CHECK(r["paired"]["wins"] == 0);
  }
}

TEST_CASE("transfer: the registry builds the kind from the campaign's stages") {
  Fixture f;
  f.cfg.stages = {f.stage({{"sources", 1}})};
  scheduler::StagePlan plan{"move", "transfer", {"tune"}, 0};
  auto made = workflow::make_stage(plan, f.cfg, std::nullopt);
  require_ok(made);
  CHECK((*made)->source()->kind() == "transfer");
  const auto names = workflow::stage_kind_names();
  CHECK(std::find(names.begin(), names.end(), "transfer") != names.end());
}
