// A dashboard server for the tests (test_dashboard, test_dashboard_web): bound on a free port and
// serving on a thread of its own until the end of the scope, with an httplib client for it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <doctest/doctest.h>

#include "dashboard/server.h"

namespace hpctune::testing {

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
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(5, 0);
    return c;
  }
};

}  // namespace hpctune::testing
