// Transports: how protocol frames travel between the master and trainer-group leaders.
//
// The scheduler and the worker loop see only these two interfaces, so most tests run the whole
// master/worker conversation in one process over InProcHub, with no sockets. Production uses
// ZeroMQ (transport_zmq.h): a ROUTER bound by the master, a DEALER per group leader.
//
// Contracts common to every implementation:
//  - recv() never blocks past its timeout; it returns nullopt when the time is up (or, on the
//    client side, when notify() was called).
//  - send() never blocks: a peer that is gone or cannot take more is an error value (kPeerGone,
//    kBusy), never silent loss.
//  - Frames larger than protocol::kMaxMessageBytes are dropped by the receiving side.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

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

// ZeroMQ: `endpoint` to bind, e.g. "tcp://127.0.0.1:*" (an ephemeral port; see endpoint()).
Result<std::unique_ptr<ServerTransport>> bind_zmq(const std::string& endpoint);
Result<std::unique_ptr<ClientTransport>> connect_zmq(const std::string& endpoint);

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
