// ZeroMQ transports: the master's ROUTER and the group leader's DEALER.
//
// The ROUTER sets ZMQ_ROUTER_MANDATORY, so a send to a departed peer fails with EHOSTUNREACH
// (kPeerGone) instead of vanishing. Both ends set ZMQ_MAXMSGSIZE, so an oversized frame
// disconnects its sender instead of reaching the application; that, the high-water marks, linger
// (0 by default: closing never blocks) and reconnection come from TransportOptions.
//
// With Security::kCurve the ROUTER is a CURVE server whose context runs a ZAP handler (RFC 27) on
// a thread: it admits only the allowlisted client keys. ZMQ_ZAP_ENFORCE_DOMAIN is set too, because
// without it a CURVE server whose handler is missing admits any client that knows the server key.
// With Security::kPlain the ROUTER is a PLAIN server and the same handler admits only the campaign
// secret. Either way a connection is a peer of the ROUTER only once the handler said yes: before
// that, libzmq has not read the routing id it claims, so an unauthenticated process cannot make the
// ROUTER's generated ids collide with claimed ones (libzmq 4.3 aborts on such a collision).
//
// "ipc://*" binds a Unix socket in a private directory of its own (PrivateIpcDir).
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <set>
#include <tuple>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/endpoint.h"
#include "common/secrets.h"
#include "protocol/messages.h"
#include "protocol/transport.h"

#include "common/safe_open.h"

namespace hpctune::protocol {
namespace {

Error zmq_error(const char* what, const zmq::error_t& e) {
  return err(Errc::kIo, std::string(what) + ": " + e.what());
}

// ZMQ_ZAP_ENFORCE_DOMAIN is a DRAFT option in libzmq 4.3's zmq.h, but the library takes it at run
// time (check_libzmq_for_curve() makes sure it does).
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
constexpr int kZapEnforceDomain = ZMQ_ZAP_ENFORCE_DOMAIN;
#else
constexpr int kZapEnforceDomain = 93;
#endif
constexpr const char* kZapDomain = "hpctune";
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by RFC 27

// The 32 bytes of a Z85 key; nullopt when the text is not one.
std::optional<std::string> z85_key_bytes(const std::string& z85) {
  if (z85.size() != 40) return std::nullopt;
  std::string bytes(32, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(bytes.data()), z85.c_str()) == nullptr) return std::nullopt;
  return bytes;
}

// Checks one key pair: two Z85 keys, and the public one belongs to the secret one.
Status check_pair(const std::string& where, const std::string& public_key, const std::string& secret_key) {
  auto bad = [&](const std::string& what) { return err(Errc::kInvalidArgument, "transport option " + where + what); };
  if (!z85_key_bytes(public_key)) return bad(".public_key is not a 40-character Z85 CURVE key");
  if (!z85_key_bytes(secret_key)) return bad(".secret_key is not a 40-character Z85 CURVE key");
  auto derived = curve_public_key(secret_key);
  if (!derived.ok() || *derived != public_key) return bad(".public_key does not belong to its secret_key");
  return {};
}

// The ZAP handler of one server context: a REP socket at inproc://zeromq.zap.01, answered on its
// own thread. It says 200 only to the CURVE mechanism with an allowlisted client key in our domain,
// or to the PLAIN mechanism with the campaign secret (when the server has one), 400 to everything
// else, and counts the refusals. Its poll has a deadline, so stop() returns within one period; a failure
// of the thread is kept and reported by the server's recv() (with no handler, enforce-domain makes
// every handshake fail: the server fails closed meanwhile).
class ZapHandler {
 public:
  ~ZapHandler() { stop(); }

  // Binds in `ctx`; call before the server socket binds, so no handshake can precede the handler.
  Status start(zmq::context_t& ctx, const std::vector<std::string>& allowed_z85, const std::string& plain_secret) {
    plain_secret_ = plain_secret;
    for (const auto& key : allowed_z85) {
      auto bytes = z85_key_bytes(key);
      if (!bytes) return err(Errc::kInvalidArgument, "transport option curve_server.allowed: not a Z85 CURVE key: " + key);
      allowed_.insert(*bytes);
    }
    try {
      socket_ = zmq::socket_t(ctx, zmq::socket_type::rep);
      socket_.set(zmq::sockopt::linger, 0);
      socket_.bind(kZapEndpoint);
    } catch (const zmq::error_t& e) {
      return zmq_error("ZAP handler", e);
    }
    // The socket moves to the thread here (thread creation is a full barrier, as ZeroMQ requires).
    thread_ = std::thread([this] { run(); });
    return {};
  }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  std::optional<Error> failure() const {
    std::lock_guard lock(mu_);
    return failure_;
  }

  int64_t refused() const { return refused_.load(); }

 private:
  static constexpr std::chrono::milliseconds kPollPeriod{50};
  static constexpr size_t kMaxFrames = 16;  // RFC 27 requests have 6 frames plus credentials

  void run() {
    try {
      while (!stop_) {
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, kPollPeriod) == 0) continue;
        answer_one();
      }
    } catch (const zmq::error_t& e) {
      if (e.num() != ETERM) fail(zmq_error("ZAP handler", e));
    } catch (const std::exception& e) {
      fail(err(Errc::kInternal, std::string("ZAP handler: ") + e.what()));
    }
    socket_.close();
  }

  void fail(Error e) {
    std::lock_guard lock(mu_);
    failure_ = std::move(e);
  }

  void answer_one() {
    std::vector<std::string> frames;
    zmq::message_t part;
    bool more = true;
    while (more) {
      if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
      more = part.more();
      if (frames.size() < kMaxFrames) frames.push_back(part.to_string());
    }
    if (frames.empty()) return;
    const bool ours = frames.size() >= 6 && frames[0] == "1.0" && frames[2] == kZapDomain;
    const bool curve = ours && frames.size() == 7 && frames[5] == "CURVE";
    const bool plain = ours && frames.size() == 8 && frames[5] == "PLAIN";
    const bool admitted = (curve && frames[6].size() == 32 && allowed_.count(frames[6]) > 0) ||
                          (plain && plain_admits(frames[7]));
    if (!admitted) ++refused_;
    std::string user_id;
    if (admitted && curve) {
      char z85[41] = {};
      if (zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(frames[6].data()), 32) != nullptr) user_id = z85;
    }
    const std::string request_id = frames.size() > 1 ? frames[1] : std::string();
    const std::string reply[] = {"1.0", request_id, admitted ? "200" : "400", admitted ? "OK" : "client key not allowed",
                                 user_id, ""};
    for (size_t i = 0; i < 6; ++i) {
      socket_.send(zmq::buffer(reply[i]), i < 5 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  // The PLAIN password is the campaign secret, alone or followed by "." and a launch token.
  bool plain_admits(const std::string& password) const {
    if (plain_secret_.empty()) return false;
    const auto dot = password.find('.');
    return secrets_equal(std::string_view(password).substr(0, dot), plain_secret_);
  }

  zmq::socket_t socket_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::set<std::string> allowed_;  // 32-byte keys
  std::string plain_secret_;
  mutable std::mutex mu_;
  std::optional<Error> failure_;
};

// The directory of an "ipc://*" socket: made by mkdtemp (0700, this user's, a fresh name, so no
// other user can have planted it or reach into it), removed with the socket in it on destruction.
class PrivateIpcDir {
 public:
  PrivateIpcDir() = default;
  PrivateIpcDir(const PrivateIpcDir&) = delete;
  PrivateIpcDir& operator=(const PrivateIpcDir&) = delete;
  ~PrivateIpcDir() {
    if (dir_.empty()) return;
    ::unlink(socket_path().c_str());  // libzmq unlinks it when the socket closes; a leftover is ours
    ::rmdir(dir_.c_str());
  }

  // Makes the directory; the endpoint to bind inside it.
  Result<std::string> make() {
    HPCTUNE_ASSIGN(std::string base,
                   private_socket_base(std::strlen(kName) + std::strlen(kSocket), "the master's socket"));
    remove_stale_socket_dirs(base.empty() ? "/" : base, "hpctune-", kSocket);
    std::string templ = base + kName;
    if (::mkdtemp(templ.data()) == nullptr) {
      return err(Errc::kIo, "cannot make a private directory for the master's socket (" + templ + "): " +
                                std::strerror(errno));
    }
    dir_ = templ;
    // mkdtemp promises 0700 and this user; checked, since the socket's privacy rests on it.
    struct stat st {};
    if (::lstat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
      return err(Errc::kIo, "the master's socket directory " + dir_ + " is not private to this user");
    }
    return "ipc://" + socket_path();
  }

 private:
  static constexpr const char* kName = "/hpctune-XXXXXX";
  static constexpr const char* kSocket = "/master";

  std::string socket_path() const { return dir_ + kSocket; }
  std::string dir_;
};

class ZmqServer final : public ServerTransport {
 public:
  ZmqServer() : ctx_(1), socket_(ctx_, zmq::socket_type::router) {}

  Status bind(const std::string& requested, const TransportOptions& o) {
    std::string endpoint = requested;
    if (private_ipc_endpoint(requested)) {
      HPCTUNE_ASSIGN(endpoint, ipc_dir_.make());
    }
    const bool curve = o.security == TransportOptions::Security::kCurve;
    const bool plain = o.security == TransportOptions::Security::kPlain;
    if ((curve || plain) && o.curve_zap_handler) {
      HPCTUNE_TRY(zap_.start(ctx_, curve ? o.curve_server.allowed : std::vector<std::string>{},
                             plain ? o.plain_secret : std::string()));
    }
    try {
      if (curve || plain) {
        if (curve) {
          socket_.set(zmq::sockopt::curve_server, 1);
          socket_.set(zmq::sockopt::curve_secretkey, o.curve_server.secret_key);
          socket_.set(zmq::sockopt::curve_publickey, o.curve_server.public_key);
        } else {
          socket_.set(zmq::sockopt::plain_server, 1);
        }
        socket_.set(zmq::sockopt::zap_domain, std::string(kZapDomain));
        const int one = 1;
        int enforced = 0;
        size_t size = sizeof enforced;
        if (zmq_setsockopt(socket_.handle(), kZapEnforceDomain, &one, sizeof one) != 0 ||
            zmq_getsockopt(socket_.handle(), kZapEnforceDomain, &enforced, &size) != 0 || enforced != 1) {
          return err(Errc::kUnavailable, "libzmq does not take ZMQ_ZAP_ENFORCE_DOMAIN: the server could not fail closed");
        }
      }
      socket_.set(zmq::sockopt::router_mandatory, 1);
      socket_.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
      socket_.set(zmq::sockopt::linger, static_cast<int>(o.linger.count()));
      socket_.set(zmq::sockopt::sndhwm, o.send_hwm);
      socket_.set(zmq::sockopt::rcvhwm, o.server_recv_hwm);
      socket_.set(zmq::sockopt::backlog, o.listen_backlog);
      socket_.set(zmq::sockopt::handshake_ivl, static_cast<int>(o.handshake_interval.count()));
      socket_.bind(endpoint);
      endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return zmq_error(("cannot bind " + endpoint).c_str(), e);
    }
    return {};
  }

  std::string endpoint() const override { return endpoint_; }

  int64_t refused_connections() const override { return zap_.refused(); }

  Status send(const PeerId& peer, std::string_view bytes) override {
    try {
      auto sent = socket_.send(zmq::buffer(peer.data(), peer.size()), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (!sent) return err(Errc::kBusy, "send queue to a worker is full");
      sent = socket_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
      if (!sent) return err(Errc::kBusy, "send queue to a worker is full");
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return err(Errc::kPeerGone, "worker is no longer connected");
      return zmq_error("send", e);
    }
    return {};
  }

  Result<std::optional<Envelope>> recv(std::chrono::milliseconds timeout) override {
    if (auto failed = zap_.failure()) return *failed;  // clients can no longer be admitted
    try {
      // A frame already queued is read without a poll first: the master reads thousands of frames
      // a second, and the poll was a system call per frame (bench/scale). Only an empty queue is
      // waited on (the poll also lets ZeroMQ take in pipes of new connections).
      zmq::message_t id;
      if (!socket_.recv(id, zmq::recv_flags::dontwait)) {
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, timeout) == 0) return std::optional<Envelope>();
        if (!socket_.recv(id, zmq::recv_flags::dontwait)) return std::optional<Envelope>();
      }
      Envelope e{id.to_string(), {}};
      int frames = 0;
      bool more = id.more();
      while (more) {
        zmq::message_t part;
        if (!socket_.recv(part, zmq::recv_flags::none)) break;
        more = part.more();
        if (++frames == 1) e.bytes = part.to_string();
      }
      if (frames != 1) e.bytes.clear();  // a frame shape the protocol does not use
      return std::optional<Envelope>(std::move(e));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return std::optional<Envelope>();
      return zmq_error("recv", e);
    }
  }

 private:
  // Destroyed in reverse: the socket, then the handler's thread (joined), then the context, then
  // the ipc socket's directory.
  PrivateIpcDir ipc_dir_;
  zmq::context_t ctx_;
  ZapHandler zap_;
  zmq::socket_t socket_;
  std::string endpoint_;
};

class ZmqClient final : public ClientTransport {
 public:
  ZmqClient() : ctx_(1), wake_in_(ctx_, zmq::socket_type::pair), wake_out_(ctx_, zmq::socket_type::pair) {}

  Status connect(const std::string& endpoint, const TransportOptions& o) {
    endpoint_ = endpoint;
    options_ = o;
    try {
      static std::atomic<uint64_t> counter{0};
      const std::string wake = "inproc://wake-" + std::to_string(++counter);
      wake_in_.set(zmq::sockopt::linger, 0);
      wake_out_.set(zmq::sockopt::linger, 0);
      wake_in_.bind(wake);
      wake_out_.connect(wake);
    } catch (const zmq::error_t& e) {
      return zmq_error("wake pipe", e);
    }
    return open();
  }

  Status send(std::string_view bytes) override {
    try {
      if (!socket_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) {
        return err(Errc::kBusy, "send queue to the master is full");
      }
    } catch (const zmq::error_t& e) {
      return zmq_error("send", e);
    }
    return {};
  }

  Result<std::optional<std::string>> recv(std::chrono::milliseconds timeout) override {
    try {
      zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {wake_in_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, timeout);
      if (items[1].revents & ZMQ_POLLIN) {
        zmq::message_t drain;
        while (wake_in_.recv(drain, zmq::recv_flags::dontwait)) {
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t msg;
        if (socket_.recv(msg, zmq::recv_flags::dontwait)) {
          std::string bytes = msg.to_string();
          while (msg.more()) {  // the master never sends more than one frame; drop extras
            if (!socket_.recv(msg, zmq::recv_flags::dontwait)) break;
            bytes.clear();
          }
          return std::optional<std::string>(std::move(bytes));
        }
      }
      return std::optional<std::string>();
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return std::optional<std::string>();
      return zmq_error("recv", e);
    }
  }

  Status reconnect() override {
    try {
      socket_.close();
    } catch (const zmq::error_t&) {
    }
    return open();
  }

  void notify() override {
    std::lock_guard lock(wake_mu_);
    try {
      (void)wake_out_.send(zmq::str_buffer("!"), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // A full wake pipe already guarantees a wake-up.
    }
  }

 private:
  // On a Unix socket the worker checks whose it is before it connects: one in a directory another
  // user could have put there, or another user's socket, is never joined (issue 35, R2: a worker
  // restarted after a crash joined an impostor's socket and ran its command as the campaign's owner).
  Status check_ipc_peer() const {
    if (endpoint_.rfind("ipc://", 0) != 0) return {};
    const std::string path = endpoint_.substr(6);
    const auto slash = path.rfind('/');
    if (path.empty() || path[0] != '/' || slash == std::string::npos)
      return err(Errc::kInvalidArgument, "the master's socket " + path + " is not an absolute path");
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    if (const std::string why = unsafe_directory_chain(dir); !why.empty())
      return err(Errc::kInvalidArgument, "refusing the master's socket " + path + ": " + why);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return err(Errc::kInvalidArgument, "refusing " + path + ": not a socket");
      if (st.st_uid != ::geteuid())
        return err(Errc::kInvalidArgument, "refusing the master's socket " + path + ": it belongs to another user (uid " +
                                               std::to_string(st.st_uid) + ")");
    }
    return {};
  }

  Status open() {
    HPCTUNE_TRY(check_ipc_peer());
    try {
      socket_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
      socket_.set(zmq::sockopt::linger, static_cast<int>(options_.linger.count()));
      socket_.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
      socket_.set(zmq::sockopt::sndhwm, options_.send_hwm);
      socket_.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options_.reconnect_interval.count()));
      socket_.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(options_.reconnect_interval_max.count()));
      if (options_.security == TransportOptions::Security::kCurve) {
        socket_.set(zmq::sockopt::curve_serverkey, options_.curve_client.server_public_key);
        socket_.set(zmq::sockopt::curve_publickey, options_.curve_client.public_key);
        socket_.set(zmq::sockopt::curve_secretkey, options_.curve_client.secret_key);
      } else if (options_.security == TransportOptions::Security::kPlain) {
        socket_.set(zmq::sockopt::plain_username, std::string("hpctune"));
        socket_.set(zmq::sockopt::plain_password, options_.plain_password);
      }
      socket_.connect(endpoint_);
    } catch (const zmq::error_t& e) {
      return zmq_error(("cannot connect to " + endpoint_).c_str(), e);
    }
    return {};
  }

  zmq::context_t ctx_;
  zmq::socket_t socket_;
  zmq::socket_t wake_in_;
  zmq::socket_t wake_out_;
  std::mutex wake_mu_;
  std::string endpoint_;
  TransportOptions options_;  // kept for reconnect()
};

}  // namespace

Status check_options(const TransportOptions& o) {
  auto bad = [](const std::string& what) { return err(Errc::kInvalidArgument, "transport option " + what); };
  if (o.max_message_bytes < 1) return bad("max_message_bytes must be at least 1");
  if (o.send_hwm < 1) return bad("send_hwm must be at least 1");
  if (o.server_recv_hwm < 1) return bad("server_recv_hwm must be at least 1");
  if (o.listen_backlog < 1) return bad("listen_backlog must be at least 1");
  // ZeroMQ takes these as int milliseconds; -1 (linger forever) is a wait without a deadline.
  constexpr int64_t kMaxMs = std::numeric_limits<int>::max();
  if (o.linger.count() < 0 || o.linger.count() > kMaxMs) return bad("linger must be 0.." + std::to_string(kMaxMs) + " ms");
  if (o.reconnect_interval.count() < 1 || o.reconnect_interval.count() > kMaxMs)
    return bad("reconnect_interval must be 1.." + std::to_string(kMaxMs) + " ms");
  if (o.reconnect_interval_max < o.reconnect_interval || o.reconnect_interval_max.count() > kMaxMs)
    return bad("reconnect_interval_max must be reconnect_interval.." + std::to_string(kMaxMs) + " ms");
  if (o.handshake_interval.count() < 1 || o.handshake_interval.count() > kMaxMs)
    return bad("handshake_interval must be 1.." + std::to_string(kMaxMs) + " ms");
  return {};
}

namespace {

Status check_curve_server(const TransportOptions& o) {
  HPCTUNE_TRY(check_pair("curve_server", o.curve_server.public_key, o.curve_server.secret_key));
  if (o.curve_server.allowed.empty()) {
    return err(Errc::kInvalidArgument, "transport option curve_server.allowed is empty: no client could connect");
  }
  for (const auto& key : o.curve_server.allowed) {
    if (!z85_key_bytes(key)) return err(Errc::kInvalidArgument, "transport option curve_server.allowed: not a Z85 CURVE key: " + key);
  }
  return check_libzmq_for_curve();
}

Status check_curve_client(const TransportOptions& o) {
  HPCTUNE_TRY(check_pair("curve_client", o.curve_client.public_key, o.curve_client.secret_key));
  if (!z85_key_bytes(o.curve_client.server_public_key)) {
    return err(Errc::kInvalidArgument, "transport option curve_client.server_public_key is not a 40-character Z85 CURVE key");
  }
  return check_libzmq_for_curve();
}

}  // namespace

Result<CurveKeyPair> curve_keypair() {
  char public_key[41] = {};
  char secret_key[41] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return err(Errc::kUnavailable, std::string("cannot make a CURVE key pair: ") + zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{public_key, secret_key};
}

Result<std::string> curve_public_key(const std::string& secret_key) {
  if (secret_key.size() != 40) return err(Errc::kInvalidArgument, "a CURVE secret key is 40 Z85 characters");
  char public_key[41] = {};
  if (zmq_curve_public(public_key, secret_key.c_str()) != 0) {
    return err(Errc::kInvalidArgument, std::string("not a Z85 CURVE secret key: ") + zmq_strerror(zmq_errno()));
  }
  return std::string(public_key);
}

Status check_libzmq_for_curve(int major, int minor, int patch, bool has_curve, bool has_enforce_domain) {
  const std::string version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  if (std::make_tuple(major, minor, patch) < std::make_tuple(4, 3, 3)) {
    return err(Errc::kUnavailable, "libzmq " + version +
                                       " is older than 4.3.3 and not safe for CURVE (CVE-2020-15166: an "
                                       "unauthenticated connection can block legitimate workers); install libzmq 4.3.3 or later");
  }
  if (!has_curve) {
    return err(Errc::kUnavailable, "libzmq " + version + " was built without CURVE (zmq_has(\"curve\") is false); "
                                   "install a libzmq built with libsodium or its own tweetnacl");
  }
  if (!has_enforce_domain) {
    return err(Errc::kUnavailable, "libzmq " + version +
                                       " does not take ZMQ_ZAP_ENFORCE_DOMAIN, so a CURVE master could not fail "
                                       "closed without its ZAP handler");
  }
  return {};
}

Status check_libzmq_for_curve() {
  int major = 0, minor = 0, patch = 0;
  zmq_version(&major, &minor, &patch);
  bool enforce = false;
  if (void* ctx = zmq_ctx_new()) {
    if (void* probe = zmq_socket(ctx, ZMQ_ROUTER)) {
      const int one = 1;
      int value = 0;
      size_t size = sizeof value;
      enforce = zmq_setsockopt(probe, kZapEnforceDomain, &one, sizeof one) == 0 &&
                zmq_getsockopt(probe, kZapEnforceDomain, &value, &size) == 0 && value == 1;
      zmq_close(probe);
    }
    zmq_ctx_term(ctx);
  }
  return check_libzmq_for_curve(major, minor, patch, zmq_has("curve") != 0, enforce);
}

Result<std::unique_ptr<ServerTransport>> bind_zmq(const std::string& endpoint, const TransportOptions& options) {
  HPCTUNE_TRY(check_options(options));
  if (options.security == TransportOptions::Security::kCurve) HPCTUNE_TRY(check_curve_server(options));
  if (options.security == TransportOptions::Security::kPlain && options.plain_secret.empty()) {
    return err(Errc::kInvalidArgument, "transport option plain_secret is empty: no client could connect");
  }
  auto server = std::make_unique<ZmqServer>();
  HPCTUNE_TRY(server->bind(endpoint, options));
  return std::unique_ptr<ServerTransport>(std::move(server));
}

Result<std::unique_ptr<ClientTransport>> connect_zmq(const std::string& endpoint, const TransportOptions& options) {
  HPCTUNE_TRY(check_options(options));
  if (options.security == TransportOptions::Security::kCurve) HPCTUNE_TRY(check_curve_client(options));
  if (options.security == TransportOptions::Security::kPlain && options.plain_password.empty()) {
    return err(Errc::kInvalidArgument, "transport option plain_password is empty");
  }
  auto client = std::make_unique<ZmqClient>();
  HPCTUNE_TRY(client->connect(endpoint, options));
  return std::unique_ptr<ClientTransport>(std::move(client));
}

}  // namespace hpctune::protocol
