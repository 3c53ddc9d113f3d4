// The dashboard's API server (issue 14, acceptance 1): the server runs in this process on a free
// port against databases made by real small campaigns (the hpctune binary: random search on
// branin, a genetic search, two objectives through a command trainer) and by the synthetic writer
// (tests/synthetic_campaign.h: a workflow with stages, 2,000 trials), and is queried over HTTP with
// httplib::Client or through dashboard::Api directly: every endpoint, pagination, sort and filters,
// CSV, bad parameters, unknown paths, the method, the token on a non-loopback bind, the Host check,
// the change counter after a write, and lineage.
#include <doctest/doctest.h>

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dashboard/api.h"
#include "dashboard/server.h"
#include "report/campaign.h"
#include "report/csv.h"
#include "report/plots.h"
#include "report/status.h"
#include "tests/campaign_fixture.h"
#include "tests/dashboard_server.h"
#include "tests/synthetic_campaign.h"
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
  static std::string db = testing::run_branin_campaign(dir, "branin", "dash-1", 3, kTrials, 2);
  return db;
}

// A server on a free port serving its options' databases until the end of the scope.
using Running = testing::RunningDashboard;

dashboard::ServerOptions local() {
  dashboard::ServerOptions o;
  o.databases = {fixture_db()};
  return o;
}

// GET `path`: the status and the parsed body (checking the headers every response carries).
std::pair<int, json> get(httplib::Client& c, const std::string& path, const httplib::Headers& headers = {}) {
  auto res = c.Get(path.c_str(), headers);
  REQUIRE_MESSAGE(res, "no response for " << path << ": " << httplib::to_string(res.error()));
  CHECK(res->get_header_value("Content-Type") == "application/json; charset=utf-8");
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
      // A NUL or another control byte in any parameter (before: sort=params.<NUL>x was taken, 200).
      {"/api/campaigns/0/trials?sort=params.%00x", "sort"},  {"/api/campaigns/0/trials?q=a%01", "q"},
      {"/api/campaigns/0/trials?q=%7f", "q"},                 {"/api/campaigns/0/trials/1?lines=1%0a", "lines"},
      {"/api/campaigns/0/trials?limit=007", "limit"},
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
                           "/api/campaigns/0/../0/status", "/api/campaigns/0/trials/%2e%2e", "/../etc/passwd",
                           // One spelling per campaign and trial (before, "00" and "01" were 0 and 1).
                           "/api/campaigns/00/status", "/api/campaigns/+0/status", "/api/campaigns/%200/status",
                           "/api/campaigns/-0/status", "/api/campaigns/0%20/status", "/api/campaigns/0/trials/01",
                           "/api/campaigns/0/trials/+1", "/api/campaigns/0/trials/-1",
                           "/api/campaigns/0/trials/9223372036854775808", "/api/campaigns/18446744073709551616/status"}) {
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

TEST_CASE("every bind needs a token on every route, generated when none is given") {
  dashboard::ServerOptions o = local();
  o.host = "0.0.0.0";
  o.port = 0;
  {
    auto generated = dashboard::Server::bind(o);  // no token given: one is generated
    REQUIRE(generated.ok());
    CHECK((*generated)->token().size() == 64);
  }
  o.token = *dashboard::generate_token();
  CHECK(o.token.size() == 64);
  CHECK(*dashboard::generate_token() != o.token);
  Running r(o);
  auto c = r.anonymous_client();
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
  // On loopback too the token is generated and printed, and needed.
  const std::string text = testing::read_file(log);
  const auto tat = text.find("?token=TOKEN): ");
  REQUIRE_MESSAGE(tat != std::string::npos, text);
  const std::string loopback_token = text.substr(tat + 15, 64);
  CHECK(text.find("open in a browser: http://127.0.0.1:" + std::to_string(port) + "/?token=" + loopback_token + "\n") !=
        std::string::npos);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  CHECK(get(c, "/api/campaigns").first == 401);
  c.set_bearer_token_auth(loopback_token);
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
  std::string token;
  REQUIRE_MESSAGE(testing::wait_until(
                      [&] {
                        const std::string text = testing::read_file(log);
                        const std::string prefix = "API at http://127.0.0.1:";
                        const auto at = text.find(prefix);
                        if (at == std::string::npos || text.find('\n', at) == std::string::npos) return false;
                        port = std::atoi(text.c_str() + at + prefix.size());
                        const auto bearer = text.find("Authorization: Bearer ", at);
                        if (bearer != std::string::npos) token = text.substr(bearer + 22, 64);
                        return true;
                      },
                      20s),
                  testing::read_file(log));
  REQUIRE(port > 0);
  REQUIRE(token.size() == 64);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  c.set_bearer_token_auth(token);
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

// ---------------------------------------------------------------------------------------------
// The views of issue 14 (contract: routes and JSON shapes)

namespace {

// A database made by `hpctune run` of `yaml` (once per name for the whole file).
std::string campaign_db(const std::string& name, const std::string& yaml) {
  static TempDir dir;
  static std::map<std::string, std::string> made;
  if (made.count(name)) return made[name];
  const std::string config = dir.write(name + ".yaml", yaml);
  const std::string path = dir.file(name + ".db");
  auto st = testing::run_hpctune({"run", config, "--db", path}, dir.file(name + ".log"));
  REQUIRE_MESSAGE(st.code == 0, testing::read_file(dir.file(name + ".log")));
  return made[name] = path;
}

// A genetic search: 3 generations of 4 on branin, 5 reports per trial.
const std::string& genetic_db() {
  static std::string db = campaign_db("genetic", "name: dash-genetic\nseed: 5\nobjective: {metric: value, mode: min}\n"
                                                 "search: {algorithm: genetic, max_trials: 12, settings: {population: 4, generations: 3}}\n"
                                                 "space:\n  x1: {type: float, low: -5, high: 10}\n"
                                                 "  x2: {type: float, low: 0, high: 15}\n"
                                                 "trainer: {kind: function, name: branin, steps: 5}\nresources: {groups: 2}\n");
  return db;
}

// Two objectives (f1 = x, f2 = (1 - x)² + y, both minimised): a command trainer reports them.
const std::string& pareto_db() {
  static TempDir dir;
  static std::string db = [] {
    const std::string script = dir.write(
        "mo.sh", "awk -v x=\"$1\" -v y=\"$2\" 'BEGIN { printf \"hpctune-report {\\\"step\\\": 1, \\\"f1\\\": %.6f, "
                 "\\\"f2\\\": %.6f}\\n\", x, (1 - x) * (1 - x) + y }'\n");
    return campaign_db("pareto", "name: dash-mo\nseed: 2\nobjectives:\n  - {metric: f1, mode: min}\n"
                                 "  - {metric: f2, mode: min}\nsearch: {algorithm: random, max_trials: 12}\n"
                                 "space:\n  x: {type: float, low: 0, high: 1}\n  y: {type: float, low: 0, high: 1}\n"
                                 "trainer: {kind: command, command: \"sh " + script + " {x} {y}\"}\nresources: {groups: 2}\n");
  }();
  return db;
}

// A workflow with stages (search -> ensemble, transfer, pbt), written by the synthetic writer.
const std::string& stages_db() {
  static TempDir dir;
  static std::string db = [] {
    testing::SyntheticOptions o;
    o.name = "dash-stages";
    o.population = 20;
    o.with_stages = true;
    o.running = 3;
    const std::string path = dir.file("stages.db");
    auto st = testing::make_synthetic_campaign(path, 60, 5, 11, o);
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
    return path;
  }();
  return db;
}

// GET through the Api directly (no sockets): status and body.
std::pair<int, json> api_get(dashboard::Api& api, const std::string& path, const dashboard::QueryParams& params = {}) {
  auto r = api.get(path, params);
  if (!r.content_type.empty()) return {r.status, json(r.text)};
  return {r.status, r.body};
}

std::set<int64_t> ids_of(const json& trials) {
  std::set<int64_t> out;
  for (const auto& t : trials) out.insert(t["trial"].get<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("overview: counts, budget, best and stages agree with the trials") {
  dashboard::Api api({fixture_db(), stages_db()});
  auto [code, o] = api_get(api, "/api/campaigns/0/overview");
  REQUIRE(code == 200);
  CHECK(o["name"] == "dash-1");
  CHECK(o["state"] == "completed");
  CHECK(o["algorithm"] == "random");
  CHECK(o["objectives"] == json::array({{{"metric", "value"}, {"mode", "min"}}}));
  CHECK(o["trials"]["total"] == kTrials);
  CHECK(o["trials"]["by_state"]["done"] == kTrials);
  CHECK(o["budget"]["max_trials"] == kTrials);
  CHECK(o["budget"]["finished"] == kTrials);
  CHECK(o["budget"]["fraction"].get<double>() == doctest::Approx(1.0));
  CHECK(o["eta_s"].is_null());  // finished
  CHECK(o["elapsed_s"].get<double>() >= 0);
  auto [c2, ranked] = api_get(api, "/api/campaigns/0/trials", {{"sort", "rank"}, {"limit", "1"}});
  REQUIRE(c2 == 200);
  CHECK(o["best"]["trial"] == ranked["trials"][0]["trial"]);
  CHECK(o["best"]["objective"] == ranked["trials"][0]["objective"]);
  CHECK(o["best"]["params"].contains("x1"));
  CHECK(o["stages"].is_array());
  CHECK(o["version"].get<uint64_t>() >= 1);

  // A running workflow: an ETA, the stages with their trials by state and summaries.
  auto [c3, w] = api_get(api, "/api/campaigns/1/overview");
  REQUIRE(c3 == 200);
  CHECK(w["state"] == "running");
  CHECK(w["eta_s"].is_number());
  CHECK(w["eta_s"].get<double>() > 0);
  REQUIRE(w["stages"].size() == 4);
  CHECK(w["stages"][0]["name"] == "search");
  CHECK(w["stages"][0]["trials"]["running"] == 3);
  CHECK(w["stages"][1]["kind"] == "ensemble");
  CHECK(w["stages"][1]["state"] == "completed");
  CHECK(w["stages"][1]["summary"].get<std::string>().find("greedy") != std::string::npos);
  // The main trials are the search stage's: the budget counts those only.
  CHECK(w["budget"]["finished"] == 57);
  CHECK(w["trials"]["total"] == 60 + 4 + 8);
}

TEST_CASE("history: trials with an objective in finish order, the best so far, downsampling keeps improvements") {
  dashboard::Api api({genetic_db()});
  auto [code, h] = api_get(api, "/api/campaigns/0/history");
  REQUIRE(code == 200);
  CHECK(h["objective"] == "value");
  CHECK(h["mode"] == "min");
  const json& p = h["points"];
  const size_t n = p["trial"].size();
  CHECK(n == h["total"].get<size_t>());
  CHECK(n == h["shown"].get<size_t>());
  REQUIRE(n >= 8);
  double best = 1e300;
  for (size_t i = 0; i < n; ++i) {
    CHECK(p["number"][i] == i + 1);
    best = std::min(best, p["value"][i].get<double>());
    CHECK(p["best"][i].get<double>() == best);
    if (i > 0) CHECK(p["finished_at"][i].get<double>() >= p["finished_at"][i - 1].get<double>());
  }
  // Three points: every improvement is kept even past max_points.
  auto [c2, few] = api_get(api, "/api/campaigns/0/history", {{"max_points", "3"}});
  REQUIRE(c2 == 200);
  CHECK(few["total"] == n);
  CHECK(few["shown"].get<size_t>() >= 1);
  CHECK(few["points"]["best"].back() == p["best"].back());
  CHECK(std::find(few["points"]["value"].begin(), few["points"]["value"].end(), json(best)) != few["points"]["value"].end());
}

TEST_CASE("generations: box statistics per generation of a genetic search; none for a random search") {
  dashboard::Api api({genetic_db(), fixture_db()});
  auto [code, g] = api_get(api, "/api/campaigns/0/generations");
  REQUIRE(code == 200);
  REQUIRE(g["generations"].size() >= 2);
  auto [tc, all] = api_get(api, "/api/campaigns/0/trials", {{"limit", "1000"}});
  REQUIRE(tc == 200);
  int64_t total = 0;
  for (const auto& box : g["generations"]) {
    total += box["n"].get<int64_t>();
    CHECK(box["min"].get<double>() <= box["q1"].get<double>());
    CHECK(box["q1"].get<double>() <= box["median"].get<double>());
    CHECK(box["median"].get<double>() <= box["q3"].get<double>());
    CHECK(box["q3"].get<double>() <= box["max"].get<double>());
    // The best trial of the generation has its minimum (minimised).
    double v = 0;
    for (const auto& t : all["trials"]) {
      if (t["trial"] == box["best_trial"]) v = t["objective"].get<double>();
    }
    CHECK(v == box["min"].get<double>());
    auto [fc, in_gen] = api_get(api, "/api/campaigns/0/trials", {{"generation", std::to_string(box["generation"].get<int64_t>())}});
    REQUIRE(fc == 200);
    CHECK(in_gen["total"] == box["n"]);
  }
  CHECK(total == all["total"].get<int64_t>());
  auto [c2, none] = api_get(api, "/api/campaigns/1/generations");
  REQUIRE(c2 == 200);
  CHECK(none["generations"].empty());
}

TEST_CASE("params: the space's parameters and each trial's values, downsampled keeping the best") {
  dashboard::Api api({fixture_db()});
  auto [code, p] = api_get(api, "/api/campaigns/0/params");
  REQUIRE(code == 200);
  CHECK(p["total"] == kTrials);
  CHECK(p["shown"] == kTrials);
  REQUIRE(p["params"].size() == 2);
  CHECK(p["params"][0]["name"] == "x1");
  CHECK(p["params"][0]["type"] == "float");
  CHECK(p["params"][0]["low"] == -5.0);
  CHECK(p["params"][0]["high"] == 10.0);
  CHECK(p["params"][0]["log"] == false);
  CHECK(p["params"][0]["choices"].is_null());
  CHECK(p["points"].size() == kTrials);
  CHECK(p["points"][0]["params"].contains("x2"));
  auto [c2, few] = api_get(api, "/api/campaigns/0/params", {{"max_points", "5"}});
  REQUIRE(c2 == 200);
  CHECK(few["total"] == kTrials);
  CHECK(few["shown"] == 5);
  REQUIRE(few["points"].size() == 5);
  auto [c3, overview] = api_get(api, "/api/campaigns/0/overview");
  CHECK(ids_of(few["points"]).count(overview["best"]["trial"].get<int64_t>()) == 1);  // the best is kept

  // A space of floats, log floats, an int and a categorical.
  dashboard::Api s({stages_db()});
  auto [c4, sp] = api_get(s, "/api/campaigns/0/params");
  REQUIRE(c4 == 200);
  std::map<std::string, json> by_name;
  for (const auto& q : sp["params"]) by_name[q["name"].get<std::string>()] = q;
  REQUIRE(by_name.size() == 6);
  CHECK(by_name["lr"]["log"] == true);
  CHECK(by_name["layers"]["type"] == "int");
  CHECK(by_name["optimizer"]["type"] == "categorical");
  CHECK(by_name["optimizer"]["choices"] == json::array({"sgd", "adam", "rmsprop"}));
}

TEST_CASE("importance: PED-ANOVA names itself, sums to 1, and finds the parameter that drives the objective") {
  dashboard::Api api({stages_db(), fixture_db()});
  auto [code, imp] = api_get(api, "/api/campaigns/0/importance");
  REQUIRE(code == 200);
  CHECK(imp["method"].get<std::string>().find("PED-ANOVA") != std::string::npos);
  CHECK(imp["n_trials"].get<int64_t>() >= 50);
  REQUIRE(imp["importances"].size() == 6);
  double sum = 0;
  for (const auto& i : imp["importances"]) sum += i["importance"].get<double>();
  CHECK(sum == doctest::Approx(1.0));
  CHECK(imp["importances"][0]["param"] == "lr");  // the synthetic objective is mostly lr's
  for (size_t k = 1; k < imp["importances"].size(); ++k) {
    CHECK(imp["importances"][k - 1]["importance"].get<double>() >= imp["importances"][k]["importance"].get<double>());
  }
  auto [c2, small] = api_get(api, "/api/campaigns/1/importance");
  REQUIRE(c2 == 200);
  CHECK(small["n_trials"] == kTrials);
  CHECK(small["importances"].size() == 2);
}

TEST_CASE("curves: reports per trial, the chosen trials, the metric; each curve at most 200 points") {
  dashboard::Api api({genetic_db(), stages_db()});
  auto [code, c] = api_get(api, "/api/campaigns/0/curves");
  REQUIRE(code == 200);
  CHECK(c["metric"] == "value");
  CHECK(std::find(c["metrics"].begin(), c["metrics"].end(), json("value")) != c["metrics"].end());
  REQUIRE_FALSE(c["trials"].empty());
  int best = 0;
  for (const auto& t : c["trials"]) {
    CHECK(t["steps"].size() == t["values"].size());
    CHECK(t["steps"].size() == 5);
    CHECK(t["pruned"] == false);
    best += t["best"].get<bool>();
  }
  CHECK(best == 1);
  auto [c2, two] = api_get(api, "/api/campaigns/0/curves", {{"trials", "2,1"}, {"max_trials", "1"}});
  REQUIRE(c2 == 200);
  CHECK(ids_of(two["trials"]) == std::set<int64_t>{1, 2});
  auto [c3, few] = api_get(api, "/api/campaigns/0/curves", {{"max_trials", "2"}});
  REQUIRE(c3 == 200);
  CHECK(few["trials"].size() == 2);
  // Running trials are always drawn, pruned ones marked.
  auto [c4, live] = api_get(api, "/api/campaigns/1/curves", {{"metric", "loss"}, {"max_trials", "10"}});
  REQUIRE(c4 == 200);
  CHECK(live["metric"] == "loss");
  int running = 0;
  for (const auto& t : live["trials"]) {
    running += t["state"] == "running";
    CHECK(t["pruned"] == (t["state"] == "pruned"));
  }
  CHECK(running == 3);
  CHECK(api_get(api, "/api/campaigns/0/curves", {{"metric", "nope"}}).first == 400);
  CHECK(api_get(api, "/api/campaigns/0/curves", {{"trials", "1,999"}}).first == 400);
}

TEST_CASE("pareto: the non-dominated trials of two objectives; a single objective has none") {
  dashboard::Api api({pareto_db(), fixture_db()});
  auto [code, p] = api_get(api, "/api/campaigns/0/pareto");
  REQUIRE(code == 200);
  CHECK(p["objectives"] == json::array({{{"metric", "f1"}, {"mode", "min"}}, {{"metric", "f2"}, {"mode", "min"}}}));
  REQUIRE(p["points"].size() == 12);
  REQUIRE_FALSE(p["front"].empty());
  const std::set<int64_t> front = p["front"].get<std::set<int64_t>>();
  for (const auto& a : p["points"]) {
    bool dominated = false;
    for (const auto& b : p["points"]) {
      const double a1 = a["values"][0], a2 = a["values"][1], b1 = b["values"][0], b2 = b["values"][1];
      dominated = dominated || (b1 <= a1 && b2 <= a2 && (b1 < a1 || b2 < a2));
    }
    CHECK(a["on_front"] == !dominated);
    CHECK(front.count(a["trial"].get<int64_t>()) == (dominated ? 0u : 1u));
  }
  // The CLI's recorded front is the same set.
  auto [sc, status] = api_get(api, "/api/campaigns/0/status");
  REQUIRE(sc == 200);
  CHECK(status["pareto_front"].get<std::set<int64_t>>() == front);
  auto [c2, few] = api_get(api, "/api/campaigns/0/pareto", {{"max_points", "1"}});
  REQUIRE(c2 == 200);
  CHECK(few["points"].size() == front.size());  // the front is always kept
  auto [c3, single] = api_get(api, "/api/campaigns/1/pareto");
  REQUIRE(c3 == 200);
  CHECK(single["objectives"].size() == 1);
  CHECK(single["front"].empty());
  CHECK(single["points"].empty());
  CHECK(single["note"].is_string());
}

TEST_CASE("timeline: one bar per attempt on its group, the span, utilization") {
  dashboard::Api api({fixture_db(), stages_db()});
  auto [code, t] = api_get(api, "/api/campaigns/0/timeline");
  REQUIRE(code == 200);
  REQUIRE(t["bars"].size() == kTrials);
  // Both groups, or one when the other registered only after the 12 quick trials were done (a
  // loaded machine: CI saw it); a group that ran a bar is always listed.
  REQUIRE(t["groups"].size() >= 1);
  REQUIRE(t["groups"].size() <= 2);
  std::set<int64_t> listed;
  for (const auto& g : t["groups"]) listed.insert(g["id"].get<int64_t>());
  for (const auto& b : t["bars"]) CHECK(listed.count(b["group"].get<int64_t>()) == 1);
  const double t0 = t["span"][0], t1 = t["span"][1];
  CHECK(t1 >= t0);
  for (const auto& b : t["bars"]) {
    CHECK(b["attempt"] == 1);
    CHECK((b["group"] == 0 || b["group"] == 1));
    CHECK(b["start"].get<double>() >= t0);
    CHECK(b["end"].get<double>() <= t1);
    CHECK(b["state"] == "done");
  }
  CHECK(t["utilization"].get<double>() > 0);
  CHECK(t["utilization"].get<double>() <= 100.0 + 1e-9);
  CHECK(t["truncated"] == false);

  auto [c2, w] = api_get(api, "/api/campaigns/1/timeline", {{"max_bars", "10"}});
  REQUIRE(c2 == 200);
  CHECK(w["groups"].size() == 16);
  CHECK(w["groups"][0]["backend"] == "local");
  CHECK(w["bars"].size() == 10);
  CHECK(w["truncated"] == true);
  // The latest bars are kept; running attempts have no end (drawn to now).
  auto [c3, full] = api_get(api, "/api/campaigns/1/timeline");
  REQUIRE(c3 == 200);
  CHECK(full["truncated"] == false);
  REQUIRE(full["bars"].size() == 72);
  std::vector<double> starts;
  int open = 0;
  for (const auto& b : full["bars"]) {
    starts.push_back(b["start"]);
    open += b["end"].is_null();
  }
  CHECK(open == 3);
  std::sort(starts.begin(), starts.end());
  for (const auto& b : w["bars"]) CHECK(b["start"].get<double>() >= starts[starts.size() - 10]);
}

TEST_CASE("stages: ensemble members, transfer pairs and the pbt tree; stage filters and unknown stages") {
  dashboard::Api api({stages_db()});
  auto [code, s] = api_get(api, "/api/campaigns/0/stages");
  REQUIRE(code == 200);
  REQUIRE(s["stages"].size() == 4);
  const json& blend = s["stages"][1];
  CHECK(blend["kind"] == "ensemble");
  CHECK(blend["result"]["method"] == "greedy");
  REQUIRE(blend["view"]["members"].size() == 3);
  CHECK(blend["view"]["members"][0]["weight"].get<double>() == doctest::Approx(0.5));
  CHECK(blend["view"]["members"][0]["objective"].is_number());
  CHECK(blend["view"]["ensemble"]["test_accuracy"] == 0.96);
  CHECK(blend["view"]["best_single"]["trial"] == blend["view"]["members"][0]["trial"]);
  const json& transfer = s["stages"][2];
  REQUIRE(transfer["view"]["pairs"].size() == 2);
  // One figure, named, as `status` shows it (issue 36, item 8): the stage's compare_metric, the
  // trials' test accuracy, not their validation objective.
  CHECK(transfer["view"]["metric"] == "test_accuracy");
  CHECK(transfer["view"]["label"] == "test accuracy");
  double sum = 0;
  for (const auto& p : transfer["view"]["pairs"]) {
    CHECK(p["baseline"].get<int64_t>() == p["target"].get<int64_t>() + 1);
    REQUIRE(p["target_value"].is_number());
    const auto [ct, trial] = api_get(api, "/api/campaigns/0/trials/" + std::to_string(p["target"].get<int64_t>()));
    REQUIRE(ct == 200);
    CHECK(p["target_value"].get<double>() == doctest::Approx(trial["metrics"]["test_accuracy"].get<double>()));
    CHECK(p["target_value"].get<double>() != doctest::Approx(trial["objective"].get<double>()));
    sum += p["target_value"].get<double>();
  }
  CHECK(transfer["view"]["mean_target"].get<double>() == doctest::Approx(sum / 2));
  const json& pbt = s["stages"][3];
  REQUIRE(pbt["view"]["tree"].size() == 8);
  int exploits = 0;
  for (const auto& n : pbt["view"]["tree"]) exploits += n["relation"] == "exploit";
  CHECK(exploits == 4);

  auto [c2, search] = api_get(api, "/api/campaigns/0/trials", {{"stage", "search"}, {"limit", "1"}});
  REQUIRE(c2 == 200);
  CHECK(search["total"] == 60);
  CHECK(search["trials"][0]["stage"] == "search");
  auto [c3, tr] = api_get(api, "/api/campaigns/0/history", {{"stage", "transfer"}});
  REQUIRE(c3 == 200);
  CHECK(tr["total"] == 4);
  auto [c4, bad] = api_get(api, "/api/campaigns/0/history", {{"stage", "nope"}});
  CHECK(c4 == 400);
  CHECK(bad["error"].get<std::string>().rfind("stage:", 0) == 0);
  CHECK(bad["error"].get<std::string>().find("search, blend, transfer, pbt") != std::string::npos);
  auto [c5, pg] = api_get(api, "/api/campaigns/0/generations", {{"stage", "pbt"}});
  REQUIRE(c5 == 200);
  CHECK(pg["generations"].size() == 2);
  // Every trial by default in the list, the main stage's in the views.
  auto [c6, every] = api_get(api, "/api/campaigns/0/trials", {{"limit", "1"}});
  CHECK(every["total"] == 72);
  auto [c7, list] = api_get(api, "/api/campaigns");
  REQUIRE(list["campaigns"][0]["stages"].size() == 4);
  CHECK(list["campaigns"][0]["stages"][3] == json{{"name", "pbt"}, {"kind", "pbt"}, {"state", "running"}});
}

TEST_CASE("trials: filters by stage, generation and text; lineage parents and children") {
  dashboard::Api api({genetic_db()});
  auto [code, all] = api_get(api, "/api/campaigns/0/trials", {{"limit", "1000"}});
  REQUIRE(code == 200);
  const json& first = all["trials"][0];
  CHECK(first.contains("stage"));
  CHECK(first["stage"] == "search");  // the implicit single stage
  CHECK(first.contains("generation"));
  CHECK(first.contains("group"));
  CHECK(first["parents"].is_array());
  // A child of a later generation names its parents; each parent lists it as a child.
  const json* child = nullptr;
  for (const auto& t : all["trials"]) {
    if (!t["parents"].empty()) child = &t;
  }
  REQUIRE(child != nullptr);
  CHECK((*child)["generation"].get<int64_t>() >= 1);
  const int64_t child_id = (*child)["trial"];
  auto [dc, detail] = api_get(api, "/api/campaigns/0/trials/" + std::to_string(child_id));
  REQUIRE(dc == 200);
  REQUIRE_FALSE(detail["lineage"]["parents"].empty());
  const int64_t parent = detail["lineage"]["parents"][0]["trial"];
  CHECK(detail["lineage"]["parents"][0]["relation"] == "parent");
  auto [pc, pdetail] = api_get(api, "/api/campaigns/0/trials/" + std::to_string(parent));
  REQUIRE(pc == 200);
  bool listed = false;
  for (const auto& k : pdetail["lineage"]["children"]) listed = listed || k["trial"] == child_id;
  CHECK(listed);

  // q: a substring of the params JSON (case-insensitive), or "#<id>".
  auto [qc, byid] = api_get(api, "/api/campaigns/0/trials", {{"q", "#" + std::to_string(child_id)}});
  REQUIRE(qc == 200);
  CHECK(ids_of(byid["trials"]).count(child_id) == 1);
  auto [q2, byname] = api_get(api, "/api/campaigns/0/trials", {{"q", "X1"}});
  CHECK(byname["total"] == all["total"]);
  auto [q3, none] = api_get(api, "/api/campaigns/0/trials", {{"q", "no such text"}});
  CHECK(none["total"] == 0);
  auto [q4, g0] = api_get(api, "/api/campaigns/0/trials", {{"generation", "0"}, {"sort", "generation"}});
  CHECK(g0["total"] == 4);
}

TEST_CASE("trials as CSV: every matching row, the contract's columns, formulas defused") {
  TempDir dir;
  testing::SyntheticOptions o;
  o.name = "csv test";
  o.running = 1;
  const std::string db = dir.file("csv.db");
  REQUIRE(testing::make_synthetic_campaign(db, 30, 2, 3, o).ok());
  {
    // A trial whose parameter value is a formula.
    auto w = store::Store::open(db);
    REQUIRE(w.ok());
    store::TrialRow t;
    t.campaign_id = 1;
    t.seq = 1000;
    t.params = {{"optimizer", "=HYPERLINK(\"http://x\")"}, {"lr", -0.5}};
    t.created_at = unix_now();
    REQUIRE((*w)->insert_trial(t).ok());
  }
  dashboard::ServerOptions so;
  so.databases = {db};
  Running r(so);
  auto c = r.client();
  auto res = c.Get("/api/campaigns/0/trials?format=csv&sort=trial");
  REQUIRE(res);
  CHECK(res->status == 200);
  std::string type = res->get_header_value("Content-Type");
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  CHECK(type.rfind("text/csv", 0) == 0);  // media types are case-insensitive (server.cpp sends "Text/csv" when gzipped)
  CHECK(res->get_header_value("Content-Disposition") == "attachment; filename=\"csv_test-trials.csv\"");
  CHECK(res->get_header_value("X-Content-Type-Options") == "nosniff");
  const auto lines = [&] {
    std::vector<std::string> out;
    std::istringstream in(res->body);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }();
  REQUIRE(lines.size() == 1 + 31);  // every row, no page
  CHECK(lines[0].rfind("trial,seq,stage,generation,state,attempt,group,created_at,started_at,finished_at,seconds,objective,step,params.", 0) == 0);
  CHECK(lines[0].find("metrics.val_accuracy") != std::string::npos);
  CHECK(lines.back().find(",\"'=HYPERLINK(\"\"http://x\"\")\"") != std::string::npos);
  CHECK(lines.back().find(",-0.5") != std::string::npos);  // a number is not text: no quote
  // A browser's request: gzip once (httplib's own Brotli is not added over it), the same bytes inflated.
  auto raw = r.client();
  raw.set_decompress(false);
  auto zipped = raw.Get("/api/campaigns/0/trials?format=csv&sort=trial", {{"Accept-Encoding", "gzip, deflate, br"}});
  REQUIRE(zipped);
  REQUIRE(res->body.size() > 1024);  // large enough to be compressed
  CHECK(zipped->get_header_value_count("Content-Encoding") == 1);
  CHECK(zipped->get_header_value("Content-Encoding") == "gzip");
  CHECK(zipped->body.size() < res->body.size());
  auto inflated = c.Get("/api/campaigns/0/trials?format=csv&sort=trial", {{"Accept-Encoding", "gzip, deflate, br"}});
  REQUIRE(inflated);
  CHECK(inflated->body == res->body);
  auto filtered = c.Get("/api/campaigns/0/trials?format=csv&state=running");
  REQUIRE(filtered);
  CHECK(std::count(filtered->body.begin(), filtered->body.end(), '\n') == 2);
  CHECK(get(c, "/api/campaigns/0/trials?format=xml").first == 400);
  CHECK(report::csv_field("=1+2") == "'=1+2");
  CHECK(report::csv_field("+1") == "+1");  // a plain number stays a number
  CHECK(report::csv_field("-1") == "-1");
  CHECK(report::csv_field("-1+2") == "'-1+2");
  CHECK(report::csv_field("a;=1+1") == "\"a;'=1+1\"");  // ';'-separated locales split there
  CHECK(report::csv_field("@SUM(A1)") == "'@SUM(A1)");
  CHECK(report::csv_field("a,b") == "\"a,b\"");
  CHECK(report::csv_field("plain") == "plain");
}

TEST_CASE("the snapshot follows the writer: new trials, trials that finished, the change counter") {
  TempDir dir;
  testing::SyntheticOptions o;
  o.running = 2;
  const std::string db = dir.file("live.db");
  REQUIRE(testing::make_synthetic_campaign(db, 20, 3, 9, o).ok());
  dashboard::Api api({db}, std::chrono::milliseconds(0));
  auto [c0, ch0] = api_get(api, "/api/changes");
  REQUIRE(c0 == 200);
  const uint64_t v0 = ch0["version"];
  CHECK(ch0["campaigns"][0]["version"] == v0);
  CHECK(ch0["campaigns"][0]["state"] == "running");
  auto [c1, before] = api_get(api, "/api/campaigns/0/trials", {{"state", "running"}});
  REQUIRE(before["total"] == 2);
  const int64_t running_id = before["trials"][0]["trial"];
  // Nothing written: the version stays.
  CHECK(api_get(api, "/api/changes", {{"since", std::to_string(v0)}}).second["version"] == v0);

  auto opened = store::Store::open(db);
  REQUIRE(opened.ok());
  auto& w = **opened;
  REQUIRE(w.finish_trial(running_id, 1, store::TrialState::kDone, {{"val_accuracy", 0.99}}, 0.99, 3, "", unix_now()).ok());
  store::TrialRow t;
  t.campaign_id = 1;
  t.seq = 20;
  t.params = {{"lr", 0.01}};
  t.created_at = unix_now();
  auto new_id = w.insert_trial(t);
  REQUIRE(new_id.ok());

  auto [c2, ch] = api_get(api, "/api/changes", {{"since", std::to_string(v0)}});
  REQUIRE(c2 == 200);
  CHECK(ch["version"].get<uint64_t>() > v0);
  CHECK(ch["campaigns"][0]["version"] == ch["version"]);
  auto [c3, after] = api_get(api, "/api/campaigns/0/trials", {{"limit", "1000"}});
  CHECK(after["total"] == 21);
  for (const auto& tr : after["trials"]) {
    if (tr["trial"] == running_id) {
      CHECK(tr["state"] == "done");
      CHECK(tr["objective"] == 0.99);
    }
  }
  CHECK(after["trials"].back()["trial"] == *new_id);
  CHECK(after["trials"].back()["state"] == "queued");
  auto [c4, ov] = api_get(api, "/api/campaigns/0/overview");
  CHECK(ov["best"]["trial"] == running_id);  // 0.99 beats every synthetic trial
  CHECK(ov["version"] == ch["version"]);
  REQUIRE(w.set_campaign_state(1, "completed", unix_now()).ok());
  auto [c5, ch2] = api_get(api, "/api/changes");
  CHECK(ch2["campaigns"][0]["state"] == "completed");
  CHECK(api_get(api, "/api/changes", {{"since", "x"}}).first == 400);

  // Over HTTP, with the default check interval: the change shows within a moment.
  dashboard::ServerOptions so;
  so.databases = {db};
  Running r(so);
  auto c = r.client();
  auto [h0, hv] = get(c, "/api/changes");
  REQUIRE(h0 == 200);
  const uint64_t hv0 = hv["version"];
  REQUIRE(w.add_metrics(*new_id, 1, 1, {{"val_accuracy", 0.5}}, unix_now()).ok());
  CHECK(testing::wait_until([&] { return get(c, "/api/changes").second["version"].get<uint64_t>() > hv0; }, 5s));
}

TEST_CASE("2,000 synthetic trials with 20 reports each: every route answers") {
  TempDir dir;
  const std::string db = dir.file("big.db");
  REQUIRE(testing::make_synthetic_campaign(db, 2000, 20, 1).ok());
  dashboard::Api api({db});
  for (const std::string route : {"overview", "status", "trials", "history", "generations", "params", "importance",
                                  "curves", "pareto", "timeline", "stages"}) {
    CAPTURE(route);
    auto [code, body] = api_get(api, "/api/campaigns/0/" + route);
    CHECK(code == 200);
  }
  auto [code, p] = api_get(api, "/api/campaigns/0/params");
  CHECK(p["shown"] == 1000);
  CHECK(p["total"].get<int64_t>() > 1800);
  auto [hc, h] = api_get(api, "/api/campaigns/0/history", {{"max_points", "100"}});
  CHECK(h["shown"].get<int64_t>() <= 100 + 20);
  auto [gc, g] = api_get(api, "/api/campaigns/0/generations");
  CHECK(g["generations"].size() == 20);
  auto [cc, curves] = api_get(api, "/api/campaigns/0/curves");
  CHECK(curves["trials"].size() == 50);
  auto [tc, t] = api_get(api, "/api/campaigns/0/timeline");
  CHECK(t["groups"].size() == 16);
  CHECK(t["utilization"].get<double>() > 50);
  auto [dc, detail] = api_get(api, "/api/campaigns/0/trials/1500");
  CHECK(dc == 200);
  CHECK(detail["metrics_by_step"].size() == 20);
  CHECK(detail["lineage"]["parents"].size() >= 1);
}

TEST_CASE("the new routes' bad parameters are a 400 naming the parameter") {
  dashboard::Api api({fixture_db()});
  const std::vector<std::pair<std::string, dashboard::QueryParams>> cases = {
      {"history", {{"max_points", "0"}}},        {"history", {{"max_points", "20001"}}},
      {"history", {{"stage", "x"}}},             {"history", {{"colour", "red"}}},
      {"params", {{"max_points", "5001"}}},      {"params", {{"max_points", "a"}}},
      {"curves", {{"max_trials", "201"}}},       {"curves", {{"trials", "a,b"}}},
      {"pareto", {{"max_points", "-1"}}},        {"timeline", {{"max_bars", "0"}}},
      {"trials", {{"generation", "-1"}}},        {"trials", {{"format", "pdf"}}},
      {"trials", {{"stage", "x"}}},              {"importance", {{"stage", "x"}}},
      {"overview", {{"x", "1"}}},                {"stages", {{"x", "1"}}},
      {"generations", {{"stage", "a"}, {"stage", "b"}}},
  };
  for (const auto& [route, params] : cases) {
    CAPTURE(route);
    CAPTURE(params.begin()->first);
    auto [code, body] = api_get(api, "/api/campaigns/0/" + route, params);
    CHECK(code == 400);
    CHECK(body["error"].get<std::string>().rfind(params.begin()->first + ":", 0) == 0);
  }
  CHECK(api_get(api, "/api/changes", {{"since", "-2"}}).first == 400);
  // A control byte in a parameter's name or value, on any route: a 400 naming the parameter.
  for (const std::string route : {"status", "overview", "trials", "history", "generations", "params", "importance", "curves",
                            "pareto", "timeline", "stages", "trials/1"}) {
    CAPTURE(route);
    auto [code, body] = api_get(api, "/api/campaigns/0/" + route, {{"sort", std::string("params.\0x", 9)}});
    CHECK(code == 400);
    CHECK_MESSAGE(body["error"].get<std::string>().rfind("sort: the value holds a control byte (\\x00 at offset 7)", 0) == 0,
                  body.dump());
    std::tie(code, body) = api_get(api, "/api/campaigns/0/" + route, {{std::string("x\x1by"), "1"}});
    CHECK(code == 400);
    CHECK_MESSAGE(body["error"].get<std::string>().rfind("x\\x1by: the name holds a control byte", 0) == 0, body.dump());
  }
  CHECK(api_get(api, "/api/changes", {{"since", std::string("1\0", 2)}}).first == 400);
  CHECK(api_get(api, "/api/campaigns/00/overview").first == 404);
  CHECK(api_get(api, "/api/campaigns/0/trials/001").first == 404);
  CHECK(api_get(api, "/api/campaigns/0/importance/x").first == 404);
  CHECK(api_get(api, "/api/campaigns/3/overview").first == 404);
}

TEST_CASE("status from the snapshot is what `hpctune status --format json` prints; an empty campaign answers every route") {
  for (const std::string& db : {stages_db(), genetic_db(), pareto_db()}) {
    CAPTURE(db);
    dashboard::Api api({db});
    auto [code, served] = api_get(api, "/api/campaigns/0/status");
    REQUIRE(code == 200);
    auto view = report::open_campaign(db);
    REQUIRE(view.ok());
    auto st = report::campaign_status(*view, unix_now());
    REQUIRE(st.ok());
    json cli = report::status_json(*st);
    CHECK(served["campaign"]["elapsed_s"].get<double>() == doctest::Approx(cli["campaign"]["elapsed_s"].get<double>()).epsilon(0.01));
    served["campaign"].erase("elapsed_s");
    cli["campaign"].erase("elapsed_s");
    // The group time of a campaign still running counts to each reader's own now.
    for (const char* key : {"span_s", "group_seconds", "busy_seconds", "idle_seconds"}) {
      CAPTURE(key);
      CHECK(served["compute"][key].get<double>() == doctest::Approx(cli["compute"][key].get<double>()).epsilon(0.01));
      served["compute"].erase(key);
      cli["compute"].erase(key);
    }
    CHECK(served["compute"]["attempts"].size() == cli["compute"]["attempts"].size());
    for (auto& [state, a] : cli["compute"]["attempts"].items()) {
      CAPTURE(state);
      CHECK(served["compute"]["attempts"][state]["attempts"] == a["attempts"]);
      CHECK(served["compute"]["attempts"][state]["seconds"].get<double>() == doctest::Approx(a["seconds"].get<double>()).epsilon(0.01));
    }
    served["compute"].erase("attempts");
    cli["compute"].erase("attempts");
    CHECK(served["compute"]["steps"].get<int64_t>() > 0);
    CHECK(served == cli);
  }

  TempDir dir;
  const std::string db = dir.file("empty.db");
  testing::SyntheticOptions o;
  o.running = 0;
  REQUIRE(testing::make_synthetic_campaign(db, 0, 0, 1, o).ok());
  dashboard::Api api({db});
  for (const std::string route : {"overview", "status", "trials", "history", "generations", "params", "importance",
                                  "curves", "pareto", "timeline", "stages"}) {
    CAPTURE(route);
    CHECK(api_get(api, "/api/campaigns/0/" + route).first == 200);
  }
  auto [c1, imp] = api_get(api, "/api/campaigns/0/importance");
  CHECK(imp["n_trials"] == 0);
  CHECK(imp["note"].is_string());
  auto [c2, ov] = api_get(api, "/api/campaigns/0/overview");
  CHECK(ov["best"].is_null());
  CHECK(ov["trials"]["total"] == 0);
  CHECK(ov["eta_s"].is_null());
  auto [c3, tl] = api_get(api, "/api/campaigns/0/timeline");
  CHECK(tl["bars"].empty());
  CHECK(tl["span"][0].is_number());
  auto [c4, csv] = api_get(api, "/api/campaigns/0/trials", {{"format", "csv"}});
  CHECK(c4 == 200);
  const std::string text = csv.get<std::string>();
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);  // the header
}

TEST_CASE("a trial's log tails stay inside the trial directories: no recorded path or link out") {
  TempDir dir;
  testing::SyntheticOptions o;
  o.running = 0;
  const std::string db = dir.file("logs.db");
  REQUIRE(testing::make_synthetic_campaign(db, 3, 1, 5, o).ok());
  namespace fs = std::filesystem;
  const std::string secret = dir.write("secret.txt", "SECRET-LINE\n");
  fs::create_directories(db + ".trials/1");
  fs::create_directories(db + ".trials/2");
  fs::create_symlink(secret, db + ".trials/1/stdout.log");           // a link out of the trial directory
  std::ofstream(db + ".trials/2/stdout.log") << "first\ninside-line\n";  // a real log
  {
    // Log artifacts as a worker's message could record them: elsewhere, and climbing out with `..`.
    auto w = store::Store::open(db);
    REQUIRE(w.ok());
    REQUIRE((*w)->add_artifact(1, 1, "log", secret, 12, unix_now()).ok());
    REQUIRE((*w)->add_artifact(1, 1, "log", db + ".trials/1/../../secret.txt", 12, unix_now()).ok());
  }
  dashboard::Api api({db});
  auto [c1, one] = api_get(api, "/api/campaigns/0/trials/1", {{"lines", "5"}});
  REQUIRE(c1 == 200);
  CHECK(one["logs"].empty());
  CHECK(one.dump().find("SECRET-LINE") == std::string::npos);
  CHECK(one["artifacts"].size() == 2);  // listed as recorded (text), never read
  auto [c2, two] = api_get(api, "/api/campaigns/0/trials/2", {{"lines", "1"}});
  REQUIRE(c2 == 200);
  REQUIRE(two["logs"].size() == 1);
  CHECK(two["logs"][0]["tail"] == "inside-line");
}

// The master's recorded warnings (a database on a network file system, reports early stopping never
// judged) are in the dashboard's status and overview as `hpctune status` shows them: the snapshot's
// status left them out, so the two views disagreed.
TEST_CASE("the master's recorded warnings are in the status and the overview, as the CLI's status has them") {
  TempDir dir;
  testing::SyntheticOptions o;
  o.running = 0;
  const std::string db = dir.file("warned.db");
  REQUIRE(testing::make_synthetic_campaign(db, 6, 2, 3, o).ok());
  {
    auto w = store::Store::open(db);
    REQUIRE(w.ok());
    auto c = (*w)->load_campaign();
    REQUIRE((c.ok() && *c));
    REQUIRE((*w)->add_event((*c)->id, "master_warning", 0, 0, -1, {{"text", "the database is on nfs"}}, 100).ok());
    REQUIRE((*w)->add_event((*c)->id, "reports_unjudged", 2, 1, 0,
                            {{"judge", "asha"}, {"metric", "val_accuracy"}}, 101).ok());
  }
  dashboard::Api api({db}, std::chrono::milliseconds(0));
  auto [c1, status] = api_get(api, "/api/campaigns/0/status");
  REQUIRE(c1 == 200);
  auto view = report::open_campaign(db);
  REQUIRE(view.ok());
  auto st = report::campaign_status(*view, unix_now());
  REQUIRE(st.ok());
  const json cli = report::status_json(*st)["campaign"]["warnings"];
  REQUIRE(cli.size() == 2);
  CHECK(cli[0] == "the database is on nfs");
  CHECK(status["campaign"]["warnings"] == cli);
  auto [c2, overview] = api_get(api, "/api/campaigns/0/overview");
  REQUIRE(c2 == 200);
  CHECK(overview["warnings"] == cli);
}

// Issue 36, item 2: the store says running, but the master is gone (its lock free, its heartbeat
// old): the campaign list, the overview and the status say interrupted and name the resume; a
// master that holds its lock is running, with a note when its heartbeat is old.
TEST_CASE("a campaign whose master is gone is interrupted in the list, the overview and the status, with the resume") {
  TempDir dir;
  testing::SyntheticOptions o;
  o.running = 2;
  const std::string db = dir.file("gone.db");
  REQUIRE(testing::make_synthetic_campaign(db, 20, 3, 9, o).ok());
  int64_t cid = 0;
  {
    auto w = store::Store::open(db);
    REQUIRE(w.ok());
    auto c = (*w)->load_campaign();
    REQUIRE((c.ok() && *c));
    cid = (*c)->id;
    REQUIRE((*w)->set_campaign_heartbeat(cid, unix_now() - 120).ok());
    // A running stage and a pending one: the running one shows interrupted with its campaign.
    REQUIRE((*w)->create_stage(cid, "search", "tune", json::object(), unix_now() - 300, "running").ok());
    REQUIRE((*w)->create_stage(cid, "ensemble", "blend", json::object(), unix_now() - 300, "pending").ok());
  }
  dashboard::Api api({db}, std::chrono::milliseconds(0));
  auto [c1, list] = api_get(api, "/api/campaigns");
  REQUIRE(c1 == 200);
  const json& summary = list["campaigns"][0];
  CHECK(summary["state"] == "interrupted");
  CHECK(summary["master"]["alive"] == false);
  CHECK(summary["master"]["resume"] == "hpctune resume " + db);
  CHECK_MESSAGE(summary["state_text"].get<std::string>().rfind("interrupted (the master is gone: last heartbeat 2m ", 0) == 0,
                summary.dump());
  auto [c2, overview] = api_get(api, "/api/campaigns/0/overview");
  REQUIRE(c2 == 200);
  CHECK(overview["state"] == "interrupted");
  CHECK(overview["master"]["resume"] == "hpctune resume " + db);
  auto [c3, status] = api_get(api, "/api/campaigns/0/status");
  REQUIRE(c3 == 200);
  CHECK(status["campaign"]["state"] == "interrupted");
  CHECK(status["campaign"]["recorded_state"] == "running");
  CHECK(status["campaign"]["master"]["alive"] == false);
  // Its stages as the CLI's status shows them: before, the running one still said running.
  auto stage_states = [](const json& stages) {
    std::vector<std::string> out;
    for (const auto& s : stages) out.push_back(s["state"].get<std::string>());
    return out;
  };
  const std::vector<std::string> shown{"interrupted", "pending"};
  CHECK(stage_states(status["stages"]) == shown);
  CHECK(status["stages"][0]["recorded_state"] == "running");
  CHECK(stage_states(overview["stages"]) == shown);
  CHECK(stage_states(summary["stages"]) == shown);
  auto [c6, stage_view] = api_get(api, "/api/campaigns/0/stages");
  REQUIRE(c6 == 200);
  CHECK(stage_states(stage_view["stages"]) == shown);

  // A master that holds the lock: running, whatever the heartbeat's age (a note when it is old).
  auto master = store::Store::open(db, {.master_lock = true});
  REQUIRE(master.ok());
  auto [c4, held] = api_get(api, "/api/campaigns");
  REQUIRE(c4 == 200);
  CHECK(held["campaigns"][0]["state"] == "running");
  CHECK(held["campaigns"][0]["master"]["alive"] == true);
  CHECK(held["campaigns"][0]["master"]["resume"].is_null());
  const std::string note = held["campaigns"][0]["state_text"];
  CHECK_MESSAGE(note.rfind("running (no heartbeat for 2m ", 0) == 0, note);
  CHECK_MESSAGE(note.find("s; the master still holds its lock)") != std::string::npos, note);
  REQUIRE((*master)->set_campaign_heartbeat(cid, unix_now()).ok());
  auto [c5, fresh] = api_get(api, "/api/campaigns/0/overview");
  REQUIRE(c5 == 200);
  CHECK(fresh["state"] == "running");
  CHECK(fresh["state_text"] == "running");
  CHECK(stage_states(fresh["stages"]) == std::vector<std::string>{"running", "pending"});
}
