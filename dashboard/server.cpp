// The dashboard's HTTP server (server.h) on GNU libmicrohttpd: checks in a fixed order before any
// route runs — the request's size (414, 431), the Host header (403), the token (401), the method
// (405) — then answers /api/... with api.h's JSON and everything else from the embedded web app
// (assets.h), with the same security headers (a strict Content-Security-Policy, nosniff, no
// framing, no referrer) on every response, errors included.
//
// Why libmicrohttpd (issue 21): Debian's cpp-httplib 0.11.4 gives each connection a thread of a
// fixed pool while it reads the request, with no bound on the number of headers and 5 s per read,
// so 20 clients sending a header line every 3 s held every thread, and it Brotli-compresses text at
// its highest quality. libmicrohttpd reads connections on a few event loops (epoll), keeps a
// connection's request line and headers in a memory pool of fixed size (a request that does not
// fit is answered 431/414 and closed), limits the connections, times out idle ones, answers
// malformed requests with 400 at once, and compresses nothing. What it lacks, a deadline for a
// whole request (its timeout restarts at every byte), is the watchdog below.
#include "dashboard/server.h"

#include "common/bounded_json.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "common/system.h"
#include "dashboard/api.h"
#include "dashboard/assets.h"

namespace hpctune::dashboard {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool is_ipv6(const std::string& host) { return host.find(':') != std::string::npos; }

// host:port as a Host header carries it (IPv6 in brackets).
std::string host_port(const std::string& host, int port) {
  return (is_ipv6(host) ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::"; }

// A request as the routes see it: method, decoded path and query, headers (names lower-case).
struct Request {
  std::string method, path;
  QueryParams params;
  std::vector<std::pair<std::string, std::string>> headers;

  std::string header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return "";
  }
  bool has_param(const std::string& name) const { return params.count(name) > 0; }
  std::string param(const std::string& name) const {
    auto it = params.find(name);
    return it == params.end() ? "" : it->second;
  }
};

// An answer before it goes out: status, headers (in order), body.
struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  void set_header(const std::string& name, const std::string& value) { headers.emplace_back(name, value); }
  void set_content(std::string b, const std::string& type) {
    body = std::move(b);
    set_header("Content-Type", type);
  }
};

// %HH decoded, and '+' too (a space, as forms and URLSearchParams write it) in a query.
std::string url_decode(std::string_view in, bool plus_is_space = true) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// The query of a request target ("a=1&b=&c"), decoded; every repetition kept.
QueryParams parse_query(std::string_view target) {
  QueryParams out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view query = target.substr(q + 1);
  const size_t hash = query.find('#');
  if (hash != std::string_view::npos) query = query.substr(0, hash);
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view item = query.substr(pos, end - pos);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        out.emplace(url_decode(item), "");
      } else {
        out.emplace(url_decode(item.substr(0, eq)), url_decode(item.substr(eq + 1)));
      }
    }
    pos = end + 1;
  }
  return out;
}

// The headers of every answer (API, app and errors alike): nothing may run but the app's own
// files, nothing may be framed, sniffed into another type, or leak the address in a Referer.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void security_headers(Response& res) {
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("X-Frame-Options", "DENY");
}

// Compression: gzip only, here (the server compresses nothing itself; Brotli at its highest
// quality cost 5.4 s of CPU for the trials' CSV under httplib). The API's JSON and CSV at level 1
// (about 3 ms for 500 KB), the embedded files once at level 9 and kept.
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
bool accepts_gzip(const Request& req) {
  std::string header = lower(req.header("accept-encoding"));
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
void set_body(const Request& req, Response& res, std::string body, const std::string& type,
              const std::string* compressed = nullptr, int level = 1) {
  res.set_header("Vary", "Accept-Encoding");
  if (body.size() > kCompressAbove && accepts_gzip(req)) {
    std::optional<std::string> z;
    if (compressed != nullptr && !compressed->empty()) z = *compressed;
    if (!z) z = gzip(body, level);
    if (z) {
      res.set_header("Content-Encoding", "gzip");
      return res.set_content(std::move(*z), type);
    }
  }
  res.set_content(std::move(body), type);
}

// A JSON answer (the API, and every error): never cached, since it changes as the campaign runs.
void write_json(const Request& req, Response& res, const ApiResponse& api) {
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
// change) and its ETag; no gzip for a small file.
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
  if (file.bytes.size() > kCompressAbove) c.gzip = gzip(file.bytes, 9).value_or("");
  return cache.emplace(name, std::move(c)).first->second;
}

// Every value of cookie `name` in the request's Cookie headers, in order. A browser sends every
// cookie of a name that matches (another server on this host may have set one with a longer Path,
// which then comes first), so each is a candidate.
std::vector<std::string> cookie_values(const Request& req, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& [key, header] : req.headers) {
    if (key != "cookie") continue;
    size_t pos = 0;
    while (pos < header.size()) {
      size_t end = header.find(';', pos);
      if (end == std::string::npos) end = header.size();
      std::string pair = header.substr(pos, end - pos);
      const size_t first = pair.find_first_not_of(' ');
      pair = first == std::string::npos ? "" : pair.substr(first);
      const size_t eq = pair.find('=');
      if (eq != std::string::npos && pair.substr(0, eq) == name) out.push_back(pair.substr(eq + 1));
      pos = end + 1;
    }
  }
  return out;
}

// The web app (`/` and `/assets/NAME`, embedded in the binary: assets.h). Anything else outside
// /api is a 404, and so is any path with a `..` segment (the path is already decoded, %2e%2e
// included): the lookup is an exact match in a fixed table, the check says so out loud.
void write_asset(const Request& req, Response& res, const std::string& path) {
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
  if (req.header("if-none-match") == cached.etag) {
    res.status = 304;
    return;
  }
  set_body(req, res, std::string(file->bytes), file->content_type, &cached.gzip);
}

// Whether the request carries the token: the Bearer credential, ?token=, or any cookie of the name.
bool carries_token(const Request& req, const std::string& token, const std::string& cookie) {
  const std::string auth = req.header("authorization");
  const std::string scheme = "bearer ";
  if (auth.size() > scheme.size() && lower(auth.substr(0, scheme.size())) == scheme) {
    return secrets_equal(auth.substr(scheme.size()), token);
  }
  // Every ?token= given must be the token: "?token=T&token=x" is not read as its first one.
  if (auto [first, last] = req.params.equal_range("token"); first != last) {
    bool all = true;
    for (auto it = first; it != last; ++it) all = secrets_equal(it->second, token) && all;  // each compared whole
    return all;
  }
  bool any = false;
  for (const auto& value : cookie_values(req, cookie)) any = secrets_equal(value, token) || any;  // each compared whole
  return any;
}

bool is_api(const std::string& path) { return path == "/api" || path.rfind("/api/", 0) == 0; }

// This machine's interface addresses of `family` (IPv6 without a zone), for a wildcard bind.
std::vector<std::string> interface_addresses(int family) {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != family) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr)
                                         : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    if (inet_ntop(family, addr, text, sizeof text) != nullptr) out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

// A listening TCP socket on host:port (non-blocking, close-on-exec, SO_REUSEADDR but never
// SO_REUSEPORT: a second server of any user could then bind the same port and take half of the
// connections; TCP_NODELAY, which accepted sockets inherit: an answer's last bytes never wait for
// the client's delayed ACK). A wildcard "::" takes IPv4 too.
Result<int> listen_on(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string name = lower(host) == "localhost" ? "127.0.0.1" : host;
  const int rc = getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) return err(Errc::kUsage, "--host " + host + ": not an address (" + gai_strerror(rc) + ")");
  std::string why;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1, no = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  return err(Errc::kIo, "cannot bind " + host_port(host, port) + " (" + (why.empty() ? "no socket" : why) +
                            "; in use, or not an address of this machine)");
}

}  // namespace

bool is_loopback(const std::string& host) {
  if (lower(host) == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

Result<std::string> generate_token() { return random_hex(32); }

Status check_token(const std::string& token) {
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-') continue;
    char shown[16];
    if (c >= 0x21 && c < 0x7f) {
      std::snprintf(shown, sizeof shown, "'%c'", c);
    } else {
      std::snprintf(shown, sizeof shown, "byte 0x%02x", c);
    }
    return err(Errc::kUsage, "--token: " + std::string(shown) + " at character " + std::to_string(i + 1) +
                                 ": a token goes into a URL and a cookie as it is, so it may hold only letters, "
                                 "digits, '.', '_', '~' and '-'");
  }
  if (token.size() < 16) return err(Errc::kUsage, "--token: at least 16 characters (a guessable token protects nothing)");
  if (token.size() > 256) return err(Errc::kUsage, "--token: at most 256 characters");
  return {};
}

// libmicrohttpd's daemon and what it lacks: a deadline for each whole request. Every connection is
// registered at its start with a duplicate of its socket; a watchdog shuts down (never closes) the
// duplicate of any connection past its deadline, and the daemon then sees the connection end and
// closes it. The duplicate keeps the socket itself alive until the connection's end, so a number
// reused by a new connection is never shut down by mistake.
struct Server::Loop {
  struct Conn {
    int fd = -1;                // our duplicate of the connection's socket
    Clock::time_point deadline;  // of the request being read, or of the answer being sent
    std::string target;         // the request line's target, as sent (the query is parsed from it)
    bool cut = false;
  };

  Server* server = nullptr;
  MHD_Daemon* daemon = nullptr;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::unordered_map<MHD_Connection*, std::unique_ptr<Conn>> conns;
  std::thread watchdog;

  Conn* conn_of(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == nullptr ? nullptr : static_cast<Conn*>(info->socket_context);
  }

  static void on_connection(void* cls, MHD_Connection* c, void** socket_context, MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Loop*>(cls);
    std::lock_guard lock(self->mutex);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto conn = std::make_unique<Conn>();
      const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      if (info != nullptr) conn->fd = ::fcntl(info->connect_fd, F_DUPFD_CLOEXEC, 0);
      conn->deadline = Clock::now() + std::chrono::seconds(self->server->options_.request_timeout_s);
      *socket_context = conn.get();
      self->conns[c] = std::move(conn);
    } else {
      auto it = self->conns.find(c);
      if (it != self->conns.end()) {
        if (it->second->fd >= 0) ::close(it->second->fd);
        self->conns.erase(it);
      }
      *socket_context = nullptr;
    }
  }

  // The request line's target, before the daemon splits and decodes it: the query is parsed here
  // ('+' is a space, every repetition kept), and its length bounded.
  static void* on_uri(void* cls, const char* uri, MHD_Connection* c) {
    auto* self = static_cast<Loop*>(cls);
    std::lock_guard lock(self->mutex);
    if (Conn* conn = self->conn_of(c)) conn->target = uri;
    return nullptr;
  }

  // An answer sent (or given up): the next request on the connection has a deadline of its own.
  static void on_completed(void* cls, MHD_Connection* c, void** /*con_cls*/, MHD_RequestTerminationCode /*code*/) {
    auto* self = static_cast<Loop*>(cls);
    std::lock_guard lock(self->mutex);
    if (Conn* conn = self->conn_of(c)) {
      conn->deadline = Clock::now() + std::chrono::seconds(self->server->options_.request_timeout_s);
      conn->target.clear();
    }
  }

  static MHD_Result collect_header(void* cls, MHD_ValueKind /*kind*/, const char* key, const char* value) {
    auto* req = static_cast<Request*>(cls);
    req->headers.emplace_back(lower(key), value == nullptr ? "" : value);
    return MHD_YES;
  }

  // Every request, once its headers are in. A GET or HEAD without a body is answered at the
  // daemon's second call: an answer queued at the first call ends the connection (no keep-alive: a
  // new connection for every request). Anything with a body, or another method, is answered at the
  // first call, so that its body is never read (that ends the connection, which is right).
  static MHD_Result on_request(void* cls, MHD_Connection* c, const char* url, const char* method,
                               const char* /*version*/, const char* /*upload_data*/, size_t* /*upload_data_size*/,
                               void** con_cls) {
    auto* self = static_cast<Loop*>(cls);
    static char first_call_seen;
    const char* length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const bool bodiless = (std::strcmp(method, "GET") == 0 || std::strcmp(method, "HEAD") == 0) &&
                          MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) == nullptr &&
                          (length == nullptr || std::strcmp(length, "0") == 0);
    if (*con_cls == nullptr && bodiless) {
      *con_cls = &first_call_seen;
      return MHD_YES;
    }
    Request req;
    req.method = method;
    req.path = url;
    std::string target;
    {
      std::lock_guard lock(self->mutex);
      if (Conn* conn = self->conn_of(c)) {
        target = conn->target;
        conn->deadline = Clock::now() + std::chrono::seconds(self->server->options_.answer_timeout_s);
      }
    }
    MHD_get_connection_values(c, MHD_HEADER_KIND, &collect_header, &req);
    Response res;
    self->answer(req, target, res);
    auto* body = new std::string(std::move(res.body));
    MHD_Response* response = MHD_create_response_from_buffer_with_free_callback_cls(
        body->size(), body->data(), [](void* p) { delete static_cast<std::string*>(p); }, body);
    if (response == nullptr) {
      delete body;
      return MHD_NO;
    }
    for (const auto& [name, value] : res.headers) MHD_add_response_header(response, name.c_str(), value.c_str());
    // A refused request (a bad Host, no token, another method, too large) ends its connection:
    // such a client keeps nothing open.
    if (res.status == 400 || res.status == 401 || res.status == 403 || res.status == 405 || res.status == 414 ||
        res.status == 431) {
      MHD_add_response_header(response, "Connection", "close");
    }
    const MHD_Result queued = MHD_queue_response(c, static_cast<unsigned>(res.status), response);
    MHD_destroy_response(response);
    return queued;
  }

  // The checks in their order, then the route; `target` is the request line's target as sent.
  void answer(const Request& req, const std::string& target, Response& res) const {
    const ServerOptions& options_ = server->options_;
    const auto& allowed_hosts_ = server->allowed_hosts_;
    try {
      // The size first: a request line or headers over the bounds are refused before anything
      // reads them (what exceeds the connection's memory never gets here: the daemon answers it).
      if (target.size() > options_.max_request_line) {
        return write_json(req, res, api_error(414, "the request line is over " + std::to_string(options_.max_request_line) + " bytes"));
      }
      size_t header_bytes = 0;
      for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
      if (req.headers.size() > options_.max_headers || header_bytes > options_.max_header_bytes) {
        return write_json(req, res, api_error(431, "too many or too large headers (at most " + std::to_string(options_.max_headers) +
                                                       " lines, " + std::to_string(options_.max_header_bytes) + " bytes)"));
      }
      Request full = req;
      full.params = parse_query(target);
      // The path decoded from the target as sent: the daemon's copy ends at a decoded %00, which
      // would make "/assets/app.js%00.png" the script.
      if (!target.empty() && target[0] == '/') {
        full.path = url_decode(std::string_view(target).substr(0, target.find('?')), false);
      }
      const std::string host = lower(full.header("host"));
      if (std::find(allowed_hosts_.begin(), allowed_hosts_.end(), host) == allowed_hosts_.end()) {
        return write_json(full, res, api_error(403, "Host '" + full.header("host") + "' is not this server's address"));
      }
      if (!carries_token(full, options_.token, server->cookie_name())) {
        res.set_header("WWW-Authenticate", "Bearer");
        return write_json(full, res, api_error(401, "a valid token is required (Authorization: Bearer TOKEN, ?token=TOKEN, or open the "
                                                     "URL the dashboard printed, /?token=TOKEN, once in the browser)"));
      }
      if (full.method != "GET" && full.method != "HEAD") {
        res.set_header("Allow", "GET, HEAD");
        return write_json(full, res, api_error(405, full.method + " is not allowed: the API is read-only (GET)"));
      }
      if (!is_api(full.path)) {
        // The browser's first visit with ?token=T (checked above): keep the token in an HttpOnly
        // cookie named by the port and send the address bar back to `/`, so the token is not left
        // in the history or shown on screen. Every later request (scripts, API) carries the cookie.
        if (full.path == "/" && full.has_param("token")) {
          res.status = 303;
          security_headers(res);
          res.set_header("Cache-Control", "no-store");
          res.set_header("Set-Cookie", server->cookie_name() + "=" + options_.token + "; HttpOnly; SameSite=Strict; Path=/");
          res.set_header("Location", "/");
          return;
        }
        return write_asset(full, res, full.path);
      }
      // What a request reads back from a database is bounded in memory (common/bounded_json.h).
      JsonReadBudget budget(kJsonReadBudgetBytes);
      write_json(full, res, server->api_->get(full.path, full.params));
    } catch (const std::bad_alloc&) {
      res = Response{};
      write_json(req, res, api_error(503, "out of memory answering this request; the server goes on"));
    } catch (const std::exception& e) {
      // An edge: a request never takes the server down.
      res = Response{};
      write_json(req, res, api_error(500, std::string("internal error: ") + e.what()));
    }
  }

  // Starts the daemon's event loops on the bound socket, and the watchdog.
  Status start(int listen_fd) {
    const auto& o = server->options_;
    daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD, 0, nullptr, nullptr, &Loop::on_request, this,
        MHD_OPTION_LISTEN_SOCKET, listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(std::max(1, o.threads)),
        MHD_OPTION_CONNECTION_LIMIT, o.max_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, o.connection_memory,
        MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(std::max(1, o.idle_timeout_s)),
        MHD_OPTION_NOTIFY_CONNECTION, &Loop::on_connection, this,
        MHD_OPTION_NOTIFY_COMPLETED, &Loop::on_completed, this,
        MHD_OPTION_URI_LOG_CALLBACK, &Loop::on_uri, this,
        MHD_OPTION_END);
    if (daemon == nullptr) return err(Errc::kIo, "the dashboard's HTTP server (libmicrohttpd) did not start on " + server->url());
    watchdog = std::thread([this] { watch(); });
    return {};
  }

  void watch() {
    std::unique_lock lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(200));
      const auto now = Clock::now();
      for (auto& [c, conn] : conns) {
        if (!conn->cut && conn->fd >= 0 && now > conn->deadline) {
          ::shutdown(conn->fd, SHUT_RDWR);  // the daemon sees the end and closes the connection
          conn->cut = true;
        }
      }
    }
  }

  // Stops the event loops (the daemon closes the listening socket and every connection).
  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (watchdog.joinable()) watchdog.join();
    if (daemon != nullptr) MHD_stop_daemon(daemon);
    daemon = nullptr;
  }
};

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() {
  stop();
  if (loop_) loop_->stop();
  if (listen_fd_ >= 0 && !loop_) ::close(listen_fd_);
}

Result<std::unique_ptr<Server>> Server::bind(ServerOptions options) {
  if (options.databases.empty()) return err(Errc::kUsage, "no database to serve");
  if (options.port < 0 || options.port > 65535) {
    return err(Errc::kUsage, "--port: " + std::to_string(options.port) + " is out of range (expected 0..65535)");
  }
  if (options.host.empty()) return err(Errc::kUsage, "--host: empty");
  if (options.token.empty()) {
    HPCTUNE_ASSIGN(options.token, generate_token());
  }
  HPCTUNE_TRY(check_token(options.token));
  // A database another user owns (or can replace) decides what is shown and which files beside it
  // are read: refused unless asked for.
  if (!options.allow_other_owners) {
    for (const auto& db : options.databases) {
      struct stat st {};
      if (::stat(db.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
        return err(Errc::kUsage, db + ": owned by user " + std::to_string(st.st_uid) +
                                     ", not you: a database another user writes decides what the dashboard "
                                     "shows and reads; serve it anyway with --allow-other-owners");
      }
    }
  }
  std::unique_ptr<Server> s(new Server(std::move(options)));
  s->api_ = std::make_unique<Api>(s->options_.databases);
  // Fail at start, not at the first request: each file must hold a campaign.
  HPCTUNE_TRY(s->api_->load());
  const auto& o = s->options_;
  HPCTUNE_ASSIGN(s->listen_fd_, listen_on(o.host, o.port));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return err(Errc::kIo, "cannot read the bound port of " + o.host);
  }
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  auto allow = [&](const std::string& host) {
    s->allowed_hosts_.push_back(lower(host_port(host, s->port_)));
    if (s->port_ == 80) s->allowed_hosts_.push_back(lower(is_ipv6(host) ? "[" + host + "]" : host));
  };
  allow(o.host);
  if (is_loopback(o.host) || is_wildcard(o.host)) {
    for (const char* h : {"localhost", "127.0.0.1", "::1"}) allow(h);
  }
  if (is_wildcard(o.host)) {
    // A browser on another machine names this one by an address of an interface or by its name.
    const std::string name = host_name();
    if (name != "unknown") allow(name);
    for (const auto& a : interface_addresses(AF_INET)) allow(a);
    if (o.host == "::") {
      for (const auto& a : interface_addresses(AF_INET6)) allow(a);
    }
  }
  std::sort(s->allowed_hosts_.begin(), s->allowed_hosts_.end());
  s->allowed_hosts_.erase(std::unique(s->allowed_hosts_.begin(), s->allowed_hosts_.end()), s->allowed_hosts_.end());
  return s;
}

Status Server::serve() {
  {
    std::lock_guard lock(stop_mutex_);
    if (stop_requested_ || loop_) return {};
  }
  loop_ = std::make_unique<Loop>();
  loop_->server = this;
  Status started = loop_->start(listen_fd_);
  if (!started.ok()) {
    loop_.reset();
    return started;
  }
  {
    std::unique_lock lock(stop_mutex_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }
  loop_->stop();  // closes the listening socket
  listen_fd_ = -1;
  return {};
}

void Server::stop() {
  {
    std::lock_guard lock(stop_mutex_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
}

std::string Server::url() const { return "http://" + host_port(options_.host, port_) + "/"; }

std::string Server::browser_url() const {
  std::string host = options_.host;
  if (is_wildcard(host)) {
    host = host_name();
    if (host == "unknown") host = "127.0.0.1";
  }
  return "http://" + host_port(host, port_) + "/?token=" + options_.token;
}

}  // namespace hpctune::dashboard
