// trainer.sync on a 2-rank trainer group, under mpirun (tests/mpirun-test 2): the classifier loop
// (classifier_training.h) with the replica exchange (replica_exchange.h) against the allreduce
// path. Issue 26, acceptance 1: SSP with staleness 0 equals synchronous allreduce bit for bit; with
// one replica 3x slower no replica ever runs more than `staleness` steps ahead (from the clocks
// both replicas record); 1-bit gradients with error feedback train like uncompressed ones and
// send at most 1/25 of the bytes (the compressed allreduce also at 4 ranks: run the "1bit*" case by hand
// under mpirun -np 4); downpour trains with each shard optimizer. Its own main initialises MPI.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <memory>
#include <tuple>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/trainer_group_mpi.h"
#include "nn/checkpoint.h"
#include "tests/mpi_test_main.h"
#include "tests/synthetic_images.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using hpctune::testing::SharedTempDir;
using namespace hpctune::trainers;
using namespace hpctune::collectives;

namespace {

using hpctune::testing::synthetic;

std::unique_ptr<TrainerGroup> replicas(int data_ranks) {
  MpiGroupOptions go;
  go.data = data_ranks;
  go.timeout = std::chrono::seconds(60);
  auto created = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(created.ok());
  return std::move(created).value();
}

Result<TrialResult> train(TrainerGroup* g, const nlohmann::json& settings, const ImageClassificationData& data,
                          const std::string& dir, int64_t trial_id = 3, int stop_at_poll = -1) {
  TrialContext ctx;
  ctx.trial_id = trial_id;
  ctx.seed = 17;
  ctx.trainer = settings;
  ctx.trial_dir = dir;
  ctx.threads = 1;
  ctx.group = g;
  ctx.ranks = g->size();
  auto polls = std::make_shared<int>(0);
  ctx.stop_requested = [g, polls, stop_at_poll]() -> bool {
    auto flag = g->broadcast_flag((*polls)++ == stop_at_poll);
    REQUIRE(flag.ok());
    return *flag;
  };
  auto s = parse_mlp_settings(settings);
  REQUIRE_MESSAGE(s.ok(), s.error().message());
  return train_mlp(*s, data, ctx);
}

struct Event {
  std::string what;
  int64_t clock = 0, applied = 0, t_ns = 0;
};

std::vector<Event> read_clocks(const std::string& path) {
  std::vector<Event> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream fields(line);
    Event e;
    fields >> e.what >> e.clock >> e.applied >> e.t_ns;
    out.push_back(e);
  }
  return out;
}

const nlohmann::json kBase = {{"kind", "mlp"}, {"hidden", {32}}, {"lr", 0.05}, {"batch_size", 16}, {"epochs", 2},
                              {"optimizer", "sgd"}, {"momentum", 0.9}, {"dropout", 0.1}};

}  // namespace

TEST_CASE("ssp with staleness 0 equals allreduce bit for bit (weights, optimizer state, metrics)") {
  const auto data = synthetic(300, 60, 8, 4, 5);
  auto g = replicas(2);
  // Every allreduce algorithm sums two replicas' gradients to the same bits as the exchange.
  for (const char* algorithm : {"hierarchical", "ring"}) {
    CAPTURE(algorithm);
    nlohmann::json sync = kBase;
    sync["allreduce"] = algorithm;
    nlohmann::json ssp = sync;
    ssp["sync"] = "ssp";
    ssp["staleness"] = 0;
    const SharedTempDir a_dir(*g, "hpctune-async"), b_dir(*g, "hpctune-async");
    const std::string &a = a_dir.path, &b = b_dir.path;
    auto ra = train(g.get(), sync, data, a);
    REQUIRE_MESSAGE(ra.ok(), ra.error().message());
    auto rb = train(g.get(), ssp, data, b);
    REQUIRE_MESSAGE(rb.ok(), rb.error().message());
    for (const char* key : {"val_loss", "val_accuracy", "train_loss", "test_loss", "test_accuracy"}) {
      CAPTURE(key);
      CHECK(ra->metrics.at(key) == rb->metrics.at(key));
    }
    auto ca = nn::read_checkpoint(nn::checkpoint_path(a, 0));
    auto cb = nn::read_checkpoint(nn::checkpoint_path(b, 0));
    REQUIRE(ca.ok());
    REQUIRE(cb.ok());
    CHECK(ca->params == cb->params);
    CHECK(ca->optimizer.buffers == cb->optimizer.buffers);
    CHECK(rb->metrics.at("sync_staleness_max") == 0.0);
    CHECK(ra->metrics.at("sync_staleness_max") == 0.0);
  }
}

TEST_CASE("ssp: with replica 1 three times slower, no replica runs more than staleness steps ahead") {
  const auto data = synthetic(300, 60, 8, 4, 5);
  auto g = replicas(2);
  constexpr int64_t kStaleness = 2;
  nlohmann::json ssp = kBase;
  ssp["sync"] = "ssp";
  ssp["staleness"] = kStaleness;
  ssp["debug_slowdown"] = 3.0;
  ssp["debug_slowdown_rank"] = 1;
  ssp["hidden"] = {256, 256};  // enough compute per step for the slowdown to show
  // Momentum 0: with sgd's 0.9, stale gradients add momentum of their own, and where the fast
  // replica's lead falls (timing) decides between 0.4 and 1.0 validation accuracy (README, "ssp and
  // momentum"); with 0 it is 1.0 in 12 runs beside two busy loops.
  ssp["momentum"] = 0.0;
  const SharedTempDir dir_guard(*g, "hpctune-async");
  const std::string& dir = dir_guard.path;
  auto r = train(g.get(), ssp, data, dir);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(r->metrics.at("sync_staleness_max") <= kStaleness);
  // The fast replica does run ahead: the bound is reached, not just respected.
  if (g->data_rank() == 0) CHECK(r->metrics.at("sync_staleness_max") == kStaleness);
  CHECK(r->metrics.at("val_accuracy") > 0.5);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g->leader()) {
    // From the recorded clocks (one steady clock on this machine): when replica r began clock c,
    // every other replica had already published every clock up to c - staleness - 1.
    const std::vector<Event> logs[2] = {read_clocks(dir + "/sync_clocks_replica0.csv"),
                                        read_clocks(dir + "/sync_clocks_replica1.csv")};
    const int64_t batches = 2 * ((300 - 30 + 15) / 16);
    int64_t checked = 0, ahead_max = 0;
    for (int r = 0; r < 2; ++r) {
      const auto& mine = logs[r];
      const auto& other = logs[1 - r];
      int64_t begins = 0;
      for (const Event& e : mine) {
        if (e.what != "begin") continue;
        ++begins;
        CHECK(e.clock - e.applied <= kStaleness);
        // The other replica's clocks published by then.
        int64_t published = 0;
        for (const Event& o : other)
          if (o.what == "publish" && o.t_ns < e.t_ns) published = std::max(published, o.clock + 1);
        CHECK(e.clock - published <= kStaleness);
        ahead_max = std::max(ahead_max, e.clock - published);
        ++checked;
      }
      CHECK(begins == batches);
    }
    CHECK(checked == 2 * batches);
    CHECK(ahead_max == kStaleness);
  }
}

TEST_CASE("ssp: a trial stopped mid-epoch leaves messages behind that the next trial on the group ignores") {
  const auto data = synthetic(300, 60, 8, 4, 5);
  auto g = replicas(2);
  nlohmann::json ssp = kBase;
  ssp["sync"] = "ssp";
  ssp["staleness"] = 4;
  ssp["debug_slowdown"] = 3.0;  // replica 0 runs ahead: its gradients of later clocks are in flight
  ssp["hidden"] = {256, 256};
  ssp["checkpoint"] = false;
  // Polls: epoch 1's start (0), its batch 16 (1): stop there.
  auto stopped = train(g.get(), ssp, data, "", 10, 1);
  REQUIRE_MESSAGE(stopped.ok(), stopped.error().message());
  CHECK(stopped->stopped);
  nlohmann::json sync = kBase, zero = kBase;
  zero["sync"] = "ssp";
  zero["staleness"] = 0;
  auto a = train(g.get(), sync, data, "", 11);
  REQUIRE_MESSAGE(a.ok(), a.error().message());
  auto b = train(g.get(), zero, data, "", 12);
  REQUIRE_MESSAGE(b.ok(), b.error().message());
  for (const char* key : {"val_loss", "train_loss", "test_loss"}) {
    CAPTURE(key);
    CHECK(a->metrics.at(key) == b->metrics.at(key));
  }
}

TEST_CASE("1bit gradients with error feedback train like uncompressed ones on 1/25 of the bytes") {
  const auto data = synthetic(600, 100, 8, 4, 7);
  auto g = replicas(hpctune::testing::world_size());  // also run by hand on 4 ranks (-tc="1bit*")
  nlohmann::json plain = kBase;
  plain["epochs"] = 3;
  plain["checkpoint"] = false;
  plain["hidden"] = {256};  // enough values that headers and per-chunk means stay small
  nlohmann::json onebit = plain;
  onebit["gradient_compression"] = "1bit";
  nlohmann::json ssp_onebit = onebit;
  ssp_onebit["sync"] = "ssp";
  ssp_onebit["staleness"] = 1;
  // Momentum 0.5, not kBase's 0.9: a stale gradient adds momentum of its own, and how stale each one
  // is depends on timing: at 0.9 this model once ended at val_loss 0.26 against 0.10 on a busy machine
  // (a clean-clone run beside a benchmark), which is ssp with high momentum, not the compression (README,
  // "ssp and momentum": 0-0.5 trains as allreduce does).
  ssp_onebit["momentum"] = 0.5;
  auto a = train(g.get(), plain, data, "");
  REQUIRE_MESSAGE(a.ok(), a.error().message());
  for (const auto& settings : {onebit, ssp_onebit}) {
    CAPTURE(settings.dump());
    auto b = train(g.get(), settings, data, "");
    REQUIRE_MESSAGE(b.ok(), b.error().message());
    CHECK(b->metrics.at("test_accuracy") > a->metrics.at("test_accuracy") - 0.1);
    CHECK(b->metrics.at("val_loss") < a->metrics.at("val_loss") + 0.1);
    const double ratio = b->metrics.at("sync_bytes_per_step") / a->metrics.at("sync_bytes_per_step");
    CAPTURE(ratio);
    // allreduce: the compressed allreduce, 1/32 of the ring's bytes at any replica count; ssp sends
    // every packet to every replica: (D - 1) / 32 against the ring's 2 (D - 1) / D, D / 64 (1/32 at 2).
    const double d = static_cast<double>(g->data_size());
    CHECK(ratio <= (settings.contains("sync") ? std::max(1.0 / 25, 1.1 * d / 64) : 1.0 / 25));
    CHECK(ratio > 1.0 / 40);
  }
}

TEST_CASE("downpour: replicas that serve the shards train with sgd and adagrad shards, 1bit pushes too") {
  const auto data = synthetic(600, 100, 8, 4, 7);
  auto g = replicas(2);
  nlohmann::json plain = kBase;
  plain["epochs"] = 3;
  auto a = train(g.get(), plain, data, "");
  REQUIRE_MESSAGE(a.ok(), a.error().message());
  for (const auto& [optimizer, lr, compression] : std::vector<std::tuple<std::string, double, std::string>>{
           {"sgd", 0.05, "none"}, {"adagrad", 0.01, "none"}, {"sgd", 0.05, "1bit"}}) {
    CAPTURE(optimizer);
    CAPTURE(compression);
    nlohmann::json dp = plain;
    dp["sync"] = "downpour";
    dp["shard_optimizer"] = optimizer;
    dp["lr"] = lr;
    dp["gradient_compression"] = compression;
    dp["fetch_interval"] = 2;
    const SharedTempDir dir_guard(*g, "hpctune-async");
    const std::string& dir = dir_guard.path;
    auto b = train(g.get(), dp, data, dir);
    REQUIRE_MESSAGE(b.ok(), b.error().message());
    if (g->leader()) {
      CHECK(b->metrics.at("test_accuracy") > a->metrics.at("test_accuracy") - 0.15);
      CHECK(b->metrics.at("sync_replica_fraction_min") == 1.0);
      CHECK(b->metrics.at("sync_replicas_dropped") == 0.0);
      CHECK(b->metrics.at("sync_staleness_max") >= 1.0);  // the other replica's pushes land between fetches
      CHECK(std::filesystem::exists(nn::checkpoint_path(dir, 0)));
      if (compression == "1bit") CHECK(b->metrics.at("sync_bytes_per_step") < a->metrics.at("sync_bytes_per_step") / 10);
    }
  }
}

TEST_CASE("downpour: with replica 1 three times slower, the final model holds every push (its last ones too)") {
  // The leader finishes its share of the last epoch well before the slow replica, which still has
  // most of its pushes to send. Before, the leader validated, reported and saved the weights of its
  // own last fetch, then waited for the slow replica all the same: the final model held only the
  // updates applied up to that fetch.
  const auto data = synthetic(600, 100, 8, 4, 7);
  auto g = replicas(2);
  nlohmann::json dp = kBase;
  dp["sync"] = "downpour";
  dp["shard_optimizer"] = "sgd";
  dp["debug_slowdown"] = 3.0;
  dp["debug_slowdown_rank"] = 1;
  const SharedTempDir dir_guard(*g, "hpctune-async");
  auto r = train(g.get(), dp, data, dir_guard.path);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  if (g->leader()) {
    const double updates = r->metrics.at("sync_updates");
    // Every minibatch of both replicas (540 training images after the 10% validation split, 34
    // minibatches of 16 an epoch, 2 epochs) is one push, applied by each of the 2 shards.
    const double minibatches = 2.0 * std::ceil(540.0 / 16.0);
    CHECK(updates == 2.0 * minibatches);
    CHECK(r->metrics.at("sync_updates_in_model") == updates);
    CHECK(r->metrics.at("sync_replica_fraction_min") == 1.0);
  }
}

// The directories of the next case, for the one after it, which checks that they are gone.
std::vector<std::string>& guarded_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

// Fails on purpose (should_fail): a failed CHECK (the scope ends as usual) and a failed REQUIRE (an
// exception unwinds it) inside the scopes of SharedTempDirs. Before, a failed REQUIRE skipped the
// cleanup at the end of the case, and every run that failed one left an hpctune-async-* behind.
TEST_CASE("a shared temporary directory whose scope a failed check leaves" * doctest::should_fail()) {
  auto g = replicas(2);
  {
    const SharedTempDir dir(*g, "hpctune-async");
    guarded_dirs().push_back(dir.path);
    if (g->leader()) std::ofstream(dir.path + "/written") << "before the failure";
    CHECK_MESSAGE(false, "a CHECK that fails on purpose");
  }
  const SharedTempDir dir(*g, "hpctune-async");
  guarded_dirs().push_back(dir.path);
  if (g->leader()) std::ofstream(dir.path + "/written") << "before the failure";
  REQUIRE_MESSAGE(false, "a REQUIRE that fails on purpose");
}

TEST_CASE("... is removed by the group's leader all the same") {
  if (guarded_dirs().empty()) return;  // run alone (-tc): nothing to check
  // The leader removed the one a REQUIRE left at once, without waiting: the other ranks look once
  // it is past that (before, they could look first and still see it).
  MPI_Barrier(MPI_COMM_WORLD);
  REQUIRE(guarded_dirs().size() == 2);
  for (const std::string& dir : guarded_dirs()) {
    CAPTURE(dir);
    CHECK(dir.find("/hpctune-async-") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir)));
  }
}

TEST_CASE("a killed run's temporary directories are swept a day later: this user's directories only, no link followed") {
  if (hpctune::testing::world_rank() != 0) return;
  namespace fs = std::filesystem;
  auto made = [](const std::string& prefix) {
    std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    std::ofstream(tmpl + "/file") << "kept";
    return tmpl;
  };
  auto age = [](const std::string& path, time_t seconds) {
    const struct timespec times[2] = {{std::time(nullptr) - seconds, 0}, {std::time(nullptr) - seconds, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
  };
  const std::string stale = made("hpctune-sweeptest"), fresh = made("hpctune-sweeptest");
  const std::string target = made("hpctune-sweeptarget"), link = made("hpctune-sweeptest");
  fs::remove_all(link);
  fs::create_directory_symlink(target, link);  // named like one of ours, pointing elsewhere
  age(stale, 2 * 24 * 3600);
  age(fresh, 3600);
  age(target, 2 * 24 * 3600);
  age(link, 2 * 24 * 3600);
  hpctune::testing::remove_stale_temp_dirs("hpctune-sweeptest");
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(fresh + "/file"));
  CHECK(fs::is_symlink(link));
  CHECK(fs::exists(target + "/file"));
  for (const std::string& p : {fresh, link, target}) fs::remove_all(p);
}

TEST_CASE("settings: unknown modes and a fraction of replicas out of (0, 1] are refused by name") {
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"min_replica_fraction", 1.5}, {"sync", "bogus"}}) {
    nlohmann::json s = kBase;
    s[key] = value;
    auto parsed = parse_mlp_settings(s);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code() == Errc::kInvalidArgument);
    CHECK(parsed.error().message().find("'" + key + "'") != std::string::npos);
  }
}

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_async_data_parallel"); }
