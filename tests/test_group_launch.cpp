// The local launcher's command line for trainer groups of several ranks (launch/launcher.h).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include <signal.h>

#include "launch/child_process.h"
#include "launch/backends.h"
#include "launch/launcher.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using namespace hpctune::launch;

namespace {

bool has(const std::vector<std::string>& argv, const std::string& a) {
  return std::find(argv.begin(), argv.end(), a) != argv.end();
}
std::string after(const std::vector<std::string>& argv, const std::string& a) {
  auto it = std::find(argv.begin(), argv.end(), a);
  return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : std::string();
}

LocalLauncherOptions options(int64_t data, int64_t model, int cores) {
  LocalLauncherOptions o;
  o.program = "/opt/hpctune";
  o.master_endpoint = "tcp://127.0.0.1:5555";
  o.resources.ranks_data = data;
  o.resources.ranks_model = model;
  o.cores = cores;
  o.mpirun = "/bin/true";  // any executable: the command is only built here
  o.extra_args = {"--campaign", "/tmp/x.db"};
  return o;
}

}  // namespace

TEST_CASE("one rank: the worker alone, threads left to it") {
  auto argv = local_group_command(options(1, 1, 8), 3);
  REQUIRE(argv.ok());
  CHECK(argv->front() == "/opt/hpctune");
  CHECK(after(*argv, "--group") == "3");
  CHECK(!has(*argv, "--threads"));
  CHECK(!has(*argv, "--ranks-data"));
  CHECK(argv->back() == "/tmp/x.db");
}

TEST_CASE("2 x 2 ranks on 8 cores: mpirun -np 4, 2 threads per rank, no oversubscription") {
  auto argv = local_group_command(options(2, 2, 8), 0);
  REQUIRE(argv.ok());
  CHECK(argv->front() == "/bin/true");
  CHECK(after(*argv, "-np") == "4");
  CHECK(after(*argv, "--bind-to") == "none");
  CHECK(after(*argv, "btl") == "self,vader");
  CHECK(!has(*argv, "--oversubscribe"));
  CHECK(has(*argv, "--allow-run-as-root") == (geteuid() == 0));
  CHECK(after(*argv, "--threads") == "2");
  CHECK(after(*argv, "--ranks-data") == "2");
  CHECK(after(*argv, "--ranks-model") == "2");
  CHECK(!has(*argv, "--trainer-starts-ranks"));
  // The program comes after mpirun's own options.
  auto prog = std::find(argv->begin(), argv->end(), std::string("/opt/hpctune"));
  REQUIRE(prog != argv->end());
  CHECK(*(prog + 1) == "worker");
}

TEST_CASE("more ranks than cores: oversubscribed, at least one thread each; explicit threads win") {
  auto argv = local_group_command(options(4, 1, 2), 0);
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--oversubscribe"));
  CHECK(after(*argv, "--threads") == "1");
  auto o = options(2, 1, 16);
  o.resources.threads = 3;
  argv = local_group_command(o, 0);
  REQUIRE(argv.ok());
  CHECK(after(*argv, "--threads") == "3");
}

TEST_CASE("a trainer that starts its own ranks gets one worker process told the layout") {
  auto o = options(2, 3, 8);
  o.resources.trainer_starts_ranks = true;
  auto argv = local_group_command(o, 1);
  REQUIRE(argv.ok());
  CHECK(argv->front() == "/opt/hpctune");
  CHECK(!has(*argv, "-np"));
  CHECK(has(*argv, "--trainer-starts-ranks"));
  CHECK(after(*argv, "--ranks-data") == "2");
  CHECK(after(*argv, "--ranks-model") == "3");
}

TEST_CASE("bad layouts and a missing mpirun are launch errors") {
  CHECK(local_group_command(options(0, 1, 8), 0).error().code() == Errc::kConfig);
  auto o = options(2, 1, 8);
  o.mpirun = "/nonexistent/mpirun";
  CHECK(local_group_command(o, 0).error().code() == Errc::kUnavailable);
  o.resources.ranks_data = 1;  // one rank needs no mpirun
  CHECK(local_group_command(o, 0).ok());
}

TEST_CASE("the rank launch command: the launcher's and the command trainer's flags from one place") {
  const std::string root = geteuid() == 0 ? "--allow-run-as-root" : "";
  auto expect = [&](std::vector<std::string> argv) {
    if (!root.empty()) argv.push_back(root);
    return argv;
  };
  CHECK(mpirun_command("/usr/bin/mpirun", 4, {.shared_memory_btl = true}) ==
        expect({"/usr/bin/mpirun", "-np", "4", "--bind-to", "none", "--mca", "btl", "self,vader"}));
  CHECK(mpirun_command("mpirun", 2, {.oversubscribe = true, .tag_output = true}) ==
        expect({"mpirun", "-np", "2", "--bind-to", "none", "--oversubscribe", "--tag-output"}));
}

// --- child processes (launch/child_process.h) ---------------------------------------------------

TEST_CASE("a program named without a slash is found through an empty PATH entry (the current directory)") {
  // As execvp and the launcher's mpirun lookup read PATH; the spawn's own lookup once made "" + "/"
  // + name an absolute path and refused the program.
  hpctune::testing::TempDir dir;
  const std::string prog = dir.write("h7-exit-7", "#!/bin/sh\nexit 7\n");
  REQUIRE(chmod(prog.c_str(), 0755) == 0);
  const char* old_path = getenv("PATH");
  const std::string saved_path = old_path ? old_path : "";
  char saved_cwd[4096];
  REQUIRE(getcwd(saved_cwd, sizeof saved_cwd) != nullptr);
  REQUIRE(chdir(dir.path.c_str()) == 0);
  setenv("PATH", "/nonexistent:", 1);
  hpctune::launch::SpawnOptions o;
  o.argv = {"h7-exit-7"};
  auto child = hpctune::launch::ChildProcess::spawn(o);
  setenv("PATH", saved_path.c_str(), 1);
  REQUIRE(chdir(saved_cwd) == 0);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(10));
  REQUIRE(status.has_value());
  CHECK(status->code == 7);
}

namespace {

int g_marks = -1;  // the write end of a pipe; the SIGUSR1 handler writes its process id there

void mark_pid(int) {
  const pid_t self = getpid();
  (void)!write(g_marks, &self, sizeof self);
}

}  // namespace

TEST_CASE("a child starts with default signal actions: an ignored signal of the parent does not leak") {
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  REQUIRE(sigaction(SIGUSR2, &ignore, &old) == 0);
  hpctune::launch::SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "kill -USR2 $$; exit 0"};
  auto child = hpctune::launch::ChildProcess::spawn(o);
  sigaction(SIGUSR2, &old, nullptr);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(10));
  REQUIRE(status.has_value());
  CHECK(status->signaled);
  CHECK(status->signal == SIGUSR2);
}

TEST_CASE("a signal sent right after spawn never runs a handler of the parent inside the child") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  g_marks = fds[1];
  struct sigaction handler {}, old {};
  handler.sa_handler = mark_pid;
  sigemptyset(&handler.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &handler, &old) == 0);
  // Signalled at once, a child is often still between fork and exec: the parent's handler, copied
  // with it, must not run there (before the fix it did, writing the child's pid).
  for (int i = 0; i < 200; ++i) {
    hpctune::launch::SpawnOptions o;
    o.argv = {"/bin/true"};
    auto child = hpctune::launch::ChildProcess::spawn(o);
    REQUIRE(child.ok());
    ::kill(child->pid(), SIGUSR1);
    REQUIRE(child->wait_for(std::chrono::seconds(10)).has_value());
  }
  sigaction(SIGUSR1, &old, nullptr);
  close(fds[1]);
  pid_t pid = 0;
  int foreign = 0;
  while (read(fds[0], &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid)) foreign += pid != getpid();
  close(fds[0]);
  CHECK(foreign == 0);
}

TEST_CASE("launchers come from a registry keyed on resources.backend") {
  CHECK(launcher_names() == std::vector<std::string>(std::begin(kBackendNames), std::end(kBackendNames)));
  auto local = make_launcher("local", options(1, 1, 2));
  REQUIRE(local.ok());
  CHECK((*local)->name() == "local");
  auto slurm = make_launcher("slurm", options(1, 1, 2));
  REQUIRE_FALSE(slurm.ok());
  CHECK(slurm.error().code() == Errc::kConfig);
  CHECK(slurm.error().message() == "resources.backend: unknown launch backend 'slurm' (known: local)");
}

TEST_CASE("the local launcher reports each group's state: starting once launched, exited once it ended") {
  LocalLauncherOptions o = options(1, 1, 2);
  o.program = "/bin/true";  // exits at once, whatever its arguments
  auto launcher = make_local_launcher(o);
  CHECK(launcher->state(0) == GroupState::kExited);  // never started
  REQUIRE(launcher->start(0, "secret.token").ok());
  CHECK(launcher->state(0) == GroupState::kStarting);  // a local process starts at once: never pending
  std::vector<GroupExit> exits;
  for (int i = 0; i < 500 && exits.empty(); ++i) {
    exits = launcher->poll_exits();
    if (exits.empty()) usleep(2000);
  }
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].group == 0);
  CHECK(exits[0].success);
  CHECK(launcher->state(0) == GroupState::kExited);
  CHECK(std::string(to_string(GroupState::kPending)) == "pending");
}
