// A directory like the private socket directories hpctune makes with mkdtemp (the master's
// "hpctune-XXXXXX"/master, a persistent program's "hpctune-control-XXXXXX"/control), for the tests
// of common/safe_open.h's remove_stale_socket_dirs: its socket bound (listening when `live`), the
// directory a minute and a half old.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <string>

#include <doctest/doctest.h>

namespace hpctune::testing {

// Makes base + "/" + name_prefix + "XXXXXX" (its path in `dir`) with the socket `socket` ("/master")
// in it; returns the socket's descriptor (the caller closes it: closed unlistened, the socket file
// stays and refuses connections, as one a SIGKILLed process left).
inline int fake_socket_dir(const std::string& base, const std::string& name_prefix, const std::string& socket,
                           bool live, std::string& dir) {
  std::string templ = base + "/" + name_prefix + "XXXXXX";
  REQUIRE(::mkdtemp(templ.data()) != nullptr);
  dir = templ;
  const std::string sock = dir + socket;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  REQUIRE(sock.size() < sizeof a.sun_path);
  std::memcpy(a.sun_path, sock.c_str(), sock.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  if (live) REQUIRE(::listen(fd, 4) == 0);
  timeval old[2] = {{::time(nullptr) - 90, 0}, {::time(nullptr) - 90, 0}};
  REQUIRE(::utimes(dir.c_str(), old) == 0);
  return fd;
}

}  // namespace hpctune::testing
