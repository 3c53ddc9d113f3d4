// Issue 21, finding 1 and the hello of finding 8: another local user (`nobody`) against a live
// master's transport. The routing-id collision that aborted a master on the old default bind
// (tcp://127.0.0.1:* without CURVE) is run for real while the campaign goes on: on the default bind
// (a private ipc socket) nobody cannot even connect; on a TCP bind asked for with security none the
// PLAIN handshake keeps the attacker from ever becoming a peer. Connections that never
// authenticate are closed within the handshake interval and write a bounded number of log lines,
// and a hello of another protocol version gets no answer from anyone but the master's own workers.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <regex>
#include <string>

#include <sys/wait.h>

#include "common/endpoint.h"
#include "common/safe_open.h"
#include "protocol/transport.h"
#include "tests/campaign_fixture.h"
#include "tests/stale_socket_dir.h"

using namespace hpctune;
using namespace hpctune::testing;

namespace {

// The master's address, from its "master at ADDRESS, database ..." log line ("" until then).
std::string master_endpoint(const std::string& log) {
  static const std::regex re("master at ([^ ,]+),");
  std::smatch m;
  const std::string text = read_file(log);
  return std::regex_search(text, m, re) ? m[1].str() : std::string();
}

// Runs the attacker helper as user `nobody` (the test runs as root, as CI does); its output.
std::string attack_as_nobody(const std::vector<std::string>& args, const std::string& log) {
  REQUIRE_MESSAGE(::geteuid() == 0, "the attacker runs as user nobody through runuser: run this test as root");
  launch::SpawnOptions o;
  o.argv = {"runuser", "-u", "nobody", "--", HPCTUNE_TRANSPORT_ATTACKER};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = log;
  o.stderr_path = "=stdout";
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(60s);
  REQUIRE_MESSAGE(status.has_value(), "the attacker did not finish in time");
  const std::string out = read_file(log);
  REQUIRE_MESSAGE(status->code == 0, out);
  return out;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

int64_t lines_containing(const std::string& text, const std::string& needle) {
  int64_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Starts `hpctune run` on a sleep campaign of `trials` trials with extra `resources` keys, waits for
// its address; the attack runs while the campaign does.
struct RunningCampaign {
  RunningCampaign(TempDir& dir, const std::string& name, int trials, const std::string& resources,
                  double seconds = 0.2)
      : dir(dir), name(name) {
    std::string text = sleep_config(name, trials, seconds, 1, 2);
    if (!resources.empty()) text.replace(text.find("resources: {"), 12, "resources: {" + resources + ", ");
    const std::string cfg = dir.write(name + ".yaml", text);
    log = dir.file(name + ".log");
    db = dir.file(name + ".db");
    child = start_hpctune({"run", cfg, "--db", db}, log);
    REQUIRE_MESSAGE(wait_until([&] { return !master_endpoint(log).empty(); }, 30s), read_file(log));
    endpoint = master_endpoint(log);
  }
  // Waits for the end: exit 0, every trial done.
  void completes(int trials) {
    auto status = child.wait_for(120s);
    REQUIRE_MESSAGE(status.has_value(), "the campaign did not finish; log:\n" << launch::tail_file(log, 40));
    CHECK_MESSAGE(status->success(), status->describe() << "\n" << read_file(log));
    const auto rows = read_trials(db);
    CHECK(static_cast<int>(rows.size()) == trials);
    for (const auto& t : rows) CHECK(t.state == store::TrialState::kDone);
  }
  TempDir& dir;
  std::string name, log, db, endpoint;
  launch::ChildProcess child;
};

}  // namespace

TEST_CASE("finding 1: nobody's routing-id collision against a live master on the default bind; the campaign completes") {
  TempDir dir;
  RunningCampaign c(dir, "collide", 30, "");
  // The default: a Unix socket in a private directory, which nobody cannot reach.
  CHECK_MESSAGE(c.endpoint.rfind("ipc:///", 0) == 0, c.endpoint);
  const std::string out = attack_as_nobody({"collide", c.endpoint}, dir.file("attack.log"));
  CHECK(contains(out, "claimed 40 routing ids"));
  if (c.endpoint.rfind("ipc://", 0) == 0) {
    CHECK_MESSAGE(contains(out, "unix-connect: refused (Permission denied)"), out);
    struct stat st {};
    const std::string path = c.endpoint.substr(6);
    REQUIRE(::stat(path.substr(0, path.rfind('/')).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(st.st_uid == ::geteuid());
  }
  CHECK_MESSAGE(contains(out, "answers: 0"), out);
  CHECK_FALSE(contains(out, "version-answer"));
  c.completes(30);
  // The socket and its directory are gone with the master.
  if (c.endpoint.rfind("ipc://", 0) == 0) {
    const std::string path = c.endpoint.substr(6);
    CHECK_FALSE(std::filesystem::exists(path.substr(0, path.rfind('/'))));
  }
}

TEST_CASE("finding 1: TCP without CURVE only by name, with a warning, and the collision still cannot crash it") {
  TempDir dir;
  // Loopback TCP: CURVE unless security none is asked for.
  {
    RunningCampaign c(dir, "curve", 20, "bind: \"tcp://127.0.0.1:*\"");
    CHECK_MESSAGE(c.endpoint.rfind("tcp://127.0.0.1:", 0) == 0, c.endpoint);
    const std::string out = attack_as_nobody({"collide", c.endpoint}, dir.file("attack-curve.log"));
    CHECK(contains(out, "claimed 40 routing ids"));
    CHECK_MESSAGE(contains(out, "answers: 0"), out);
    c.completes(20);
    const std::string log = read_file(c.log);
    CHECK(contains(log, "transport: CURVE encryption"));
    CHECK_FALSE(contains(log, "warning: the master listens"));
  }
  {
    RunningCampaign c(dir, "none", 20, "bind: \"tcp://127.0.0.1:*\", security: none");
    const std::string out = attack_as_nobody({"collide", c.endpoint}, dir.file("attack-none.log"));
    CHECK(contains(out, "claimed 40 routing ids"));
    CHECK_MESSAGE(contains(out, "answers: 0"), out);
    c.completes(20);
    const std::string log = read_file(c.log);
    CHECK_MESSAGE(contains(log, "hpctune run: warning: the master listens on tcp://127.0.0.1:*, which every local user "
                                "can reach, with resources.security none"),
                  log);
    CHECK(contains(log, "connections without it are refused"));
  }
}

TEST_CASE("finding 1 and 8: connections that never authenticate are closed, bounded in log lines, and get no version") {
  TempDir dir;
  // 120 trials of 0.3 s on 2 groups: the campaign outlasts the attack.
  RunningCampaign c(dir, "flood", 120, "bind: \"tcp://127.0.0.1:*\", security: none", 0.3);
  // 300 ZeroMQ connections sending hellos of another version and garbage, 300 silent TCP ones,
  // held past the master's handshake interval (10 s).
  const std::string out = attack_as_nobody({"flood", c.endpoint, "300", "11500"}, dir.file("flood.log"));
  // The master closed the silent ones, not its own exit.
  REQUIRE_MESSAGE(!c.child.wait_for(0ms).has_value(), "the campaign ended before the attack did");
  CHECK(contains(out, "zmq-connections: 300"));
  CHECK_MESSAGE(contains(out, "raw-connections: 300"), out);
  CHECK_MESSAGE(contains(out, "raw-closed-by-master: 300"), out);  // none outlives the handshake interval
  CHECK_MESSAGE(contains(out, "answers: 0"), out);                 // not even the version
  CHECK_FALSE(contains(out, "version-answer"));
  c.completes(120);
  const std::string log = read_file(c.log);
  // Nothing per connection: at most one line per 10 s saying how many were refused.
  CHECK_MESSAGE(lines_containing(log, "peer ") == 0, log);
  CHECK_MESSAGE(lines_containing(log, "refused") <= 3, log);
  CHECK_MESSAGE(lines_containing(log, "connection(s) that did not authenticate") >= 1, log);
}

TEST_CASE("transport: ipc://* is a private directory, gone with the server; PLAIN admits only the campaign secret") {
  protocol::TransportOptions o;
  o.security = protocol::TransportOptions::Security::kPlain;
  o.plain_secret = "0123456789abcdef";
  std::string dir;
  {
    auto server = protocol::bind_zmq("ipc://*", o);
    REQUIRE_MESSAGE(server.ok(), (server.ok() ? "" : server.error().to_string()));
    const std::string endpoint = (*server)->endpoint();
    REQUIRE_MESSAGE(endpoint.rfind("ipc:///", 0) == 0, endpoint);
    CHECK(endpoint.size() - 6 <= kMaxIpcPathBytes);
    dir = endpoint.substr(6, endpoint.rfind('/') - 6);
    struct stat st {};
    REQUIRE(::lstat(dir.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(st.st_uid == ::geteuid());

    auto client = [&](protocol::TransportOptions::Security security, const std::string& password) {
      protocol::TransportOptions c;
      c.security = security;
      c.plain_password = password;
      auto t = protocol::connect_zmq(endpoint, c);
      REQUIRE(t.ok());
      REQUIRE((*t)->send("from " + password).ok());
      return std::move(t).value();
    };
    auto wrong = client(protocol::TransportOptions::Security::kPlain, "fedcba9876543210.0000");
    auto prefix = client(protocol::TransportOptions::Security::kPlain, "0123456789abcdef0.0000");  // not the secret
    auto null = client(protocol::TransportOptions::Security::kNone, "");
    auto good = client(protocol::TransportOptions::Security::kPlain, "0123456789abcdef.1234");
    std::vector<std::string> got;
    REQUIRE(wait_until(
        [&] {
          auto e = (*server)->recv(std::chrono::milliseconds(20));
          REQUIRE(e.ok());
          if (e->has_value()) got.push_back((*e)->bytes);
          return (*server)->refused_connections() >= 2 && !got.empty();
        },
        10s));
    auto more = (*server)->recv(std::chrono::milliseconds(300));
    REQUIRE(more.ok());
    if (more->has_value()) got.push_back((*more)->bytes);
    CHECK(got == std::vector<std::string>{"from 0123456789abcdef.1234"});
    CHECK((*server)->refused_connections() == 2);  // the NULL one fails before ZAP: a mechanism mismatch
  }
  CHECK_FALSE(std::filesystem::exists(dir));  // the socket and its directory went with the server

  // Options that could admit no one are refused.
  o.plain_secret.clear();
  CHECK_FALSE(protocol::bind_zmq("ipc://*", o).ok());
}

TEST_CASE("transport: a killed master's ipc directory is removed by the next one; a live one's is kept") {
  std::string base;
  {
    auto probe = protocol::bind_zmq("ipc://*");
    REQUIRE(probe.ok());
    const std::string path = (*probe)->endpoint().substr(6);
    base = path.substr(0, path.rfind('/'));
    base = base.substr(0, base.rfind('/'));
  }
  std::string stale, live, young;
  const int stale_fd = fake_socket_dir(base, "hpctune-", "/master", false, stale);
  ::close(stale_fd);  // SIGKILL: the socket file stays, nobody listens
  const int live_fd = fake_socket_dir(base, "hpctune-", "/master", true, live);
  const int young_fd = fake_socket_dir(base, "hpctune-", "/master", false, young);
  ::close(young_fd);
  REQUIRE(::utimes(young.c_str(), nullptr) == 0);  // made just now: maybe a master still starting
  {
    auto next = protocol::bind_zmq("ipc://*");
    REQUIRE(next.ok());
  }
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live + "/master"));
  CHECK(std::filesystem::exists(young + "/master"));
  ::close(live_fd);
  std::filesystem::remove_all(live);
  std::filesystem::remove_all(young);
}

// Issue 35, R2: a folder others can write without the sticky bit (a careless TMPDIR), where
// `nobody` made its own directory and socket under the name a worker is told to join. The worker
// refuses it before connecting; the impostor never sees a connection.
TEST_CASE("R2: a worker never joins a socket another user could have put in its place") {
  REQUIRE_MESSAGE(::geteuid() == 0, "the impostor runs as user nobody: run this test as root");
  TempDir dir;
  ::chmod(dir.path.c_str(), 0755);
  const std::string shared = dir.file("shared");
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);  // writable by all, no sticky bit
  CHECK(unsafe_directory_chain(shared).find("without the sticky bit") != std::string::npos);
  CHECK(unsafe_directory_chain(dir.path).empty());
  const std::string evil = shared + "/hpctune-ABCDEF";
  const std::string sock = evil + "/master";
  int ready[2], seen[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(seen) == 0);
  const pid_t impostor = ::fork();
  REQUIRE(impostor >= 0);
  if (impostor == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    ::mkdir(evil.c_str(), 0755);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", sock.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 8) != 0) ::_exit(3);
    (void)!::write(ready[1], "r", 1);
    timeval tv{8, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const int c = ::accept(fd, nullptr, nullptr);
    (void)!::write(seen[1], c >= 0 ? "c" : "n", 1);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(seen[1]);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  auto worker = start_hpctune({"worker", "--master", "ipc://" + sock, "--group", "0"}, dir.file("worker.log"),
                              {{"HPCTUNE_SECRET", "00112233445566778899aabbccddeeff.00112233445566778899aabbccddeeff"}});
  auto st = worker.wait_for(20s);
  REQUIRE(st.has_value());
  CHECK(st->code != 0);
  const std::string log = read_file(dir.file("worker.log"));
  CHECK_MESSAGE(contains(log, "refusing the master's socket " + sock), log);
  byte = 0;
  REQUIRE(::read(seen[0], &byte, 1) == 1);
  CHECK(byte == 'n');  // no connection reached the impostor
  int status = 0;
  ::waitpid(impostor, &status, 0);
  ::close(ready[0]);
  ::close(seen[0]);
}
