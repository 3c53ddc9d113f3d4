// GPUs as resources in real campaigns, without a GPU: `hpctune run` with the local backend and a
// command trainer whose program writes the CUDA_VISIBLE_DEVICES it sees, with its start and end
// times, and reports them. 4 groups over gpus [0, 1, 2, 3] (each running trial on its own device,
// the store recording it, `trial` and `status` showing it); trials_per_gpu 2 with 3 groups on one
// device (never 3 trials on it at once); a SIGKILLed worker (its device freed, its retry given one);
// 2 ranks of a group, each with its own device; `validate` refusing what cannot fit; an older
// database shown with no devices; resources.mps under a stand-in nvidia-cuda-mps-control (the
// daemon up before any trial, its variables in every trial, quit at the end, after a failure and
// Ctrl-C; none with trials_per_gpu 1 or mps off; on without the program an error, auto a warning).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/device_list.h"
#include "common/system.h"
#include "config/config.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;

namespace {

// One run of the program, from the file it appends to.
struct Run {
  int64_t trial = 0, attempt = 0;
  std::string visible, group_gpus;  // CUDA_VISIBLE_DEVICES, HPCTUNE_GPUS
  double t0 = 0, t1 = 0;
};

// The program: waits `hold` seconds (60 for the first attempt of trial 1 when `hang_first`), then
// appends "trial attempt CUDA_VISIBLE_DEVICES HPCTUNE_GPUS t0 t1" to runs.txt and reports.
std::string write_program(TempDir& dir, const std::string& hold, bool hang_first = false) {
  const std::string runs = dir.file("runs.txt");
  std::string text = "#!/bin/sh\nt0=$(date +%s.%N)\ntouch \"" + dir.path + "/started-$HPCTUNE_TRIAL_ID-$HPCTUNE_ATTEMPT\"\n";
  if (hang_first) text += "if [ \"$HPCTUNE_TRIAL_ID\" = 1 ] && [ \"$HPCTUNE_ATTEMPT\" = 1 ]; then sleep 60; fi\n";
  text += "sleep " + hold + "\nt1=$(date +%s.%N)\n"
          "echo \"$HPCTUNE_TRIAL_ID $HPCTUNE_ATTEMPT ${CUDA_VISIBLE_DEVICES:--} ${HPCTUNE_GPUS:--} $t0 $t1\" >> \"" + runs + "\"\n"
          "echo \"hpctune-report {\\\"val_accuracy\\\": 0.5, \\\"t1\\\": $t1}\"\n";
  return dir.write("program.sh", text);
}

std::vector<Run> read_runs(const std::string& path) {
  std::vector<Run> out;
  std::istringstream in(read_file(path));
  Run r;
  while (in >> r.trial >> r.attempt >> r.visible >> r.group_gpus >> r.t0 >> r.t1) out.push_back(r);
  return out;
}

std::string campaign_yaml(const std::string& name, const std::string& program, int trials, const std::string& resources) {
  return "name: " + name + "\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n"
         "search: {algorithm: random, max_trials: " + std::to_string(trials) + "}\n"
         "space:\n  lr: {type: float, low: 0.001, high: 1.0, log: true}\n"
         "trainer:\n  kind: command\n  command: \"sh " + program + "\"\n"
         "resources:\n  threads: 1\n" + resources;
}

// The most runs that overlap at one moment.
int max_overlap(const std::vector<Run>& runs) {
  std::vector<std::pair<double, int>> edges;
  for (const auto& r : runs) {
    edges.push_back({r.t0, +1});
    edges.push_back({r.t1, -1});
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same instant
  int now = 0, most = 0;
  for (const auto& [t, d] : edges) most = std::max(most, now += d);
  return most;
}

// trial id -> attempt -> the devices the store recorded for it.
std::map<int64_t, std::map<int64_t, std::string>> recorded_devices(const std::string& db) {
  std::map<int64_t, std::map<int64_t, std::string>> out;
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  for (const auto& t : read_trials(db)) {
    auto attempts = (*s)->attempts(t.id);
    REQUIRE(attempts.ok());
    for (const auto& a : *attempts) out[t.id][a["attempt"].get<int64_t>()] = a["devices"].get<std::string>();
  }
  return out;
}

std::string run_cli(TempDir& dir, const std::vector<std::string>& args, int* code = nullptr) {
  const std::string log = dir.file("cli.log");
  std::filesystem::remove(log);
  auto status = run_hpctune(args, log, std::chrono::seconds(30));
  if (code) *code = status.signaled ? -1 : status.code;
  return read_file(log);
}

}  // namespace

TEST_CASE("campaign: 4 groups over gpus [0, 1, 2, 3]: each running trial sees its own device, and the store records it") {
  TempDir dir;
  const std::string program = write_program(dir, "0.5");
  const std::string cfg = dir.write(
      "four.yaml", campaign_yaml("gpu-four", program, 8, "  groups: 4\n  gpus_per_rank: 1\n  gpus: [0, 1, 2, 3]\n"));
  const std::string db = dir.file("four.db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("four.log"), std::chrono::seconds(60));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("four.log")));

  const auto runs = read_runs(dir.file("runs.txt"));
  REQUIRE(runs.size() == 8);
  const auto recorded = recorded_devices(db);
  std::set<std::string> used;
  for (const auto& r : runs) {
    CAPTURE(r.trial);
    CHECK(r.visible == r.group_gpus);  // one rank: the group's device is the rank's
    CHECK((r.visible == "0" || r.visible == "1" || r.visible == "2" || r.visible == "3"));
    CHECK(recorded.at(r.trial).at(r.attempt) == r.visible);
    used.insert(r.visible);
  }
  // Trials that ran at the same time never shared a device.
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = i + 1; j < runs.size(); ++j)
      if (runs[i].t0 < runs[j].t1 && runs[j].t0 < runs[i].t1) {
        CAPTURE(runs[i].trial);
        CAPTURE(runs[j].trial);
        CHECK(runs[i].visible != runs[j].visible);
      }
  CHECK(max_overlap(runs) >= 2);  // the groups did run side by side
  CHECK(used.size() >= 2);

  // `hpctune trial` lists each attempt's GPUs; `status` names the best trial's.
  const int64_t some = runs.front().trial;
  const std::string trial_text = run_cli(dir, {"trial", db, std::to_string(some)});
  CHECK(trial_text.find("GPUs") != std::string::npos);
  const std::string json_text = run_cli(dir, {"trial", db, std::to_string(some), "--format", "json"});
  CHECK(json_text.find("\"devices\": \"" + runs.front().visible + "\"") != std::string::npos);
  const std::string status_text = run_cli(dir, {"status", db});
  CHECK(status_text.find(", GPUs ") != std::string::npos);
  check_no_orphans(db);
}

TEST_CASE("campaign: trials_per_gpu 2 with 3 groups on gpus [0] never runs 3 trials on the device at once") {
  TempDir dir;
  const std::string program = write_program(dir, "0.6");
  const std::string cfg = dir.write(
      "packed.yaml",
      campaign_yaml("gpu-packed", program, 6, "  groups: 3\n  gpus_per_rank: 1\n  gpus: [0]\n  trials_per_gpu: 2\n"));
  const std::string db = dir.file("packed.db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("packed.log"), std::chrono::seconds(60));
  const std::string log = read_file(dir.file("packed.log"));
  REQUIRE_MESSAGE(status.success(), log);
  CHECK(log.find("3 groups, of which 2 hold GPUs at once") != std::string::npos);

  const auto runs = read_runs(dir.file("runs.txt"));
  REQUIRE(runs.size() == 6);
  for (const auto& r : runs) CHECK(r.visible == "0");
  const auto recorded = recorded_devices(db);
  for (const auto& [trial, attempts] : recorded)
    for (const auto& [attempt, devices] : attempts) CHECK(devices == "0");
  CHECK(max_overlap(runs) == 2);  // packed two to the device, never three
  check_no_orphans(db);
}

TEST_CASE("campaign: a SIGKILLed worker frees its device, and the group waiting for it runs the trial's retry") {
  TempDir dir;
  const std::string program = write_program(dir, "0.1", /*hang_first=*/true);
  // One device, two groups: one holds it, the other waits. When the holder's worker is killed, its
  // device must be freed for the waiting group to start and run the retry (the restarted holder waits).
  const std::string cfg =
      dir.write("lost.yaml", campaign_yaml("gpu-lost", program, 2, "  groups: 2\n  gpus_per_rank: 1\n  gpus: [0]\n"));
  const std::string db = dir.file("lost.db");
  launch::ChildProcess run = start_hpctune({"run", cfg, "--db", db}, dir.file("lost.log"));
  REQUIRE_MESSAGE(wait_until([&] { return std::filesystem::exists(dir.file("started-1-1")); }, std::chrono::seconds(30)),
                  read_file(dir.file("lost.log")));
  // While it runs, `status` names the trial's device.
  std::string live;
  CHECK_MESSAGE(wait_until(
                    [&] {
                      live = run_cli(dir, {"status", db, "--format", "json"});
                      return live.find("\"running_gpus\"") != std::string::npos;
                    },
                    std::chrono::seconds(10)),
                live);
  const auto running = nlohmann::json::parse(live, nullptr, false)["running_gpus"];
  REQUIRE(running.size() == 1);
  CHECK(running[0]["trial"] == 1);
  CHECK(running[0]["devices"] == "0");
  CHECK(run_cli(dir, {"status", db}).find("Running on GPUs:") != std::string::npos);
  const auto workers = workers_of(db);
  REQUIRE(workers.size() == 1);
  REQUIRE(::kill(workers[0], SIGKILL) == 0);
  auto status = run.wait_for(std::chrono::seconds(60));
  REQUIRE_MESSAGE(status.has_value(), read_file(dir.file("lost.log")));
  REQUIRE_MESSAGE(status->success(), read_file(dir.file("lost.log")));

  const auto trials = read_trials(db);
  REQUIRE(trials.size() == 2);
  const auto recorded = recorded_devices(db);
  const auto& first = recorded.at(1);
  REQUIRE(first.size() == 2);  // attempt 1 lost with the worker, attempt 2 ran
  CHECK(first.at(1) == "0");
  CHECK(first.at(2) == "0");
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto attempts = (*s)->attempts(1);
  REQUIRE(attempts.ok());
  CHECK((*attempts)[0]["state"] == "lost");
  CHECK((*attempts)[1]["state"] == "done");
  CHECK((*attempts)[0]["group_id"] != (*attempts)[1]["group_id"]);  // the group that waited for the device
  CHECK(read_file(dir.file("lost.log")).find("2 groups, of which 1 hold GPUs at once") != std::string::npos);
  for (const auto& t : trials) CHECK(t.state == store::TrialState::kDone);
  check_no_orphans(db);
}

TEST_CASE("campaign: a group of 2 ranks gets 2 devices, and each rank of the program sees its own") {
  if (find_in_path("mpirun").empty()) {
    // A machine without Open MPI cannot run 2 ranks at all (test_command_trainer says the same).
    MESSAGE("skipped: no mpirun in PATH");
    return;
  }
  TempDir dir;
  const std::string ranks_log = dir.file("ranks.txt");
  const std::string program = dir.write(
      "ranks.sh", "#!/bin/sh\necho \"$HPCTUNE_TRIAL_ID $LOCAL_RANK $CUDA_VISIBLE_DEVICES $HPCTUNE_GPUS\" >> \"" +
                      ranks_log + "\"\n[ \"$RANK\" = 0 ] && echo 'hpctune-report {\"val_accuracy\": 0.5}'\nexit 0\n");
  const std::string cfg = dir.write(
      "ranks.yaml",
      campaign_yaml("gpu-ranks", program, 2, "  groups: 2\n  ranks: {data: 2}\n  gpus_per_rank: 1\n  gpus: [0, 1, 2, 3]\n"));
  const std::string db = dir.file("ranks.db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("ranks.log"), std::chrono::seconds(90));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("ranks.log")));
  const auto recorded = recorded_devices(db);
  std::istringstream in(read_file(ranks_log));
  int64_t trial = 0, rank = 0;
  std::string visible, group;
  int lines = 0;
  while (in >> trial >> rank >> visible >> group) {
    ++lines;
    CAPTURE(trial);
    CAPTURE(rank);
    const auto devices = parse_device_list(group);
    REQUIRE(devices.has_value());
    REQUIRE(devices->size() == 2);
    CHECK(visible == std::to_string((*devices)[static_cast<size_t>(rank)]));  // rank r: the r-th of the group's
    CHECK(recorded.at(trial).at(1) == group);
  }
  CHECK(lines == 4);  // 2 trials x 2 ranks
  check_no_orphans(db);
}

TEST_CASE("validate: more GPUs per group than gpus lists, or a device listed twice, is refused with its place") {
  TempDir dir;
  const std::string base = campaign_yaml("gpu-bad", "/bin/true", 2, "");
  const std::string too_many = dir.write("many.yaml", base + "  ranks: {data: 2}\n  gpus_per_rank: 2\n  gpus: [0, 1, 2]\n");
  int code = 0;
  std::string out = run_cli(dir, {"validate", too_many}, &code);
  CHECK(code == 2);
  CHECK(out.find("many.yaml:13:3: resources.gpus_per_rank: 2 GPU(s) per rank x 2 rank(s) = 4 GPUs per group, but "
                 "resources.gpus lists 3") != std::string::npos);
  const std::string twice = dir.write("twice.yaml", base + "  gpus: [1, 1]\n");
  out = run_cli(dir, {"validate", twice}, &code);
  CHECK(code == 2);
  CHECK(out.find("twice.yaml:12:13: resources.gpus[1]: device 1 is listed twice") != std::string::npos);
  const std::string fine = dir.write("fine.yaml", base + "  groups: 4\n  gpus_per_rank: 1\n  gpus: [0, 1, 2, 3]\n");
  out = run_cli(dir, {"validate", fine}, &code);
  CHECK_MESSAGE(code == 0, out);
}

TEST_CASE("an older database (schema v6, before attempts.devices) shows its trials with no devices") {
  TempDir dir;
  const std::string db = dir.file("old.db");
  {
    auto config_text = campaign_yaml("gpu-old", "/bin/true", 1, "");
    auto parsed = config::parse_config(config_text, "old.yaml");
    REQUIRE(parsed.ok());
    auto v6 = store::Store::open(db, {.migrate_to = 6});
    REQUIRE(v6.ok());
    store::CampaignRow c;
    c.name = "gpu-old";
    c.config_text = config_text;
    c.config_json = parsed->normalized;
    c.state = "completed";
    c.created_at = 1000;
    c.finished_at = 1010;
    auto campaign = (*v6)->create_campaign(c);
    REQUIRE(campaign.ok());
    store::TrialRow t;
    t.campaign_id = *campaign;
    t.params = {{"lr", 0.1}};
    t.created_at = 1000;
    auto id = (*v6)->insert_trial(t);
    REQUIRE(id.ok());
    REQUIRE((*v6)->mark_assigned(*id, 1, 0, 1, 1001).ok());
    REQUIRE((*v6)->mark_running(*id, 1, 1002).ok());
    REQUIRE((*v6)->finish_trial(*id, 1, store::TrialState::kDone, {{"val_accuracy", 0.5}}, 0.5, 1, "", 1003).ok());
  }
  int code = 0;
  const std::string trial_text = run_cli(dir, {"trial", db, "1"}, &code);
  CHECK_MESSAGE(code == 0, trial_text);
  CHECK(trial_text.find("GPUs") != std::string::npos);
  const std::string json_text = run_cli(dir, {"trial", db, "1", "--format", "json"}, &code);
  CHECK(code == 0);
  CHECK(json_text.find("\"devices\": \"\"") != std::string::npos);
  const std::string status_text = run_cli(dir, {"status", db}, &code);
  CHECK_MESSAGE(code == 0, status_text);
  CHECK(status_text.find("GPUs") == std::string::npos);
  // Opened read-only: still v6.
  auto ro = store::Store::open_readonly(db);
  REQUIRE(ro.ok());
  CHECK((*ro)->schema_version() == 6);
}

TEST_CASE("campaign: gpus auto takes the devices nvidia-smi lists; with none, the run stops at once naming why") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("bin"));
  const std::string smi = dir.write("bin/nvidia-smi", "#!/bin/sh\nprintf '0\\n1\\n'\n");
  ::chmod(smi.c_str(), 0700);
  const std::string program = write_program(dir, "0.2");
  const std::string cfg =
      dir.write("auto.yaml", campaign_yaml("gpu-auto", program, 4, "  groups: 2\n  gpus_per_rank: 1\n  gpus: auto\n"));
  auto run_with_path = [&](const std::string& db, const std::string& log) {
    launch::SpawnOptions o;
    o.argv = {HPCTUNE_BINARY, "run", cfg, "--db", db};
    o.env["PATH"] = dir.file("bin") + ":/usr/local/bin:/usr/bin:/bin";
    o.stdout_path = log;
    o.stderr_path = "=stdout";
    auto child = launch::ChildProcess::spawn(o);
    REQUIRE(child.ok());
    auto status = child->wait_for(std::chrono::seconds(60));
    REQUIRE(status.has_value());
    return *status;
  };
  auto status = run_with_path(dir.file("auto.db"), dir.file("auto.log"));
  const std::string log = read_file(dir.file("auto.log"));
  REQUIRE_MESSAGE(status.success(), log);
  CHECK(log.find("resources.gpus: auto found 2 GPU(s): 0,1") != std::string::npos);
  for (const auto& r : read_runs(dir.file("runs.txt"))) CHECK((r.visible == "0" || r.visible == "1"));
  for (const auto& [trial, attempts] : recorded_devices(dir.file("auto.db")))
    for (const auto& [attempt, devices] : attempts) CHECK((devices == "0" || devices == "1"));

  // nvidia-smi fails (a node without a driver): no GPU, and a config that needs one cannot run.
  dir.write("bin/nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\nexit 9\n");
  status = run_with_path(dir.file("none.db"), dir.file("none.log"));
  const std::string none = read_file(dir.file("none.log"));
  CHECK_MESSAGE(status.code == 2, none);
  CHECK(none.find("resources.gpus_per_rank: 1 GPU(s) per rank x 1 rank(s) = 1 GPUs per group, more than this node has "
                  "(resources.gpus: auto found none (nvidia-smi failed (exit code 9)))") != std::string::npos);
}

TEST_CASE("campaign: a built-in trainer's group of 2 ranks under mpirun: each worker rank narrows CUDA_VISIBLE_DEVICES to its own") {
  if (find_in_path("mpirun").empty()) {
    MESSAGE("skipped: no mpirun in PATH");
    return;
  }
  TempDir dir;
  const std::string cfg = dir.write(
      "cnn.yaml",
      "name: gpu-cnn-ranks\nseed: 11\nobjective: {metric: val_accuracy, mode: max}\n"
      "search: {algorithm: random, max_trials: 1}\nspace:\n  lr: {type: float, low: 0.03, high: 0.1}\n"
      "trainer:\n  kind: cnn\n  epochs: 1\n  batch_size: 64\n  max_train_samples: 256\n  max_test_samples: 100\n"
      "  layers: [{kind: conv, filters: 2, kernel: 3}, {kind: maxpool, size: 2}, {kind: dense, units: 8}]\n"
      "resources:\n  groups: 1\n  ranks: {data: 2}\n  gpus_per_rank: 1\n  gpus: [5, 7]\n  heartbeat_timeout: 30\n");
  const std::string db = dir.file("cnn.db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file("cnn.log"), std::chrono::seconds(180));
  REQUIRE_MESSAGE(status.success(), read_file(dir.file("cnn.log")));
  const std::string group_log = read_file(db + ".trials/logs/group-0.log");
  CHECK_MESSAGE(group_log.find("local rank 0: CUDA_VISIBLE_DEVICES=5 (of the group's 5,7)") != std::string::npos, group_log);
  CHECK_MESSAGE(group_log.find("local rank 1: CUDA_VISIBLE_DEVICES=7 (of the group's 5,7)") != std::string::npos, group_log);
  CHECK(recorded_devices(db).at(1).at(1) == "5,7");
  check_no_orphans(db);
}

// --- resources.mps: a private MPS control daemon, under a stand-in nvidia-cuda-mps-control -------

namespace {

// The stand-in in <dir>/bin, appending to <dir>/mps.txt one line per call:
//   -d:   "start T <pipe> <log> <pipe mode:uid:type> <log mode:uid:type>", and a sleeping "daemon"
//         (its own session, as the real one's) whose pid goes to <dir>/daemon.pid
//   else: "<its stdin's first line> T <pipe> <log>", killing the daemon on quit.
void write_mps_stand_in(TempDir& dir) {
  std::filesystem::create_directories(dir.file("bin"));
  const std::string record = dir.file("mps.txt"), pid = dir.file("daemon.pid");
  const std::string path = dir.write(
      "bin/nvidia-cuda-mps-control",
      "#!/bin/sh\nt=$(date +%s.%N)\nif [ \"$1\" = -d ]; then\n"
      "  echo \"start $t $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY "
      "$(stat -c %a:%u:%F \"$CUDA_MPS_PIPE_DIRECTORY\" | tr ' ' _) $(stat -c %a:%u:%F \"$CUDA_MPS_LOG_DIRECTORY\" | tr ' ' _)\""
      " >> \"" + record + "\"\n"
      "  setsid sleep 120 </dev/null >/dev/null 2>&1 &\n  echo $! > \"" + pid + "\"\n  exit 0\nfi\n"
      "read cmd\necho \"$cmd $t $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY\" >> \"" + record + "\"\n"
      "[ \"$cmd\" = quit ] && kill \"$(cat \"" + pid + "\")\"\nexit 0\n");
  ::chmod(path.c_str(), 0700);
}

// One run of the MPS program: "trial t0 t1 <CUDA_MPS_PIPE_DIRECTORY> <CUDA_MPS_LOG_DIRECTORY>" ("-": unset).
std::string write_mps_program(TempDir& dir, const std::string& hold) {
  return dir.write("mps-program.sh",
                   "#!/bin/sh\nt0=$(date +%s.%N)\ntouch \"" + dir.path + "/started-$HPCTUNE_TRIAL_ID-$HPCTUNE_ATTEMPT\"\n"
                   "sleep " + hold + "\nt1=$(date +%s.%N)\n"
                   "echo \"$HPCTUNE_TRIAL_ID $t0 $t1 ${CUDA_MPS_PIPE_DIRECTORY:--} ${CUDA_MPS_LOG_DIRECTORY:--}\" >> \"" +
                       dir.file("mps-runs.txt") + "\"\n"
                   "echo \"hpctune-report {\\\"val_accuracy\\\": 0.5}\"\n");
}

std::vector<std::vector<std::string>> words_per_line(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (!w.empty()) out.push_back(std::move(w));
  }
  return out;
}

// PATH with the stand-in first (`stand_in`), else only the tools the program needs (no real
// nvidia-cuda-mps-control of a GPU machine can be found through it).
std::map<std::string, std::string> mps_path(TempDir& dir, bool stand_in) {
  if (stand_in) return {{"PATH", dir.file("bin") + ":/usr/local/bin:/usr/bin:/bin"}};
  std::filesystem::create_directories(dir.file("tools"));
  for (const char* tool : {"sh", "date", "sleep", "touch"}) {
    std::error_code ec;
    std::filesystem::create_symlink(find_in_path(tool), dir.file(std::string("tools/") + tool), ec);
  }
  return {{"PATH", dir.file("tools")}};
}

launch::ExitStatus run_with(const std::vector<std::string>& args, const std::string& log,
                            std::map<std::string, std::string> env) {
  launch::ChildProcess child = start_hpctune(args, log, std::move(env));
  auto status = child.wait_for(std::chrono::seconds(90));
  REQUIRE_MESSAGE(status.has_value(), "hpctune did not finish in time; log:\n" << launch::tail_file(log, 40));
  return *status;
}

bool process_gone(const std::string& pid_file) {
  const std::string text = read_file(pid_file);
  if (text.empty()) return true;
  const pid_t pid = static_cast<pid_t>(std::stol(text));
  return wait_until([&] { return ::kill(pid, 0) != 0; }, std::chrono::seconds(10));
}

}  // namespace

TEST_CASE("campaign: trials_per_gpu 2 starts a private MPS daemon before any group; every trial sees it; quit at the end") {
  TempDir dir;
  write_mps_stand_in(dir);
  const std::string program = write_mps_program(dir, "0.3");
  const std::string cfg = dir.write(
      "mps.yaml", "name: gpu-mps\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n"
                  "search: {algorithm: random, max_trials: 4}\nspace:\n  lr: {type: float, low: 0.001, high: 1.0}\n"
                  "trainer:\n  kind: command\n  command: \"sh " + program + "\"\n"
                  "resources:\n  threads: 1\n  groups: 2\n  gpus_per_rank: 1\n  gpus: [0]\n  trials_per_gpu: 2\n");
  const std::string db = dir.file("mps.db");
  auto status = run_with({"run", cfg, "--db", db}, dir.file("mps.log"), mps_path(dir, true));
  const std::string log = read_file(dir.file("mps.log"));
  REQUIRE_MESSAGE(status.success(), log);
  CHECK(log.find("resources.mps: auto: starting a private MPS control daemon (" + dir.file("bin") +
                 "/nvidia-cuda-mps-control -d) for the 2 groups per GPU") != std::string::npos);
  CHECK(log.find("MPS: control daemon stopped") != std::string::npos);

  const auto calls = words_per_line(dir.file("mps.txt"));
  REQUIRE_MESSAGE(calls.size() == 2, read_file(dir.file("mps.txt")));
  REQUIRE(calls[0].size() == 6);
  REQUIRE(calls[1].size() == 4);
  CHECK(calls[0][0] == "start");
  CHECK(calls[1][0] == "quit");
  const std::string pipe = calls[0][2], logs = calls[0][3];
  const std::string mine = "700:" + std::to_string(::geteuid()) + ":directory";
  CHECK(calls[0][4] == mine);  // private: 0700, this user's, a directory (not a link)
  CHECK(calls[0][5] == mine);
  CHECK(calls[1][2] == pipe);  // quit reaches the same daemon
  CHECK(calls[1][3] == logs);
  const double started = std::stod(calls[0][1]), quit = std::stod(calls[1][1]);

  const auto runs = words_per_line(dir.file("mps-runs.txt"));
  REQUIRE(runs.size() == 4);
  for (const auto& r : runs) {
    REQUIRE(r.size() == 5);
    CAPTURE(r[0]);
    CHECK(r[3] == pipe);  // every trial's program sees both variables
    CHECK(r[4] == logs);
    CHECK(std::stod(r[1]) > started);  // the daemon was up before any group ran a trial
    CHECK(std::stod(r[2]) < quit);     // and asked to quit after the last
  }
  CHECK(process_gone(dir.file("daemon.pid")));
  CHECK_FALSE(std::filesystem::exists(pipe));  // its directory is removed with it
  CHECK_FALSE(std::filesystem::exists(logs));
  check_no_orphans(db);
}

TEST_CASE("campaign: no MPS daemon with trials_per_gpu 1 or mps off; on without the program stops the run; auto warns") {
  TempDir dir;
  write_mps_stand_in(dir);
  const std::string program = write_mps_program(dir, "0.1");
  auto config = [&](const std::string& name, const std::string& resources) {
    return dir.write(name + ".yaml", "name: " + name + "\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n"
                                     "search: {algorithm: random, max_trials: 2}\nspace:\n  lr: {type: float, low: 0.001, high: 1.0}\n"
                                     "trainer:\n  kind: command\n  command: \"sh " + program + "\"\n"
                                     "resources:\n  threads: 1\n  groups: 2\n  gpus_per_rank: 1\n" + resources);
  };
  std::string db, log;
  auto run = [&](const std::string& name, const std::string& resources, bool stand_in) {
    db = dir.file(name + ".db");
    auto status = run_with({"run", config(name, resources), "--db", db}, dir.file(name + ".log"), mps_path(dir, stand_in));
    log = read_file(dir.file(name + ".log"));
    return status;
  };
  auto unset_in_every_run = [&] {
    for (const auto& r : words_per_line(dir.file("mps-runs.txt"))) CHECK((r.size() == 5 && r[3] == "-" && r[4] == "-"));
  };
  SUBCASE("trials_per_gpu 1: nobody shares a device") {
    auto status = run("alone", "  gpus: [0, 1]\n  trials_per_gpu: 1\n", true);
    REQUIRE_MESSAGE(status.success(), log);
    CHECK(words_per_line(dir.file("mps-runs.txt")).size() == 2);
  }
  SUBCASE("mps: off") {
    auto status = run("off", "  gpus: [0]\n  trials_per_gpu: 2\n  mps: off\n", true);
    REQUIRE_MESSAGE(status.success(), log);
    CHECK(words_per_line(dir.file("mps-runs.txt")).size() == 2);
  }
  SUBCASE("auto without the program: a warning, and the groups run without it") {
    auto status = run("missing", "  gpus: [0]\n  trials_per_gpu: 2\n", false);
    REQUIRE_MESSAGE(status.success(), log);
    CHECK(log.find("warning: resources.mps: auto: nvidia-cuda-mps-control was not found in PATH") != std::string::npos);
    CHECK(words_per_line(dir.file("mps-runs.txt")).size() == 2);
  }
  SUBCASE("on without the program: the run stops before any group, naming it") {
    auto status = run("on", "  gpus: [0]\n  trials_per_gpu: 2\n  mps: on\n", false);
    CHECK_FALSE(status.success());
    CHECK(log.find("resources.mps: on, but nvidia-cuda-mps-control was not found in PATH") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.file("mps-runs.txt")));
  }
  CHECK(log.find("MPS: control daemon") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("mps.txt")));  // the stand-in never ran
  unset_in_every_run();
}

TEST_CASE("campaign: quit reaches the MPS daemon also when the campaign fails or is interrupted") {
  TempDir dir;
  write_mps_stand_in(dir);
  const std::string program = write_mps_program(dir, "60");
  const std::string cfg = dir.write(
      "fail.yaml", "name: gpu-mps-fail\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n"
                   "search: {algorithm: random, max_trials: 4}\nspace:\n  lr: {type: float, low: 0.001, high: 1.0}\n"
                   "trainer:\n  kind: command\n  command: \"sh " + program + "\"\n"
                   "resources:\n  threads: 1\n  groups: 2\n  gpus_per_rank: 1\n  gpus: [0]\n  trials_per_gpu: 2\n"
                   "  max_group_restarts: 0\n");
  const std::string db = dir.file("fail.db");
  launch::ChildProcess run = start_hpctune({"run", cfg, "--db", db}, dir.file("fail.log"), mps_path(dir, true));
  REQUIRE_MESSAGE(wait_until([&] { return std::filesystem::exists(dir.file("started-1-1")) &&
                                          std::filesystem::exists(dir.file("started-2-1")); },
                             std::chrono::seconds(30)),
                  read_file(dir.file("fail.log")));
  SUBCASE("every group lost, no restarts left: the campaign fails") {
    const auto workers = workers_of(db);
    REQUIRE(workers.size() == 2);
    for (pid_t w : workers) REQUIRE(::kill(w, SIGKILL) == 0);
    auto status = run.wait_for(std::chrono::seconds(60));
    REQUIRE_MESSAGE(status.has_value(), read_file(dir.file("fail.log")));
    CHECK_MESSAGE(!status->success(), read_file(dir.file("fail.log")));
  }
  SUBCASE("Ctrl-C") {
    run.signal(SIGINT);
    auto status = run.wait_for(std::chrono::seconds(60));
    REQUIRE_MESSAGE(status.has_value(), read_file(dir.file("fail.log")));
  }
  const auto calls = words_per_line(dir.file("mps.txt"));
  REQUIRE_MESSAGE(calls.size() == 2, read_file(dir.file("fail.log")));
  CHECK(calls[0][0] == "start");
  CHECK(calls[1][0] == "quit");
  CHECK(calls[1][2] == calls[0][2]);
  CHECK(process_gone(dir.file("daemon.pid")));
  CHECK_FALSE(std::filesystem::exists(calls[0][2]));
  check_no_orphans(db);
}
