// `hpctune dashboard DB...`: the dashboard's web app and read-only API (dashboard/server.h) over campaign
// databases, until Ctrl-C. The URL (and a generated token) are printed at start.
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "dashboard/api.h"
#include "dashboard/server.h"

namespace hpctune::cli {

Status cmd_dashboard(const DashboardArgs& args, const std::atomic<int>& interrupt) {
  dashboard::ServerOptions o;
  HPCTUNE_ASSIGN(o.databases, dashboard::expand_databases(args.databases));
  o.host = args.host;
  o.port = static_cast<int>(args.port);
  o.token = args.token;
  bool generated = false;
  if (o.token.empty() && !dashboard::is_loopback(o.host)) {
    HPCTUNE_ASSIGN(o.token, dashboard::generate_token());
    generated = true;
  }
  HPCTUNE_ASSIGN(auto server, dashboard::Server::bind(o));
  std::printf("hpctune dashboard: serving %zu campaign database%s at %s\n", o.databases.size(),
              o.databases.size() == 1 ? "" : "s", server->url().c_str());
  for (size_t i = 0; i < o.databases.size(); ++i) std::printf("  %zu  %s\n", i, o.databases[i].c_str());
  if (generated) std::printf("token (send it as 'Authorization: Bearer TOKEN' or ?token=TOKEN): %s\n", o.token.c_str());
  // With a token, the browser opens /?token=T once: the server keeps it in a cookie and redirects to /.
  // A token given on the command line is not echoed (it may be a shared secret kept out of logs).
  if (o.token.empty()) {
    std::printf("open in a browser: %s\n", server->url().c_str());
  } else if (generated) {
    std::printf("open in a browser: %s?token=%s\n", server->url().c_str(), o.token.c_str());
  } else {
    std::printf("open in a browser: %s?token=TOKEN (your --token)\n", server->url().c_str());
  }
  std::printf("API: %sapi/campaigns   (Ctrl-C stops)\n", server->url().c_str());
  std::fflush(stdout);
  // Ctrl-C sets `interrupt` (main's handler); a watcher turns it into stop(), which ends serve().
  std::atomic<bool> done{false};
  // It asks again until serve() returns: a stop() before listening has begun would be lost.
  std::thread watcher([&] {
    while (!done.load()) {
      if (interrupt.load() != 0) server->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  Status served = server->serve();
  done.store(true);
  watcher.join();
  if (interrupt.load() != 0) return {};  // stopping on Ctrl-C is how a dashboard ends
  return served;
}

}  // namespace hpctune::cli
