// The dashboard's web app as the server delivers it (issue 14, "Static app"): the files embedded
// in the binary at build time, served at `/` and `/assets/NAME` with their Content-Type and the
// security headers every answer carries (API included); 404 for anything else, `..` and its
// encodings included; the token on a non-loopback bind for every route, the assets too, and the
// browser's cookie flow (`GET /?token=T` sets an HttpOnly cookie and redirects to `/`).
#include <doctest/doctest.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dashboard/assets.h"
#include "dashboard/server.h"
#include "tests/campaign_fixture.h"
#include "tests/dashboard_server.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using hpctune::testing::TempDir;

namespace {

constexpr const char* kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// A small real campaign (3 branin trials) for the server to open.
const std::string& fixture_db() {
  static TempDir dir;
  static std::string db = testing::run_branin_campaign(dir, "web", "web-1", 5, 3);
  return db;
}

// A server on a free port serving its options' databases until the end of the scope.
using Running = testing::RunningDashboard;

dashboard::ServerOptions local() {
  dashboard::ServerOptions o;
  o.databases = {fixture_db()};
  return o;
}

httplib::Result fetch(httplib::Client& c, const std::string& path, const httplib::Headers& headers = {}) {
  auto res = c.Get(path.c_str(), headers);
  REQUIRE_MESSAGE(res, "no response for " << path << ": " << httplib::to_string(res.error()));
  return res;
}

// The headers every answer carries, whatever its route or status.
void check_security_headers(const httplib::Response& res) {
  CHECK(res.get_header_value("Content-Security-Policy") == kCsp);
  CHECK(res.get_header_value("X-Content-Type-Options") == "nosniff");
  CHECK(res.get_header_value("Referrer-Policy") == "no-referrer");
  CHECK(res.get_header_value("X-Frame-Options") == "DENY");
}

}  // namespace

TEST_CASE("the web app is embedded in the binary with its content types") {
  const auto names = dashboard::asset_names();
  for (const char* required : {"index.html", "app.js", "app.css", "echarts.min.js"}) {
    CAPTURE(required);
    CHECK(std::find(names.begin(), names.end(), required) != names.end());
  }
  auto index = dashboard::asset("index.html");
  REQUIRE(index);
  CHECK(index->content_type == "text/html; charset=utf-8");
  CHECK(index->bytes.find("<main id=\"view\">") != std::string_view::npos);
  auto echarts = dashboard::asset("echarts.min.js");
  REQUIRE(echarts);
  CHECK(echarts->content_type == "application/javascript; charset=utf-8");
  CHECK(echarts->bytes.size() > 500 * 1024);  // the whole minified library, not a stub
  CHECK(echarts->bytes.find("Apache") != std::string_view::npos);
  CHECK(dashboard::asset("app.css")->content_type == "text/css; charset=utf-8");
  for (const char* absent : {"", "/index.html", "../index.html", "./app.js", "APP.JS", "app.js/", "nothing.js"}) {
    CAPTURE(absent);
    CHECK_FALSE(dashboard::asset(absent));
  }
  CHECK(dashboard::content_type_for("x.svg") == "image/svg+xml");
  CHECK(dashboard::content_type_for("x.mjs") == "application/javascript; charset=utf-8");
  CHECK(dashboard::content_type_for("x.bin") == "application/octet-stream");
}

TEST_CASE("index.html has no inline script or style and loads only its own files") {
  const std::string html(dashboard::asset("index.html")->bytes);
  // Each <script> has a src (the CSP would block an inline one), and nothing points off the server.
  size_t at = 0;
  int scripts = 0;
  while ((at = html.find("<script", at)) != std::string::npos) {
    const std::string tag = html.substr(at, html.find('>', at) - at);
    CHECK_MESSAGE(tag.find("src=\"/assets/") != std::string::npos, tag);
    ++scripts;
    ++at;
  }
  CHECK(scripts >= 1);  // the app (ECharts is loaded by the app before its first chart)
  CHECK(html.find("src=\"/assets/app.js\"") != std::string::npos);
  CHECK(html.find("<style") == std::string::npos);
  CHECK(html.find("style=") == std::string::npos);
  CHECK(html.find(" on") == std::string::npos);  // no onclick= / onload= handlers
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("//cdn") == std::string::npos);
}

TEST_CASE("/ and every asset are served with their type and the security headers") {
  Running r(local());
  auto c = r.client();
  auto index = fetch(c, "/");
  CHECK(index->status == 200);
  CHECK(index->get_header_value("Content-Type") == "text/html; charset=utf-8");
  CHECK(index->body == std::string(dashboard::asset("index.html")->bytes));
  check_security_headers(*index);
  for (const auto& name : dashboard::asset_names()) {
    CAPTURE(name);
    auto res = fetch(c, "/assets/" + name);
    CHECK(res->status == 200);
    const auto file = dashboard::asset(name);
    CHECK(res->get_header_value("Content-Type") == file->content_type);
    CHECK(res->body.size() == file->bytes.size());
    CHECK(res->body == std::string(file->bytes));
    check_security_headers(*res);
  }
  CHECK(fetch(c, "/assets/app.js")->get_header_value("Content-Type") == "application/javascript; charset=utf-8");
  CHECK(fetch(c, "/assets/app.css")->get_header_value("Content-Type") == "text/css; charset=utf-8");
  // The API carries the same headers, and is never cached.
  auto api = fetch(c, "/api/campaigns");
  CHECK(api->status == 200);
  check_security_headers(*api);
  CHECK(api->get_header_value("Cache-Control") == "no-store");
  // HEAD answers the headers without the body.
  auto head = c.Head("/assets/app.js");
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->body.empty());
  check_security_headers(*head);
}

TEST_CASE("large answers are gzip (never httplib's slowest Brotli), assets have an ETag and answer 304") {
  Running r(local());
  auto c = r.client();
  c.set_decompress(false);
  const httplib::Headers browser = {{"Accept-Encoding", "gzip, deflate, br"}};
  const auto echarts = dashboard::asset("echarts.min.js");
  REQUIRE(echarts);
  auto res = c.Get("/assets/echarts.min.js", browser);
  REQUIRE(res);
  CHECK(res->status == 200);
  // One Content-Encoding, gzip: httplib would have added its own br over it for a text/* type.
  CHECK(res->get_header_value_count("Content-Encoding") == 1);
  CHECK(res->get_header_value("Content-Encoding") == "gzip");
  CHECK(res->body.size() < echarts->bytes.size() / 2);
  const std::string etag = res->get_header_value("ETag");
  CHECK(etag.size() > 2);
  // The same bytes once inflated (the client's own decompression).
  auto plain = r.client();
  auto inflated = plain.Get("/assets/echarts.min.js", browser);
  REQUIRE(inflated);
  CHECK(inflated->body == std::string(echarts->bytes));
  // Without gzip in Accept-Encoding: the bytes as they are.
  auto identity = c.Get("/assets/echarts.min.js", {{"Accept-Encoding", "br;q=1, gzip;q=0"}});
  REQUIRE(identity);
  CHECK(!identity->has_header("Content-Encoding"));
  CHECK(identity->body == std::string(echarts->bytes));
  // If-None-Match with the ETag: 304 and no bytes.
  auto again = c.Get("/assets/echarts.min.js", {{"If-None-Match", etag}, {"Accept-Encoding", "gzip"}});
  REQUIRE(again);
  CHECK(again->status == 304);
  CHECK(again->body.empty());
  // A large API answer is gzip too, and inflates to the JSON a plain request gets.
  auto status = c.Get("/api/campaigns/0/trials?limit=100", browser);
  REQUIRE(status);
  CHECK(status->status == 200);
  CHECK(status->get_header_value_count("Content-Encoding") == 1);
  CHECK(status->get_header_value("Content-Encoding") == "gzip");
  auto status_plain = plain.Get("/api/campaigns/0/trials?limit=100", browser);
  REQUIRE(status_plain);
  CHECK(nlohmann::json::parse(status_plain->body)["total"].get<int64_t>() > 0);
}

TEST_CASE("paths outside the embedded files are 404, '..' and its encodings included") {
  Running r(local());
  auto c = r.client();
  for (std::string path : {"/index.htm", "/assets/", "/assets", "/assets/nothing.js", "/assets//app.js",
                           "/assets/../assets/app.js", "/assets/%2e%2e/assets/app.js", "/assets/%2E%2E%2Fapp.js",
                           "/assets/..%2fapp.js", "/assets/%2e%2e%5capp.js", "/assets/.%2e/index.html",
                           "/../index.html", "/%2e%2e/index.html", "/etc/passwd", "/assets/app.js%00.png",
                           "/assets/APP.JS", "/favicon.ico", "/dashboard/web/src/app.js", "/web.db"}) {
    CAPTURE(path);
    auto res = fetch(c, path);
    CHECK(res->status == 404);
    CHECK(res->get_header_value("Content-Type") == "application/json; charset=utf-8");
    check_security_headers(*res);
  }
}

TEST_CASE("off loopback the token guards every route, the assets too; the browser gets a cookie") {
  dashboard::ServerOptions o = local();
  o.host = "0.0.0.0";
  o.token = *dashboard::generate_token();
  Running r(o);
  auto c = r.anonymous_client();
  const std::string cookie_name = "hpctune_token_" + std::to_string(r.server->port());
  CHECK(r.server->cookie_name() == cookie_name);
  for (std::string path : {"/", "/assets/app.js", "/assets/echarts.min.js", "/assets/nothing.js", "/api/campaigns"}) {
    CAPTURE(path);
    auto none = fetch(c, path);
    CHECK(none->status == 401);
    CHECK(none->body.find("Apache") == std::string::npos);
    check_security_headers(*none);
    CHECK(fetch(c, path, {{"Cookie", cookie_name + "=" + o.token + "x"}})->status == 401);
    CHECK(fetch(c, path, {{"Cookie", "other=" + o.token}})->status == 401);
    CHECK(fetch(c, path + "?token=" + o.token.substr(1))->status == 401);
  }
  // The first visit: ?token=T sets the HttpOnly cookie and sends the address bar back to /.
  CHECK(fetch(c, "/?token=wrong-token-of-some-length")->status == 401);
  auto first = fetch(c, "/?token=" + o.token);
  CHECK(first->status == 303);
  CHECK(first->get_header_value("Location") == "/");
  CHECK(first->get_header_value("Set-Cookie") == cookie_name + "=" + o.token + "; HttpOnly; SameSite=Strict; Path=/");
  CHECK(first->get_header_value("Cache-Control") == "no-store");
  check_security_headers(*first);
  // Then every route works from the cookie alone (among other cookies, in any order).
  const httplib::Headers cookie{{"Cookie", "a=1; " + cookie_name + "=" + o.token + "; b=2"}};
  auto index = fetch(c, "/", cookie);
  CHECK(index->status == 200);
  CHECK(index->get_header_value("Content-Type") == "text/html; charset=utf-8");
  CHECK(fetch(c, "/assets/app.js", cookie)->status == 200);
  CHECK(fetch(c, "/assets/echarts.min.js", cookie)->status == 200);
  CHECK(fetch(c, "/api/campaigns", cookie)->status == 200);
  CHECK(fetch(c, "/assets/nothing.js", cookie)->status == 404);
  CHECK(fetch(c, "/assets/%2e%2e/index.html", cookie)->status == 404);
  // Bearer and ?token= work for the assets as for the API.
  CHECK(fetch(c, "/assets/app.css", {{"Authorization", "Bearer " + o.token}})->status == 200);
  CHECK(fetch(c, "/assets/app.css?token=" + o.token)->status == 200);
  // The Host check runs first, cookie or not.
  CHECK(fetch(c, "/", {{"Cookie", cookie_name + "=" + o.token}, {"Host", "evil.example"}})->status == 403);
}

TEST_CASE("on loopback too the token guards the app: generated when none is given, set by ?token=") {
  Running r(local());
  auto c = r.anonymous_client();
  CHECK(r.server->token().size() == 64);
  CHECK(fetch(c, "/")->status == 401);
  CHECK(fetch(c, "/?token=anything-at-all-here")->status == 401);
  auto res = fetch(c, "/?token=" + r.server->token());
  CHECK(res->status == 303);
  CHECK(res->get_header_value("Set-Cookie").rfind(r.server->cookie_name() + "=", 0) == 0);
  CHECK(fetch(c, "/", {{"Host", "evil.example"}})->status == 403);
}
