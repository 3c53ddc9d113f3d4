// What a workflow stage reads because the store names it (issue 21: "every path read because a
// database says so is opened without following symlinks out of a directory owned by the user"):
// the ensemble stage's prediction artifacts and the transfer stage's source checkpoints, each a
// link planted inside the trial's directory to a file outside it, or a FIFO. The stage refuses it
// at once, naming the trial and the artifact, and never reads the file outside.
// (PBT's snapshot copy: tests/test_pbt.cpp, "pbt: a checkpoint that is a link ...".)
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/npy.h"
#include "config/config.h"
#include "scheduler/stages.h"
#include "stage_fixture.h"
#include "store/store.h"
#include "temp_dir.h"
#include "workflow/stages.h"
#include "workflow/transfer_stage.h"

using namespace hpctune;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using hpctune::testing::require_ok;

constexpr const char* kKinds[] = {"val_probs", "test_probs", "val_indices", "val_labels", "test_labels"};

// Writes the five prediction files of one member into `dir` (valid, lining up).
void write_predictions(const std::string& dir) {
  fs::create_directories(dir);
  const std::vector<float> val = {0.9f, 0.1f, 0.8f, 0.2f}, test = {0.7f, 0.3f};
  const std::vector<int64_t> idx = {3, 5}, labels = {0, 0}, test_labels = {0};
  require_ok(write_npy_f32(dir + "/val_probs.npy", val.data(), 2, 2));
  require_ok(write_npy_f32(dir + "/test_probs.npy", test.data(), 1, 2));
  require_ok(write_npy_i64(dir + "/val_indices.npy", idx.data(), 2));
  require_ok(write_npy_i64(dir + "/val_labels.npy", labels.data(), 2));
  require_ok(write_npy_i64(dir + "/test_labels.npy", test_labels.data(), 1));
}

// A campaign with a search stage `tune` of one done trial and stages over it, in a temp dir.
struct Campaign {
  testing::TempDir dir;
  std::unique_ptr<store::Store> db;
  int64_t campaign = 0, tune = 0, next = 0, trial = 0;
  std::string run_dir, trial_dir;

  explicit Campaign(const std::string& kind) {
    testing::StageStore made(dir.file("c.db"), "demo", 7, 0);
    tune = made.add_stage("search", "tune");
    next = made.add_stage(kind, kind == "ensemble" ? "blend" : "move");
    db = std::move(made.db);
    campaign = made.campaign;
    run_dir = dir.file("c.db.trials");
    store::TrialRow row;
    row.campaign_id = campaign;
    row.stage_id = tune;
    row.params = {{"lr", 0.01}};
    row.created_at = 1;
    auto id = db->insert_trial(row);
    require_ok(id);
    trial = *id;
    require_ok(db->mark_assigned(trial, 1, 0, 1, 2));
    require_ok(db->mark_running(trial, 1, 3));
    require_ok(db->finish_trial(trial, 1, store::TrialState::kDone, {{"val_accuracy", 0.5}}, 0.5, 3, "", 4));
    trial_dir = run_dir + "/" + std::to_string(trial);
    fs::create_directories(trial_dir);
  }

  scheduler::StageContext ctx() const {
    scheduler::StageContext c;
    c.store = db.get();
    c.campaign_id = campaign;
    c.stage_id = next;
    c.inputs = {tune};
    c.run_dir = run_dir;
    return c;
  }
};

config::CampaignConfig ensemble_config() {
  config::CampaignConfig cfg;
  cfg.name = "demo";
  cfg.seed = 7;
  cfg.objectives = {{"val_accuracy", true}};
  cfg.trainer = {{"kind", "mlp"}, {"epochs", 3}, {"save_predictions", true}};
  config::StageConfig tune{"tune", "search", {}, json::object(), true, nullptr, {}};
  config::StageConfig blend{"blend", "ensemble", {"tune"}, json{{"method", "greedy"}}, false, nullptr, {}};
  cfg.stages = {tune, blend};
  return cfg;
}

// Runs `f` on a thread; a FIFO it may wait on is opened for writing and closed after `deadline`
// so that a reader stuck on it returns (the test then fails on the time, not by hanging).
template <typename F>
auto within(std::chrono::seconds deadline, const std::string& fifo, F f) {
  auto started = std::chrono::steady_clock::now();
  auto job = std::async(std::launch::async, f);
  if (job.wait_for(deadline) != std::future_status::ready && !fifo.empty()) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  auto out = job.get();
  return std::make_pair(std::move(out), std::chrono::steady_clock::now() - started);
}

}  // namespace

TEST_CASE("security: the ensemble stage refuses a prediction artifact that is a link out of its trial, or a FIFO") {
  Campaign c("ensemble");
  write_predictions(c.trial_dir);
  // The file outside: valid predictions of its own, so that following the link would succeed.
  const std::string outside = c.dir.file("outside");
  write_predictions(outside);
  std::string planted, fifo;
  SUBCASE("a symbolic link inside the trial directory to a file outside it") {
    planted = c.trial_dir + "/evil.npy";
    fs::create_symlink(outside + "/val_probs.npy", planted);
  }
  SUBCASE("a FIFO inside the trial directory") {
    planted = fifo = c.trial_dir + "/pipe.npy";
    REQUIRE(::mkfifo(planted.c_str(), 0600) == 0);
  }
  for (const std::string kind : kKinds) {
    const std::string path = kind == "val_probs" ? planted : c.trial_dir + "/" + kind + ".npy";
    require_ok(c.db->add_artifact(c.trial, 1, kind, path, 64, 5));
  }
  auto made = workflow::make_stage({"blend", "ensemble", {"tune"}, 1}, ensemble_config(), std::nullopt);
  require_ok(made);
  auto stage = std::move(made).value();
  require_ok(stage->begin(c.ctx()));
  auto [r, took] = within(std::chrono::seconds(5), fifo, [&] { return stage->finish(c.ctx()); });
  CHECK(took < std::chrono::seconds(2));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kFailed);
  const std::string msg = r.error().message();
  INFO(msg);
  CHECK(msg.find("ensemble 'blend': trial " + std::to_string(c.trial) + "'s val_probs artifact " + planted +
                 " is refused: ") == 0);
  CHECK(msg.find(fifo.empty() ? "symbolic link" : "not a regular file") != std::string::npos);
}

TEST_CASE("security: the transfer stage refuses a source checkpoint that is a link out of its trial") {
  Campaign c("transfer");
  const std::string outside = c.dir.file("outside.bin");
  std::ofstream(outside) << "someone else's weights";
  config::CampaignConfig cfg;
  cfg.name = "demo";
  cfg.seed = 7;
  cfg.objectives = {{"val_accuracy", true}};
  cfg.trainer = {{"kind", "mlp"}, {"epochs", 3}, {"classes", json::array()}};
  cfg.algorithm = "random";
  cfg.max_trials = 1;
  config::StageConfig st;
  st.name = "move";
  st.kind = "transfer";
  st.from = {"tune"};
  st.settings = {{"sources", 1}};
  st.own = std::make_shared<config::CampaignConfig>(cfg);
  std::string planted = c.trial_dir + "/checkpoint-stage0.bin", what;
  fs::create_symlink(outside, planted);
  SUBCASE("recorded as the trial's checkpoint artifact") {
    require_ok(c.db->add_artifact(c.trial, 1, "checkpoint", planted, 64, 5));
    what = "move': trial " + std::to_string(c.trial) + "'s checkpoint artifact " + planted + " is refused: ";
  }
  SUBCASE("found in the trial's directory") {
    what = "move': trial " + std::to_string(c.trial) + ": its checkpoint checkpoint-stage0.bin is refused: ";
  }
  auto made = workflow::make_transfer_stage(st, cfg);
  require_ok(made);
  auto stage = std::move(made).value();
  auto begun = stage->begin(c.ctx());
  REQUIRE_FALSE(begun.ok());
  CHECK(begun.error().code() == Errc::kFailed);
  const std::string msg = begun.error().message();
  INFO(msg);
  CHECK(msg.find("stage '" + what) == 0);
  CHECK(msg.find("symbolic link") != std::string::npos);
  // No trial is proposed that would train from it.
  auto asked = stage->source()->ask(4);
  require_ok(asked);
  CHECK(asked->empty());
}
