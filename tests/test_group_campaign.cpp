// Multi-rank trainer groups through the whole system: `hpctune run` with resources.ranks starts
// each group under mpirun, the ranks train one trial together, the leader's result is recorded; a
// pipeline on GPUs (the CPU stand-in of the CUDA library) trains a stage per rank's own device; a
// hung rank ends the group through the watchdog and the trial runs again; a SIGKILLed master leaves
// no rank behind.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <string>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;

namespace {

// A tiny CNN on a small subset of Fashion-MNIST: seconds per trial even on shared cores.
std::string cnn_config(const std::string& name, int data, int model, int max_trials, int epochs, int samples) {
  return "name: " + name + "\nseed: 11\nobjective: {metric: val_accuracy, mode: max}\n"
         "search: {algorithm: random, max_trials: " + std::to_string(max_trials) + "}\n"
         "space:\n  lr: {type: float, low: 0.03, high: 0.1}\n"
         "trainer:\n  kind: cnn\n  epochs: " + std::to_string(epochs) +
         "\n  batch_size: 64\n  max_train_samples: " + std::to_string(samples) +
         "\n  max_test_samples: 200\n"
         "  layers: [{kind: conv, filters: 4, kernel: 3}, {kind: maxpool, size: 2}, {kind: dense, units: 32}]\n"
         "resources:\n  groups: 1\n  ranks: {data: " + std::to_string(data) + ", model: " + std::to_string(model) +
         "}\n  heartbeat_interval: 0.5\n  heartbeat_timeout: 30\n";
}

}  // namespace

TEST_CASE("a 2 x 2 group trains a cnn trial through the master") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", cnn_config("grid2x2", 2, 2, 1, 1, 1000));
  const std::string db = dir.file("c.db");
  // No thread settings here: the launcher gives each of the 4 ranks max(1, cores / 4) threads.
  ChildProcess p = start_hpctune({"run", cfg, "--db", db}, dir.file("log"), {});
  auto status = p.wait_for(240s);
  REQUIRE_MESSAGE(status.has_value(), tail_file(dir.file("log"), 40));
  CHECK_MESSAGE(status->success(), tail_file(dir.file("log"), 40));
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == store::TrialState::kDone);
  CHECK(trials[0].attempt == 1);
  REQUIRE(trials[0].metrics.is_object());
  CHECK(trials[0].metrics.value("val_accuracy", 0.0) > 0.3);  // 10 classes: chance is 0.1
  CHECK(trials[0].metrics.value("test_accuracy", 0.0) > 0.3);
  // One checkpoint per pipeline stage, written by data rank 0 of each.
  const std::string trial_dir = db + ".trials/" + std::to_string(trials[0].id);
  CHECK(std::filesystem::exists(trial_dir + "/checkpoint-stage0.bin"));
  CHECK(std::filesystem::exists(trial_dir + "/checkpoint-stage1.bin"));
  check_no_orphans(db);
}

TEST_CASE("a 1 x 2 group on two GPUs trains a cnn trial as a pipeline, one stage on each rank's own device") {
  TempDir dir;
  std::string config = cnn_config("gpupipe", 1, 2, 1, 1, 600);
  config.replace(config.find("  kind: cnn\n"), 12, "  kind: cnn\n  device: gpu\n");
  config += "  gpus: [0, 1]\n  gpus_per_rank: 1\n";
  const std::string cfg = dir.write("c.yaml", config);
  const std::string db = dir.file("c.db");
  // The CPU stand-in of the CUDA library with two devices (its NCCL over Unix sockets).
  ChildProcess p = start_hpctune({"run", cfg, "--db", db}, dir.file("log"),
                                 {{"OMP_NUM_THREADS", "1"}, {"HPCTUNE_GPU_LIBRARY", HPCTUNE_GPU_CPU_LIBRARY},
                                  {"HPCTUNE_CPU_REFERENCE_DEVICES", "2"}});
  auto status = p.wait_for(240s);
  REQUIRE_MESSAGE(status.has_value(), tail_file(dir.file("log"), 40));
  CHECK_MESSAGE(status->success(), tail_file(dir.file("log"), 40));
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == store::TrialState::kDone);
  CHECK(trials[0].metrics.value("val_accuracy", 0.0) > 0.3);  // 10 classes: chance is 0.1
  const std::string trial_dir = db + ".trials/" + std::to_string(trials[0].id);
  CHECK(std::filesystem::exists(trial_dir + "/checkpoint-stage0.bin"));
  CHECK(std::filesystem::exists(trial_dir + "/checkpoint-stage1.bin"));
  // The group's log names the leader's stage and how the stages pass activations.
  const std::string logs = read_file(db + ".trials/logs/group-0.log");
  CHECK_MESSAGE(logs.find("training stage 0 of 2") != std::string::npos, logs);
  CHECK_MESSAGE(logs.find("the 2 stages pass activations and gradients with NCCL send/receive") != std::string::npos, logs);
  check_no_orphans(db);
}

TEST_CASE("a hung rank: the watchdog ends the group and the trial runs again") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", cnn_config("hung", 2, 1, 1, 1, 600));
  const std::string db = dir.file("c.db");
  const std::string hang = dir.file("hang-once");
  ChildProcess p = start_hpctune({"run", cfg, "--db", db}, dir.file("log"),
                                  {{"OMP_NUM_THREADS", "1"},
                                   {"HPCTUNE_TEST_HANG_FILE", hang},
                                   {"HPCTUNE_TEST_HANG_RANK", "1"},
                                   {"HPCTUNE_COLLECTIVE_TIMEOUT_S", "2"}});
  auto status = p.wait_for(240s);
  REQUIRE_MESSAGE(status.has_value(), tail_file(dir.file("log"), 40));
  CHECK_MESSAGE(status->success(), tail_file(dir.file("log"), 40));
  CHECK(std::filesystem::exists(hang));  // rank 1 did hang
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == store::TrialState::kDone);
  CHECK(trials[0].attempt == 2);  // the first attempt died with the group
  bool exited = false, restarted = false;
  for (const auto& e : read_events(db)) {
    exited = exited || e.kind == "group_exited";
    restarted = restarted || e.kind == "group_restarted";
  }
  CHECK(exited);
  CHECK(restarted);
  const std::string log = read_file(dir.file("c.db.trials/logs/group-0.log"));
  CHECK(log.find("ending the trainer group") != std::string::npos);
  check_no_orphans(db);
}

TEST_CASE("a SIGKILLed master leaves no rank of a group behind") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", cnn_config("orphans", 2, 1, 1, 50, 2000));
  const std::string db = dir.file("c.db");
  ChildProcess p = start_hpctune({"run", cfg, "--db", db}, dir.file("log"), {{"OMP_NUM_THREADS", "1"}});
  // mpirun and its two ranks carry the campaign on their command lines; wait for a running trial.
  const bool running = wait_until(
      [&] {
        auto t = read_trials(db);
        return workers_of(db).size() >= 3 && !t.empty() && t[0].state == store::TrialState::kRunning;
      },
      120s);
  REQUIRE_MESSAGE(running, tail_file(dir.file("log"), 40));
  kill(p.pid(), SIGKILL);
  (void)p.wait_for(10s);
  check_no_orphans(db);
}
