// Issue 26: a rank that dies inside a real campaign (`hpctune run`, groups under mpirun, started by
// the launcher with --enable-recovery because the campaign can run downpour or ssp trials).
//   - downpour: a data replica SIGKILLed mid-trial leaves the trial finishing on the others; the
//     store holds a replica_dropped event and the mode; the group then ends and is started again.
//   - ssp: the same; the dead replica stops holding the others back after the group's timeout.
//   - allreduce in such a campaign: a dead rank still ends the group within its timeout, and the
//     attempt is queued again.
//   - downpour: a parameter-server shard that dies fails the attempt, which runs again from the
//     checkpoint of the last epoch.
// The kill is the trainer's test aid HPCTUNE_TEST_KILL_REPLICA (trainers/classifier_training.cpp),
// once per campaign (HPCTUNE_TEST_KILL_ONCE_FILE). Tiny MLPs on 800 images and a group timeout
// (HPCTUNE_COLLECTIVE_TIMEOUT_S) of kSurvivorTimeoutS where the trial must survive the loss: on 2
// cores beside a busy loop (issue 35: the suite must hold under load) 8 s once took a live, starved
// rank for dead and ended the group; 8 s where the group ends anyway (allreduce).
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>

#include "dashboard/api.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;

namespace {

constexpr int kSurvivorTimeoutS = 20;

// A grid campaign of tiny MLP trials on one group of `ranks` data ranks; `space` and `trainer` are
// YAML lines added to those sections.
std::string config(const std::string& name, int ranks, int max_trials, const std::string& space,
                   const std::string& trainer, int epochs = 2) {
  return "name: " + name + "\nseed: 4\nobjective: {metric: val_accuracy, mode: max}\n"
         "search: {algorithm: grid, max_trials: " + std::to_string(max_trials) + "}\n"
         "space:\n" + space +
         "trainer:\n  kind: mlp\n  hidden: [32]\n  lr: 0.1\n  batch_size: 32\n  epochs: " + std::to_string(epochs) + "\n"
         "  max_train_samples: 800\n  max_test_samples: 200\n  shard_optimizer: sgd\n" + trainer +
         "resources:\n  groups: 1\n  ranks: {data: " + std::to_string(ranks) + ", model: 1}\n  threads: 1\n"
         "  heartbeat_interval: 0.5\n  heartbeat_timeout: 60\n";
}

// Runs the campaign with replica `kill` (data rank:step) SIGKILLed once, the group's timeout
// `timeout_s`; returns its log.
std::string run_with_kill(TempDir& dir, const std::string& cfg, const std::string& db, const std::string& kill,
                          int timeout_s) {
  ChildProcess p = start_hpctune({"run", cfg, "--db", db}, dir.file("log"),
                                  {{"OMP_NUM_THREADS", "1"},
                                   {"HPCTUNE_TEST_KILL_REPLICA", kill},
                                   {"HPCTUNE_TEST_KILL_ONCE_FILE", dir.file("killed-once")},
                                   {"HPCTUNE_COLLECTIVE_TIMEOUT_S", std::to_string(timeout_s)}});
  auto status = p.wait_for(180s);
  REQUIRE_MESSAGE(status.has_value(), tail_file(dir.file("log"), 40));
  CHECK_MESSAGE(status->success(), tail_file(dir.file("log"), 40));
  CHECK(std::filesystem::exists(dir.file("killed-once")));  // the replica was killed
  return read_file(dir.file("log"));
}

std::string sync_mode_of(const std::string& db, int64_t trial) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto mode = (*s)->sync_mode(trial);
  REQUIRE(mode.ok());
  return *mode;
}

int count_events(const std::string& db, const std::string& kind) {
  int n = 0;
  for (const auto& e : read_events(db)) n += e.kind == kind ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("downpour in a campaign: a replica SIGKILLed mid-trial, the trial finishes on the others") {
  TempDir dir;
  // Data ranks 0 and 1 are replicas, rank 2 holds the one shard; replica 1 dies before its 4th
  // minibatch of trial 1. Trial 2 runs on the group started again. Its rate is 0.05, not above 0.1:
  // downpour's replicas do not wait for each other, and at 0.15 on a loaded machine (3 busy loops
  // on 2 cores) this model ended anywhere from 0.23 to 0.69 test accuracy, once 0.075 in CI; at
  // 0.05, 0.55-0.645 in 14 runs, and 0.1 0.49-0.68.
  const std::string cfg = dir.write("c.yaml", config("dp-kill", 3, 2, "  lr: {type: choice, values: [0.1, 0.05]}\n",
                                                    "  sync: downpour\n  ps_placement: own_ranks\n  ps_shards: 1\n"));
  const std::string db = dir.file("c.db");
  const std::string log = run_with_kill(dir, cfg, db, "1:3", kSurvivorTimeoutS);
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 2);
  for (const auto& t : trials) {
    CAPTURE(t.id);
    CHECK(t.state == store::TrialState::kDone);
    // Neither ran twice: the kill cost no attempt, the group's end neither. When one did (a flake
    // seen under ctest's load), the master's and the group's logs say who ended the group.
    CHECK_MESSAGE(t.attempt == 1, "master:\n" << tail_file(dir.file("log"), 30) << "\ngroup:\n"
                                               << tail_file(db + ".trials/logs/group-0.log", 60));
    CHECK(sync_mode_of(db, t.id) == "downpour");
    REQUIRE(t.metrics.is_object());
    // Learned: above chance (10 classes, 0.1 on 200 test images, whose standard deviation there is 0.021:
    // 0.15 is 2.4 of them above). Asynchronous, so no fixed figure (above).
    CHECK(t.metrics.value("test_accuracy", 0.0) > 0.15);
  }
  const auto& hit = trials[0];
  CHECK(hit.metrics.value("sync_replicas_dropped", -1.0) == 1.0);
  CHECK(hit.metrics.value("sync_replica0_fraction", 0.0) == 1.0);
  // Replica 1 pushed 3 of its minibatches (of 2 epochs x 11 of the 23) before it died. On a busy
  // machine the shard may answer its fetch while its third push is still arriving; it then dies
  // half-way through that push, which the shard gives up after the timeout and says so.
  const double fraction1 = hit.metrics.value("sync_replica1_fraction", 1.0);
  const std::string group_log = read_file(db + ".trials/logs/group-0.log");
  if (fraction1 == doctest::Approx(2.0 / 22)) {
    CHECK_MESSAGE(group_log.find("gave up 1 message(s) from a data replica that stopped half-way") != std::string::npos,
                  tail_file(db + ".trials/logs/group-0.log", 60));
  } else {
    CHECK(fraction1 == doctest::Approx(3.0 / 22));
  }
  CHECK(trials[1].metrics.value("sync_replicas_dropped", -1.0) == 0.0);
  bool dropped = false;
  for (const auto& e : read_events(db)) {
    if (e.kind != "replica_dropped") continue;
    dropped = true;
    CHECK(e.trial_id == hit.id);
    CHECK(e.attempt == 1);
    CHECK(e.detail.value("replica", -1) == 1);
    CHECK(e.detail.value("sync", "") == "downpour");
  }
  CHECK(dropped);
  CHECK(count_events(db, "group_restarted") >= 1);  // the group that lost a rank was started again
  CHECK(log.find("replica_dropped") != std::string::npos);
  // `hpctune trial` shows the mode and the event.
  REQUIRE(run_hpctune({"trial", db, std::to_string(hit.id)}, dir.file("trial.txt")).success());
  const std::string shown = read_file(dir.file("trial.txt"));
  CHECK(shown.find("sync mode") != std::string::npos);
  CHECK(shown.find("downpour") != std::string::npos);
  CHECK(shown.find("replica_dropped") != std::string::npos);
  // The dashboard's trial page reads the same: the mode and the event.
  dashboard::Api api({db}, std::chrono::milliseconds(0));
  REQUIRE(api.load().ok());
  auto page = api.get("/api/campaigns/0/trials/" + std::to_string(hit.id), {});
  REQUIRE(page.status == 200);
  CHECK(page.body.value("sync_mode", "") == "downpour");
  bool listed = false;
  for (const auto& e : page.body["events"]) listed = listed || e.value("kind", "") == "replica_dropped";
  CHECK(listed);
  check_no_orphans(db);
}

TEST_CASE("ssp in a campaign: a replica SIGKILLed mid-trial is dropped and the others finish") {
  TempDir dir;
  // Three replicas, staleness 2: replica 1 dies at the first step of epoch 2 (step 23; there no
  // message of it is half sent: a sender that dies mid-message leaves the receiver's wait for the
  // rest to time out, and the attempt is queued again). The leader drops it after the group's
  // timeout of silence, and the two others train on, without another collective of the group.
  // Momentum 0: stale gradients act as momentum of their own, and with sgd's 0.9 this tiny 2-epoch
  // model ends anywhere between 0.18 and 0.55 test accuracy at staleness 1-4, with or without a
  // drop (0.745 at staleness 0); with momentum 0 it ends at 0.68-0.71 (README, "ssp and momentum").
  const std::string cfg = dir.write("c.yaml", config("ssp-kill", 3, 1, "  staleness: {type: choice, values: [2]}\n",
                                                    "  sync: ssp\n  momentum: 0\n"));
  const std::string db = dir.file("c.db");
  (void)run_with_kill(dir, cfg, db, "1:23", kSurvivorTimeoutS);
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  const auto& t = trials[0];
  CHECK(t.state == store::TrialState::kDone);
  CHECK(t.attempt == 1);
  CHECK(sync_mode_of(db, t.id) == "ssp");
  REQUIRE(t.metrics.is_object());
  // Replica 1 is dropped. On a starved machine (a clean-clone test run beside a build: load 10+)
  // replica 2, alive, can also be silent for the timeout while it waits for the staleness bound: it
  // is dropped too, by design, and counts again if heard before the end (ReplicaExchange::store,
  // "slow, not dead"); its fraction then falls short of 1 but stays above the dead one's (0.565
  // once). Reported, not failed; the dead replica's drop and the survivors' model stay checked.
  const double dropped_metric = t.metrics.value("sync_replicas_dropped", -1.0);
  CHECK(dropped_metric >= 1.0);
  CHECK(t.metrics.value("sync_replica0_fraction", 0.0) == 1.0);
  const double fraction2 = t.metrics.value("sync_replica2_fraction", 0.0);
  if (dropped_metric == 1.0) CHECK(fraction2 == 1.0);
  else MESSAGE("the live replica 2 was dropped too for a while (silent for the timeout on a busy machine): fraction " << fraction2);
  // Replica 1 made steps 0..22 of 2 x 23.
  CHECK(t.metrics.value("sync_replica1_fraction", 1.0) == doctest::Approx(23.0 / 46));
  CHECK(fraction2 > 23.0 / 46);
  // The survivors' model is trained: 0.665-0.69 in 6 runs, the same as without a drop (0.68-0.705);
  // an update lost or applied twice around the drop would show here (chance is 0.1).
  CHECK(t.metrics.value("test_accuracy", 0.0) > 0.55);
  int dropped = 0, dead_dropped = 0;
  for (const auto& e : read_events(db)) {
    if (e.kind != "replica_dropped") continue;
    ++dropped;
    CHECK(e.trial_id == t.id);
    const int replica = e.detail.value("replica", -1);
    CHECK((replica == 1 || (replica == 2 && dropped_metric > 1.0)));  // replica 2 only as above
    dead_dropped += replica == 1 ? 1 : 0;
    CHECK(e.detail.value("sync", "") == "ssp");
  }
  CHECK(dead_dropped == 1);
  CHECK(dropped == static_cast<int>(dropped_metric));
  check_no_orphans(db);
}

TEST_CASE("downpour in a campaign: a dead parameter-server shard fails the attempt, which resumes from the checkpoint") {
  TempDir dir;
  // Shards on the replicas' ranks: data rank 1 holds shard 1 and dies in epoch 3 (its 26th
  // minibatch; 11 per epoch), after the checkpoint of epoch 1 at least (the leader may still be
  // validating epoch 2: downpour's replicas do not wait for each other). Replica 0's next fetch of
  // shard 1 gets no answer: the group ends, the attempt runs again and resumes from there.
  const std::string cfg = dir.write("c.yaml", config("shard-kill", 2, 1, "  lr: {type: choice, values: [0.1]}\n",
                                                    "  sync: downpour\n  ps_placement: replicas\n", 3));
  const std::string db = dir.file("c.db");
  (void)run_with_kill(dir, cfg, db, "1:25", kSurvivorTimeoutS);
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  const auto& t = trials[0];
  CHECK(t.state == store::TrialState::kDone);
  CHECK(t.attempt == 2);
  REQUIRE(t.metrics.is_object());
  // From the checkpoint of epoch 1 or 2; or of epoch 3 when a busy machine let replica 0 finish its
  // epochs before replica 1 reached the minibatch it dies at (downpour's replicas do not wait for each
  // other: seen once in a clean-clone run beside other work): its shard then dies under finish().
  const double resumed = t.metrics.value("resumed_epoch", 0.0);
  const bool leader_done = resumed == 3.0;
  CHECK((resumed == 1.0 || resumed == 2.0 || leader_done));
  // The resumed attempt reported the epochs after its checkpoint only.
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto metrics = (*s)->metrics(t.id);
  REQUIRE(metrics.ok());
  int64_t first_step_of_2 = 99;
  for (const auto& m : *metrics)
    if (m.attempt == 2) first_step_of_2 = std::min(first_step_of_2, m.step);
  // (After every epoch, the resumed attempt sends the last epoch's report again.)
  CHECK(first_step_of_2 == static_cast<int64_t>(resumed) + (leader_done ? 0 : 1));
  // Learned: above chance, as in the first case (0.15 is 2.4 standard deviations above 0.1 on 200 images).
  CHECK(t.metrics.value("test_accuracy", 0.0) > 0.15);
  CHECK(sync_mode_of(db, t.id) == "downpour");
  CHECK(count_events(db, "group_restarted") >= 1);
  CHECK(count_events(db, "replica_dropped") == 0);
  const std::string group_log = read_file(dir.file("c.db.trials/logs/group-0.log"));
  // The leader notices the dead shard at its next fetch, or, when it was already past its last
  // minibatch (a busy machine; seen once in CI), in finish() waiting for the shards' summaries.
  if (!leader_done)
    CHECK_MESSAGE(group_log.find("(a dead shard fails the attempt)") != std::string::npos,
                  "resumed from epoch " << resumed << "\nmaster:\n" << tail_file(dir.file("log"), 30) << "\ngroup:\n"
                                        << tail_file(db + ".trials/logs/group-0.log", 80));
  check_no_orphans(db);
}

TEST_CASE("allreduce in a campaign that runs groups with --enable-recovery: a dead rank still ends the group") {
  TempDir dir;
  // The grid's first trial is allreduce: rank 1 dies at step 3; the survivor's allreduce gives up
  // at the group's timeout, the group ends, the attempt runs again. The ssp trial is untouched.
  const std::string cfg = dir.write("c.yaml", config("ar-kill", 2, 2, "  sync: {type: choice, values: [allreduce, ssp]}\n", ""));
  const std::string db = dir.file("c.db");
  const auto t0 = std::chrono::steady_clock::now();
  (void)run_with_kill(dir, cfg, db, "1:3", 8);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 2);
  std::map<std::string, int64_t> attempts;
  for (const auto& t : trials) {
    CHECK(t.state == store::TrialState::kDone);
    attempts[t.params.value("sync", "")] = t.attempt;
    CHECK(sync_mode_of(db, t.id) == t.params.value("sync", ""));
  }
  CHECK(attempts["allreduce"] == 2);
  CHECK(attempts["ssp"] == 1);
  CHECK(count_events(db, "group_restarted") >= 1);
  CHECK(seconds < 120);  // no wait past the group's timeout (8 s) beyond the restart
  // The ssp trial (staleness 2, sgd's default momentum 0.9) warns that the two momenta overshoot;
  // the allreduce trial does not.
  const std::string group_log = read_file(db + ".trials/logs/group-0.log");
  auto warnings = [&](const std::string& text) {
    int n = 0;
    for (size_t at = group_log.find(text); at != std::string::npos; at = group_log.find(text, at + 1)) ++n;
    return n;
  };
  CHECK(warnings("warning: ssp with staleness 2 and momentum 0.9: stale gradients add momentum of their own") == 1);
  check_no_orphans(db);
}
