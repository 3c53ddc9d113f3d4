// GPUs as resources without a GPU: the device allocator (one device per group, trials_per_gpu,
// waiting, freeing), the device lists and each rank's slice, `auto` through a fake nvidia-smi (with
// its deadline), the local launcher deferring a group until its devices are free (real child
// processes that print the CUDA_VISIBLE_DEVICES they got), the config's checks, and the store's
// attempts.devices on a new and on an older (v6) database.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/device_list.h"
#include "config/config.h"
#include "launch/device_allocator.h"
#include "launch/launcher.h"
#include "store/store.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using hpctune::testing::TempDir;
using launch::DeviceAllocator;
using Clock = std::chrono::steady_clock;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string executable(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.write(name, text);
  ::chmod(path.c_str(), 0700);
  return path;
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace

// --- the allocator -----------------------------------------------------------------------------

TEST_CASE("allocator: 4 groups over gpus [0, 1, 2, 3] each get a device of their own") {
  DeviceAllocator a({0, 1, 2, 3}, /*per_device=*/1, /*per_group=*/1);
  REQUIRE(a.satisfiable().ok());
  std::set<int> seen;
  for (int64_t g = 0; g < 4; ++g) {
    auto d = a.acquire(g);
    REQUIRE(d.has_value());
    REQUIRE(d->size() == 1);
    seen.insert((*d)[0]);
  }
  CHECK(seen == std::set<int>{0, 1, 2, 3});
  // A fifth group waits: every device holds its one group.
  CHECK_FALSE(a.acquire(4).has_value());
  // Asking again for a group that holds devices gives the same ones.
  CHECK(a.acquire(2) == std::vector<int>{2});
  // Sparse ids are ids, not positions.
  DeviceAllocator sparse({7, 3}, 1, 1);
  CHECK(sparse.acquire(0) == std::vector<int>{3});
  CHECK(sparse.acquire(1) == std::vector<int>{7});
}

TEST_CASE("allocator: trials_per_gpu 2 never puts a third group on a device; freed devices go to the waiting") {
  DeviceAllocator a({0}, /*per_device=*/2, /*per_group=*/1);
  CHECK(a.acquire(0) == std::vector<int>{0});
  CHECK(a.acquire(1) == std::vector<int>{0});
  CHECK(a.load(0) == 2);
  CHECK_FALSE(a.acquire(2).has_value());  // waits
  CHECK(a.load(0) == 2);
  a.release(0);  // group 0 ended (or was lost)
  CHECK(a.load(0) == 1);
  CHECK(a.acquire(2) == std::vector<int>{0});
  CHECK_FALSE(a.acquire(0).has_value());  // the restarted group 0 waits in turn
  a.release(7);                           // a group that holds nothing: nothing
  CHECK(a.load(0) == 2);

  // Two devices, two per device: the least loaded first, so the groups spread before they pack.
  DeviceAllocator b({0, 1}, 2, 1);
  CHECK(b.acquire(0) == std::vector<int>{0});
  CHECK(b.acquire(1) == std::vector<int>{1});
  CHECK(b.acquire(2) == std::vector<int>{0});
  CHECK(b.acquire(3) == std::vector<int>{1});
  CHECK_FALSE(b.acquire(4).has_value());
}

TEST_CASE("allocator: a multi-rank group gets distinct devices; one that can never fit is refused") {
  DeviceAllocator a({0, 1, 2, 3}, 1, /*per_group=*/2);  // e.g. 1 GPU per rank x 2 ranks
  CHECK(a.acquire(0) == std::vector<int>{0, 1});
  CHECK(a.acquire(1) == std::vector<int>{2, 3});
  CHECK_FALSE(a.acquire(2).has_value());
  a.release(0);
  CHECK(a.acquire(2) == std::vector<int>{0, 1});
  CHECK(a.held(2) == std::vector<int>{0, 1});
  CHECK(a.held(0).empty());

  // trials_per_gpu 4 does not let one group take a device twice.
  DeviceAllocator too_big({0}, 4, 2);
  auto s = too_big.satisfiable();
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
  CHECK(s.error().message().find("needs 2 GPUs") != std::string::npos);
  CHECK_FALSE(too_big.acquire(0).has_value());
  // No GPUs asked for: every group gets none, at once.
  DeviceAllocator none({}, 1, 0);
  CHECK(none.satisfiable().ok());
  CHECK(none.acquire(5) == std::vector<int>{});
}

TEST_CASE("device lists: the CUDA_VISIBLE_DEVICES form, and each rank's slice of its group's") {
  CHECK(format_device_list({0, 2, 3}) == "0,2,3");
  CHECK(format_device_list({}).empty());
  CHECK(parse_device_list("0,2,3") == std::vector<int>{0, 2, 3});
  CHECK(parse_device_list("") == std::vector<int>{});
  for (const char* bad : {"0,", ",1", "a", "1,,2", "-1", "123456", "0 1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_device_list(bad).has_value());
  }
  const std::vector<int> group = {4, 5, 6, 7};
  CHECK(rank_devices(group, 2, 0) == std::vector<int>{4, 5});
  CHECK(rank_devices(group, 2, 1) == std::vector<int>{6, 7});
  CHECK(rank_devices(group, 2, 2).empty());
  CHECK(rank_devices(group, 1, 3) == std::vector<int>{7});
  CHECK(rank_devices(group, 0, 0).empty());
}

// --- resources.gpus: auto ----------------------------------------------------------------------

TEST_CASE("auto: the indices nvidia-smi lists; none when it is absent, fails, prints garbage or hangs past the deadline") {
  TempDir dir;
  std::string why;
  const auto fine = executable(dir, "smi-fine", "#!/bin/sh\n[ \"$1 $2\" = \"--query-gpu=index --format=csv,noheader\" ] || exit 9\nprintf '0\\n1\\n 3\\n'\n");
  CHECK(launch::detect_gpus(std::chrono::seconds(5), &why, fine) == std::vector<int>{0, 1, 3});

  CHECK(launch::detect_gpus(std::chrono::seconds(5), &why, dir.file("no-such-smi")).empty());
  CHECK(why.find("not found") != std::string::npos);

  const auto failing = executable(dir, "smi-fail", "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 6\n");
  CHECK(launch::detect_gpus(std::chrono::seconds(5), &why, failing).empty());
  CHECK(why.find("exit code 6") != std::string::npos);

  const auto garbage = executable(dir, "smi-garbage", "#!/bin/sh\necho 'No devices were found'\n");
  CHECK(launch::detect_gpus(std::chrono::seconds(5), &why, garbage).empty());
  CHECK(why.find("other than device indices") != std::string::npos);

  const auto hanging = executable(dir, "smi-hang", "#!/bin/sh\nexec sleep 60\n");
  const auto t0 = Clock::now();
  CHECK(launch::detect_gpus(std::chrono::milliseconds(300), &why, hanging).empty());
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(took < 3.0);  // the deadline, not the 60 s sleep
  CHECK(why.find("did not answer within 300 ms") != std::string::npos);
}

// --- the local launcher ------------------------------------------------------------------------

TEST_CASE("local launcher: a group waits for a free GPU, starts when a group exits or is killed, and sees its devices") {
  TempDir dir;
  // The "worker": argv is `worker --master EP --group G ...`; it writes what it got and sleeps.
  const std::string program = executable(
      dir, "fake-worker",
      "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES|$HPCTUNE_GPUS|$HPCTUNE_GPUS_PER_RANK\" > \"" + dir.path +
          "/group-$5.env\"\nexec sleep 60\n");
  launch::LocalLauncherOptions o;
  o.program = program;
  o.master_endpoint = "ipc:///nowhere";
  o.resources.gpus_per_rank = 1;
  o.resources.gpus = {0};
  o.resources.trials_per_gpu = 2;
  auto launcher = launch::make_local_launcher(o);
  for (int64_t g = 0; g < 3; ++g) REQUIRE(launcher->start(g, "").ok());
  CHECK(launcher->state(0) == launch::GroupState::kStarting);
  CHECK(launcher->state(1) == launch::GroupState::kStarting);
  CHECK(launcher->state(2) == launch::GroupState::kPending);  // deferred, not failed
  CHECK(launcher->devices(0) == std::vector<int>{0});
  CHECK(launcher->devices(2).empty());
  // Each group's own file, each waited for (with the deadline of wait_for): the groups are
  // separate processes, and group 1 may write its file before group 0 does.
  CHECK(wait_for([&] { return slurp(dir.file("group-0.env")) == "0|0|1\n"; }));
  CHECK(wait_for([&] { return slurp(dir.file("group-1.env")) == "0|0|1\n"; }));
  CHECK_FALSE(std::filesystem::exists(dir.file("group-2.env")));
  CHECK(launcher->poll_exits().empty());
  CHECK(launcher->state(2) == launch::GroupState::kPending);

  // Group 0 is lost: killed; its exit frees device 0 and the waiting group 2 starts on it.
  launcher->kill(0);
  std::vector<launch::GroupExit> exits;
  REQUIRE(wait_for([&] {
    for (auto& e : launcher->poll_exits()) exits.push_back(e);
    return !exits.empty();
  }));
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].group == 0);
  CHECK(exits[0].how.find("signal 9") != std::string::npos);
  CHECK(launcher->state(2) == launch::GroupState::kStarting);
  CHECK(launcher->devices(2) == std::vector<int>{0});
  CHECK(launcher->devices(0).empty());
  REQUIRE(wait_for([&] { return slurp(dir.file("group-2.env")) == "0|0|1\n"; }));

  // Group 0 restarted: it waits now (1 and 2 hold the device); killed while waiting, it ends as an exit.
  REQUIRE(launcher->start(0, "").ok());
  CHECK(launcher->state(0) == launch::GroupState::kPending);
  launcher->kill(0);
  exits = launcher->poll_exits();
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].group == 0);
  CHECK(exits[0].how == "killed while waiting for GPUs");
  CHECK(launcher->state(0) == launch::GroupState::kExited);
  launcher->stop_all(std::chrono::milliseconds(500));
  CHECK(launcher->state(1) == launch::GroupState::kExited);
}

namespace {
// A launcher without packs: each group its own process.
std::vector<int64_t> plain_groups(int64_t group) {
  launch::LocalLauncherOptions o;
  o.program = "/bin/true";
  o.master_endpoint = "ipc:///nowhere";
  return launch::make_local_launcher(o)->process_groups(group);
}
}  // namespace

TEST_CASE("local launcher: packed groups (pack_slots) start k to a process once all k are started, and exit together") {
  TempDir dir;
  // The "worker" writes its devices, credentials and arguments, then sleeps.
  const std::string program = executable(
      dir, "fake-worker",
      "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES|$HPCTUNE_SECRET|$*\" > \"" + dir.path + "/group-$5.env\"\nexec sleep 60\n");
  launch::LocalLauncherOptions o;
  o.program = program;
  o.master_endpoint = "ipc:///nowhere";
  o.resources.gpus_per_rank = 1;
  o.resources.gpus = {0};
  o.resources.trials_per_gpu = 2;
  o.resources.pack_slots = 2;
  o.resources.groups = 3;  // packs {0, 1} and {2}
  auto launcher = launch::make_local_launcher(o);
  REQUIRE(launcher->start(0, "a").ok());
  CHECK(launcher->state(0) == launch::GroupState::kPending);  // waits for group 1, its pack's other group
  REQUIRE(launcher->start(1, "b").ok());
  CHECK(launcher->state(0) == launch::GroupState::kStarting);
  CHECK(launcher->state(1) == launch::GroupState::kStarting);
  CHECK(launcher->devices(1) == std::vector<int>{0});
  // What dies together, for the master's packed dispatch (scheduler.h).
  CHECK(launcher->process_groups(1) == std::vector<int64_t>{0, 1});
  CHECK(launcher->process_groups(2) == std::vector<int64_t>{2});
  CHECK(plain_groups(2) == std::vector<int64_t>{2});
  REQUIRE(launcher->start(2, "c").ok());
  CHECK(launcher->state(2) == launch::GroupState::kPending);  // the pack holds GPU 0 alone
  REQUIRE(wait_for([&] { return !slurp(dir.file("group-0.env")).empty(); }));
  CHECK(slurp(dir.file("group-0.env")) == "0|a,b|worker --master ipc:///nowhere --group 0 --slots 2\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("group-1.env")));  // one process for both

  // Killing group 1 kills the pack: both its groups exit, and pack {2} gets the GPU, with one slot.
  launcher->kill(1);
  std::vector<launch::GroupExit> exits;
  REQUIRE(wait_for([&] {
    for (auto& e : launcher->poll_exits()) exits.push_back(e);
    return exits.size() >= 2;
  }));
  REQUIRE(exits.size() == 2);
  CHECK(exits[0].group == 0);
  CHECK(exits[1].group == 1);
  CHECK(launcher->state(2) == launch::GroupState::kStarting);
  REQUIRE(wait_for([&] { return !slurp(dir.file("group-2.env")).empty(); }));
  CHECK(slurp(dir.file("group-2.env")) == "0|c|worker --master ipc:///nowhere --group 2 --slots 1\n");
  launcher->stop_all(std::chrono::milliseconds(500));
}

TEST_CASE("local launcher: a group that could never get its GPUs is an error, not a wait; without GPUs nothing changes") {
  TempDir dir;
  const std::string program =
      executable(dir, "fake-worker", "#!/bin/sh\nenv | grep -c -E '^(CUDA_VISIBLE_DEVICES|HPCTUNE_GPUS)=' > \"" + dir.path +
                                         "/group-$5.env\"\nexec sleep 60\n");
  launch::LocalLauncherOptions o;
  o.program = program;
  o.master_endpoint = "ipc:///nowhere";
  o.resources.gpus_per_rank = 2;
  o.resources.gpus = {0};
  auto launcher = launch::make_local_launcher(o);
  auto s = launcher->start(0, "");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
  CHECK(launcher->state(0) == launch::GroupState::kExited);

  o.resources.gpus_per_rank = 0;
  auto plain = launch::make_local_launcher(o);
  REQUIRE(plain->start(0, "").ok());
  CHECK(plain->state(0) == launch::GroupState::kStarting);
  CHECK(plain->devices(0).empty());
  // The parent's CUDA_VISIBLE_DEVICES (if any) passes through untouched; hpctune adds nothing.
  const bool parent_has = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
  REQUIRE(wait_for([&] { return !slurp(dir.file("group-0.env")).empty(); }));
  CHECK(slurp(dir.file("group-0.env")) == (parent_has ? "1\n" : "0\n"));
  plain->stop_all(std::chrono::milliseconds(500));
}

// --- the config --------------------------------------------------------------------------------

namespace {

const std::string kBase =
    "name: g\nobjective: {metric: val_accuracy}\nsearch: {algorithm: random, max_trials: 2}\n"
    "space: {lr: {type: float, low: 0.01, high: 0.1}}\ntrainer: {kind: command, command: \"true\"}\n";

}  // namespace

TEST_CASE("config: gpus_per_rank, gpus and trials_per_gpu; defaults are exactly today's") {
  auto plain = config::parse_config(kBase, "plain.yaml");
  REQUIRE_MESSAGE(plain.ok(), plain.error().to_string());
  CHECK(plain->resources.gpus_per_rank == 0);
  CHECK_FALSE(plain->resources.gpus.has_value());  // auto
  CHECK(plain->resources.trials_per_gpu == 1);

  auto gpus = config::parse_config(
      kBase + "resources: {groups: 4, gpus_per_rank: 1, gpus: [0, 1, 2, 3], trials_per_gpu: 2}\n", "gpus.yaml");
  REQUIRE_MESSAGE(gpus.ok(), gpus.error().to_string());
  CHECK(gpus->resources.gpus_per_rank == 1);
  CHECK(gpus->resources.gpus == std::vector<int>{0, 1, 2, 3});
  CHECK(gpus->resources.trials_per_gpu == 2);

  auto automatic = config::parse_config(kBase + "resources: {gpus_per_rank: 8, gpus: auto}\n", "auto.yaml");
  REQUIRE_MESSAGE(automatic.ok(), automatic.error().to_string());  // auto is checked when the campaign starts
  CHECK_FALSE(automatic->resources.gpus.has_value());
}

TEST_CASE("config: more GPUs per group than gpus lists, a device listed twice, and bad values are refused with their place") {
  struct Case {
    std::string resources;
    std::string where;  // "file:line:column: key"
    std::string says;
  };
  const std::vector<Case> cases = {
      {"resources:\n  gpus: [0]\n  gpus_per_rank: 2\n", "bad.yaml:8:3: resources.gpus_per_rank",
       "2 GPU(s) per rank x 1 rank(s) = 2 GPUs per group, but resources.gpus lists 1"},
      {"resources:\n  ranks: {data: 2}\n  gpus_per_rank: 1\n  gpus: [3]\n", "bad.yaml:8:3: resources.gpus_per_rank",
       "1 GPU(s) per rank x 2 rank(s) = 2 GPUs per group"},
      {"resources:\n  gpus: [0, 1, 0]\n", "bad.yaml:7:16: resources.gpus[2]", "device 0 is listed twice"},
      {"resources:\n  gpus: [0, -1]\n", "bad.yaml:7:13: resources.gpus[1]", "a device id is an integer 0..65535"},
      {"resources:\n  gpus: all\n", "bad.yaml:7:3: resources.gpus", "expected auto or a list of device ids"},
      {"resources:\n  trials_per_gpu: 0\n", "bad.yaml:7:3: resources.trials_per_gpu", "below the minimum 1"},
      {"resources:\n  gpus_per_rank: -1\n", "bad.yaml:7:3: resources.gpus_per_rank", "below the minimum 0"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.resources);
    auto r = config::parse_config(kBase + c.resources, "bad.yaml");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kConfig);
    CHECK(r.error().message().rfind(c.where, 0) == 0);
    CHECK(r.error().message().find(c.says) != std::string::npos);
  }
}

// --- the store ---------------------------------------------------------------------------------

namespace {

int64_t add_campaign(store::Store& db) {
  store::CampaignRow c;
  c.name = "gpu";
  c.config_text = "name: gpu\n";
  c.created_at = 1000;
  auto id = db.create_campaign(c);
  REQUIRE(id.ok());
  return *id;
}

int64_t add_trial(store::Store& db, int64_t campaign, int64_t seq) {
  store::TrialRow t;
  t.campaign_id = campaign;
  t.seq = seq;
  t.created_at = 1000;
  auto id = db.insert_trial(t);
  REQUIRE(id.ok());
  return *id;
}

}  // namespace

TEST_CASE("store: each attempt keeps its GPUs; a v6 database opens, reads and migrates with none") {
  TempDir dir;
  const std::string path = dir.file("old.db");
  int64_t old_trial = 0;
  {
    auto v6 = store::Store::open(path, {.migrate_to = 6});
    REQUIRE(v6.ok());
    const int64_t c = add_campaign(**v6);
    old_trial = add_trial(**v6, c, 0);
    // A writer at v6 (not migrated) records the attempt without devices.
    REQUIRE((*v6)->mark_assigned(old_trial, 1, 0, 7, 1001, "5").ok());
  }
  {
    auto ro = store::Store::open_readonly(path);
    REQUIRE(ro.ok());
    CHECK((*ro)->schema_version() == 6);
    auto attempts = (*ro)->attempts(old_trial);
    REQUIRE(attempts.ok());
    REQUIRE(attempts->size() == 1);
    CHECK((*attempts)[0]["devices"] == "");
    auto changed = (*ro)->attempts_changed(0, {});
    REQUIRE(changed.ok());
    REQUIRE(changed->size() == 1);
    CHECK((*changed)[0].devices.empty());
  }
  auto db = store::Store::open(path);
  REQUIRE(db.ok());
  CHECK((*db)->schema_version() == store::Store::latest_version());  // migrated past v7
  CHECK((*(*db)->attempts(old_trial))[0]["devices"] == "");
  const int64_t fresh = add_trial(**db, 1, 1);
  REQUIRE((*db)->mark_assigned(fresh, 1, 3, 9, 1002, "2,3").ok());
  auto attempts = (*db)->attempts(fresh);
  REQUIRE(attempts.ok());
  REQUIRE(attempts->size() == 1);
  CHECK((*attempts)[0]["devices"] == "2,3");
  auto changed = (*db)->attempts_changed(0, {});
  REQUIRE(changed.ok());
  REQUIRE(changed->size() == 2);
  CHECK((*changed)[1].devices == "2,3");
}
