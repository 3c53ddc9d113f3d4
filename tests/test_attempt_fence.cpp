// End to end through the hpctune binary (issue 21, finding 11): nothing of a trial's attempt
// outlives it, even when its worker and the supervisor of its program die together, and no two
// attempts of a trial run at once. The trial program (a shell) starts a child that outlives the
// shell (`sleep 3041 &`); its first attempt is killed with its worker and supervisor (and, in the
// second case, with the master too, then `resume`). Attempt 2 records whether attempt 1's child
// was still alive when it started; after the campaign, /proc is walked for that child.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;
namespace fs = std::filesystem;

namespace {

// Attempt 1 leaves a child that outlives the shell; attempt 2 notes whether it is still alive,
// then reports. The child's pid goes in the trial directory (shared by the attempts).
const char* const kScript =
    "echo \"$HPCTUNE_ATTEMPT $$\" >> \"$HPCTUNE_TRIAL_DIR/starts\"\n"
    "if [ \"$HPCTUNE_ATTEMPT\" = 1 ]; then\n"
    "  sleep 3041 &\n"
    "  echo $! > \"$HPCTUNE_TRIAL_DIR/child.pid\"\n"
    "  wait\n"
    "fi\n"
    // Alive and not a zombie (a killed orphan stays one until PID 1 reaps it; some containers' never do).
    "state=''\n"
    "if [ -f \"$HPCTUNE_TRIAL_DIR/child.pid\" ]; then\n"
    "  state=$(sed 's/.*) //' \"/proc/$(cat \"$HPCTUNE_TRIAL_DIR/child.pid\")/stat\" 2>/dev/null | cut -c1)\n"
    "fi\n"
    "if [ -n \"$state\" ] && [ \"$state\" != Z ] && [ \"$state\" != X ]; then\n"
    "  echo \"attempt $HPCTUNE_ATTEMPT started beside attempt 1\" >> \"$HPCTUNE_TRIAL_DIR/overlap\"\n"
    "fi\n"
    "echo 'hpctune-report {\"value\": 1.5}'\n";

std::string fence_config(const std::string& script) {
  return "name: fence\nseed: 2\nobjective: {metric: value, mode: max}\n"
         "search: {algorithm: random, max_trials: 1, max_attempts: 3}\n"
         "space:\n  x: {type: float, low: 0.1, high: 0.9}\n"
         "trainer:\n  kind: command\n  command: \"/bin/sh " +
         script +
         "\"\n"
         "resources: {groups: 1, threads: 1, heartbeat_interval: 0.2, heartbeat_timeout: 5}\n";
}

// Whether `pid` is a live (not zombie) `sleep 3041`: the trial program's child.
bool child_alive(pid_t pid) {
  for (pid_t p : processes_mentioning(std::string("sleep\0" "3041", 10))) {
    if (p == pid) return true;
  }
  return false;
}

std::string trial_dir_of(const std::string& db) {
  for (const auto& t : read_trials(db)) return db + ".trials/" + std::to_string(t.id);
  return "";
}

pid_t wait_for_child(const std::string& db) {
  pid_t pid = 0;
  const bool started = wait_until(
      [&] {
        const std::string dir = trial_dir_of(db);
        if (dir.empty()) return false;
        std::ifstream in(dir + "/child.pid");
        return static_cast<bool>(in >> pid) && pid > 0 && child_alive(pid);
      },
      std::chrono::seconds(60));
  REQUIRE_MESSAGE(started, "attempt 1 never started its child");
  return pid;
}

// The supervisors of the campaign's trial programs (launch/child_process.h names them).
std::vector<pid_t> supervisors_of(const std::string& db) {
  std::vector<pid_t> out;
  for (pid_t pid : campaign_processes(db)) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "hpctune-superv") out.push_back(pid);
  }
  return out;
}

// SIGKILL of the worker and its supervisor together: the worker is stopped first, so that it
// cannot see its supervisor die and kill the program's group itself.
void kill_worker_and_supervisor(const std::string& db, std::vector<pid_t> also = {}) {
  const auto workers = workers_of(db);
  const auto supervisors = supervisors_of(db);
  REQUIRE(workers.size() == 1);
  REQUIRE(supervisors.size() == 1);
  for (pid_t p : also) ::kill(p, SIGSTOP);
  ::kill(workers[0], SIGSTOP);
  ::kill(supervisors[0], SIGKILL);
  ::kill(workers[0], SIGKILL);
  for (pid_t p : also) ::kill(p, SIGKILL);
}

void check_attempt_2_alone(const std::string& db, pid_t child) {
  const auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == store::TrialState::kDone);
  CHECK(trials[0].attempt == 2);
  const std::string dir = trial_dir_of(db);
  CHECK_MESSAGE(!fs::exists(dir + "/overlap"), read_file(dir + "/overlap"));
  // Walking /proc: nothing of attempt 1 is left (its child, nor anything with its token).
  CHECK_MESSAGE(!child_alive(child), "attempt 1's child " << child << " outlived it");
  CHECK(processes_mentioning(std::string("sleep\0" "3041", 10)).empty());
  // The attempt's fence file went with its attempt.
  CHECK(!fs::exists(dir + "/attempt.fence"));  // launch::kAttemptFenceFile
  check_no_orphans(db);
}

}  // namespace

TEST_CASE("SIGKILL of the worker and its supervisor together: nothing of attempt 1 survives; attempt 2 runs alone") {
  TempDir dir;
  const std::string script = dir.write("trial.sh", kScript);
  const std::string cfg = dir.write("c.yaml", fence_config(script));
  const std::string db = dir.file("c.db");
  const std::string log = dir.file("run.log");
  launch::ChildProcess master = start_hpctune({"run", cfg, "--db", db}, log);
  const pid_t child = wait_for_child(db);
  kill_worker_and_supervisor(db);
  const auto status = master.wait_for(std::chrono::seconds(90));
  REQUIRE_MESSAGE(status.has_value(), read_file(log));
  CHECK_MESSAGE(status->success(), read_file(log));
  check_attempt_2_alone(db, child);
  if (child_alive(child)) ::kill(child, SIGKILL);  // not to leave the failure's orphan behind
}

TEST_CASE("SIGKILL of the master, the worker and the supervisor at once, then resume: attempt 2 runs alone") {
  TempDir dir;
  const std::string script = dir.write("trial.sh", kScript);
  const std::string cfg = dir.write("c.yaml", fence_config(script));
  const std::string db = dir.file("c.db");
  const std::string log = dir.file("run.log");
  launch::ChildProcess master = start_hpctune({"run", cfg, "--db", db}, log);
  const pid_t child = wait_for_child(db);
  kill_worker_and_supervisor(db, {master.pid()});
  const auto status = master.wait_for(std::chrono::seconds(10));
  REQUIRE(status.has_value());
  CHECK(status->signaled);
  const auto resumed = run_hpctune({"resume", db}, dir.file("resume.log"), std::chrono::seconds(90));
  CHECK_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  check_attempt_2_alone(db, child);
  if (child_alive(child)) ::kill(child, SIGKILL);
}
