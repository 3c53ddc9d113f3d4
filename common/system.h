// What hpctune asks of the operating system in more than one place: the host name, where a
// program is in PATH, random identifiers from the kernel's random source, and whether a path is
// on a network file system.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hpctune {

// This machine's name; "unknown" when the system will not say.
inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// `name` itself when it holds a slash (if executable), else its first executable match in PATH
// ("/usr/bin:/bin" when PATH is unset), as execvp finds it; "" when none.
inline std::string find_in_path(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    // An empty entry means the current directory. (Built in one expression: assigning "." to the
    // substr() result made GCC 12 warn -Wrestrict about a memcpy that cannot overlap.)
    const std::string dir = end > start ? dirs.substr(start, end - start) : std::string(".");
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Fills `out` with `bytes` bytes from getrandom, or /dev/urandom on a kernel without it. For
// secrets and identifiers that nobody may predict, never for choices of the search (those draw
// from the config seed). False when neither source gave enough bytes.
inline bool random_bytes(void* out, std::size_t bytes) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(p + got, bytes - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  if (got < bytes) {
    const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    while (got < bytes) {
      const ssize_t n = ::read(fd, p + got, bytes - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  return got == bytes;
}

// A 64-bit identifier of this process's incarnation (the master's, a worker's: a restarted one
// gets a new one). Random, so that nobody can predict it and pose as this process reconnecting;
// without a random source, the process id and the monotonic clock (unique, not secret).
inline uint64_t make_incarnation() {
  uint64_t id = 0;
  if (random_bytes(&id, sizeof id)) return id;
  return (static_cast<uint64_t>(::getpid()) << 32) ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// The network or cluster file system a statfs() f_type names ("nfs", "lustre", ...), or nullptr
// for any other (local disks, tmpfs, overlay). From linux/magic.h and the vendors' headers.
inline const char* network_filesystem_name(unsigned long f_type) noexcept {
  switch (f_type) {
    case 0x6969UL: return "nfs";
    case 0x0BD00BD0UL: return "lustre";
    case 0x47504653UL: return "gpfs";
    case 0xAAD7AAEAUL: return "panfs";
    case 0x19830326UL: return "beegfs";
    case 0x00C36400UL: return "ceph";
    case 0xFF534D42UL: return "cifs";
    case 0xFE534D42UL: return "smb2";
    case 0x517BUL: return "smb";
    case 0x01021997UL: return "9p";
    case 0x5346414FUL: return "afs";
    case 0x7461636FUL: return "ocfs2";
    case 0x01161970UL: return "gfs2";
    case 0x65735546UL: return "fuse";  // sshfs, s3fs, ...: locking depends on the daemon
    default: return nullptr;
  }
}

// The network file system `path` is on (a file, or a directory for a file yet to be created), or
// "" when it is local or the system will not say.
inline std::string network_filesystem(const std::string& path) {
  struct statfs st {};
  if (::statfs(path.c_str(), &st) != 0) {
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (::statfs(dir.c_str(), &st) != 0) return "";
  }
  const char* name = network_filesystem_name(static_cast<unsigned long>(st.f_type));
  return name ? name : "";
}

// Raises this process's soft limit of open files (RLIMIT_NOFILE) to its hard limit and returns the
// soft limit now in force (-1: the system will not say). The master holds one TCP connection per
// trainer group, plus ZeroMQ's own descriptors and SQLite's files: 2048 groups need more than the
// usual soft limit of 1024. A site whose hard limit is lower must raise it (README: limits).
inline int64_t raise_open_files_limit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  if (lim.rlim_cur < lim.rlim_max) {
    struct rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(lim.rlim_cur);
}

}  // namespace hpctune
