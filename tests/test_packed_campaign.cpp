// Packed groups in a real campaign (issue 37 item 2): `hpctune run` with mlp trials on device: gpu,
// trials_per_gpu 4 and resources.pack: auto starts 4 groups as ONE worker process (launch/
// launcher.h, pack_slots) whose trials train each epoch as one fused model (trainers/
// packed_engine.h), against the CPU stand-in of the CUDA library (HPCTUNE_GPU_LIBRARY, passed on
// to the workers). More trials than slots, so trials start as slots free up, and ASHA prunes some.
// Checked: every trial has its own report at each epoch up to where it ended, a pruned trial none
// after, its own checkpoint and (done ones) predictions; the group log names the packed path; a
// trial started after the first ones joined a pack with others in it; and every trial's numbers
// equal those of the same campaign with pack: off (each trial alone on the GPU path).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;

namespace {

std::string config(const std::string& name, const std::string& pack, bool asha) {
  return "name: " + name + "\nseed: 5\nobjective: {metric: val_accuracy, mode: max}\n"
         "search: {algorithm: grid, max_trials: 8}\n" +
         (asha ? "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 2, max_t: 6}\n" : "") +
         "space:\n  lr: {type: choice, values: [0.1, 0.00001, 0.05, 0.02, 0.00002, 0.08, 0.00003, 0.03]}\n"
         "trainer:\n  kind: mlp\n  device: gpu\n  hidden: [48]\n  batch_size: 32\n  epochs: 6\n  momentum: 0.9\n"
         "  lr_schedule: cosine\n  max_train_samples: 3000\n  max_test_samples: 300\n"
         "resources:\n  groups: 4\n  threads: 1\n  gpus_per_rank: 1\n  gpus: [0]\n  trials_per_gpu: 4\n"
         "  pack: " + pack + "\n  heartbeat_interval: 0.5\n  heartbeat_timeout: 60\n";
}

void run_campaign(TempDir& dir, const std::string& name, const std::string& pack, bool asha) {
  const std::string cfg = dir.write(name + ".yaml", config(name, pack, asha));
  launch::ChildProcess p = start_hpctune({"run", cfg, "--db", dir.file(name + ".db")}, dir.file(name + ".log"),
                                         {{"OMP_NUM_THREADS", "1"}, {"HPCTUNE_GPU_LIBRARY", HPCTUNE_GPU_CPU_LIBRARY}});
  auto status = p.wait_for(280s);
  REQUIRE_MESSAGE(status.has_value(), launch::tail_file(dir.file(name + ".log"), 40));
  REQUIRE_MESSAGE(status->success(), launch::tail_file(dir.file(name + ".log"), 40));
}

// trial seq -> step -> metric -> value (the last attempt's).
using Reports = std::map<int64_t, std::map<int64_t, std::map<std::string, double>>>;

struct Campaign {
  std::vector<store::TrialRow> trials;
  Reports reports;
  std::map<int64_t, std::vector<store::ArtifactRow>> artifacts;  // by seq
};

Campaign read_campaign(const std::string& db) {
  Campaign c;
  c.trials = read_trials(db);
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  for (const auto& t : c.trials) {
    auto rows = (*s)->metrics(t.id);
    REQUIRE(rows.ok());
    for (const auto& m : *rows) c.reports[t.seq][m.step][m.name] = m.value;
    auto arts = (*s)->artifacts(t.id);
    REQUIRE(arts.ok());
    c.artifacts[t.seq] = *arts;
  }
  return c;
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-4 * (std::fabs(b) + 1e-3); }

}  // namespace

TEST_CASE("a packed campaign: 4 groups in one process, trials joining and pruned, each its own record, numbers as alone") {
  TempDir dir;
  run_campaign(dir, "packed", "auto", true);
  const Campaign packed = read_campaign(dir.file("packed.db"));
  REQUIRE(packed.trials.size() == 8);
  const std::string master_log = read_file(dir.file("packed.log"));
  CHECK(master_log.find("resources.pack: auto: groups run 4 to a worker process") != std::string::npos);
  // One process for the 4 groups: its log is group 0's.
  const std::string logs = dir.file("packed.db") + ".trials/logs";
  REQUIRE(std::filesystem::exists(logs + "/group-0.log"));
  CHECK_FALSE(std::filesystem::exists(logs + "/group-1.log"));
  const std::string group_log = read_file(logs + "/group-0.log");
  INFO("group log:\n" << group_log.substr(0, 6000));

  int pruned = 0;
  for (const auto& t : packed.trials) {
    CAPTURE(t.id);
    CAPTURE(t.seq);
    REQUIRE((t.state == store::TrialState::kDone || t.state == store::TrialState::kPruned));
    const auto& steps = packed.reports.at(t.seq);
    const int64_t last = t.state == store::TrialState::kDone ? 6 : t.step;
    CHECK(last >= 1);
    for (int64_t e = 1; e <= last; ++e) {
      CAPTURE(e);
      REQUIRE(steps.count(e) == 1);
      CHECK(steps.at(e).count("val_loss") == 1);
      CHECK(steps.at(e).count("train_loss") == 1);
    }
    // Nothing after the last report of a pruned trial (step 6 of a done one carries its final metrics).
    for (const auto& [step, metrics] : steps) CHECK(step <= last);
    // Its own checkpoint, and predictions when it finished.
    const std::string trial_dir = dir.file("packed.db") + ".trials/" + std::to_string(t.id);
    CHECK(std::filesystem::exists(trial_dir + "/checkpoint-stage0.bin"));
    if (t.state == store::TrialState::kDone) {
      CHECK(std::filesystem::exists(trial_dir + "/val_probs.npy"));
      CHECK(std::filesystem::exists(trial_dir + "/test_probs.npy"));
    } else {
      ++pruned;
    }
    const std::string who = "trial " + std::to_string(t.id) + " attempt " + std::to_string(t.attempt) + ": ";
    CHECK(group_log.find(who + "packed: trains in the pack") != std::string::npos);
  }
  CHECK(pruned >= 1);
  // A trial started after the first four joined a pack that others were training in.
  bool joined = false;
  const std::regex late("trial ([5-8]) attempt 1: packed with ([1-3]) other trial");
  for (std::sregex_iterator it(group_log.begin(), group_log.end(), late), end; it != end; ++it) joined = true;
  CHECK(joined);

  // The same campaign with pack: off and no pruning: every trial alone on the GPU path, each in its
  // own process. Each packed trial's reports and final metrics are its.
  run_campaign(dir, "alone", "off", false);
  const Campaign alone = read_campaign(dir.file("alone.db"));
  REQUIRE(alone.trials.size() == 8);
  CHECK(read_file(dir.file("alone.db") + ".trials/logs/group-0.log").find("packed") == std::string::npos);
  for (const auto& [seq, steps] : packed.reports) {
    CAPTURE(seq);
    for (const auto& [step, metrics] : steps) {
      CAPTURE(step);
      for (const char* name : {"val_loss", "train_loss", "test_loss"}) {
        if (metrics.count(name) == 0) continue;
        CAPTURE(name);
        const double a = alone.reports.at(seq).at(step).at(name);
        CHECK_MESSAGE(close(metrics.at(name), a), "packed " << metrics.at(name) << ", alone " << a);
      }
    }
  }
}
