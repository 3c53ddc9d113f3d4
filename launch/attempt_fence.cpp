// The attempt fence (attempt_fence.h): a file per trial naming its running attempt's token,
// machine and process group; the next attempt kills what it names before it starts.
#include "launch/attempt_fence.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace hpctune::launch {
namespace {

constexpr std::size_t kMaxFenceFile = 4096;
constexpr std::size_t kMaxEnviron = 1 << 20;  // a process's environment read at most this far

// This machine and boot, and this PID namespace: pids in the file mean something only here.
// Read once per process (neither changes while it runs).
std::string read_machine_id() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  return boot + "/" + (n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string("?"));
}

const std::string& machine_id() {
  static const std::string id = read_machine_id();
  return id;
}

// Field 22 of /proc/PID/stat (start time in clock ticks since boot), its state and process
// group; false when the process is gone.
struct ProcStat {
  char state = '?';
  pid_t pgrp = 0;
  unsigned long long start = 0;
};
bool read_stat(pid_t pid, ProcStat& out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  // After the command: state(3) ppid(4) pgrp(5) ... starttime(22).
  std::vector<std::string> f;
  while (rest >> field && f.size() < 20) f.push_back(field);
  if (f.size() < 20) return false;
  out.state = f[0].empty() ? '?' : f[0][0];
  out.pgrp = static_cast<pid_t>(std::strtol(f[2].c_str(), nullptr, 10));
  out.start = std::strtoull(f[19].c_str(), nullptr, 10);
  return true;
}

struct Record {
  std::string token, machine;
  pid_t pgid = 0;
  unsigned long long start = 0;
};

// The file's record; nullopt when there is none (or it is not one).
std::optional<Record> read_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
    text.resize(kMaxFenceFile);
    const ssize_t n = ::read(fd, text.data(), text.size());
    text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  Record r;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "token") r.token = value;
    if (key == "machine") r.machine = value;
    if (key == "pgid") r.pgid = static_cast<pid_t>(std::strtol(value.c_str(), nullptr, 10));
    if (key == "start") r.start = std::strtoull(value.c_str(), nullptr, 10);
  }
  if (r.token.size() < 16) return std::nullopt;
  return r;
}

Status write_record(const std::string& path, const Record& r) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {  // left by a writer that died between open and rename
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) return err(Errc::kIo, "cannot write the attempt fence " + tmp + ": " + std::strerror(errno));
  const std::string text = "token=" + r.token + "\nmachine=" + r.machine + "\npgid=" + std::to_string(r.pgid) +
                           "\nstart=" + std::to_string(r.start) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return err(Errc::kIo, "cannot write the attempt fence " + path + ": " + std::strerror(errno));
  }
  return {};
}

// Whether the environment of `pid` holds NAME=token.
bool environ_has(pid_t pid, const std::string& needle) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/environ").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string env;
  char buf[8192];
  ssize_t n;
  while (env.size() < kMaxEnviron && (n = ::read(fd, buf, sizeof buf)) > 0) env.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  // Entries are NUL-separated: match a whole entry.
  for (std::size_t at = env.find(needle); at != std::string::npos; at = env.find(needle, at + 1)) {
    const bool starts = at == 0 || env[at - 1] == '\0';
    const bool ends = at + needle.size() == env.size() || env[at + needle.size()] == '\0';
    if (starts && ends) return true;
  }
  return false;
}

// One pass over /proc: SIGKILLs every live process of this user that belongs to the attempt.
// Returns the pids found (alive when looked at).
std::vector<pid_t> kill_pass(const Record& r, bool group_is_ours) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  const std::string needle = std::string(AttemptFence::kEnvironmentName) + "=" + r.token;
  const uid_t me = ::geteuid();
  const pid_t self = ::getpid();
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (v <= 0 || *end != '\0' || v == self) continue;
    const pid_t pid = static_cast<pid_t>(v);
    struct stat st {};
    if (::stat(("/proc/" + std::string(e->d_name)).c_str(), &st) != 0 || st.st_uid != me) continue;
    // A pidfd first: the signal then reaches the process that was looked at, never a reuse of its pid.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    ProcStat ps;
    if (!read_stat(pid, ps) || ps.state == 'Z' || ps.state == 'X') {
      if (pidfd >= 0) ::close(pidfd);
      continue;
    }
    const bool ours = (group_is_ours && r.pgid > 0 && ps.pgrp == r.pgid) || environ_has(pid, needle);
    if (ours) {
      found.push_back(pid);
      if (pidfd >= 0) {
        ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
      } else {
        ::kill(pid, SIGKILL);
      }
    }
    if (pidfd >= 0) ::close(pidfd);
  }
  ::closedir(proc);
  return found;
}

std::string random_token() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) out += hex[b >> 4], out += hex[b & 15];
  if (got < sizeof bytes) out += std::to_string(::getpid()) + "-" + std::to_string(::time(nullptr));
  return out;
}

}  // namespace

Status fence_attempt(const std::string& path, std::chrono::milliseconds limit) {
  const std::optional<Record> r = read_record(path);
  if (!r || r->machine != machine_id()) return {};
  // The recorded group is the attempt's while no other process holds its number: a live process
  // with that pid but another start time means the group is empty (a pid in use as a group id is
  // never given to a new process), so only the token identifies what is left.
  ProcStat leader;
  const bool group_is_ours = r->pgid > 0 && (!read_stat(r->pgid, leader) || leader.start == r->start);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const std::vector<pid_t> left = kill_pass(*r, group_is_ours);
    if (left.empty()) return {};
    if (limit.count() <= 0) return {};  // signalled; the caller does not wait
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string pids;
      for (pid_t p : left) {
        if (!pids.empty()) pids += ' ';
        pids += std::to_string(p);
      }
      return err(Errc::kBusy, "processes of the previous attempt recorded in " + path + " (pids " + pids +
                                  ") are still alive; the next attempt does not start beside them");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

AttemptFence::~AttemptFence() { release(); }

AttemptFence::AttemptFence(AttemptFence&& other) noexcept
    : path_(std::move(other.path_)), token_(std::move(other.token_)) {
  other.path_.clear();
}

AttemptFence& AttemptFence::operator=(AttemptFence&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    token_ = std::move(other.token_);
    other.path_.clear();
  }
  return *this;
}

Result<AttemptFence> AttemptFence::enter(const std::string& path, std::chrono::milliseconds limit) {
  HPCTUNE_TRY(fence_attempt(path, limit));
  AttemptFence f;
  f.token_ = random_token();
  // Written before the program starts: a worker killed right after the fork still leaves the
  // token for the next attempt to find.
  HPCTUNE_TRY(write_record(path, Record{f.token_, machine_id(), 0, 0}));
  f.path_ = path;
  return f;
}

Result<AttemptFence> AttemptFence::enter_shared(const std::string& path, std::chrono::milliseconds limit,
                                                const std::string& token, pid_t pgid) {
  const std::optional<Record> old = read_record(path);
  if (!(old && old->token == token)) HPCTUNE_TRY(fence_attempt(path, limit));
  AttemptFence f;
  f.token_ = token;
  f.path_ = path;
  HPCTUNE_TRY(f.started(pgid));
  return f;
}

std::string AttemptFence::new_token() { return random_token(); }

Status AttemptFence::started(pid_t pgid) {
  if (path_.empty()) return {};
  ProcStat ps;
  Record r{token_, machine_id(), pgid, read_stat(pgid, ps) ? ps.start : 0};
  return write_record(path_, r);
}

void AttemptFence::abandon() noexcept {
  if (path_.empty()) return;
  try {
    (void)fence_attempt(path_, std::chrono::milliseconds(0));
  } catch (...) {
  }
  path_.clear();
}

void AttemptFence::release() noexcept {
  if (path_.empty()) return;
  try {
    const std::optional<Record> r = read_record(path_);
    if (r && r->token == token_) ::unlink(path_.c_str());
  } catch (...) {
  }
  path_.clear();
}

}  // namespace hpctune::launch
