// Opening paths that someone else may have named, without following links they planted: files
// under a directory of the user's own (a database's trial directories), and an output path whose
// symbolic links are followed only where nobody else can have made them.
//
// Used by the readers that open what a database names (report/trial_detail.cpp, for `hpctune
// trial` and the dashboard) and by `hpctune export -o`. Header-only: report/ and cli/ share it.
#pragma once

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/endpoint.h"
#include "common/result.h"

namespace hpctune {

// A file descriptor closed when it goes out of scope; -1 holds none.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() noexcept { reset(); }
  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  // Gives up ownership: the caller closes it.
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The components of a relative path; empty when it is absolute, empty, or holds "." or "..".
inline std::vector<std::string> plain_components(std::string_view relative) {
  std::vector<std::string> out;
  if (relative.empty() || relative.front() == '/') return {};
  std::size_t start = 0;
  while (start <= relative.size()) {
    const std::size_t end = std::min(relative.find('/', start), relative.size());
    const std::string_view part = relative.substr(start, end - start);
    if (part == "." || part == "..") return {};
    if (!part.empty()) out.emplace_back(part);
    start = end + 1;
  }
  return out;
}

// Opens `name` in the directory `dir_fd` without following a link, and checks that it is the user's
// own (owned by the effective uid) and a directory (`directory`) or a regular file. A FIFO is never
// waited on (O_NONBLOCK, then refused as not a regular file).
inline Result<UniqueFd> open_own_at(int dir_fd, const std::string& name, bool directory) {
  const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (directory ? O_DIRECTORY : 0);
  UniqueFd fd(::openat(dir_fd, name.c_str(), flags));
  if (!fd.valid()) {
    const int e = errno;
    if (e == ELOOP || (directory && e == ENOTDIR)) {
      return err(Errc::kInvalidArgument, "'" + name + "' is a symbolic link or not a directory: not followed");
    }
    return err(e == ENOENT ? Errc::kNotFound : Errc::kIo, "cannot open '" + name + "': " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return err(Errc::kIo, "cannot stat '" + name + "': " + std::strerror(errno));
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return err(Errc::kInvalidArgument, "'" + name + "' is not a " + (directory ? "directory" : "regular file"));
  }
  if (st.st_uid != ::geteuid()) {
    return err(Errc::kInvalidArgument, "'" + name + "' belongs to uid " + std::to_string(st.st_uid) +
                                           ", not to this user (uid " + std::to_string(::geteuid()) + ")");
  }
  return fd;
}

// Opens the regular file `relative` ("a/b/c") under the directory `dir_fd`, one component at a time:
// no symbolic link is followed, no "." or "..", and every directory on the way and the file itself
// must be the user's own. What another user planted (a link, a directory of theirs holding a hard
// link) is refused with kInvalidArgument.
inline Result<UniqueFd> open_own_file_under(int dir_fd, std::string_view relative) {
  const auto parts = plain_components(relative);
  if (parts.empty()) {
    std::string what = "'";  // appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict, PR 105329)
    what.append(relative).append("' is not a plain relative path");
    return err(Errc::kInvalidArgument, what);
  }
  UniqueFd dir;
  int at = dir_fd;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    HPCTUNE_ASSIGN(UniqueFd next, open_own_at(at, parts[i], /*directory=*/true));
    dir = std::move(next);
    at = dir.get();
  }
  return open_own_at(at, parts.back(), /*directory=*/false);
}

// Opens `path` to write it, created with `mode` when missing (`truncate`: emptied, else appended
// to), without following a symbolic link at its last component and without waiting on a FIFO: what
// is there must be a regular file of the user's own (checked before it is emptied). For the files
// hpctune writes into a trial's directory, which may have come with a campaign unpacked from
// someone else's archive and resumed: a stdout.log linked to ~/.bashrc was appended to, a FIFO
// stderr.log hung the worker for good.
inline Result<UniqueFd> open_own_for_writing(const std::string& path, bool truncate, mode_t mode = 0644) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (truncate ? 0 : O_APPEND);
  UniqueFd fd(::open(path.c_str(), flags, mode));
  if (!fd.valid()) {
    const int e = errno;
    if (e == ELOOP) return err(Errc::kInvalidArgument, path + " is a symbolic link: not written through");
    if (e == ENXIO) return err(Errc::kInvalidArgument, path + " is a FIFO: not written to");
    return err(Errc::kIo, "cannot open " + path + ": " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return err(Errc::kIo, "cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return err(Errc::kInvalidArgument, path + " is not a regular file: not written to");
  if (st.st_uid != ::geteuid()) {
    return err(Errc::kInvalidArgument, path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                                           std::to_string(::geteuid()) + "): not written to");
  }
  if (truncate && ::ftruncate(fd.get(), 0) != 0) return err(Errc::kIo, "cannot empty " + path + ": " + std::strerror(errno));
  const int now = ::fcntl(fd.get(), F_GETFL);
  if (now >= 0) (void)::fcntl(fd.get(), F_SETFL, now & ~O_NONBLOCK);
  return fd;
}

// Whether what is at `dir` (made by the caller) is a directory of the user's own and not a
// symbolic link: one planted where a trial's directory goes would take its files elsewhere.
inline Status check_own_directory(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return err(Errc::kIo, "cannot stat " + dir + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return err(Errc::kInvalidArgument, dir + " is a symbolic link: not followed");
  if (!S_ISDIR(st.st_mode)) return err(Errc::kInvalidArgument, dir + " is not a directory");
  if (st.st_uid != ::geteuid()) {
    return err(Errc::kInvalidArgument, dir + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                                           std::to_string(::geteuid()) + ")");
  }
  return Status::Ok();
}

// Creates the directory `dir` where there is none with the permissions of the directory it is made
// in: the owner's all, the parent's read and search bits for group and others, never their write;
// set exactly, whatever the umask. Missing parents are made the same way. What is at `dir` must
// then be a directory of the user's own (check_own_directory; one that was there keeps its mode).
// A trial's directory below <db>.trials, which the master makes with the modes of storage_access
// (scheduler/campaign_preparation.h), and an attempt's below that, thus follow the setting: 0700
// for owner (the default), 0750 for group, 0755 for all.
inline Status make_directory_like_parent(const std::string& dir) {
  std::string path = dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::size_t slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat up {};
  if (::stat(parent.c_str(), &up) != 0) {
    if (errno != ENOENT || parent == "." || parent == "/") {
      return err(Errc::kIo, "cannot stat " + parent + ": " + std::strerror(errno));
    }
    HPCTUNE_TRY(make_directory_like_parent(parent));
    if (::stat(parent.c_str(), &up) != 0) return err(Errc::kIo, "cannot stat " + parent + ": " + std::strerror(errno));
  }
  const mode_t mode = (up.st_mode & 0755) | 0700;
  if (::mkdir(path.c_str(), mode) != 0) {
    if (errno == EEXIST) return check_own_directory(path);
    return err(Errc::kIo, "cannot create " + path + ": " + std::strerror(errno));
  }
  UniqueFd made(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!made.valid() || ::fchmod(made.get(), mode) != 0) {
    return err(Errc::kIo, "cannot set the permissions of " + path + ": " + std::strerror(errno));
  }
  return check_own_directory(path);
}

// Creates the directory `name` in the open directory `dir_fd` with the permissions
// make_directory_like_parent gives (the parent's read and search bits, the owner's all, whatever the
// umask) and opens it without following a link: one that is there must be a directory of the
// user's own (open_own_at), and is kept with its mode unless `fresh` (then it is an error: the
// caller removed what was there). A link planted at `name` is refused, never followed: for the
// directories the master makes below <db>.trials, where a trial's own program can write.
inline Result<UniqueFd> make_own_directory_at(int dir_fd, const std::string& name, bool fresh = false) {
  struct stat up {};
  if (::fstat(dir_fd, &up) != 0) return err(Errc::kIo, "cannot stat the directory of '" + name + "': " + std::strerror(errno));
  const mode_t mode = (up.st_mode & 0755) | 0700;
  const bool made = ::mkdirat(dir_fd, name.c_str(), mode) == 0;
  if (!made && (fresh || errno != EEXIST)) return err(Errc::kIo, "cannot create '" + name + "': " + std::strerror(errno));
  HPCTUNE_ASSIGN(UniqueFd dir, open_own_at(dir_fd, name, /*directory=*/true));
  if (made && ::fchmod(dir.get(), mode) != 0) {
    return err(Errc::kIo, "cannot set the permissions of '" + name + "': " + std::strerror(errno));
  }
  return dir;
}

// Whether a symbolic link in a directory with these attributes may be followed: only where nobody
// but the directory's owner can create entries (not writable by group or others) and that owner is
// this user or root. A link in /tmp or in a group-shared folder may be someone else's.
inline bool links_trusted_in(const struct stat& dir) {
  return (dir.st_mode & (S_IWGRP | S_IWOTH)) == 0 && (dir.st_uid == ::geteuid() || dir.st_uid == 0);
}

// Why nobody but this user (and root) could have put an entry at `dir` or anywhere on its way from
// "/", or "" when nobody could: every directory from "/" to `dir` (followed by lstat, a symbolic
// link on the way is a reason) belongs to this user or root, and none is writable by group or
// others unless it has the sticky bit (as /tmp), where others cannot rename or remove what is ours.
// A Unix socket in such a directory of our own is ours: nobody can have swapped it.
inline std::string unsafe_directory_chain(const std::string& dir) {
  if (dir.empty() || dir[0] != '/') return "'" + dir + "' is not an absolute path";
  std::size_t pos = 0;
  while (true) {
    const std::size_t next = dir.find('/', pos + 1);
    // Never empty (next >= 1). Built in one expression: assigning "/" to an empty string here made
    // GCC 12 warn -Wrestrict about a memcpy that cannot overlap, where this is inlined (common/system.h).
    const std::string at = next == std::string::npos ? dir : dir.substr(0, next);
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) return "cannot stat " + at + ": " + std::strerror(errno);
    if (S_ISLNK(st.st_mode)) return at + " is a symbolic link";
    if (!S_ISDIR(st.st_mode)) return at + " is not a directory";
    if (st.st_uid != ::geteuid() && st.st_uid != 0)
      return at + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
      return at + " is writable by others without the sticky bit: another user can replace what is in it";
    if (next == std::string::npos || next + 1 >= dir.size()) return "";
    pos = next;
  }
}

// Where to make a private directory for a Unix socket: $TMPDIR, else $XDG_RUNTIME_DIR, else /tmp, the
// first that is an absolute directory with room for `room` more bytes of path (a socket's path takes
// at most 107) and where nobody else can replace what we make (unsafe_directory_chain: a TMPDIR
// others can write without the sticky bit would let them swap it for theirs). "" stands for "/".
// kIo naming each refused candidate and why, when none will do; `what` names the socket.
inline Result<std::string> private_socket_base(std::size_t room, const std::string& what) {
  std::string refused;
  for (const char* var : {"TMPDIR", "XDG_RUNTIME_DIR", ""}) {
    const char* value = var[0] ? std::getenv(var) : "/tmp";
    std::string dir = value ? value : "";
    if (dir.empty() || dir[0] != '/') continue;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    struct stat st {};
    if (dir.size() + room > kMaxIpcPathBytes || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    const std::string why = unsafe_directory_chain(dir);
    if (why.empty()) return dir == "/" ? std::string() : dir;
    refused += (refused.empty() ? "" : "; ") + (var[0] ? std::string("$") + var + " " : std::string()) + dir + ": " + why;
  }
  return err(Errc::kIo, "no directory where " + what + " would be private to this user (" + refused +
                            "); set TMPDIR to a directory of your own (mode 0700)");
}

// The private socket directories (made by mkdtemp from base + "/" + prefix + "XXXXXX") that a process
// of this user left in `base` when it was killed (SIGKILL runs no destructor): the master's, a
// persistent program's control socket's. One is removed when this user owns it, it is 0700, older
// than a minute, and its socket `socket` ("/master") refuses connections (nothing listens there any
// more); a live one, bound and listening within microseconds of its directory's creation, accepts.
// At most 100,000 entries of `base` are looked at. Best effort, silent.
inline void remove_stale_socket_dirs(const std::string& base, std::string_view prefix, std::string_view socket) {
  constexpr std::size_t kMaxScanned = 100000;
  constexpr time_t kStaleAfterS = 60;
  DIR* d = ::opendir(base.c_str());
  if (!d) return;
  const time_t now = std::time(nullptr);
  std::size_t scanned = 0;
  while (dirent* e = ::readdir(d)) {
    if (++scanned > kMaxScanned) break;
    const std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string dir = (base == "/" ? "" : base) + "/" + name;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & 07777) != 0700 || now - st.st_mtime < kStaleAfterS) {
      continue;
    }
    const std::string sock = dir + std::string(socket);
    struct stat ss {};
    if (::lstat(sock.c_str(), &ss) != 0 || !S_ISSOCK(ss.st_mode) || sock.size() >= sizeof(sockaddr_un::sun_path)) continue;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, sock.c_str(), sock.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const bool refused = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == ECONNREFUSED;
    ::close(fd);
    if (!refused) continue;
    ::unlink(sock.c_str());
    ::rmdir(dir.c_str());  // fails, harmlessly, when anything else is in it
  }
  ::closedir(d);
}

// A path resolved for writing: the directory that holds its last component (open) and that name,
// which is not a symbolic link when it exists.
struct ResolvedPath {
  UniqueFd dir;
  std::string name;
  std::string shown;  // the path as resolved, for messages
};

// Resolves `path` component by component, following a symbolic link (40 at most) only where
// links_trusted_in() its directory; the last component is followed the same way, and need not exist.
// kInvalidArgument names the link that is refused (or a directory as the last component); kNotFound
// a directory on the way that does not exist; kIo one that cannot be opened.
inline Result<ResolvedPath> resolve_without_planted_links(const std::string& path) {
  if (path.empty()) return err(Errc::kInvalidArgument, "an empty path");
  std::vector<std::string> todo;  // components still to walk, the next one last
  auto push_front = [&todo](std::string_view p) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= p.size()) {
      const std::size_t end = std::min(p.find('/', start), p.size());
      if (end > start) parts.emplace_back(p.substr(start, end - start));
      start = end + 1;
    }
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_back(*it);
  };
  std::string shown = path.front() == '/' ? "" : ".";
  UniqueFd dir(::open(path.front() == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return err(Errc::kIo, "cannot open the directory of " + path + ": " + std::strerror(errno));
  push_front(path);
  if (todo.empty()) return err(Errc::kInvalidArgument, "'" + path + "' names a directory, not a file");
  int links = 0;
  while (true) {
    std::string name = std::move(todo.back());
    todo.pop_back();
    const bool last = todo.empty();
    struct stat st {};
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT && last && name != "." && name != "..") return ResolvedPath{std::move(dir), name, shown + "/" + name};
      const int e = errno;
      return err(e == ENOENT ? Errc::kNotFound : Errc::kIo, "cannot reach " + shown + "/" + name + ": " + std::strerror(e));
    }
    if (S_ISLNK(st.st_mode)) {
      struct stat here {};
      if (::fstat(dir.get(), &here) != 0) return err(Errc::kIo, "cannot stat " + shown + ": " + std::strerror(errno));
      if (!links_trusted_in(here)) {
        return err(Errc::kInvalidArgument,
                   shown + "/" + name + " is a symbolic link in a directory that others can write (or that belongs "
                   "to another user): not followed; name the file it points to");
      }
      if (++links > 40) return err(Errc::kInvalidArgument, "too many symbolic links in " + path);
      std::string target(4096, '\0');
      const ssize_t n = ::readlinkat(dir.get(), name.c_str(), target.data(), target.size());
      if (n < 0 || static_cast<std::size_t>(n) >= target.size()) {
        return err(Errc::kIo, "cannot read the link " + shown + "/" + name);
      }
      target.resize(static_cast<std::size_t>(n));
      if (!target.empty() && target.front() == '/') {
        dir = UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        shown.clear();
      }
      push_front(target);
      if (todo.empty()) return err(Errc::kInvalidArgument, "the link " + shown + "/" + name + " points to a directory");
      continue;
    }
    if (last) {
      if (S_ISDIR(st.st_mode)) return err(Errc::kInvalidArgument, shown + "/" + name + " is a directory, not a file");
      return ResolvedPath{std::move(dir), name, shown + "/" + name};
    }
    UniqueFd next(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return err(Errc::kIo, "cannot open the directory " + shown + "/" + name + ": " + std::strerror(errno));
    dir = std::move(next);
    shown += "/" + name;
  }
}

}  // namespace hpctune
