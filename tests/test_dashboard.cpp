// The dashboard's API server (issue 14, acceptance 1): the server runs in this process on a free
// port against a database made by a real small campaign (the hpctune binary, function trainer),
// and is queried over HTTP with httplib::Client: every endpoint, pagination, sort and filter, bad
// parameters, unknown paths, the method, the token on a non-loopback bind and the Host check.
#include <doctest/doctest.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dashboard/api.h"
#include "dashboard/server.h"
#include "tests/campaign_fixture.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using json = nlohmann::json;
using hpctune::testing::TempDir;
using namespace std::chrono_literals;

namespace {

constexpr int kTrials = 12;

// One campaign for the whole file: 12 branin trials, minimised, on 2 groups.
const std::string& fixture_db() {
  static TempDir dir;
  static std::string db = [] {
    const std::string config = dir.write("branin.yaml",
                                         "name: dash-1\nseed: 3\nobjective: {metric: value, mode: min}\n"
                                         "search: {algorithm: random, max_trials: " + std::to_string(kTrials) + "}\n"
                                         "space:\n  x1: {type: float, low: -5, high: 10}\n"
                                         "  x2: {type: float, low: 0, high: 15}\n"
                                         "trainer: {kind: function, name: branin}\nresources: {groups: 2}\n");
    const std::string path = dir.file("branin.db");
    auto st = testing::run_hpctune({"run", config, "--db", path}, dir.file("run.log"));
    REQUIRE_MESSAGE(st.code == 0, testing::read_file(dir.file("run.log")));
    return path;
  }();
  return db;
}

// A server on a free port serving `dbs`, listening on a thread until the end of the scope.
struct Running {
  std::unique_ptr<dashboard::Server> server;
  std::thread thread;
  std::atomic<bool> finished{false};
  explicit Running(dashboard::ServerOptions o) {
    o.port = 0;
    auto s = dashboard::Server::bind(std::move(o));
    REQUIRE_MESSAGE(s.ok(), s.error().to_string());
    server = std::move(s).value();
    thread = std::thread([this] {
      CHECK(server->serve().ok());
      finished.store(true);
    });
  }
  ~Running() {
    // stop() before listening has begun is lost: ask until the thread has ended.
    while (!finished.load()) {
      server->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(5, 0);
    return c;
  }
};

dashboard::ServerOptions local() {
  dashboard::ServerOptions o;
  o.databases = {fixture_db()};
  return o;
}

// GET `path`: the status and the parsed body (checking the headers every response carries).
std::pair<int, json> get(httplib::Client& c, const std::string& path, const httplib::Headers& headers = {}) {
  auto res = c.Get(path.c_str(), headers);
  REQUIRE_MESSAGE(res, "no response for " << path << ": " << httplib::to_string(res.error()));
  CHECK(res->get_header_value("Content-Type") == "application/json");
  CHECK(res->get_header_value("X-Content-Type-Options") == "nosniff");
  CHECK(res->get_header_value("Content-Security-Policy").find("default-src 'none'") != std::string::npos);
  return {res->status, json::parse(res->body)};
}

}  // namespace

TEST_CASE("the campaigns list and a campaign's status are the CLI's status JSON") {
  Running r(local());
  auto c = r.client();
  auto [code, list] = get(c, "/api/campaigns");
  REQUIRE(code == 200);
  REQUIRE(list["campaigns"].size() == 1);
  const json& one = list["campaigns"][0];
  CHECK(one["index"] == 0);
  CHECK(one["file"] == "branin.db");
  CHECK(one["name"] == "dash-1");
  CHECK(one["state"] == "completed");
  CHECK(one["algorithm"] == "random");
  CHECK(one["trials"]["total"] == kTrials);
  CHECK(one["trials"]["by_state"]["done"] == kTrials);
  CHECK(one["elapsed_s"].is_number());
  REQUIRE(one["best"].is_object());

  auto [scode, status] = get(c, "/api/campaigns/0/status");
  REQUIRE(scode == 200);
  CHECK(status["campaign"]["name"] == "dash-1");
  CHECK(status["trials"]["total"] == kTrials);
  CHECK(status["best"]["trial"] == one["best"]["trial"]);
  CHECK(status["best"]["objective"] == one["best"]["objective"]);
  // The best of a minimised objective is the smallest of every trial's.
  double smallest = 1e300;
  auto [tcode, all] = get(c, "/api/campaigns/0/trials?limit=1000");
  REQUIRE(tcode == 200);
  for (const auto& t : all["trials"]) smallest = std::min(smallest, t["objective"].get<double>());
  CHECK(status["best"]["objective"].get<double>() == smallest);
}

TEST_CASE("trials are paginated, sorted and filtered on the server") {
  Running r(local());
  auto c = r.client();
  auto [code, first] = get(c, "/api/campaigns/0/trials?offset=0&limit=5");
  REQUIRE(code == 200);
  CHECK(first["total"] == kTrials);
  REQUIRE(first["trials"].size() == 5);
  CHECK(first["trials"][0]["trial"] == 1);
  CHECK(first["trials"][4]["trial"] == 5);
  auto [c2, last] = get(c, "/api/campaigns/0/trials?offset=10&limit=5");
  REQUIRE(c2 == 200);
  CHECK(last["total"] == kTrials);
  REQUIRE(last["trials"].size() == 2);
  CHECK(last["trials"][1]["trial"] == kTrials);
  auto [c3, past] = get(c, "/api/campaigns/0/trials?offset=50");
  CHECK(c3 == 200);
  CHECK(past["trials"].empty());

  // Sorted by objective, both ways; rank = best first (minimised: ascending objective).
  auto [c4, asc] = get(c, "/api/campaigns/0/trials?sort=objective&order=asc&limit=1000");
  REQUIRE(c4 == 200);
  REQUIRE(asc["trials"].size() == kTrials);
  for (size_t i = 1; i < asc["trials"].size(); ++i) {
    CHECK(asc["trials"][i - 1]["objective"].get<double>() <= asc["trials"][i]["objective"].get<double>());
  }
  auto [c5, desc] = get(c, "/api/campaigns/0/trials?sort=objective&order=desc&limit=3");
  REQUIRE(c5 == 200);
  CHECK(desc["trials"][0]["trial"] == asc["trials"][kTrials - 1]["trial"]);
  auto [c6, rank] = get(c, "/api/campaigns/0/trials?sort=rank&limit=1");
  REQUIRE(c6 == 200);
  CHECK(rank["trials"][0]["trial"] == asc["trials"][0]["trial"]);
  auto [c7, byx] = get(c, "/api/campaigns/0/trials?sort=params.x1&order=desc&limit=1000");
  REQUIRE(c7 == 200);
  for (size_t i = 1; i < byx["trials"].size(); ++i) {
    CHECK(byx["trials"][i - 1]["params"]["x1"].get<double>() >= byx["trials"][i]["params"]["x1"].get<double>());
  }

  // Filtered by state.
  auto [c8, done] = get(c, "/api/campaigns/0/trials?state=done&limit=2");
  CHECK(c8 == 200);
  CHECK(done["total"] == kTrials);
  CHECK(done["trials"].size() == 2);
  auto [c9, failed] = get(c, "/api/campaigns/0/trials?state=failed,queued");
  CHECK(c9 == 200);
  CHECK(failed["total"] == 0);
  CHECK(failed["trials"].empty());
}

TEST_CASE("a trial's detail is the CLI's trial JSON") {
  Running r(local());
  auto c = r.client();
  auto [code, t] = get(c, "/api/campaigns/0/trials/3");
  REQUIRE(code == 200);
  CHECK(t["trial"] == 3);
  CHECK(t["state"] == "done");
  CHECK(t["params"].contains("x1"));
  CHECK(t["attempts"].size() == 1);
  CHECK(t.contains("metrics_by_step"));
  CHECK(t.contains("events"));
  auto [c2, missing] = get(c, "/api/campaigns/0/trials/999");
  CHECK(c2 == 404);
  CHECK(missing["error"].is_string());
  auto [c3, bad] = get(c, "/api/campaigns/0/trials/abc");
  CHECK(c3 == 404);
}

TEST_CASE("bad parameters are a 400 naming the parameter") {
  Running r(local());
  auto c = r.client();
  const std::pair<const char*, const char*> cases[] = {
      {"/api/campaigns/0/trials?limit=0", "limit"},          {"/api/campaigns/0/trials?limit=1001", "limit"},
      {"/api/campaigns/0/trials?limit=ten", "limit"},        {"/api/campaigns/0/trials?offset=-1", "offset"},
      {"/api/campaigns/0/trials?sort=color", "sort"},        {"/api/campaigns/0/trials?order=up", "order"},
      {"/api/campaigns/0/trials?state=finished", "state"},   {"/api/campaigns/0/trials?limit=1&limit=2", "limit"},
      {"/api/campaigns/0/trials?colour=red", "colour"},      {"/api/campaigns/0/trials/1?lines=-3", "lines"},
  };
  for (const auto& [path, param] : cases) {
    CAPTURE(path);
    auto [code, body] = get(c, path);
    CHECK(code == 400);
    CHECK(body["error"].get<std::string>().rfind(std::string(param) + ":", 0) == 0);
  }
}

TEST_CASE("unknown paths, paths with '..' and other methods are refused") {
  Running r(local());
  auto c = r.client();
  // ("/" is the web app now: test_dashboard_web.)
  for (std::string path : {"/api", "/api/campaign", "/api/campaigns/1/status", "/api/campaigns/x/status",
                           "/api/campaigns/0/nothing", "/api/campaigns/0/status/more",
                           "/api/campaigns/0/../0/status", "/api/campaigns/0/trials/%2e%2e", "/../etc/passwd"}) {
    CAPTURE(path);
    auto [code, body] = get(c, path);
    CHECK(code == 404);
    CHECK(body["error"].is_string());
  }
  auto post = c.Post("/api/campaigns", "{}", "application/json");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->get_header_value("X-Content-Type-Options") == "nosniff");
  auto del = c.Delete("/api/campaigns/0/trials/1");
  REQUIRE(del);
  CHECK(del->status == 405);
  // A large body is never read (the method is refused first), and a long request line is
  // refused by the bound on it; the server answers on.
  auto big = c.Post("/api/campaigns", std::string(64 * 1024, 'x'), "text/plain");
  REQUIRE(big);
  CHECK(big->status == 405);
  auto longer = c.Get(("/api/campaigns?x=" + std::string(10000, 'y')).c_str());
  REQUIRE(longer);
  CHECK(longer->status == 414);
  CHECK(longer->get_header_value("X-Content-Type-Options") == "nosniff");
  CHECK(json::parse(longer->body)["error"].is_string());
  CHECK(get(c, "/api/campaigns").first == 200);
}

TEST_CASE("a directory serves every *.db in it, each at its index") {
  TempDir dir;
  for (const char* name : {"a.db", "b.db"}) std::filesystem::copy_file(fixture_db(), dir.file(name));
  dir.write("notes.txt", "not a database");
  auto dbs = dashboard::expand_databases({dir.path});
  REQUIRE(dbs.ok());
  dashboard::ServerOptions o;
  o.databases = *dbs;
  Running r(o);
  auto c = r.client();
  auto [code, list] = get(c, "/api/campaigns");
  REQUIRE(code == 200);
  REQUIRE(list["campaigns"].size() == 2);
  CHECK(list["campaigns"][0]["file"] == "a.db");
  CHECK(list["campaigns"][1]["file"] == "b.db");
  CHECK(list["campaigns"][1]["trials"]["total"] == kTrials);
  CHECK(get(c, "/api/campaigns/1/status").first == 200);
  CHECK(get(c, "/api/campaigns/1/trials/2").first == 200);
  CHECK(get(c, "/api/campaigns/2/status").first == 404);
}

TEST_CASE("a Host header that is not the bound address is refused (DNS rebinding)") {
  Running r(local());
  auto c = r.client();
  const std::string port = std::to_string(r.server->port());
  CHECK(get(c, "/api/campaigns", {{"Host", "127.0.0.1:" + port}}).first == 200);
  CHECK(get(c, "/api/campaigns", {{"Host", "localhost:" + port}}).first == 200);
  CHECK(get(c, "/api/campaigns", {{"Host", "evil.example:" + port}}).first == 403);
  CHECK(get(c, "/api/campaigns", {{"Host", "evil.example"}}).first == 403);
  CHECK(get(c, "/api/campaigns", {{"Host", "127.0.0.1:1"}}).first == 403);
}

TEST_CASE("a non-loopback bind needs a token on every route") {
  dashboard::ServerOptions o = local();
  o.host = "0.0.0.0";
  CHECK(dashboard::Server::bind(o).error().code() == Errc::kUsage);  // no token: refused at start
  o.token = *dashboard::generate_token();
  CHECK(o.token.size() == 64);
  CHECK(*dashboard::generate_token() != o.token);
  Running r(o);
  auto c = r.client();
  for (std::string path : {"/api/campaigns", "/api/campaigns/0/status", "/api/campaigns/0/trials",
                           "/api/campaigns/0/trials/1", "/api/nothing"}) {
    CAPTURE(path);
    CHECK(get(c, path).first == 401);
    CHECK(get(c, path, {{"Authorization", "Bearer " + o.token + "x"}}).first == 401);
    CHECK(get(c, path, {{"Authorization", "Bearer " + o.token.substr(1)}}).first == 401);
  }
  CHECK(get(c, "/api/campaigns", {{"Authorization", "Bearer " + o.token}}).first == 200);
  CHECK(get(c, "/api/campaigns/0/trials?limit=1&token=" + o.token).first == 200);
  CHECK(get(c, "/api/nothing", {{"Authorization", "Bearer " + o.token}}).first == 404);
  // The Host check runs first, token or not.
  CHECK(get(c, "/api/campaigns", {{"Authorization", "Bearer " + o.token}, {"Host", "evil.example"}}).first == 403);
}

TEST_CASE("constant-time comparison, loopback names and the database arguments") {
  CHECK(secrets_equal("abc", "abc"));
  CHECK_FALSE(secrets_equal("abc", "abd"));
  CHECK_FALSE(secrets_equal("abc", "abcd"));
  CHECK_FALSE(secrets_equal("", "a"));
  CHECK(dashboard::is_loopback("127.0.0.1"));
  CHECK(dashboard::is_loopback("127.1.2.3"));
  CHECK(dashboard::is_loopback("::1"));
  CHECK(dashboard::is_loopback("localhost"));
  CHECK_FALSE(dashboard::is_loopback("0.0.0.0"));
  CHECK_FALSE(dashboard::is_loopback("10.0.0.1"));
  TempDir dir;
  CHECK(dashboard::expand_databases({dir.file("none.db")}).error().code() == Errc::kUsage);
  CHECK(dashboard::expand_databases({dir.path}).error().code() == Errc::kUsage);  // no *.db in it
  dir.write("b.db", "");
  dir.write("a.db", "");
  dir.write("notes.txt", "");
  auto dbs = dashboard::expand_databases({dir.path});
  REQUIRE(dbs.ok());
  CHECK(*dbs == std::vector<std::string>{dir.file("a.db"), dir.file("b.db")});
  // A file that holds no campaign is refused at start, not at the first request.
  dashboard::ServerOptions o;
  o.databases = {dir.file("a.db")};
  o.port = 0;
  CHECK_FALSE(dashboard::Server::bind(o).ok());
}

TEST_CASE("hpctune dashboard: prints the URL with the real port, serves, stops on Ctrl-C; bad arguments exit 2") {
  TempDir dir;
  const std::string log = dir.file("dash.log");
  auto child = testing::start_hpctune({"dashboard", fixture_db(), "--port", "0"}, log);
  // The URL line: http://127.0.0.1:PORT/
  int port = 0;
  REQUIRE(testing::wait_until(
      [&] {
        const std::string text = testing::read_file(log);
        const std::string prefix = "at http://127.0.0.1:";
        const auto at = text.find(prefix);
        if (at == std::string::npos || text.find('\n', at) == std::string::npos) return false;
        port = std::atoi(text.c_str() + at + prefix.size());
        return true;
      },
      10s));
  REQUIRE(port > 0);
  CHECK(port != 8080);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto [code, list] = get(c, "/api/campaigns");
  CHECK(code == 200);
  CHECK(list["campaigns"][0]["name"] == "dash-1");
  child.signal(SIGINT);
  auto st = child.wait_for(5s);
  REQUIRE(st.has_value());
  CHECK(st->success());

  // Bad arguments: a usage error (exit 2) with a message, before anything is served.
  const std::vector<std::vector<std::string>> bad = {
      {"dashboard", fixture_db(), "--port", "70000"},
      {"dashboard", fixture_db(), "--port", "-1"},
      {"dashboard", dir.file("missing.db")},
      {"dashboard", fixture_db(), "--host", "0.0.0.0", "--port", "0", "--token", "short"},
      {"dashboard"},
  };
  for (const auto& args : bad) {
    CAPTURE(args.back());
    auto s = testing::run_hpctune(args, dir.file("bad.log"), 10s);
    CHECK(s.code == 2);
    CHECK(testing::read_file(dir.file("bad.log")).find("error") != std::string::npos);
  }

  // A non-loopback host without --token: one is generated and printed, and it works.
  const std::string log2 = dir.file("dash2.log");
  auto open = testing::start_hpctune({"dashboard", fixture_db(), "--host", "0.0.0.0", "--port", "0"}, log2);
  std::string token;
  REQUIRE(testing::wait_until(
      [&] {
        const std::string text = testing::read_file(log2);
        const auto at = text.find("?token=TOKEN): ");
        const auto p = text.find("at http://0.0.0.0:");
        if (at == std::string::npos || p == std::string::npos || text.find('\n', at) == std::string::npos) return false;
        token = text.substr(at + 15, text.find('\n', at) - at - 15);
        port = std::atoi(text.c_str() + p + 18);
        return true;
      },
      10s));
  CHECK(token.size() == 64);
  httplib::Client c2("127.0.0.1", port);
  c2.set_read_timeout(5, 0);
  CHECK(get(c2, "/api/campaigns").first == 401);
  CHECK(get(c2, "/api/campaigns", {{"Authorization", "Bearer " + token}}).first == 200);
  open.signal(SIGINT);
  auto st2 = open.wait_for(5s);
  REQUIRE(st2.has_value());
  CHECK(st2->success());
}

TEST_CASE("run --dashboard serves the running campaign and stops with it; a port in use is said, the campaign goes on") {
  TempDir dir;
  const std::string cfg = dir.write("live.yaml",
                                    "name: live\nobjective: {metric: value, mode: max}\n"
                                    "search: {algorithm: random, max_trials: 4}\n"
                                    "space: {value: {type: float, low: 0, high: 1}}\n"
                                    "trainer: {kind: sleep, seconds: 1.5, steps: 3, metric: value}\n"
                                    "resources: {groups: 2}\n");
  const std::string log = dir.file("live.log");
  auto child = testing::start_hpctune({"run", cfg, "--db", dir.file("live.db"), "--dashboard", "--dashboard-port", "0"}, log);
  int port = 0;
  REQUIRE_MESSAGE(testing::wait_until(
                      [&] {
                        const std::string text = testing::read_file(log);
                        const std::string prefix = "API at http://127.0.0.1:";
                        const auto at = text.find(prefix);
                        if (at == std::string::npos || text.find('\n', at) == std::string::npos) return false;
                        port = std::atoi(text.c_str() + at + prefix.size());
                        return true;
                      },
                      20s),
                  testing::read_file(log));
  REQUIRE(port > 0);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto [code, status] = get(c, "/api/campaigns/0/status");
  CHECK(code == 200);
  CHECK(status["campaign"]["name"] == "live");
  CHECK(status["campaign"]["state"] == "running");  // seen while it runs
  // While this dashboard holds the port, a second campaign asking for it says so and completes.
  const std::string log2 = dir.file("busy.log");
  auto busy = testing::run_hpctune({"run", cfg, "--db", dir.file("busy.db"), "--dashboard-port", std::to_string(port)},
                                   log2, 60s);
  CHECK_MESSAGE(busy.code == 0, testing::read_file(log2));
  CHECK(testing::read_file(log2).find("dashboard: not started, the campaign goes on without it") != std::string::npos);
  auto st = child.wait_for(60s);
  REQUIRE(st.has_value());
  CHECK_MESSAGE(st->success(), testing::read_file(log));
  // The server stopped with the campaign: its port answers no more.
  httplib::Client gone("127.0.0.1", port);
  gone.set_connection_timeout(1, 0);
  CHECK_FALSE(gone.Get("/api/campaigns"));
  // A bad port: a usage error before anything runs.
  auto bad = testing::run_hpctune({"run", cfg, "--db", dir.file("bad.db"), "--dashboard-port", "70000"}, dir.file("bad.log"), 10s);
  CHECK(bad.code == 2);
  CHECK(testing::read_file(dir.file("bad.log")).find("--dashboard-port") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("bad.db")));
}
