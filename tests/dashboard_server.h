// What the dashboard's tests (test_dashboard, test_dashboard_web) serve and how: a small real
// campaign (branin, the function trainer) run by the binary, and a server bound on a free port and
// serving on a thread of its own until the end of the scope, with httplib clients for it (with and
// without its token).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <doctest/doctest.h>

#include "dashboard/server.h"
#include "tests/campaign_fixture.h"
#include "tests/temp_dir.h"

namespace hpctune::testing {

// Runs `trials` random branin trials (minimised) as campaign `name` into `dir`/`stem`.db, on
// `groups` trainer groups (0: the default); its path.
inline std::string run_branin_campaign(const TempDir& dir, const std::string& stem, const std::string& name,
                                       int seed, int trials, int groups = 0) {
  const std::string config = dir.write(stem + ".yaml",
                                       "name: " + name + "\nseed: " + std::to_string(seed) +
                                           "\nobjective: {metric: value, mode: min}\n"
                                           "search: {algorithm: random, max_trials: " + std::to_string(trials) + "}\n"
                                           "space:\n  x1: {type: float, low: -5, high: 10}\n"
                                           "  x2: {type: float, low: 0, high: 15}\n"
                                           "trainer: {kind: function, name: branin}\n" +
                                           (groups > 0 ? "resources: {groups: " + std::to_string(groups) + "}\n" : ""));
  const std::string path = dir.file(stem + ".db");
  auto st = run_hpctune({"run", config, "--db", path}, dir.file(stem + ".log"));
  REQUIRE_MESSAGE(st.code == 0, read_file(dir.file(stem + ".log")));
  return path;
}

struct RunningDashboard {
  std::unique_ptr<dashboard::Server> server;
  std::thread thread;
  std::atomic<bool> finished{false};
  explicit RunningDashboard(dashboard::ServerOptions o) {
    o.port = 0;
    auto s = dashboard::Server::bind(std::move(o));
    REQUIRE_MESSAGE(s.ok(), s.error().to_string());
    server = std::move(s).value();
    thread = std::thread([this] {
      CHECK(server->serve().ok());
      finished.store(true);
    });
  }
  ~RunningDashboard() {
    // stop() before listening has begun is lost: ask until the thread has ended.
    while (!finished.load()) {
      server->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    thread.join();
  }
  RunningDashboard(const RunningDashboard&) = delete;
  RunningDashboard& operator=(const RunningDashboard&) = delete;
  // A client carrying the server's token (every request needs it, on every bind).
  httplib::Client client() const {
    httplib::Client c = anonymous_client();
    c.set_bearer_token_auth(server->token());
    return c;
  }
  // A client without the token.
  httplib::Client anonymous_client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(5, 0);
    return c;
  }
};

}  // namespace hpctune::testing
