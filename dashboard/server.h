// The dashboard's HTTP server (issue 14): serves api.h's read-only JSON API and the embedded web
// app (assets.h: `/`, `/assets/NAME`) over cpp-httplib, safe by default. It binds 127.0.0.1 unless
// told otherwise; any other address needs a token that every request must carry (Authorization:
// Bearer, ?token=, or the HttpOnly cookie hpctune_token that `GET /?token=T` sets before
// redirecting to `/`), compared in constant time. A
// request whose Host header is not the bound address (DNS rebinding) is refused, requests are
// bounded in size and time, and only GET is answered.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/secrets.h"

namespace httplib {
class Server;
}

namespace hpctune::dashboard {

class Api;

struct ServerOptions {
  std::vector<std::string> databases;  // the files served, in the order of /api/campaigns
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: a free port (Server::port() tells which)
  std::string token;                   // required when `host` is not a loopback address
  size_t max_request_bytes = 16 * 1024;  // bodies; the request line and headers are bounded by httplib (8 KB)
  int read_timeout_s = 5, write_timeout_s = 5;
  int threads = 16;                    // above a browser's 6 keep-alive connections per host, which each hold a thread
};

// 127.0.0.0/8, ::1 and "localhost": the addresses only this machine can reach.
bool is_loopback(const std::string& host);

// A token of 32 random bytes (getrandom) as 64 hex digits.
Result<std::string> generate_token();


class Server {
 public:
  // Checks the options (a non-loopback host needs a token; every database must open as a
  // campaign) and binds the port. kUsage for bad options, kIo when the port cannot be bound.
  static Result<std::unique_ptr<Server>> bind(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until stop() (from any thread or a signal watcher). kIo when listening fails.
  Status serve();
  void stop();

  int port() const { return port_; }
  // http://HOST:PORT/ (the IPv6 host in brackets).
  std::string url() const;
  // The Host header values accepted (the bound name or address with the port; for a loopback
  // bind, also localhost / 127.0.0.1 / [::1]; for a wildcard bind, also this machine's name).
  const std::vector<std::string>& allowed_hosts() const { return allowed_hosts_; }

 private:
  explicit Server(ServerOptions options);
  void install_handlers();

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Api> api_;  // the routes, with each database's snapshot (snapshot.h)
  int port_ = 0;
  std::vector<std::string> allowed_hosts_;
};

}  // namespace hpctune::dashboard
