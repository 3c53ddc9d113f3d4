// resources.mps without a GPU: a stand-in nvidia-cuda-mps-control (a script that records its argv,
// the two MPS variables, the directories' mode, owner and type, and what it read on stdin; `-d`
// forks a sleeping "daemon" that quit kills). The daemon (launch/mps_daemon.h): its private
// directories, quit at stop, the deadlines of `-d` and quit; the decision (scheduler's
// mps_control: auto only when groups share a GPU, off never, on without the program an error,
// auto without it a warning); the config's choices and places. Whole campaigns under a stand-in
// are in test_gpu_campaign.cpp.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "config/config.h"
#include "launch/mps_daemon.h"
#include "scheduler/launcher_options.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using hpctune::testing::TempDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The stand-in, `nvidia-cuda-mps-control` in `bin`, appending one line per call to `record`:
//   -d:   "start <pipe> <log> <pipe mode:uid:type> <log mode:uid:type>" and a sleeping daemon
//         (its own session, as the real one) whose pid goes to <pipe>/daemon.pid
//   else: "<stdin's first line> <pipe> <log>", killing the daemon on quit
// `on_start` / `on_quit` replace the normal behaviour of each (a failure, a hang).
std::string write_stand_in(const TempDir& dir, const std::string& bin, const std::string& record,
                           const std::string& on_start = "", const std::string& on_quit = "") {
  std::filesystem::create_directories(bin);
  const std::string path = bin + "/nvidia-cuda-mps-control";
  std::ofstream out(path);
  out << "#!/bin/sh\n"
         "if [ \"$1\" = -d ]; then\n"
         "  echo \"start $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY "
         "$(stat -c %a:%u:%F \"$CUDA_MPS_PIPE_DIRECTORY\" | tr ' ' _) "
         "$(stat -c %a:%u:%F \"$CUDA_MPS_LOG_DIRECTORY\" | tr ' ' _)\" >> \""
      << record << "\"\n"
      << on_start
      << "  setsid sleep 60 </dev/null >/dev/null 2>&1 &\n"
         "  echo $! > \"$CUDA_MPS_PIPE_DIRECTORY/daemon.pid\"\n"
         "  exit 0\n"
         "fi\n"
         "read cmd\n"
         "echo \"$cmd $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY\" >> \""
      << record << "\"\n"
      << on_quit
      << "[ \"$cmd\" = quit ] && kill \"$(cat \"$CUDA_MPS_PIPE_DIRECTORY/daemon.pid\")\"\n"
         "exit 0\n";
  out.close();
  ::chmod(path.c_str(), 0700);
  (void)dir;
  return path;
}

std::vector<std::vector<std::string>> record_lines(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    out.push_back(w);
  }
  return out;
}

launch::MpsDaemon::Options options(const std::string& control, const std::string& base,
                                  std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  launch::MpsDaemon::Options o;
  o.control = control;
  o.base = base;
  o.deadline = deadline;
  return o;
}

bool alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// Waits up to 10 s for `pid` to be gone (the stand-in's daemon is a grandchild: init reaps it).
bool gone_within_deadline(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !alive(pid);
}

// PATH set for the scope (mps_control looks the program up there).
struct ScopedPath {
  std::string old;
  explicit ScopedPath(const std::string& path) : old(std::getenv("PATH") ? std::getenv("PATH") : "") {
    ::setenv("PATH", path.c_str(), 1);
  }
  ~ScopedPath() { ::setenv("PATH", old.c_str(), 1); }
};

}  // namespace

TEST_CASE("mps daemon: -d with both variables in private directories (0700, this user's), quit with the same at stop") {
  TempDir dir;
  const std::string record = dir.file("record.txt");
  const std::string control = write_stand_in(dir, dir.file("bin"), record);
  auto started = launch::MpsDaemon::start(options(control, dir.path));
  REQUIRE_MESSAGE(started.ok(), started.error().to_string());
  auto& mps = *started;
  const std::string pipe = mps->environment().at("CUDA_MPS_PIPE_DIRECTORY");
  const std::string logs = mps->environment().at("CUDA_MPS_LOG_DIRECTORY");
  CHECK(mps->environment().size() == 2);
  CHECK(pipe == mps->directory() + "/pipe");
  CHECK(logs == mps->directory() + "/log");
  CHECK(mps->directory().rfind(dir.path + "/hpctune-mps-", 0) == 0);
  for (const std::string& d : {mps->directory(), pipe, logs}) {
    CAPTURE(d);
    struct stat st {};
    REQUIRE(::lstat(d.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(st.st_uid == ::geteuid());
  }
  auto lines = record_lines(record);
  REQUIRE(lines.size() == 1);
  const std::string mine = "700:" + std::to_string(::geteuid()) + ":directory";
  CHECK(lines[0] == std::vector<std::string>{"start", pipe, logs, mine, mine});
  const pid_t daemon = std::stoi(slurp(pipe + "/daemon.pid"));
  CHECK(alive(daemon));

  const std::string where = mps->directory();
  REQUIRE(mps->stop().ok());
  lines = record_lines(record);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1] == std::vector<std::string>{"quit", pipe, logs});
  CHECK(gone_within_deadline(daemon));
  CHECK_FALSE(std::filesystem::exists(where));  // removed once the daemon quit
  // Once: a second stop (and the destructor) sends nothing more.
  CHECK(mps->stop().ok());
  mps.reset();
  CHECK(record_lines(record).size() == 2);
}

TEST_CASE("mps daemon: the destructor sends quit (the failure and Ctrl-C ways out of the driver)") {
  TempDir dir;
  const std::string record = dir.file("record.txt");
  const std::string control = write_stand_in(dir, dir.file("bin"), record);
  std::string pipe;
  {
    auto started = launch::MpsDaemon::start(options(control, dir.path));
    REQUIRE(started.ok());
    pipe = (*started)->environment().at("CUDA_MPS_PIPE_DIRECTORY");
  }
  const auto lines = record_lines(record);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0][0] == "start");
  CHECK(lines[1] == std::vector<std::string>{"quit", pipe, lines[0][2]});
  CHECK_FALSE(std::filesystem::exists(pipe));
}

TEST_CASE("mps daemon: -d that fails or hangs is an error within the deadline, quit is still sent, nothing is left") {
  TempDir dir;
  const std::string record = dir.file("record.txt");
  SUBCASE("fails") {
    const std::string control =
        write_stand_in(dir, dir.file("bin"), record, "  echo 'cannot start: no devices' >&2; exit 3\n");
    auto started = launch::MpsDaemon::start(options(control, dir.path));
    REQUIRE_FALSE(started.ok());
    CHECK(started.error().code() == Errc::kFailed);
    CHECK(started.error().message().find(control + " -d: exit code 3") != std::string::npos);
    CHECK(started.error().message().find("cannot start: no devices") != std::string::npos);
  }
  SUBCASE("hangs") {
    const std::string control = write_stand_in(dir, dir.file("bin"), record, "  exec sleep 60\n");
    const auto t0 = std::chrono::steady_clock::now();
    auto started = launch::MpsDaemon::start(options(control, dir.path, std::chrono::milliseconds(1500)));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_FALSE(started.ok());
    CHECK(started.error().message().find("did not return within 1500 ms") != std::string::npos);
    CHECK(took < 10.0);  // the deadline (and quit's), not the 60 s sleep
  }
  const auto lines = record_lines(record);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0][0] == "start");
  CHECK(lines[1][0] == "quit");
  // Nothing of ours is left in the base directory.
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    CHECK(e.path().filename().string().rfind("hpctune-mps-", 0) != 0);
}

TEST_CASE("mps daemon: -d and then quit both fail: the error says both, and the directory is kept, named") {
  TempDir dir;
  const std::string record = dir.file("record.txt");
  const std::string control = write_stand_in(dir, dir.file("bin"), record, "  exit 3\n", "exit 4\n");
  auto started = launch::MpsDaemon::start(options(control, dir.path));
  REQUIRE_FALSE(started.ok());
  const std::string message = started.error().message();
  CHECK(message.find(control + " -d: exit code 3; then echo quit | " + control + ": exit code 4") != std::string::npos);
  std::string kept;
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    if (e.path().filename().string().rfind("hpctune-mps-", 0) == 0) kept = e.path().string();
  REQUIRE_FALSE(kept.empty());
  CHECK(message.find("CUDA_MPS_PIPE_DIRECTORY=" + kept + "/pipe") != std::string::npos);
  CHECK(message.find("then remove " + kept) != std::string::npos);
}

TEST_CASE("mps daemon: quit that hangs past the deadline is an error naming how to stop it; its directory is kept") {
  TempDir dir;
  const std::string record = dir.file("record.txt");
  const std::string control = write_stand_in(dir, dir.file("bin"), record, "", "exec sleep 60\n");
  auto started = launch::MpsDaemon::start(options(control, dir.path, std::chrono::milliseconds(2000)));
  REQUIRE(started.ok());
  const std::string where = (*started)->directory();
  const std::string pipe = (*started)->environment().at("CUDA_MPS_PIPE_DIRECTORY");
  const pid_t daemon = std::stoi(slurp(pipe + "/daemon.pid"));
  Status stopped = (*started)->stop();
  REQUIRE_FALSE(stopped.ok());
  CHECK(stopped.error().message().find("did not return within 2000 ms") != std::string::npos);
  CHECK(stopped.error().message().find("CUDA_MPS_PIPE_DIRECTORY=" + pipe) != std::string::npos);
  CHECK(std::filesystem::exists(pipe));  // what reaches the daemon stays
  ::kill(daemon, SIGKILL);
  std::filesystem::remove_all(where);
}

TEST_CASE("mps daemon: the next master of a campaign stops the daemon a killed master left; other campaigns' and planted directories are left alone") {
  TempDir dir;
  const std::string record = dir.file("record.txt");
  const std::string control = write_stand_in(dir, dir.file("bin"), record);
  auto for_campaign = [&](const std::string& campaign) {
    auto o = options(control, dir.path);
    o.campaign = campaign;
    return o;
  };
  // Two masters killed: their MpsDaemon never stops (released, as a SIGKILL leaves it).
  auto a = launch::MpsDaemon::start(for_campaign("/x/a.db"));
  auto b = launch::MpsDaemon::start(for_campaign("/x/b.db"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::string a_dir = (*a)->directory(), b_dir = (*b)->directory();
  CHECK(a_dir != b_dir);
  CHECK(a_dir.substr(0, a_dir.size() - 6) != b_dir.substr(0, b_dir.size() - 6));  // tagged by campaign
  const pid_t a_daemon = std::stoi(slurp(a_dir + "/pipe/daemon.pid"));
  const pid_t b_daemon = std::stoi(slurp(b_dir + "/pipe/daemon.pid"));
  (void)a->release();
  (void)b->release();
  // Another user's look-alike of campaign a's directory (open to others): never touched.
  const std::string planted = a_dir.substr(0, a_dir.size() - 6) + "zzzzzz";
  std::filesystem::create_directories(planted + "/pipe");
  std::filesystem::create_directories(planted + "/log");
  ::chmod(planted.c_str(), 0755);

  std::vector<std::string> said;
  auto o = for_campaign("/x/a.db");
  o.log = [&](const std::string& line) { said.push_back(line); };
  auto resumed = launch::MpsDaemon::start(o);
  REQUIRE_MESSAGE(resumed.ok(), resumed.error().to_string());
  CHECK(gone_within_deadline(a_daemon));  // quit through its own pipe directory
  CHECK_FALSE(std::filesystem::exists(a_dir));
  CHECK(alive(b_daemon));  // another campaign's
  CHECK(std::filesystem::exists(b_dir));
  CHECK(std::filesystem::exists(planted));
  bool stopped = false, left = false;
  for (const auto& line : said) {
    stopped |= line.find("stopped the daemon an earlier master of this campaign left (" + a_dir + ")") != std::string::npos;
    left |= line.find("left alone " + planted) != std::string::npos;
  }
  CHECK(stopped);
  CHECK(left);
  bool quit_a = false;
  for (const auto& w : record_lines(record)) quit_a |= w.size() == 3 && w[0] == "quit" && w[1] == a_dir + "/pipe";
  CHECK(quit_a);
  CHECK((*resumed)->stop().ok());
  // Campaign b's master comes back too: its daemon is stopped now.
  auto b2 = launch::MpsDaemon::start(for_campaign("/x/b.db"));
  REQUIRE(b2.ok());
  CHECK(gone_within_deadline(b_daemon));
  CHECK_FALSE(std::filesystem::exists(b_dir));
  CHECK((*b2)->stop().ok());
  ::chmod(planted.c_str(), 0700);
}

TEST_CASE("mps_control: auto only when groups share a GPU; off never; on without the program an error, auto a warning") {
  TempDir dir;
  const std::string bin = dir.file("bin");
  write_stand_in(dir, bin, dir.file("record.txt"));
  std::filesystem::create_directories(dir.file("empty"));
  config::Resources r;
  launch::GroupResources shared;
  shared.gpus_per_rank = 1;
  shared.gpus = {0};
  shared.trials_per_gpu = 4;
  std::vector<std::string> said;
  auto log = [&](const std::string& line) { said.push_back(line); };
  {
    ScopedPath path(bin + ":/usr/bin:/bin");
    auto c = scheduler::mps_control(r, shared, log);  // auto, shared
    REQUIRE(c.ok());
    CHECK(*c == bin + "/nvidia-cuda-mps-control");
    REQUIRE(said.size() == 1);
    CHECK(said[0].find("for the 4 groups per GPU") != std::string::npos);
    launch::GroupResources one = shared;
    one.trials_per_gpu = 1;
    CHECK(scheduler::mps_control(r, one, log).value().empty());  // nobody shares
    launch::GroupResources none = shared;
    none.gpus_per_rank = 0;
    CHECK(scheduler::mps_control(r, none, log).value().empty());  // no GPUs given to the groups
    none = shared;
    none.gpus.clear();
    CHECK(scheduler::mps_control(r, none, log).value().empty());  // auto found none
    r.mps = "off";
    CHECK(scheduler::mps_control(r, shared, log).value().empty());
    r.mps = "on";
    CHECK(scheduler::mps_control(r, one, log).value() == bin + "/nvidia-cuda-mps-control");  // on: always
    r.backend = "slurm";
    CHECK(scheduler::mps_control(r, shared, log).value().empty());  // the local backend's only
    r.backend = "local";
  }
  said.clear();
  {
    ScopedPath path(dir.file("empty"));
    r.mps = "on";
    auto c = scheduler::mps_control(r, shared, log);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code() == Errc::kUnavailable);
    CHECK(c.error().message().find("resources.mps: on, but nvidia-cuda-mps-control was not found in PATH") !=
          std::string::npos);
    r.mps = "auto";
    c = scheduler::mps_control(r, shared, log);
    REQUIRE(c.ok());
    CHECK(c->empty());
    REQUIRE(said.size() == 1);
    CHECK(said[0].find("warning: resources.mps: auto: nvidia-cuda-mps-control was not found in PATH") == 0);
  }
}

TEST_CASE("config: resources.mps is auto, on or off (auto by default); a bad value and on with slurm are refused at their place") {
  const std::string base =
      "name: m\nobjective: {metric: val_accuracy}\nsearch: {algorithm: random, max_trials: 2}\n"
      "space: {lr: {type: float, low: 0.01, high: 0.1}}\ntrainer: {kind: command, command: \"true\"}\n";
  auto plain = config::parse_config(base, "plain.yaml");
  REQUIRE(plain.ok());
  CHECK(plain->resources.mps == "auto");
  for (const char* mode : {"auto", "on", "off"}) {
    auto c = config::parse_config(base + "resources: {trials_per_gpu: 2, mps: " + mode + "}\n", "m.yaml");
    REQUIRE_MESSAGE(c.ok(), c.error().to_string());
    CHECK(c->resources.mps == mode);
  }
  auto bad = config::parse_config(base + "resources:\n  mps: sometimes\n", "bad.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("bad.yaml:7:") != std::string::npos);
  CHECK(bad.error().message().find("resources.mps") != std::string::npos);
  auto slurm = config::parse_config(base + "resources:\n  backend: slurm\n  mps: on\n", "slurm.yaml");
  REQUIRE_FALSE(slurm.ok());
  CHECK(slurm.error().message().find("slurm.yaml:8:") != std::string::npos);
  CHECK(slurm.error().message().find("local backend only") != std::string::npos);
}

// resources.pack: the master asks the trainer kind whether its trials pack
// (TrainerCapabilities::packs), never its name; packed groups need no MPS daemon.
TEST_CASE("launcher_options: packed groups where the kind packs (mlp on a GPU), else a process per group, saying why") {
  auto options = [](const std::string& trainer, const std::string& resources, std::vector<std::string>& said) {
    const std::string yaml = "name: p\nobjective: {metric: val_accuracy}\nsearch: {algorithm: random, max_trials: 4}\n"
                             "space: {lr: {type: float, low: 0.01, high: 0.1}}\ntrainer: " + trainer +
                             "\nresources: {groups: 4, gpus_per_rank: 1, gpus: [0], trials_per_gpu: 4" + resources + "}\n";
    auto cfg = config::parse_config(yaml, "p.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.error().to_string());
    auto o = scheduler::launcher_options(*cfg, [&](const std::string& line) { said.push_back(line); });
    REQUIRE_MESSAGE(o.ok(), o.error().to_string());
    return *o;
  };
  auto mentions = [](const std::vector<std::string>& said, const std::string& what) {
    for (const auto& line : said)
      if (line.find(what) != std::string::npos) return true;
    return false;
  };
  std::vector<std::string> said;
  const auto packed = options("{kind: mlp, device: gpu}", "", said);
  CHECK(packed.resources.pack_slots == 4);
  CHECK(mentions(said, "groups run 4 to a worker process"));
  {
    ScopedPath path("/nonexistent");  // auto would only warn without the program; packed, it does not look
    said.clear();
    const config::Resources mps_auto;
    CHECK(scheduler::mps_control(mps_auto, packed.resources, [&](const std::string& line) { said.push_back(line); })
              .value()
              .empty());
    CHECK(mentions(said, "no MPS daemon: packed groups"));
  }
  said.clear();
  CHECK(options("{kind: mlp, device: cpu}", "", said).resources.pack_slots == 0);
  CHECK(mentions(said, "not packed (its trials train on the CPU"));
  said.clear();
  CHECK(options("{kind: cnn, device: gpu}", "", said).resources.pack_slots == 0);  // the packed model is the mlp's
  CHECK(mentions(said, "not packed (trainer kind cnn does not train packed)"));
  said.clear();
  CHECK(options("{kind: mlp, device: gpu}", ", pack: off", said).resources.pack_slots == 0);
}
