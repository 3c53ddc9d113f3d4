// ZeroMQ transports: the master's ROUTER and the group leader's DEALER.
//
// The ROUTER sets ZMQ_ROUTER_MANDATORY, so a send to a departed peer fails with EHOSTUNREACH
// (kPeerGone) instead of vanishing. Both ends set ZMQ_MAXMSGSIZE, so an oversized frame
// disconnects its sender instead of reaching the application; that, the high-water marks, linger
// (0 by default: closing never blocks) and reconnection come from TransportOptions.
#include <atomic>
#include <limits>
#include <mutex>

#include <zmq.hpp>

#include "protocol/messages.h"
#include "protocol/transport.h"

namespace hpctune::protocol {
namespace {

Error zmq_error(const char* what, const zmq::error_t& e) {
  return err(Errc::kIo, std::string(what) + ": " + e.what());
}

class ZmqServer final : public ServerTransport {
 public:
  ZmqServer() : ctx_(1), socket_(ctx_, zmq::socket_type::router) {}

  Status bind(const std::string& endpoint, const TransportOptions& o) {
    try {
      socket_.set(zmq::sockopt::router_mandatory, 1);
      socket_.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
      socket_.set(zmq::sockopt::linger, static_cast<int>(o.linger.count()));
      socket_.set(zmq::sockopt::sndhwm, o.send_hwm);
      socket_.set(zmq::sockopt::rcvhwm, o.server_recv_hwm);
      socket_.bind(endpoint);
      endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return zmq_error(("cannot bind " + endpoint).c_str(), e);
    }
    return {};
  }

  std::string endpoint() const override { return endpoint_; }

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
    try {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, timeout) == 0) return std::optional<Envelope>();
      zmq::message_t id;
      if (!socket_.recv(id, zmq::recv_flags::dontwait)) return std::optional<Envelope>();
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
  zmq::context_t ctx_;
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
  Status open() {
    try {
      socket_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
      socket_.set(zmq::sockopt::linger, static_cast<int>(options_.linger.count()));
      socket_.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
      socket_.set(zmq::sockopt::sndhwm, options_.send_hwm);
      socket_.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options_.reconnect_interval.count()));
      socket_.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(options_.reconnect_interval_max.count()));
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
  // ZeroMQ takes these as int milliseconds; -1 (linger forever) is a wait without a deadline.
  constexpr int64_t kMaxMs = std::numeric_limits<int>::max();
  if (o.linger.count() < 0 || o.linger.count() > kMaxMs) return bad("linger must be 0.." + std::to_string(kMaxMs) + " ms");
  if (o.reconnect_interval.count() < 1 || o.reconnect_interval.count() > kMaxMs)
    return bad("reconnect_interval must be 1.." + std::to_string(kMaxMs) + " ms");
  if (o.reconnect_interval_max < o.reconnect_interval || o.reconnect_interval_max.count() > kMaxMs)
    return bad("reconnect_interval_max must be reconnect_interval.." + std::to_string(kMaxMs) + " ms");
  return {};
}

Result<std::unique_ptr<ServerTransport>> bind_zmq(const std::string& endpoint, const TransportOptions& options) {
  HPCTUNE_TRY(check_options(options));
  auto server = std::make_unique<ZmqServer>();
  HPCTUNE_TRY(server->bind(endpoint, options));
  return std::unique_ptr<ServerTransport>(std::move(server));
}

Result<std::unique_ptr<ClientTransport>> connect_zmq(const std::string& endpoint, const TransportOptions& options) {
  HPCTUNE_TRY(check_options(options));
  auto client = std::make_unique<ZmqClient>();
  HPCTUNE_TRY(client->connect(endpoint, options));
  return std::unique_ptr<ClientTransport>(std::move(client));
}

}  // namespace hpctune::protocol
