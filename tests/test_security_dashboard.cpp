// The dashboard against another local user (issue 21, findings 2, 4, 5 and part of 8): the
// `hpctune dashboard` binary serves a real campaign, and is attacked over real sockets, as `nobody`
// where the attack is a second user's (runuser): no token, no campaign; the token cookie named by
// the port and every cookie of that name checked; slow, malformed and header-flooding clients
// neither block others nor grow the server's memory, and each request has a deadline; never
// Brotli; wildcard binds accept the machine's own addresses; a --token a cookie cannot carry and a
// database another user owns are refused.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "dashboard/server.h"
#include "tests/campaign_fixture.h"
#include "tests/dashboard_server.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using namespace std::chrono_literals;
using hpctune::testing::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

// One small campaign (8 branin trials) for the whole file, in a directory every user can enter
// (nobody needs none of it: the attacks go over the network).
const std::string& fixture_db() {
  static TempDir dir;
  static std::string db = testing::run_branin_campaign(dir, "sec", "sec-1", 7, 8);
  return db;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A TCP connection to host:port (IPv4 or IPv6 literal); -1 when it cannot connect.
int connect_to(const std::string& host, int port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (host.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) != 1) return -1;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1) return -1;
    len = sizeof(*a);
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Everything the peer sends until it closes or `limit` passes; nullopt when it did not close in time.
std::optional<std::string> read_until_closed(int fd, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  std::string out;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;  // closed (or reset)
    out.append(buf, static_cast<size_t>(n));
  }
}

struct Reply {
  int status = 0;                                // 0: no answer
  std::multimap<std::string, std::string> headers;  // lower-case names
  std::string body;
  double ms = 0;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

Reply parse_reply(const std::string& raw) {
  Reply r;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  size_t pos = raw.find("\r\n") + 2;
  while (pos < end) {
    const size_t eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers.emplace(name, value);
    }
    pos = eol + 2;
  }
  r.body = raw.substr(end + 4);
  return r;
}

// GET `path` on a connection of its own (Connection: close), with `headers` ("Name: value" lines).
Reply http_get(const std::string& host, int port, const std::string& path, const std::vector<std::string>& headers = {},
               const std::string& host_header = "") {
  const auto t0 = Clock::now();
  Reply r;
  const int fd = connect_to(host, port);
  if (fd < 0) return r;
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: " +
                    (host_header.empty() ? (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                                               std::to_string(port)
                                         : host_header) +
                    "\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  req += "\r\n";
  if (send_all(fd, req)) {
    auto raw = read_until_closed(fd, 10s);
    if (raw) r = parse_reply(*raw);
  }
  ::close(fd);
  r.ms = ms_since(t0);
  return r;
}

// `hpctune dashboard ARGS` in the background: its port and the token of the URL it prints.
struct DashboardProcess {
  TempDir dir;
  std::unique_ptr<launch::ChildProcess> child;
  int port = 0;
  std::string token, output;

  explicit DashboardProcess(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), "dashboard");
    child = std::make_unique<launch::ChildProcess>(testing::start_hpctune(args, dir.file("dash.log"), std::move(env)));
    const std::regex url(R"(open in a browser: http://[^ ]*:(\d+)/(\?token=([A-Za-z0-9._~-]+))?[^\n]*\n)");
    REQUIRE_MESSAGE(testing::wait_until(
                        [&] {
                          output = testing::read_file(dir.file("dash.log"));
                          std::smatch m;
                          if (!std::regex_search(output, m, url)) return false;
                          port = std::stoi(m[1]);
                          token = m[3];
                          return true;
                        },
                        15s),
                    output);
  }
  ~DashboardProcess() {
    if (child) child->terminate(5s);
  }
  std::vector<std::string> auth() const { return {"Authorization: Bearer " + token}; }
  long rss_kb() const {
    std::ifstream in("/proc/" + std::to_string(child->pid()) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
    }
    return -1;
  }
};

// `cmd` run by /bin/sh; its standard output.
std::string shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// What `nobody` gets for `url`: the HTTP status curl saw ("000" when none).
std::string status_as_nobody(const std::string& url) {
  return shell("runuser -u nobody -- curl -s -o /dev/null -w '%{http_code}' --max-time 5 '" + url + "'");
}

// The machine's own addresses that are not loopback, IPv4 or IPv6 (no link-local).
std::vector<std::string> own_addresses(int family) {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != family || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    } else {
      const auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    }
    out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

// Clients that send a request's header lines one every `every`, never finishing it, on `n`
// connections; the time each connection was closed by the server (nullopt while open).
class SlowClients {
 public:
  SlowClients(const std::string& host, int port, int n, std::chrono::milliseconds every) {
    start_ = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = connect_to(host, port);
      REQUIRE(fd >= 0);
      REQUIRE(send_all(fd, "GET /api/campaigns HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n"));
      fds_.push_back(fd);
      closed_ms_.push_back(-1);
    }
    thread_ = std::thread([this, every] {
      int line = 0;
      auto next = Clock::now() + every;
      while (!stop_.load()) {
        std::vector<pollfd> ps;
        for (int fd : fds_) ps.push_back({fd, POLLIN, 0});
        ::poll(ps.data(), ps.size(), 50);
        for (size_t i = 0; i < fds_.size(); ++i) {
          if (closed_ms_[i] >= 0 || !(ps[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          char buf[4096];
          if (::recv(fds_[i], buf, sizeof buf, MSG_DONTWAIT) <= 0) closed_ms_[i] = ms_since(start_);
        }
        if (Clock::now() >= next) {
          ++line;
          for (size_t i = 0; i < fds_.size(); ++i) {
            if (closed_ms_[i] < 0 && !send_all(fds_[i], "X-Slow-" + std::to_string(line) + ": 1\r\n")) {
              closed_ms_[i] = ms_since(start_);
            }
          }
          next += every;
        }
      }
    });
  }
  ~SlowClients() {
    stop_.store(true);
    thread_.join();
    for (int fd : fds_) ::close(fd);
  }
  // How many the server has closed so far.
  int closed() const {
    return static_cast<int>(std::count_if(closed_ms_.begin(), closed_ms_.end(), [](double ms) { return ms >= 0; }));
  }

 private:
  Clock::time_point start_;
  std::vector<int> fds_;
  std::vector<double> closed_ms_;  // written by the thread only; read after the poll below
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Over `span`, a normal client's GET every 250 ms; the slowest answer's time (ms), or -1 when one
// got no 200.
double slowest_answer(const DashboardProcess& d, std::chrono::milliseconds span) {
  double worst = 0;
  const auto end = Clock::now() + span;
  while (Clock::now() < end) {
    Reply r = http_get("127.0.0.1", d.port, "/api/campaigns", d.auth());
    if (r.status != 200) return -1;
    worst = std::max(worst, r.ms);
    std::this_thread::sleep_for(250ms);
  }
  return worst;
}

}  // namespace

TEST_CASE("nobody cannot read a served campaign without the token, on loopback too; the URL printed carries it") {
  DashboardProcess d({fixture_db(), "--port", "0"});
  REQUIRE_MESSAGE(d.token.size() == 64, d.output);  // generated, and printed as ?token=
  const std::string base = "http://127.0.0.1:" + std::to_string(d.port);
  for (const char* path : {"/api/campaigns", "/api/campaigns/0/trials", "/api/campaigns/0/trials/1", "/"}) {
    CAPTURE(path);
    CHECK(status_as_nobody(base + path) == "401");
  }
  CHECK(status_as_nobody(base + "/api/campaigns/0/trials?token=" + d.token.substr(1)) == "401");
  // A repeated ?token= counts only when every one is the token (before, the first one decided).
  CHECK(status_as_nobody(base + "/api/campaigns/0/trials?token=" + d.token + "&token=x") == "401");
  CHECK(status_as_nobody(base + "/api/campaigns/0/trials?token=" + d.token + "&token=" + d.token) == "200");
  // The URL as printed opens the app (303 to / with the cookie), and the token reads the API.
  CHECK(http_get("127.0.0.1", d.port, "/?token=" + d.token).status == 303);
  CHECK(http_get("127.0.0.1", d.port, "/api/campaigns/0/trials", d.auth()).status == 200);

  // `run --dashboard`: the live campaign's URL, with its token, in the run's output; nobody gets 401.
  TempDir dir;
  const std::string cfg = dir.write("live.yaml",
                                    "name: live\nobjective: {metric: value, mode: max}\n"
                                    "search: {algorithm: random, max_trials: 3}\n"
                                    "space: {value: {type: float, low: 0, high: 1}}\n"
                                    "trainer: {kind: sleep, seconds: 2, steps: 2, metric: value}\n"
                                    "resources: {groups: 1}\n");
  auto run = testing::start_hpctune({"run", cfg, "--db", dir.file("live.db"), "--dashboard", "--dashboard-port", "0"},
                                    dir.file("live.log"));
  std::smatch m;
  std::string text;
  const std::regex live(R"(dashboard: the live campaign at http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{64})#/c/0)");
  REQUIRE_MESSAGE(testing::wait_until(
                      [&] {
                        text = testing::read_file(dir.file("live.log"));
                        return std::regex_search(text, m, live);
                      },
                      30s),
                  text);
  const int port = std::stoi(m[1]);
  const std::string token = m[2];
  CHECK(status_as_nobody("http://127.0.0.1:" + std::to_string(port) + "/api/campaigns/0/status") == "401");
  CHECK(http_get("127.0.0.1", port, "/api/campaigns/0/status", {"Authorization: Bearer " + token}).status == 200);
  auto st = run.wait_for(60s);
  REQUIRE(st.has_value());
  CHECK(st->success());
}

TEST_CASE("keep-alive: one connection serves request after request (a browser's polling, the bench)") {
  DashboardProcess d({fixture_db(), "--port", "0"});
  const int fd = connect_to("127.0.0.1", d.port);
  REQUIRE(fd >= 0);
  const std::string get = "GET /api/changes HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(d.port) +
                          "\r\nAuthorization: Bearer " + d.token + "\r\n";
  // Two requests one after the other on the same connection, then a third that asks to close.
  for (int i = 0; i < 2; ++i) {
    REQUIRE(send_all(fd, get + "\r\n"));
    std::string got;
    char buf[4096];
    const auto deadline = Clock::now() + 5s;
    // Until the whole answer is in: its headers and Content-Length bytes of body.
    auto complete = [&] {
      const size_t end = got.find("\r\n\r\n");
      if (end == std::string::npos) return false;
      Reply r = parse_reply(got);
      return got.size() >= end + 4 + static_cast<size_t>(std::atol(r.header("content-length").c_str()));
    };
    while (!complete()) {
      pollfd p{fd, POLLIN, 0};
      REQUIRE(Clock::now() < deadline);
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      REQUIRE_MESSAGE(n > 0, "the server closed the connection after request " << i + 1 << ": " << got);
      got.append(buf, static_cast<size_t>(n));
    }
    CHECK(got.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(got.find("Connection: close") == std::string::npos);
  }
  REQUIRE(send_all(fd, get + "Connection: close\r\n\r\n"));
  auto last = read_until_closed(fd, 5s);
  REQUIRE(last);
  CHECK(parse_reply(*last).status == 200);
  ::close(fd);
}

TEST_CASE("the token cookie is named by the port, and every cookie of that name is checked") {
  DashboardProcess d({fixture_db(), "--port", "0"});
  const std::string name = "hpctune_token_" + std::to_string(d.port);
  Reply first = http_get("127.0.0.1", d.port, "/?token=" + d.token);
  CHECK(first.status == 303);
  CHECK(first.header("set-cookie") == name + "=" + d.token + "; HttpOnly; SameSite=Strict; Path=/");
  // Another server's cookie of the same name (Path=/api, so the browser sends it first) locks nobody out.
  CHECK(http_get("127.0.0.1", d.port, "/api/campaigns",
                 {"Cookie: " + name + "=set-by-another-server-xxxx; a=1; " + name + "=" + d.token})
            .status == 200);
  CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", {"Cookie: " + name + "=set-by-another-server-xxxx"}).status ==
        401);
  // The cookie of a server on another port (or the old unnumbered name) opens nothing here.
  CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", {"Cookie: hpctune_token=" + d.token}).status == 401);
  CHECK(http_get("127.0.0.1", d.port, "/api/campaigns",
                 {"Cookie: hpctune_token_" + std::to_string(d.port + 1) + "=" + d.token})
            .status == 401);
}

TEST_CASE("20 slow clients do not block a normal one, and each is cut at the request deadline") {
  SUBCASE("loopback") {
    DashboardProcess d({fixture_db(), "--port", "0"});
    SlowClients slow("127.0.0.1", d.port, 20, 3000ms);
    const double worst = slowest_answer(d, 7s);
    CHECK_MESSAGE(worst >= 0, "a normal request got no answer");
    CHECK(worst < 1000);
    // Header lines keep coming every 3 s, but the whole request has 10 s: all 20 are closed by 13 s.
    CHECK(testing::wait_until([&] { return slow.closed() == 20; }, 7s));
    CHECK(slow.closed() == 20);
  }
  SUBCASE("0.0.0.0 with a token: the headers are read by no thread of the routes") {
    DashboardProcess d({fixture_db(), "--port", "0", "--host", "0.0.0.0"});
    SlowClients slow("127.0.0.1", d.port, 20, 3000ms);
    const double worst = slowest_answer(d, 5s);
    CHECK_MESSAGE(worst >= 0, "a normal request got no answer");
    CHECK(worst < 1000);
  }
}

TEST_CASE("10,000 headers are refused with the dashboard's memory bounded") {
  DashboardProcess d({fixture_db(), "--port", "0"});
  REQUIRE(http_get("127.0.0.1", d.port, "/api/campaigns/0/trials", d.auth()).status == 200);
  const long before = d.rss_kb();
  REQUIRE(before > 0);
  // 8 connections at once, each 10,000 headers of 1 KB (80 MB in all).
  const std::string pad(1000, 'p');
  std::vector<std::thread> floods;
  std::atomic<int> refused{0}, answered_431{0};
  for (int c = 0; c < 8; ++c) {
    floods.emplace_back([&] {
      const int fd = connect_to("127.0.0.1", d.port);
      if (fd < 0) return;
      std::string head = "GET /api/campaigns HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(d.port) + "\r\n";
      bool sent = send_all(fd, head);
      for (int i = 0; sent && i < 10000; ++i) sent = send_all(fd, "X-Pad-" + std::to_string(i) + ": " + pad + "\r\n");
      if (sent) sent = send_all(fd, "\r\n");
      auto raw = read_until_closed(fd, 10s);
      const bool got_431 = raw && parse_reply(*raw).status == 431;
      if (got_431) ++answered_431;
      if (got_431 || !sent) ++refused;  // answered 431, or cut off before all was sent
      ::close(fd);
    });
  }
  for (auto& t : floods) t.join();
  const long after = d.rss_kb();
  MESSAGE("RSS before " << before << " kB, after " << after << " kB; " << refused.load() << " floods refused, "
                        << answered_431.load() << " with a 431");
  CHECK(after - before < 16 * 1024);  // 80 MB sent; the server keeps at most its bounded buffers
  CHECK(refused.load() == 8);
  // And it answers on.
  Reply r = http_get("127.0.0.1", d.port, "/api/campaigns", d.auth());
  CHECK(r.status == 200);
  CHECK(r.ms < 1000);
}

TEST_CASE("malformed requests are answered at once and hold nothing") {
  DashboardProcess d({fixture_db(), "--port", "0"});
  const std::vector<std::string> malformed = {
      std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n", 16), "GET\r\n\r\n", "GET / HTTP/9.9\r\n\r\n",
      "GET / HTTP/1.1\r\nno colon here\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n",
      "GET  HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"};
  std::vector<int> fds;
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_to("127.0.0.1", d.port);
    REQUIRE(fd >= 0);
    CHECK(send_all(fd, malformed[static_cast<size_t>(i) % malformed.size()]));
    fds.push_back(fd);
  }
  // A normal client meanwhile: served at once.
  Reply r = http_get("127.0.0.1", d.port, "/api/campaigns", d.auth());
  CHECK(r.status == 200);
  CHECK(r.ms < 1000);
  // Each malformed connection is closed by the server within 2 s (after a 4xx, or at once).
  const auto t0 = Clock::now();
  int closed = 0;
  for (int fd : fds) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(2s - (Clock::now() - t0));
    if (read_until_closed(fd, std::max(left, std::chrono::milliseconds(1)))) ++closed;
    ::close(fd);
  }
  CHECK(closed == 40);
}

TEST_CASE("no answer is ever Brotli, whatever Accept-Encoding says") {
  DashboardProcess d({fixture_db(), "--port", "0"});
  for (const char* path : {"/", "/assets/app.css", "/assets/app.js", "/assets/echarts.min.js", "/api/campaigns",
                           "/api/campaigns/0/trials?format=csv", "/api/campaigns/0/trials?limit=100"}) {
    for (const char* ae : {"br", "br;q=1, gzip;q=0", "gzip, deflate, br", "*", "br, *;q=0", "identity", "deflate"}) {
      CAPTURE(path);
      CAPTURE(ae);
      std::vector<std::string> h = d.auth();
      h.push_back(std::string("Accept-Encoding: ") + ae);
      Reply r = http_get("127.0.0.1", d.port, path, h);
      CHECK(r.status == 200);
      CHECK(r.headers.count("content-encoding") <= 1);
      const std::string enc = r.header("content-encoding");
      CHECK((enc.empty() || enc == "gzip"));
    }
  }
}

TEST_CASE("wildcard binds accept the machine's own addresses and name; :: accepts [::1]") {
  char name[256] = {};
  REQUIRE(gethostname(name, sizeof name - 1) == 0);
  {
    DashboardProcess d({fixture_db(), "--port", "0", "--host", "0.0.0.0"});
    const std::string port = std::to_string(d.port);
    std::vector<std::string> hosts = {std::string(name), "127.0.0.1", "localhost"};
    for (const auto& a : own_addresses(AF_INET)) hosts.push_back(a);
    REQUIRE(hosts.size() > 3);  // the machine has an address besides loopback
    for (const auto& h : hosts) {
      CAPTURE(h);
      CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", d.auth(), h + ":" + port).status == 200);
    }
    CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", d.auth(), "evil.example:" + port).status == 403);
    CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", d.auth(), "10.255.255.254:" + port).status == 403);
  }
  {
    DashboardProcess d({fixture_db(), "--port", "0", "--host", "::"});
    const std::string port = std::to_string(d.port);
    CHECK(http_get("::1", d.port, "/api/campaigns", d.auth()).status == 200);  // Host: [::1]:PORT
    CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", d.auth()).status == 200);
    CHECK(http_get("::1", d.port, "/api/campaigns", d.auth(), std::string(name) + ":" + port).status == 200);
    for (const auto& a : own_addresses(AF_INET6)) {
      CAPTURE(a);
      CHECK(http_get("::1", d.port, "/api/campaigns", d.auth(), "[" + a + "]:" + port).status == 200);
    }
    CHECK(http_get("::1", d.port, "/api/campaigns", d.auth(), "evil.example:" + port).status == 403);
  }
}

TEST_CASE("a --token a cookie or URL cannot carry is refused with a clear error") {
  TempDir dir;
  for (const std::string token : {"abcdefghijklmnop;q", "abcdefghijklmnop q", "abcdefghijklmnop,q", "abcdefghij\"klmnop",
                                  "abcdefghijklmnop&q", "abcdefghijklmnop\\q", "abcdefghijklmnop\xc3\xa9"}) {
    CAPTURE(token);
    dashboard::ServerOptions o;
    o.databases = {fixture_db()};
    o.port = 0;
    o.token = token;
    auto s = dashboard::Server::bind(o);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == Errc::kUsage);
    CHECK(s.error().message().find("--token") != std::string::npos);
  }
  auto st = testing::run_hpctune({"dashboard", fixture_db(), "--port", "0", "--token", "abcdefghijklmnop;Path=/"},
                                 dir.file("bad.log"), 10s);
  CHECK(st.code == 2);
  const std::string log = testing::read_file(dir.file("bad.log"));
  CHECK_MESSAGE(log.find("--token") != std::string::npos, log);
  CHECK_MESSAGE(log.find("';'") != std::string::npos, log);
}

TEST_CASE("a served database another user owns is refused unless --allow-other-owners") {
  TempDir dir;
  ::chmod(dir.path.c_str(), 0755);
  const std::string db = dir.file("theirs.db");
  std::filesystem::copy_file(fixture_db(), db);
  REQUIRE(::chown(db.c_str(), 65534, 65534) == 0);  // nobody's
  auto st = testing::run_hpctune({"dashboard", db, "--port", "0"}, dir.file("refused.log"), 10s);
  CHECK(st.code == 2);
  const std::string log = testing::read_file(dir.file("refused.log"));
  CHECK_MESSAGE(log.find("theirs.db") != std::string::npos, log);
  CHECK_MESSAGE(log.find("--allow-other-owners") != std::string::npos, log);
  DashboardProcess d({db, "--port", "0", "--allow-other-owners"});
  CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", d.auth()).status == 200);
}

namespace {

// Whether `needle` is in the command line (and, for `pid`, the environment) of any process here.
bool shown_in_proc(const std::string& needle, pid_t pid) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (testing::read_file(e.path().string() + "/cmdline").find(needle) != std::string::npos) return true;
  }
  return testing::read_file("/proc/" + std::to_string(pid) + "/environ").find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("a token given by file or environment never shows in /proc/*/cmdline or the dashboard's environment") {
  TempDir dir;
  const std::string secret = "tokenfromfile-0123456789abcdef";
  const std::string file = dir.write("token", secret + "\n");
  ::chmod(file.c_str(), 0600);
  {
    DashboardProcess d({fixture_db(), "--port", "0", "--token-file", file});
    CHECK(d.output.find(secret) == std::string::npos);  // not echoed
    CHECK(d.output.find("your --token-file") != std::string::npos);
    CHECK_FALSE(shown_in_proc(secret, d.child->pid()));
    CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", {"Authorization: Bearer " + secret}).status == 200);
    CHECK(http_get("127.0.0.1", d.port, "/api/campaigns").status == 401);
  }
  const std::string from_env = "tokenfromenvironment-abcdef012";
  {
    DashboardProcess d({fixture_db(), "--port", "0"}, {{"HPCTUNE_DASHBOARD_TOKEN", from_env}});
    CHECK(d.output.find("your HPCTUNE_DASHBOARD_TOKEN") != std::string::npos);
    CHECK_FALSE(shown_in_proc(from_env, d.child->pid()));
    CHECK(http_get("127.0.0.1", d.port, "/api/campaigns", {"Authorization: Bearer " + from_env}).status == 200);
  }
  // Set but empty, as --token "" and --token-file "": refused (before, a token was generated).
  {
    auto st = testing::start_hpctune({"dashboard", fixture_db(), "--port", "0"}, dir.file("empty-env.log"),
                                     {{"HPCTUNE_DASHBOARD_TOKEN", ""}});
    auto done = st.wait_for(10s);
    REQUIRE_MESSAGE(done.has_value(), testing::read_file(dir.file("empty-env.log")));
    const std::string log = testing::read_file(dir.file("empty-env.log"));
    CHECK_MESSAGE(done->code == 2, log);
    CHECK_MESSAGE(log.find("HPCTUNE_DASHBOARD_TOKEN is set but empty") != std::string::npos, log);
    for (const char* flag : {"--token", "--token-file"}) {
      CAPTURE(flag);
      auto r = testing::run_hpctune({"dashboard", fixture_db(), "--port", "0", flag, ""}, dir.file("empty.log"), 10s);
      const std::string out = testing::read_file(dir.file("empty.log"));
      CHECK_MESSAGE(r.code == 2, out);
      CHECK_MESSAGE(out.find(std::string(flag) + ": the value is empty") != std::string::npos, out);
    }
  }
  // --token still works, with a warning that says what to use instead.
  {
    DashboardProcess d({fixture_db(), "--port", "0", "--token", "tokenonthecommandline"});
    CHECK(d.output.find("warning: --token shows the token") != std::string::npos);
    CHECK(d.output.find("--token-file") != std::string::npos);
  }
  // A file others may read, a link, an empty one: refused with the reason (exit 2).
  const std::string loose = dir.write("loose", secret + "\n");
  ::chmod(loose.c_str(), 0644);
  const std::string empty = dir.write("empty", "\n");
  ::chmod(empty.c_str(), 0600);
  const std::string link = dir.file("link");
  std::filesystem::create_symlink(file, link);
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {loose, "chmod 600"}, {empty, "holds no secret"}, {link, "symbolic link"}, {dir.file("none"), "cannot open"}}) {
    CAPTURE(path);
    auto st = testing::run_hpctune({"dashboard", fixture_db(), "--port", "0", "--token-file", path}, dir.file("bad.log"), 10s);
    CHECK(st.code == 2);
    const std::string log = testing::read_file(dir.file("bad.log"));
    CHECK_MESSAGE(log.find(why) != std::string::npos, log);
    CHECK(log.find(secret) == std::string::npos);
  }
}

TEST_CASE("dashboard DIR serves the databases it can read and names the ones it skipped") {
  TempDir dir;
  std::filesystem::copy_file(fixture_db(), dir.file("good.db"));
  dir.write("empty.db", "");
  dir.write("foreign.db", "this is not SQLite at all, just text\n");
  DashboardProcess d({dir.path, "--port", "0"});
  CHECK(d.output.find("skipped  " + dir.file("empty.db")) != std::string::npos);
  CHECK(d.output.find("skipped  " + dir.file("foreign.db")) != std::string::npos);
  Reply r = http_get("127.0.0.1", d.port, "/api/campaigns", d.auth());
  REQUIRE(r.status == 200);
  const auto list = nlohmann::json::parse(r.body);
  CHECK(list["campaigns"].size() == 1);
  // Named on the command line, a database it cannot read is still an error.
  auto st = testing::run_hpctune({"dashboard", dir.file("empty.db"), "--port", "0"}, dir.file("bad.log"), 10s);
  CHECK(st.code != 0);
  CHECK_FALSE(st.signaled);
}
