// The dashboard's HTTP server (server.h): checks in a fixed order before any route runs — the
// Host header (403), the token (401), the method (405) — then answers /api/... with api.h's JSON
// and everything else from the embedded web app (assets.h), with the same security headers
// (a strict Content-Security-Policy, nosniff, no framing, no referrer) on every response, errors
// included.
#include "dashboard/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include <httplib.h>
#include <zlib.h>

#include "common/system.h"
#include "dashboard/api.h"
#include "dashboard/assets.h"

namespace hpctune::dashboard {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool is_ipv6(const std::string& host) { return host.find(':') != std::string::npos; }

// host:port as a Host header carries it (IPv6 in brackets).
std::string host_port(const std::string& host, int port) {
  return (is_ipv6(host) ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::" || host.empty(); }

// The headers of every answer (API, app and errors alike): nothing may run but the app's own
// files, nothing may be framed, sniffed into another type, or leak the address in a Referer.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void security_headers(httplib::Response& res) {
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("X-Frame-Options", "DENY");
}

// Compression. Debian's httplib compresses every answer whose type it deems compressible (text/*,
// exactly "application/json", ...) with Brotli at its highest quality when the browser accepts br,
// on every request: 1.9 s of CPU for ECharts' 1 MB and 0.9 s for a 500 KB timeline. So the large
// answers carry types it leaves alone ("...; charset=utf-8" for JSON, application/javascript for
// scripts) and are compressed here with gzip: the API's JSON at level 1 (about 3 ms for 500 KB),
// the embedded scripts once at level 9 and kept. Small text answers are left to httplib.
constexpr size_t kCompressAbove = 1024;

// `in` compressed by zlib with a gzip wrapper at `level`; nullopt when zlib fails (sent plain then).
std::optional<std::string> gzip(std::string_view in, int level) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return std::nullopt;
  std::string out(deflateBound(&zs, static_cast<uLong>(in.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return std::nullopt;
  out.resize(zs.total_out);
  return out;
}

// Whether the request's Accept-Encoding lists gzip (or *) without q=0.
bool accepts_gzip(const httplib::Request& req) {
  std::string header = lower(req.get_header_value("Accept-Encoding"));
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t end = header.find(',', pos);
    if (end == std::string::npos) end = header.size();
    std::string item = header.substr(pos, end - pos);
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    const std::string coding = item.substr(0, item.find(';'));
    const bool refused = item.find(";q=0") != std::string::npos && item.find(";q=0.") == std::string::npos;
    if ((coding == "gzip" || coding == "*") && !refused) return true;
    pos = end + 1;
  }
  return false;
}

// The body of an answer of `type`, gzip-compressed (already, or at `level` now) when it is large
// and the client takes gzip.
void set_body(const httplib::Request& req, httplib::Response& res, std::string body, const std::string& type,
              const std::string* compressed = nullptr, int level = 1) {
  res.set_header("Vary", "Accept-Encoding");
  if (body.size() > kCompressAbove && accepts_gzip(req)) {
    std::optional<std::string> z;
    if (compressed != nullptr && !compressed->empty()) z = *compressed;
    if (!z) z = gzip(body, level);
    if (z) {
      res.set_header("Content-Encoding", "gzip");
      // httplib compresses any "text/..." answer again (over this gzip, with a second
      // Content-Encoding): its check of the type is case-sensitive, and media types are not (RFC
      // 2045 5.1), so "Text/csv" is the same type to a browser and left alone by httplib.
      std::string t = type;
      if (t.rfind("text/", 0) == 0) t[0] = 'T';
      return res.set_content(std::move(*z), t);
    }
  }
  res.set_content(std::move(body), type);
}

// A JSON answer (the API, and every error): never cached, since it changes as the campaign runs.
void write_json(const httplib::Request& req, httplib::Response& res, const ApiResponse& api) {
  res.status = api.status;
  security_headers(res);
  res.set_header("Cache-Control", "no-store");
  for (const auto& [name, value] : api.headers) res.set_header(name, value);
  if (!api.content_type.empty()) return set_body(req, res, api.text, api.content_type);  // CSV
  // Non-ASCII bytes are escaped, so a body is valid UTF-8 whatever a trainer wrote.
  set_body(req, res, api.body.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + "\n",
           "application/json; charset=utf-8");
}

// An embedded file's gzip (level 9, made at its first request and kept: the binary's files never
// change) and its ETag; "" for a file httplib compresses itself (text/*) or a small one.
struct AssetCache {
  std::string gzip, etag;
};

const AssetCache& asset_cache(const std::string& name, const Asset& file) {
  static std::mutex mutex;
  static std::map<std::string, AssetCache> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  AssetCache c;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string_view>{}(file.bytes));
  c.etag = std::string("\"") + hex + "-" + std::to_string(file.bytes.size()) + "\"";
  if (file.bytes.size() > kCompressAbove && file.content_type.rfind("text/", 0) != 0) {
    c.gzip = gzip(file.bytes, 9).value_or("");
  }
  return cache.emplace(name, std::move(c)).first->second;
}

// The name of the cookie that carries the token for the browser app (HttpOnly: no script reads it).
constexpr const char* kTokenCookie = "hpctune_token";

// The value of cookie `name` in the request's Cookie headers; "" when absent.
std::string cookie_value(const httplib::Request& req, const std::string& name) {
  const size_t n = req.get_header_value_count("Cookie");
  for (size_t i = 0; i < n; ++i) {
    const std::string header = req.get_header_value("Cookie", i);
    size_t pos = 0;
    while (pos < header.size()) {
      size_t end = header.find(';', pos);
      if (end == std::string::npos) end = header.size();
      std::string pair = header.substr(pos, end - pos);
      const size_t first = pair.find_first_not_of(' ');
      pair = first == std::string::npos ? "" : pair.substr(first);
      const size_t eq = pair.find('=');
      if (eq != std::string::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
      pos = end + 1;
    }
  }
  return "";
}

// The web app (`/` and `/assets/NAME`, embedded in the binary: assets.h). Anything else outside
// /api is a 404, and so is any path with a `..` segment (httplib has already decoded %2e%2e):
// the lookup is an exact match in a fixed table, the check says so out loud.
void write_asset(const httplib::Request& req, httplib::Response& res, const std::string& path) {
  std::string name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (path.rfind("/assets/", 0) == 0) {
    name = path.substr(8);
  }
  std::optional<Asset> file;
  if (!name.empty() && name.find("..") == std::string::npos && name.find('\\') == std::string::npos) file = asset(name);
  if (!file) {
    write_json(req, res, api_error(404, "no such page: " + path));
    return;
  }
  res.status = 200;
  security_headers(res);
  // Embedded in this binary: the browser asks again each load (cheap on the loopback) so a new
  // binary's app is never mixed with an old one's modules.
  // The ETag lets it answer 304 without the bytes.
  res.set_header("Cache-Control", "no-cache");
  const AssetCache& cached = asset_cache(name, *file);
  res.set_header("ETag", cached.etag);
  if (req.get_header_value("If-None-Match") == cached.etag) {
    res.status = 304;
    return;
  }
  set_body(req, res, std::string(file->bytes), file->content_type, &cached.gzip);
}

// The token a request carries: the Bearer credential, else ?token=, else the app's cookie. "" when none.
std::string request_token(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  const std::string scheme = "bearer ";
  if (auth.size() > scheme.size() && lower(auth.substr(0, scheme.size())) == scheme) return auth.substr(scheme.size());
  if (req.has_param("token")) return req.get_param_value("token");
  return cookie_value(req, kTokenCookie);
}

bool is_api(const std::string& path) { return path == "/api" || path.rfind("/api/", 0) == 0; }

}  // namespace

bool is_loopback(const std::string& host) {
  if (lower(host) == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

Result<std::string> generate_token() { return random_hex(32); }


Server::Server(ServerOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {}

Server::~Server() { stop(); }

Result<std::unique_ptr<Server>> Server::bind(ServerOptions options) {
  if (options.databases.empty()) return err(Errc::kUsage, "no database to serve");
  if (options.port < 0 || options.port > 65535) {
    return err(Errc::kUsage, "--port: " + std::to_string(options.port) + " is out of range (expected 0..65535)");
  }
  if (options.host.empty()) return err(Errc::kUsage, "--host: empty");
  if (!is_loopback(options.host) && options.token.empty()) {
    return err(Errc::kUsage, "--host " + options.host + " can be reached from other machines: a token is required");
  }
  if (!options.token.empty() && options.token.size() < 16) {
    return err(Errc::kUsage, "--token: at least 16 characters (a guessable token protects nothing)");
  }
  std::unique_ptr<Server> s(new Server(std::move(options)));
  s->api_ = std::make_unique<Api>(s->options_.databases);
  // Fail at start, not at the first request: each file must hold a campaign.
  HPCTUNE_TRY(s->api_->load());
  auto& http = *s->http_;
  const auto& o = s->options_;
  http.set_payload_max_length(o.max_request_bytes);
  http.set_read_timeout(o.read_timeout_s, 0);
  http.set_write_timeout(o.write_timeout_s, 0);
  http.set_keep_alive_timeout(5);
  http.set_keep_alive_max_count(100);
  const int threads = std::max(1, o.threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s->install_handlers();
  // httplib's default sets SO_REUSEPORT too: a second server (a second `run --dashboard`, or any
  // process of this user) could then bind the same port and take half of the connections. Only
  // SO_REUSEADDR (a restart need not wait for TIME_WAIT), so a port in use is refused.
  // TCP_NODELAY: httplib writes an answer's headers and body apart, and with Nagle's algorithm the
  // body then waits for the client's delayed ACK: 40 ms on every request (bench/run-dashboard saw
  // every route at 44 ms, 14 bytes included). Linux gives accepted sockets the listener's setting.
  http.set_tcp_nodelay(true);
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  });
  if (o.port == 0) {
    s->port_ = http.bind_to_any_port(o.host);
    if (s->port_ <= 0) return err(Errc::kIo, "cannot bind " + o.host + " on a free port");
  } else {
    if (!http.bind_to_port(o.host, o.port)) {
      return err(Errc::kIo, "cannot bind " + host_port(o.host, o.port) + " (in use, or not an address of this machine)");
    }
    s->port_ = o.port;
  }
  s->allowed_hosts_.push_back(lower(host_port(o.host, s->port_)));
  if (is_loopback(o.host)) {
    for (const char* h : {"localhost", "127.0.0.1", "::1"}) s->allowed_hosts_.push_back(host_port(h, s->port_));
  }
  if (is_wildcard(o.host)) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) == 0 && name[0]) s->allowed_hosts_.push_back(lower(host_port(name, s->port_)));
    for (const char* h : {"localhost", "127.0.0.1"}) s->allowed_hosts_.push_back(host_port(h, s->port_));
  }
  std::sort(s->allowed_hosts_.begin(), s->allowed_hosts_.end());
  s->allowed_hosts_.erase(std::unique(s->allowed_hosts_.begin(), s->allowed_hosts_.end()), s->allowed_hosts_.end());
  return s;
}

void Server::install_handlers() {
  // Everything is decided here, before httplib's own routing: one order of checks for every
  // method and path.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    try {
      const std::string host = lower(req.get_header_value("Host"));
      if (std::find(allowed_hosts_.begin(), allowed_hosts_.end(), host) == allowed_hosts_.end()) {
        write_json(req, res, api_error(403, "Host '" + req.get_header_value("Host") + "' is not this server's address"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!options_.token.empty() && !secrets_equal(request_token(req), options_.token)) {
        res.set_header("WWW-Authenticate", "Bearer");
        write_json(req, res, api_error(401, "a valid token is required (Authorization: Bearer TOKEN, ?token=TOKEN, or open /?token=TOKEN once in the browser)"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.method != "GET" && req.method != "HEAD") {
        res.set_header("Allow", "GET, HEAD");
        write_json(req, res, api_error(405, req.method + " is not allowed: the API is read-only (GET)"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!is_api(req.path)) {
        // The browser's first visit with ?token=T (checked above): keep the token in an HttpOnly
        // cookie and send the address bar back to `/`, so the token is not left in the history
        // or shown on screen. Every later request (scripts, API) carries the cookie.
        if (!options_.token.empty() && req.path == "/" && req.has_param("token")) {
          res.status = 303;
          security_headers(res);
          res.set_header("Cache-Control", "no-store");
          res.set_header("Set-Cookie", std::string(kTokenCookie) + "=" + options_.token + "; HttpOnly; SameSite=Strict; Path=/");
          res.set_header("Location", "/");
          return httplib::Server::HandlerResponse::Handled;
        }
        write_asset(req, res, req.path);
        return httplib::Server::HandlerResponse::Handled;
      }
      std::multimap<std::string, std::string> params(req.params.begin(), req.params.end());
      write_json(req, res, api_->get(req.path, params));
    } catch (const std::exception& e) {
      // An edge: a request never takes the server down.
      write_json(req, res, api_error(500, std::string("internal error: ") + e.what()));
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (a request line over 8 KB: 414, a malformed request: 400, a body over
  // the bound: 413) get the same JSON and headers; ours already have a body and are left alone.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    write_json(req, res, api_error(res.status, "the request was refused (HTTP " + std::to_string(res.status) + ")"));
    return httplib::Server::HandlerResponse::Handled;
  }));
}

Status Server::serve() {
  if (!http_->listen_after_bind()) return err(Errc::kIo, "the dashboard stopped listening on " + url());
  return {};
}

void Server::stop() {
  if (http_) http_->stop();
}

std::string Server::url() const { return "http://" + host_port(options_.host, port_) + "/"; }

}  // namespace hpctune::dashboard
