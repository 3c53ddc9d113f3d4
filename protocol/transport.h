// Transports: how protocol frames travel between the master and trainer-group leaders.
//
// The scheduler and the worker loop see only these two interfaces, so most tests run the whole
// master/worker conversation in one process over InProcHub, with no sockets. Production uses
// ZeroMQ (transport_zmq.cpp): a ROUTER bound by the master, a DEALER per group leader.
//
// Contracts common to every implementation:
//  - recv() never blocks past its timeout; it returns nullopt when the time is up (or, on the
//    client side, when notify() was called).
//  - send() never blocks: a peer that is gone or cannot take more is an error value (kPeerGone,
//    kBusy), never silent loss.
//  - Frames larger than protocol::kMaxMessageBytes (TransportOptions::max_message_bytes for
//    ZeroMQ) are dropped by the receiving side.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/limits.h"
#include "common/result.h"

namespace hpctune::protocol {

using PeerId = std::string;  // opaque routing id of a connected client

struct Envelope {
  PeerId peer;
  std::string bytes;  // one frame; empty when the peer sent a frame shape the transport rejects
};

// The master's end: one socket that many clients connect to.
class ServerTransport {
 public:
  virtual ~ServerTransport() = default;
  // The address clients connect to, e.g. "tcp://127.0.0.1:40123" or "inproc://hub-1".
  virtual std::string endpoint() const = 0;
  // kPeerGone when `peer` is not connected; kBusy when its queue is full. Never blocks.
  virtual Status send(const PeerId& peer, std::string_view bytes) = 0;
  // Waits up to `timeout` for one frame; nullopt when none arrived in time.
  virtual Result<std::optional<Envelope>> recv(std::chrono::milliseconds timeout) = 0;
  // Connections refused at the handshake so far (a CURVE key or PLAIN secret that is not the
  // campaign's): they never became peers, so the master says how many, not who. 0 when the
  // transport authenticates nothing itself.
  virtual int64_t refused_connections() const { return 0; }
};

// A trainer-group leader's end. Used from one thread, except notify().
class ClientTransport {
 public:
  virtual ~ClientTransport() = default;
  virtual Status send(std::string_view bytes) = 0;
  // Waits up to `timeout` for a frame from the master; nullopt on timeout or after notify().
  virtual Result<std::optional<std::string>> recv(std::chrono::milliseconds timeout) = 0;
  // Drops the connection and connects afresh (the master then sees a new peer id).
  virtual Status reconnect() = 0;
  // Thread-safe: wakes a recv() in progress (or the next one) so the owner can look at its queues.
  virtual void notify() = 0;
};

// The socket options of a ZeroMQ transport, one struct for both ends (each end applies the
// fields that concern it). The defaults are what the master and the workers use.
struct TransportOptions {
  // ZMQ_MAXMSGSIZE: a peer that sends a larger frame is disconnected by ZeroMQ before the frame
  // reaches the application (so a frame is never allocated past it). Both ends.
  int64_t max_message_bytes = hpctune::kMaxMessageBytes;
  // ZMQ_SNDHWM, per peer: frames queued for one peer before send() says kBusy. Both ends.
  int send_hwm = 10000;
  // ZMQ_RCVHWM of the master's ROUTER: frames from all workers waiting to be read (past it ZeroMQ
  // stops reading the sockets, and the workers' own queues fill: back-pressure). The server only;
  // a worker keeps ZeroMQ's default (1000), the master sends it little.
  int server_recv_hwm = 100000;
  // ZMQ_BACKLOG of the master's listening TCP socket: connections waiting to be accepted. ZeroMQ's
  // default, 100, drops the SYNs of 2048 groups connecting at once (the kernel's ListenOverflows),
  // and each dropped one costs its group a SYN retransmit 1 s, then 3 s, later (bench/scale). The
  // kernel caps it at net.core.somaxconn (4096 since Linux 5.4, 128 before: a site must raise it).
  // The server only.
  int listen_backlog = 4096;
  // ZMQ_LINGER: how long closing a socket waits for unsent frames. 0: closing never blocks.
  std::chrono::milliseconds linger{0};
  // ZMQ_HANDSHAKE_IVL: a connection that has not finished its ZeroMQ handshake (greeting, and with
  // CURVE or PLAIN the authentication) this long after it was accepted is closed. Connections that
  // never authenticate are thus gone within it; a refused one at once. The server only.
  std::chrono::milliseconds handshake_interval{10000};
  // ZMQ_RECONNECT_IVL / _MAX: a worker's reconnection back-off. The client only.
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{5000};

  // Security. kNone: the transport neither encrypts nor authenticates; a worker proves itself
  // with the per-launch credential in its hello (messages.h). kCurve: ZeroMQ CURVE encrypts every
  // frame, and the server admits a client only when its public key is in `curve_server.allowed`
  // (a ZAP handler, RFC 27, runs for the server's socket; ZMQ_ZAP_ENFORCE_DOMAIN makes the socket
  // refuse everyone if that handler is missing, so the server fails closed). Keys are the 40-char
  // Z85 text of curve_keypair(). bind_zmq uses curve_server, connect_zmq curve_client; both check
  // check_libzmq_for_curve() first. Required for an endpoint that is not loopback (the master
  // decides; common/endpoint.h).
  // kPlain: ZeroMQ PLAIN, no encryption, but the same ZAP handler admits a client only when the
  // password of its handshake is `<plain_secret>` or starts with `<plain_secret>.` (the campaign
  // secret, compared in constant time; a worker sends its launch credential). A connection without
  // it never becomes a peer of the ROUTER: it cannot claim a routing id (a claimed id that an unnamed
  // peer's generated id then meets aborts libzmq 4.3: Assertion failed: ok (socket_base.cpp)), and
  // it writes nothing to the master's log. The master uses it for resources.security none.
  enum class Security { kNone, kCurve, kPlain };
  Security security = Security::kNone;
  struct CurveServer {
    std::string public_key;            // the server's key pair
    std::string secret_key;
    std::vector<std::string> allowed;  // client public keys admitted (Z85)
  };
  struct CurveClient {
    std::string public_key;         // the client's own key pair
    std::string secret_key;
    std::string server_public_key;  // the server it trusts
  };
  CurveServer curve_server;
  CurveClient curve_client;
  std::string plain_secret;    // kPlain, the server: the campaign secret it admits
  std::string plain_password;  // kPlain, the client: what it sends (the launch credential)
  // Test hook: false binds a CURVE server without its ZAP handler, to show that it then refuses
  // every client (fail closed). Production never sets it.
  bool curve_zap_handler = true;
};

// kInvalidArgument when an option is out of range (a size or a high-water mark below 1, a
// negative time); the message names the option.
Status check_options(const TransportOptions& options);

// A fresh CURVE key pair from libzmq (zmq_curve_keypair, a real random source), as Z85 text.
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};
Result<CurveKeyPair> curve_keypair();
// The public key that belongs to a Z85 secret key (zmq_curve_public); kInvalidArgument when the
// text is not a 40-character Z85 key.
Result<std::string> curve_public_key(const std::string& secret_key);

// kUnavailable, with the reason, when this process's libzmq must not run a CURVE transport: older
// than 4.3.3 (CVE-2020-15166: an unauthenticated peer could block legitimate clients), built
// without CURVE (zmq_has("curve")), or without ZMQ_ZAP_ENFORCE_DOMAIN (no failing closed).
Status check_libzmq_for_curve();
// The same decision for given facts (tests show the refusals without an old libzmq).
Status check_libzmq_for_curve(int major, int minor, int patch, bool has_curve, bool has_enforce_domain);

// ZeroMQ: `endpoint` to bind, e.g. "tcp://127.0.0.1:*" (an ephemeral port; see endpoint()), or
// "ipc://*" (kPrivateIpcEndpoint, common/endpoint.h): a Unix socket in a new directory made with
// mkdtemp (mode 0700, owned by this user) under $TMPDIR when that is an absolute path short enough
// for a socket, else /tmp; the socket and its directory are removed when the server is destroyed.
// (libzmq's own "ipc://*" makes its directory relative to the working directory when $TMPDIR is
// unset, which other processes cannot resolve.)
Result<std::unique_ptr<ServerTransport>> bind_zmq(const std::string& endpoint, const TransportOptions& options = {});
Result<std::unique_ptr<ClientTransport>> connect_zmq(const std::string& endpoint,
                                                     const TransportOptions& options = {});

// In-process hub: one server, any number of clients, queues under a mutex.
class InProcHub {
 public:
  InProcHub();
  ~InProcHub();
  InProcHub(const InProcHub&) = delete;
  InProcHub& operator=(const InProcHub&) = delete;

  // The server end; call once. The hub must outlive it and every client.
  std::unique_ptr<ServerTransport> server();
  std::unique_ptr<ClientTransport> connect();
  // Test hook: disconnects every client whose peer id is `peer` (as if its process died).
  void drop(const PeerId& peer);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace hpctune::protocol
