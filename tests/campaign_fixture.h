// Helpers for the end-to-end tests: a temporary directory, the hpctune binary as a child process,
// reading the campaign database back, and the orphan check.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "launch/child_process.h"
#include "store/store.h"
#include "tests/temp_dir.h"

namespace hpctune::testing {

using namespace std::chrono_literals;

// Runs `hpctune args...`, output to `log`, with `env` added to its environment; returns the handle.
inline launch::ChildProcess start_hpctune(const std::vector<std::string>& args, const std::string& log,
                                          std::map<std::string, std::string> env = {}) {
  launch::SpawnOptions o;
  o.argv = {HPCTUNE_BINARY};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = log;
  o.stderr_path = "=stdout";
  o.env = std::move(env);
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  return std::move(child).value();
}

inline launch::ExitStatus run_hpctune(const std::vector<std::string>& args, const std::string& log,
                              std::chrono::milliseconds limit = 120s) {
  launch::ChildProcess child = start_hpctune(args, log);
  auto status = child.wait_for(limit);
  REQUIRE_MESSAGE(status.has_value(), "hpctune did not finish in time; log:\n" << launch::tail_file(log, 40));
  return *status;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Pids of live processes whose command line mentions `needle` (zombies excluded).
inline std::vector<pid_t> processes_mentioning(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    // A process that exits while its files are read makes the read fail with ESRCH, which
    // libstdc++'s filebuf throws (std::ios_base::failure): it is gone, so it is not listed.
    std::string line, stat;
    try {
      std::ifstream cmd("/proc/" + std::string(e->d_name) + "/cmdline", std::ios::binary);
      line.assign(std::istreambuf_iterator<char>(cmd), {});
      if (line.find(needle) == std::string::npos) continue;
      std::ifstream st("/proc/" + std::string(e->d_name) + "/stat");
      stat.assign(std::istreambuf_iterator<char>(st), {});
    } catch (const std::ios_base::failure&) {
      continue;
    }
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
    out.push_back(pid);
  }
  closedir(proc);
  return out;
}

// Every process of the campaign in `db`: the workers (they carry --campaign <absolute db path>)
// and the supervisors of their trial programs (forked from a worker, they share its command line).
inline std::vector<pid_t> campaign_processes(const std::string& db) {
  return processes_mentioning(std::string("--campaign") + '\0' + std::filesystem::absolute(db).string());
}

// The worker processes of the campaign in `db`: its processes less the supervisors
// (launch/child_process.h names them hpctune-superv).
inline std::vector<pid_t> workers_of(const std::string& db) {
  std::vector<pid_t> out;
  for (pid_t pid : campaign_processes(db)) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name != "hpctune-superv") out.push_back(pid);
  }
  return out;
}

// Waits up to 5 s for every process of the campaign to be gone; fails the test otherwise.
inline void check_no_orphans(const std::string& db) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!campaign_processes(db).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK_MESSAGE(campaign_processes(db).empty(), "orphan processes of the campaign survived");
}

inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

inline std::vector<store::TrialRow> read_trials(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  if (!s.ok()) return {};
  auto c = (*s)->load_campaign();
  if (!c.ok() || !*c) return {};
  auto t = (*s)->trials((*c)->id);
  return t.ok() ? t.value() : std::vector<store::TrialRow>{};
}

// Waits up to `limit` until some trial of the campaign in `db` is running.
inline bool wait_for_running_trial(const std::string& db, std::chrono::milliseconds limit) {
  return wait_until(
      [&] {
        for (const auto& t : read_trials(db)) {
          if (t.state == store::TrialState::kRunning) return true;
        }
        return false;
      },
      limit);
}

inline std::vector<store::EventRow> read_events(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  auto e = (*s)->events((*c)->id, 0);
  REQUIRE(e.ok());
  return e.value();
}

// A sleep-trainer campaign config.
inline std::string sleep_config(const std::string& name, int max_trials, double seconds, int steps, int groups,
                                double hb_interval = 1.0, double hb_timeout = 10.0) {
  return "name: " + name +
         "\nseed: 5\nobjective: {metric: value, mode: max}\n"
         "search: {algorithm: random, max_trials: " +
         std::to_string(max_trials) +
         "}\n"
         "space:\n  value: {type: float, low: 0.0, high: 1.0}\n"
         "trainer: {kind: sleep, seconds: " +
         std::to_string(seconds) + ", steps: " + std::to_string(steps) +
         ", metric: value}\n"
         "resources: {groups: " +
         std::to_string(groups) + ", heartbeat_interval: " + std::to_string(hb_interval) +
         ", heartbeat_timeout: " + std::to_string(hb_timeout) + "}\n";
}

}  // namespace hpctune::testing
