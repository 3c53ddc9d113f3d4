// The local launcher's command line for trainer groups of several ranks (launch/launcher.h).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <iterator>
#include <string>
#include <vector>

#include <signal.h>

#include "launch/child_process.h"
#include "launch/backends.h"
#include "launch/launcher.h"
#include "launch/slurm_launcher.h"
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
  auto other = make_launcher("pbs", options(1, 1, 2));
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code() == Errc::kConfig);
  CHECK(other.error().message() == "resources.backend: unknown launch backend 'pbs' (known: local, slurm)");
  // slurm is known; outside an allocation it says how to get one.
  const char* job = getenv("SLURM_JOB_ID");
  const std::string saved = job ? job : "";
  unsetenv("SLURM_JOB_ID");
  auto slurm = make_launcher("slurm", options(1, 1, 2));
  if (!saved.empty()) setenv("SLURM_JOB_ID", saved.c_str(), 1);
  REQUIRE_FALSE(slurm.ok());
  CHECK(slurm.error().code() == Errc::kConfig);
  CHECK(slurm.error().message().find("hpctune slurm submit") != std::string::npos);
  CHECK(slurm.error().message().find("salloc") != std::string::npos);
  auto o = options(1, 1, 2);
  o.slurm.job_id = "42";
  auto inside = make_launcher("slurm", o);
  REQUIRE(inside.ok());
  CHECK((*inside)->name() == "slurm");
}

// --- the SLURM backend (launch/slurm_launcher.h) -------------------------------------------------

namespace {

LocalLauncherOptions slurm_options(int64_t data, int64_t per_node, const std::string& launch) {
  LocalLauncherOptions o = options(data, 1, 2);
  o.slurm.job_id = "77";
  o.slurm.ranks_per_node = per_node;
  o.slurm.launch = launch;
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The program after `bash -c SCRIPT hpctune-step`.
std::vector<std::string> step_program(const std::vector<std::string>& argv) {
  auto it = std::find(argv.begin(), argv.end(), std::string("hpctune-step"));
  return it == argv.end() ? std::vector<std::string>{} : std::vector<std::string>(it + 1, argv.end());
}

}  // namespace

TEST_CASE("slurm: a group is one step of ceil(ranks / ranks_per_node) nodes; srun starts the ranks") {
  auto argv = slurm_step_command(slurm_options(8, 3, "srun"), 5, {});
  REQUIRE(argv.ok());
  const std::vector<std::string> head(argv->begin(), argv->begin() + 9);
  CHECK(head == std::vector<std::string>{"srun", "--jobid=77", "--job-name=hpctune-g5", "--nodes=3", "--ntasks=8",
                                         "--ntasks-per-node=3", "--exclusive", "--kill-on-bad-exit=1", "--export=ALL"});
  CHECK(!has(*argv, "--mpi"));
  for (const auto& a : *argv) CHECK(a.rfind("--exclude", 0) != 0);
  const auto prog = step_program(*argv);
  REQUIRE(!prog.empty());
  CHECK(prog.front() == "/opt/hpctune");  // every task runs the worker rank itself
  CHECK(after(prog, "--group") == "5");
  CHECK(after(prog, "--master") == "tcp://127.0.0.1:5555");
  CHECK(after(prog, "--ranks-data") == "8");
  CHECK(!has(prog, "-np"));
  // Task 0 names the step and its nodes (the launcher's pending -> starting), then execs the program.
  const std::string script = after(*argv, "-c");
  CHECK(script.find("hpctune: step $SLURM_JOB_ID.$SLURM_STEP_ID on $SLURM_STEP_NODELIST") != std::string::npos);
  CHECK(script.find("exit 0") == std::string::npos);  // every task runs
  CHECK(script.substr(script.size() - 9) == "exec \"$@\"");
}

TEST_CASE("slurm: site options, failed nodes and setup lines go into the step") {
  auto o = slurm_options(4, 4, "srun");
  o.slurm.mpi = "cray_shasta";
  o.slurm.gres = "gpu:4";
  o.slurm.gpus_per_task = 1;
  o.slurm.cpus_per_task = 7;
  o.slurm.setup = {"module load cray-mpich", "export FOO=1"};
  auto argv = slurm_step_command(o, 0, {"nid0002", "nid0001"});
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--nodes=1"));
  CHECK(has(*argv, "--ntasks=4"));
  CHECK(has(*argv, "--mpi=cray_shasta"));
  CHECK(has(*argv, "--gres=gpu:4"));
  CHECK(has(*argv, "--gpus-per-task=1"));
  CHECK(has(*argv, "--cpus-per-task=7"));
  CHECK(has(*argv, "--exclude=nid0001,nid0002"));
  // cpus_per_task sizes the ranks' threads when resources.threads is automatic.
  CHECK(after(step_program(*argv), "--threads") == "7");
  CHECK(slurm_step_environment(o).at("OMP_NUM_THREADS") == "7");
  const std::string script = after(*argv, "-c");
  const auto load = script.find("module load cray-mpich\nexport FOO=1\n");
  REQUIRE(load != std::string::npos);
  CHECK(script.find("set -e") < load);
  CHECK(load < script.find("exec \"$@\""));
}

TEST_CASE("slurm: in a heterogeneous job the steps run in the groups' component (--het-group)") {
  auto o = slurm_options(4, 4, "srun");
  ::unsetenv("SLURM_HET_SIZE");
  auto plain = slurm_step_command(o, 0, {});
  REQUIRE(plain.ok());
  for (const auto& a : *plain) CHECK(a.rfind("--het-group", 0) != 0);
  // Inside the job of `hpctune slurm submit` with resources.slurm.master: component 1.
  ::setenv("SLURM_HET_SIZE", "2", 1);
  auto het = slurm_step_command(o, 0, {});
  ::unsetenv("SLURM_HET_SIZE");
  REQUIRE(het.ok());
  CHECK(has(*het, "--het-group=1"));
  o.slurm.het_group = 0;
  auto given = slurm_step_command(o, 0, {});
  REQUIRE(given.ok());
  CHECK(has(*given, "--het-group=0"));
}

TEST_CASE("slurm: launch mpirun runs mpirun from task 0 over the step's nodes") {
  auto argv = slurm_step_command(slurm_options(2, 1, "mpirun"), 1, {});
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--nodes=2"));
  CHECK(has(*argv, "--ntasks=2"));  // SLURM reserves the ranks' cores; only task 0 runs a program
  CHECK(has(*argv, "--ntasks-per-node=1"));
  const auto prog = step_program(*argv);
  REQUIRE(prog.size() > 3);
  CHECK(prog.front() == "/bin/true");  // the mpirun found (options(): mpirun = /bin/true)
  CHECK(after(prog, "-np") == "2");
  CHECK(!has(prog, "self,vader"));  // several nodes: not shared memory only
  CHECK(after(prog, "--group") == "1");
  const std::string script = after(*argv, "-c");
  CHECK(script.rfind("[ \"${SLURM_PROCID:-0}\" = 0 ] || exit 0\n", 0) == 0);
  CHECK(script.find("SLURM_NODELIST=\"$SLURM_STEP_NODELIST\"") != std::string::npos);
  CHECK(script.find("OMPI_MCA_plm_slurm_args=\"--overlap --nodelist=$SLURM_STEP_NODELIST\"") != std::string::npos);
  CHECK(slurm_step_environment(slurm_options(2, 1, "mpirun")).at("OMPI_MCA_btl_vader_single_copy_mechanism") == "none");
  // One rank needs no mpirun.
  auto one = slurm_step_command(slurm_options(1, 1, "mpirun"), 1, {});
  REQUIRE(one.ok());
  CHECK(step_program(*one).front() == "/opt/hpctune");
}

TEST_CASE("slurm: a campaign whose trials survive a rank's loss runs mpirun with --enable-recovery") {
  // launch: mpirun: the ranks under --enable-recovery, told so through HPCTUNE_GROUP_RECOVERY.
  auto o = slurm_options(3, 1, "mpirun");
  o.resources.rank_recovery = true;
  auto argv = slurm_step_command(o, 0, {});
  REQUIRE(argv.ok());
  CHECK(has(step_program(*argv), "--enable-recovery"));
  CHECK(has(*argv, "--kill-on-bad-exit=1"));  // the step: only task 0 runs a program (mpirun)
  CHECK(slurm_step_environment(o).at(kGroupRecoveryEnv) == "1");
  // Without rank_recovery neither.
  auto plain = slurm_step_command(slurm_options(3, 1, "mpirun"), 0, {});
  REQUIRE(plain.ok());
  CHECK(!has(step_program(*plain), "--enable-recovery"));
  CHECK(slurm_step_environment(slurm_options(3, 1, "mpirun")).count(kGroupRecoveryEnv) == 0);
  // launch: srun: the ranks are the step's tasks, and the step ends with the first that fails.
  auto direct = slurm_options(3, 1, "srun");
  direct.resources.rank_recovery = true;
  auto srun_argv = slurm_step_command(direct, 0, {});
  REQUIRE(srun_argv.ok());
  CHECK(!has(*srun_argv, "--enable-recovery"));
  CHECK(slurm_step_environment(direct).count(kGroupRecoveryEnv) == 0);
}

TEST_CASE("slurm: the time left to a job, as squeue writes it, in seconds") {
  CHECK(parse_slurm_duration("1:59") == 119.0);
  CHECK(parse_slurm_duration("2:03:04\n") == 2 * 3600 + 3 * 60 + 4.0);
  CHECK(parse_slurm_duration("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4.0);
  CHECK(parse_slurm_duration("10") == 600.0);  // minutes alone
  CHECK(!parse_slurm_duration("UNLIMITED"));
  CHECK(!parse_slurm_duration("NOT_SET"));
  CHECK(!parse_slurm_duration(""));
  CHECK(!parse_slurm_duration("1:2:3:4"));
  CHECK(!parse_slurm_duration("-5:00"));
}

TEST_CASE("slurm: a time-left field too long to be a time is no time, not an exception") {
  // std::stod threw out_of_range on these (uncaught: the master ended).
  const std::string digits400(400, '9');
  CHECK(!parse_slurm_duration(digits400));
  CHECK(!parse_slurm_duration("1-" + digits400));
  CHECK(!parse_slurm_duration(digits400 + "-00:00:01"));
  CHECK(!parse_slurm_duration("1:" + digits400 + ":00"));
  CHECK(!parse_slurm_duration("1234567890"));  // ten digits
  // Nine digits in each field is still a time.
  CHECK(parse_slurm_duration("999999999-0:0:1") == 999999999.0 * 86400 + 1);
  CHECK(parse_slurm_duration("999999999") == 999999999.0 * 60);
}

TEST_CASE("slurm: bad layouts and a missing mpirun are errors") {
  CHECK(slurm_step_command(slurm_options(0, 1, "srun"), 0, {}).error().code() == Errc::kConfig);
  CHECK(slurm_step_command(slurm_options(2, 0, "srun"), 0, {}).error().code() == Errc::kConfig);
  auto o = slurm_options(2, 1, "mpirun");
  o.mpirun = "/nonexistent/mpirun";
  CHECK(slurm_step_command(o, 0, {}).error().code() == Errc::kUnavailable);
}

TEST_CASE("slurm: nodes down, drained, failing or not responding count as failed; others do not") {
  const std::string out =
      "NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=ALLOCATED ThreadsPerCore=1\n"
      "NodeName=n2 Arch=x86_64 State=DOWN+NOT_RESPONDING Reason=gone\n"
      "NodeName=n3 State=MIXED+DRAIN Reason=x\n"
      "NodeName=n4 State=IDLE+NOT_RESPONDING\n"
      "NodeName=n5 State=ALLOCATED+COMPLETING\n"
      "NodeName=n6 State=ALLOCATED+FAIL\n"
      "garbage line\n";
  CHECK(failed_nodes(out) == std::set<std::string>{"n2", "n3", "n4", "n6"});
  CHECK(failed_nodes("").empty());
}

TEST_CASE("slurm: a step is pending until its marker, and its failed nodes are excluded from the next step") {
  hpctune::testing::TempDir dir;
  // A fake srun: records its arguments, waits for a go file, prints the marker, then exits with
  // the code in the file `code` (non-zero: saying n1 failed, which is back when asked); a fake
  // scontrol says n2 is down.
  const std::string srun = dir.write("srun", "#!/bin/sh\necho \"$@\" >> " + dir.file("calls") +
                                                "\nwhile [ ! -f " + dir.file("go") + " ]; do sleep 0.01; done\n"
                                                "echo 'hpctune: step 77.3 on n[1-2]'\n"
                                                "[ $(cat " + dir.file("code") + ") = 0 ] || echo 'srun: error: Node failure on n1' >&2\n"
                                                "exit $(cat " + dir.file("code") + ")\n");
  const std::string scontrol = dir.write("scontrol", "#!/bin/sh\necho \"$@\" > " + dir.file("asked") +
                                                         "\necho 'NodeName=n1 State=ALLOCATED'\necho 'NodeName=n2 State=DOWN'\n");
  REQUIRE(chmod(srun.c_str(), 0755) == 0);
  REQUIRE(chmod(scontrol.c_str(), 0755) == 0);
  dir.write("code", "1\n");
  auto o = slurm_options(2, 1, "srun");
  o.slurm.srun = srun;
  o.slurm.scontrol = scontrol;
  o.log_dir = dir.path;
  auto made = make_slurm_launcher(o);
  REQUIRE(made.ok());
  Launcher& l = **made;
  REQUIRE(l.start(0, "").ok());
  CHECK(l.state(0) == GroupState::kPending);  // srun runs, the step has no nodes yet
  dir.write("go", "");
  auto wait_exit = [&] {
    std::vector<GroupExit> exits;
    for (int i = 0; i < 500 && exits.empty(); ++i) {
      exits = l.poll_exits();
      if (exits.empty()) usleep(10000);
    }
    return exits;
  };
  auto exits = wait_exit();
  REQUIRE(exits.size() == 1);
  CHECK(!exits[0].success);
  CHECK(exits[0].how.find("step 77.3 on n[1-2]") != std::string::npos);
  CHECK(exits[0].how.find("node failure: n1,n2 excluded from later steps") != std::string::npos);
  CHECK(slurp(dir.file("asked")).find("show node n[1-2]") != std::string::npos);
  CHECK(l.state(0) == GroupState::kExited);
  // The next step leaves n2 out; a step that ends well asks nothing about its nodes.
  dir.write("code", "0\n");
  std::remove(dir.file("asked").c_str());
  REQUIRE(l.start(0, "").ok());
  exits = wait_exit();
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].success);
  CHECK(!std::filesystem::exists(dir.file("asked")));
  const std::string calls = slurp(dir.file("calls"));
  const auto second = calls.find('\n');
  REQUIRE(second != std::string::npos);
  CHECK(calls.substr(0, second).find("--exclude") == std::string::npos);
  CHECK(calls.substr(second).find("--exclude=n1,n2 ") != std::string::npos);
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
