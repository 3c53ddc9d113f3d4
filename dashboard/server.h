// The dashboard's HTTP server (issue 14, hardened in issue 21): serves api.h's read-only JSON API
// and the embedded web app (assets.h: `/`, `/assets/NAME`) over GNU libmicrohttpd, safe by
// default. It binds 127.0.0.1 unless told otherwise and every request, on every bind, must carry
// the token (Authorization: Bearer, ?token=, or the HttpOnly cookie hpctune_token_PORT that
// `GET /?token=T` sets before redirecting to `/`), compared in constant time against every cookie
// of that name. A request whose Host header is not an address or name of the bound socket (DNS
// rebinding) is refused, and only GET is answered. Against other local users and slow or hostile
// clients: connections are read by a few event loops (none is held by a slow client), the request
// line and headers are bounded in size and number, each request has a deadline for all of it,
// malformed requests are answered and closed at once, and nothing is Brotli-compressed.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/secrets.h"

namespace hpctune::dashboard {

class Api;

struct ServerOptions {
  std::vector<std::string> databases;  // the files served, in the order of /api/campaigns
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: a free port (Server::port() tells which)
  std::string token;                   // "" = generated at bind (Server::token()); letters, digits, . _ ~ -
  bool allow_other_owners = false;     // serve a database another user owns (it decides what is shown)
  size_t max_request_line = 8 * 1024;  // the request line (414 above)
  size_t max_header_bytes = 16 * 1024; // every header line together (431 above)
  size_t max_headers = 100;            // header lines (431 above)
  size_t connection_memory = 32 * 1024;  // per connection: what the request line and headers may fill at most
  unsigned max_connections = 256;      // at once; more are refused at accept
  int request_timeout_s = 10;          // from a connection's start (or its last answer) to the request's last header
  int answer_timeout_s = 60;           // from the last header to the answer's last byte
  int idle_timeout_s = 5;              // no byte either way: the connection is closed (keep-alive included)
  int threads = 4;                     // event loops; a slow client holds none of them
};

// 127.0.0.0/8, ::1 and "localhost": the addresses only this machine can reach.
bool is_loopback(const std::string& host);

// A token of 32 random bytes (getrandom) as 64 hex digits.
Result<std::string> generate_token();

// A token a URL and a cookie carry as it is: 16 to 256 letters, digits, '.', '_', '~' or '-'.
// kUsage naming the first character that is not, for --token.
Status check_token(const std::string& token);


class Server {
 public:
  // Checks the options (the token, that the databases are the user's own unless
  // allow_other_owners, that each opens as a campaign), generates the token when none is given,
  // and binds the port. kUsage for bad options, kIo when the port cannot be bound.
  static Result<std::unique_ptr<Server>> bind(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until stop() (from any thread or a signal watcher; a stop() before serve() makes it
  // return at once). kIo when the server cannot start.
  Status serve();
  void stop();

  int port() const { return port_; }
  // The token every request must carry (given or generated).
  const std::string& token() const { return options_.token; }
  // http://HOST:PORT/ (the IPv6 host in brackets).
  std::string url() const;
  // The address a browser opens once, with ?token=TOKEN (it then keeps the token in a cookie):
  // url(), or for a wildcard bind (0.0.0.0, ::) the same with this machine's name.
  std::string browser_url() const;
  // The name of the token's cookie: hpctune_token_PORT (browsers do not scope cookies by port).
  std::string cookie_name() const { return "hpctune_token_" + std::to_string(port_); }
  // The Host header values accepted (the bound name or address with the port; for a loopback
  // bind, also localhost / 127.0.0.1 / [::1]; for a wildcard bind, also this machine's name and
  // every address of its interfaces in the bound family, and loopback).
  const std::vector<std::string>& allowed_hosts() const { return allowed_hosts_; }

 private:
  struct Loop;  // libmicrohttpd's daemon, its connections and their deadlines (server.cpp)

  explicit Server(ServerOptions options);

  ServerOptions options_;
  std::unique_ptr<Api> api_;  // the routes, with each database's snapshot (snapshot.h)
  std::unique_ptr<Loop> loop_;
  int listen_fd_ = -1;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  int port_ = 0;
  std::vector<std::string> allowed_hosts_;
};

}  // namespace hpctune::dashboard
