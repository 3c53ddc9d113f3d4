// Issue 26, backup replicas (trainer.min_replica_fraction < 1, trainers/replica_exchange.h,
// coordinated): with one replica ten times slower (the debug_slowdown aid) and a fraction of 0.5,
// a step completes once ceil(0.5 x D) replicas, the leader among them, have reported, so the fast
// replicas are not held back: from the recorded clocks, the leader never waits for a step, the
// straggler's late gradients are dropped and counted, and the model still learns (how much faster
// it trains is bench/run-async's figure, not a check: a busy machine moves it). Not deterministic (which gradients make a step
// depends on timing): the checks are bounds. Run on 2 ranks by ctest (measured on 2 cores: 0.17-0.22 s
// against 0.04-0.06 s). On 3 or 4 ranks (tests/mpirun-test 4 build/tests/test_backup_replicas) it
// needs a core per rank: oversubscribed on 2 cores the fast replicas share the cores with each
// other, the straggler is not the slowest any more and the timing checks fail (measured 0.8-0.9x).
// Its own main initialises MPI.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/trainer_group_mpi.h"
#include "tests/mpi_test_main.h"
#include "tests/synthetic_images.h"
#include "trainers/mlp_trainer.h"

using namespace hpctune;
using hpctune::testing::SharedTempDir;
using namespace hpctune::trainers;
using namespace hpctune::collectives;

namespace {

Result<TrialResult> train(TrainerGroup* g, const nlohmann::json& settings, const ImageClassificationData& data,
                          const std::string& dir, int64_t trial_id) {
  TrialContext ctx;
  ctx.trial_id = trial_id;
  ctx.seed = 23;
  ctx.trainer = settings;
  ctx.trial_dir = dir;
  ctx.threads = 1;
  ctx.group = g;
  ctx.ranks = g->size();
  ctx.stop_requested = [g]() -> bool {
    auto flag = g->broadcast_flag(false);
    REQUIRE(flag.ok());
    return *flag;
  };
  auto s = parse_mlp_settings(settings);
  REQUIRE_MESSAGE(s.ok(), s.error().message());
  return train_mlp(*s, data, ctx);
}

// The "begin" lines of a replica's clock log: clock, clocks applied then.
std::vector<std::pair<int64_t, int64_t>> begins(const std::string& path) {
  std::vector<std::pair<int64_t, int64_t>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream fields(line);
    std::string what;
    int64_t clock = 0, applied = 0, t = 0;
    fields >> what >> clock >> applied >> t;
    if (what == "begin") out.emplace_back(clock, applied);
  }
  return out;
}

}  // namespace

TEST_CASE("backup replicas: at fraction 0.5 a replica 3x slower does not set the pace") {
  const auto data = hpctune::testing::synthetic(6000, 200, 16, 4, 9);
  MpiGroupOptions go;
  go.data = hpctune::testing::world_size();
  go.timeout = std::chrono::seconds(60);
  auto created = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(created.ok());
  TrainerGroup& g = **created;
  const int D = g.data_size();
  const size_t kClocks = 3 * ((6000 - 600 + 999) / 1000);
  // The last replica is the straggler: the leader (replica 0) must be among the fast ones.
  // Large minibatches of 16 x 16 images through a small network: computing a step costs more than
  // sending its gradient, as in the models backup replicas are for.
  nlohmann::json base = {{"kind", "mlp"}, {"hidden", {128}}, {"lr", 0.2}, {"batch_size", 1000},
                         {"epochs", 3}, {"optimizer", "sgd"}, {"momentum", 0.9}, {"checkpoint", false},
                         {"debug_slowdown", 10.0}, {"debug_slowdown_rank", D - 1}};
  nlohmann::json all = base;  // every replica counts: the allreduce waits for the straggler
  nlohmann::json backup = base;
  backup["min_replica_fraction"] = 0.5;
  const SharedTempDir dir_guard(g, "hpctune-backup");
  const std::string& dir = dir_guard.path;
  auto slow = train(&g, all, data, "", 1);
  REQUIRE_MESSAGE(slow.ok(), slow.error().message());
  auto fast = train(&g, backup, data, dir, 2);
  REQUIRE_MESSAGE(fast.ok(), fast.error().message());
  if (g.leader()) {
    const double a = slow->metrics.at("train_seconds"), b = fast->metrics.at("train_seconds");
    // How much faster is a measurement, and a busy machine moves it (issue 35): bench/run-async
    // measures it (bench/results/async.md, the backup-replica rows). The checks below hold under
    // load: with the straggler 10x slower its gradients are late whatever else runs.
    MESSAGE("train seconds, every replica: " << a << ", fraction 0.5: " << b);
    CHECK(fast->metrics.at("val_accuracy") > 0.5);
    CHECK(fast->metrics.at("sync_replica0_fraction") == 1.0);  // the leader is in every step
    const double straggler = fast->metrics.at("sync_replica" + std::to_string(D - 1) + "_fraction");
    CHECK(straggler < 0.6);
    CHECK(fast->metrics.at("sync_replica_fraction_min") == straggler);
    // Its gradients that came too late: usually some, but none when the straggler skipped every clock
    // applied without it before computing one (it then sends nothing late), as a busy machine can make it.
    MESSAGE("late packets: " << fast->metrics.at("sync_late_packets"));
    CHECK(fast->metrics.at("sync_replicas_dropped") == 0.0);
    // From the leader's clock log: it began every step with every earlier step applied (it never
    // waited to run ahead), and began every clock (3 epochs x 6 minibatches).
    const auto mine = begins(dir + "/sync_clocks_replica0.csv");
    CHECK(mine.size() == kClocks);
    int64_t behind = 0;
    for (const auto& [clock, applied] : mine) behind = std::max(behind, clock - applied);
    CHECK(behind == 0);
  }
  if (g.data_rank() == D - 1) {
    // The straggler skipped the steps done without it: it began fewer clocks than there are.
    CHECK(begins(dir + "/sync_clocks_replica" + std::to_string(D - 1) + ".csv").size() < kClocks);
  }
}

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_backup_replicas"); }
