// Issue 26, acceptance 3: configs/group-sync-modes.yaml, a campaign that searches over
// trainer.sync and trainer.gradient_compression (and staleness for ssp), runs end to end through
// the master with 2-rank groups under mpirun; every trial records the sync_* metrics, 1-bit
// compression sends at most 1/25 of the allreduce's bytes, and `hpctune trial` shows them.
#include <doctest/doctest.h>

#include <string>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;

TEST_CASE("configs/group-sync-modes.yaml searches sync x gradient_compression end to end") {
  TempDir dir;
  const std::string db = dir.file("s.db");
  const std::string config = std::string(HPCTUNE_SOURCE_DIR) + "/configs/group-sync-modes.yaml";
  auto status = run_hpctune({"run", config, "--db", db}, dir.file("log"), 240s);
  CHECK_MESSAGE(status.success(), read_file(dir.file("log")));
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 8);  // allreduce, downpour: x2 compressions; ssp: x2 x2 staleness
  double allreduce_bytes = 0, onebit_bytes = 0;
  int64_t onebit_trial = 0;
  std::map<std::string, int> modes;
  for (const auto& t : trials) {
    CAPTURE(t.id);
    CHECK(t.state == store::TrialState::kDone);
    REQUIRE(t.metrics.is_object());
    for (const char* key : {"sync_bytes_per_step", "sync_staleness_max", "sync_staleness_mean", "sync_replica_fraction_min"})
      CHECK(t.metrics.contains(key));
    CHECK(t.metrics.value("val_accuracy", 0.0) > 0.3);
    const std::string sync = t.params.value("sync", ""), compression = t.params.value("gradient_compression", "");
    ++modes[sync + "/" + compression];
    if (sync == "allreduce" && compression == "none") allreduce_bytes = t.metrics.value("sync_bytes_per_step", 0.0);
    if (sync == "allreduce" && compression == "1bit") {
      onebit_bytes = t.metrics.value("sync_bytes_per_step", 0.0);
      onebit_trial = t.id;
    }
    if (sync == "ssp") CHECK(t.metrics.value("sync_staleness_max", 99.0) <= t.params.value("staleness", 0));
  }
  CHECK(modes.size() == 6);
  REQUIRE(allreduce_bytes > 0);
  CHECK(onebit_bytes / allreduce_bytes <= 1.0 / 25);
  REQUIRE(run_hpctune({"trial", db, std::to_string(onebit_trial)}, dir.file("trial.txt")).success());
  const std::string shown = read_file(dir.file("trial.txt"));
  CHECK(shown.find("sync_bytes_per_step") != std::string::npos);
  CHECK(shown.find("sync_staleness_mean") != std::string::npos);
  CHECK(shown.find("1bit") != std::string::npos);
}
