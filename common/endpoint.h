// The master's bind address: which forms are accepted, and whether one is reachable only from
// this machine. Here, not in protocol/, because the config (resources.bind), the CLI (--bind) and
// the transport all check the same text and the config may not depend on the protocol.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace hpctune {

// The longest ipc:// path: a Unix socket's sun_path holds 108 bytes with the terminating NUL.
inline constexpr std::size_t kMaxIpcPathBytes = 107;

namespace endpoint_detail {

inline bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A host name, an interface name (eth0) or an IPv4 address: letters, digits, '.', '-', '_'.
inline bool plain_host(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') return false;
  }
  return true;
}

// An IPv6 address in brackets' inside: hex digits, ':' and '.' (an embedded IPv4), at least one ':'.
inline bool ipv6_host(std::string_view h) {
  if (h.size() < 2 || h.find(':') == std::string_view::npos) return false;
  for (char c : h) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
  }
  return true;
}

}  // namespace endpoint_detail

// What is wrong with `endpoint` as the master's bind address, or nullopt when it is one of
//   tcp://HOST:PORT   HOST: an IPv4 address, a host or interface name, [IPv6], or * (every
//                     interface); PORT: 1..65535, or * for a free port chosen at bind time
//   ipc://PATH        a Unix socket at PATH (at most kMaxIpcPathBytes bytes); ipc://* is a socket in
//                     a private directory made at bind time (kPrivateIpcEndpoint, the default)
// The message names the expected forms, for a config error or a --bind usage error.
inline std::optional<std::string> endpoint_problem(std::string_view endpoint) {
  using namespace endpoint_detail;
  const std::string forms = "expected tcp://HOST:PORT (PORT 1..65535 or * for a free one) or ipc://PATH";
  if (endpoint.rfind("ipc://", 0) == 0) {
    const std::string_view path = endpoint.substr(6);
    if (path.empty()) return "'" + std::string(endpoint) + "' has no path; " + forms;
    if (path.size() > kMaxIpcPathBytes)
      return "the ipc path is " + std::to_string(path.size()) + " bytes, more than a Unix socket takes (" +
             std::to_string(kMaxIpcPathBytes) + ")";
    for (char c : path) {
      if (static_cast<unsigned char>(c) < 0x20) return "the ipc path holds a control character";
    }
    return std::nullopt;
  }
  if (endpoint.rfind("tcp://", 0) != 0) {
    const auto scheme = endpoint.find("://");
    return (scheme == std::string_view::npos ? "'" + std::string(endpoint) + "' has no transport"
                                             : "transport '" + std::string(endpoint.substr(0, scheme)) +
                                                   "' cannot reach the workers") +
           "; " + forms;
  }
  const std::string_view rest = endpoint.substr(6);
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) return "'" + std::string(endpoint) + "' has no port; " + forms;
  const std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
  const bool host_ok = host == "*" || (host.size() > 2 && host.front() == '[' && host.back() == ']' &&
                                       ipv6_host(host.substr(1, host.size() - 2))) ||
                       plain_host(host);
  if (!host_ok) return "'" + std::string(host) + "' is not a host, an interface, [IPv6] or *; " + forms;
  if (port != "*") {
    if (!all_digits(port) || port.size() > 5 || std::atoi(std::string(port).c_str()) < 1 ||
        std::atoi(std::string(port).c_str()) > 65535)
      return "port '" + std::string(port) + "' is not 1..65535 or *";
  }
  return std::nullopt;
}

// True when only this machine can reach `endpoint` (a valid one): tcp on 127.x.x.x, localhost or
// [::1], or an ipc socket. Anything else listens on a network.
inline bool loopback_endpoint(std::string_view endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  const std::string_view rest = endpoint.substr(6);
  const std::string_view host = rest.substr(0, rest.rfind(':'));
  if (host == "localhost" || host == "[::1]") return true;
  if (host.rfind("127.", 0) != 0) return false;  // and not a name such as 127.example.org:
  for (char c : host) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  }
  return true;
}

// The default bind address: a Unix socket in a fresh directory of its own, mode 0700, made by the
// master at bind time (protocol::bind_zmq) and removed when it stops. Only this user (and root) can
// connect to it: other local users cannot even open a connection to the master.
inline constexpr const char* kPrivateIpcEndpoint = "ipc://*";

inline bool private_ipc_endpoint(std::string_view endpoint) { return endpoint == kPrivateIpcEndpoint; }

// Whether a master bound to `endpoint` protects its transport with ZeroMQ CURVE, for the setting
// resources.security: "curve" always, "none" never, "auto" (the default) everywhere except on the
// private ipc socket (kPrivateIpcEndpoint), which only this user can reach: a TCP port, loopback
// included, is reachable by every local user, and so may be an ipc path the user chose. Here,
// beside loopback_endpoint(), because the config, the CLI and the master all decide it from the
// same text.
inline bool transport_uses_curve(std::string_view security, std::string_view endpoint) {
  if (security == "curve") return true;
  if (security == "none") return false;
  return !private_ipc_endpoint(endpoint);
}

// Whether `run`, `resume` and `validate` warn: the transport is not CURVE and the address is not the
// private ipc socket, so other users (local ones at least) can connect (resources.security none).
inline bool transport_warning_needed(std::string_view security, std::string_view endpoint) {
  return !transport_uses_curve(security, endpoint) && !private_ipc_endpoint(endpoint);
}

// The warning for a transport without CURVE that others can reach (transport_warning_needed).
// Printed by `run`, `resume` and `validate`.
inline std::string network_bind_warning(std::string_view endpoint) {
  const std::string head = "the master listens on " + std::string(endpoint);
  const std::string tail =
      ": traffic between the master and the workers is not encrypted; the transport checks only the campaign "
      "secret, sent in clear text at each connection's handshake (ZeroMQ PLAIN), so connections without it are "
      "refused before they reach the master; remove `security: none` to use CURVE, or leave resources.bind at its "
      "default (a private ipc socket)";
  if (loopback_endpoint(endpoint)) {
    return head + ", which every local user can reach, with resources.security none" + tail;
  }
  return head + ", reachable from other machines, with resources.security none" + tail +
         " (anyone who can capture the traffic reads the secret and the trials' data)";
}

}  // namespace hpctune
