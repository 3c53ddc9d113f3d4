// The campaign's CURVE key directory: permission checks, loading, creation (see curve_keys.h).
#include "protocol/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace hpctune::protocol {
namespace {

constexpr const char* kServerKeyFile = "server.key";
constexpr const char* kWorkerKeyFile = "worker.key";
constexpr size_t kMaxKeyFileBytes = 256;  // a key is 40 characters; anything far larger is not one

std::string octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

Error io_error(const std::string& what, const std::string& path, int e) {
  return err(Errc::kIo, what + " " + path + ": " + std::strerror(e));
}

// The refusal for a key path that others could read or replace.
Error refuse(const std::string& path, bool directory, const struct stat& st) {
  const std::string kind = directory ? "the CURVE key directory " : "the CURVE key file ";
  const std::string fix = directory ? "chmod 700 " + path : "chmod 600 " + path;
  if (S_ISLNK(st.st_mode)) {
    return err(Errc::kUnavailable, kind + path + " is a symbolic link: keys must be kept in the campaign's own " +
                                       (directory ? "directory" : "file") + "; remove the link (a new one is then created)");
  }
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return err(Errc::kUnavailable, kind + path + " is not a " + (directory ? "directory" : "regular file") +
                                       "; move it away (a new one is then created)");
  }
  if (st.st_uid != ::geteuid()) {
    return err(Errc::kUnavailable, kind + path + " belongs to user id " + std::to_string(st.st_uid) +
                                       ", not to the user running the master (" + std::to_string(::geteuid()) +
                                       "); only the campaign's owner may hold its keys");
  }
  return err(Errc::kUnavailable, kind + path + " has mode " + octal(st.st_mode) +
                                     ": other users could read the campaign's secret keys; it must be private to its "
                                     "owner (fix: " + fix + ")");
}

// Reads one key file: private (check_private), at most kMaxKeyFileBytes, a Z85 secret key.
Result<CurveKeyPair> read_key_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    struct stat link {};
    if (e == ELOOP && ::lstat(path.c_str(), &link) == 0) return refuse(path, false, link);  // a symbolic link
    return io_error("cannot open", path, e);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return io_error("cannot stat", path, e);
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    ::close(fd);
    return refuse(path, false, st);
  }
  std::string text(kMaxKeyFileBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return io_error("cannot read", path, e);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  auto public_key = text.size() == 40 ? curve_public_key(text) : Result<std::string>(err(Errc::kInvalidArgument, ""));
  if (!public_key.ok()) {
    // The message never quotes the file's text: it may be a secret.
    return err(Errc::kUnavailable, "the CURVE key file " + path +
                                       " does not hold a Z85 CURVE secret key (40 characters); remove it and a new "
                                       "key is made on the next run (workers of a running campaign then need a restart)");
  }
  return CurveKeyPair{*public_key, text};
}

// Writes a fresh key file: a temporary file created 0600 (whatever the umask), synced, renamed.
Result<CurveKeyPair> create_key_file(const std::string& dir, const std::string& path) {
  HPCTUNE_ASSIGN(CurveKeyPair pair, curve_keypair());
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // left by a crash between create and rename
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create", tmp, errno);
  const std::string text = pair.secret_key + "\n";
  bool ok = ::fchmod(fd, 0600) == 0;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return io_error("cannot write", tmp, e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int re = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot rename the new key to", path, re);
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);  // the rename itself survives a crash
    ::close(dfd);
  }
  return pair;
}

Result<CurveKeyPair> load_or_create(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return io_error("cannot stat", path, errno);
    return create_key_file(dir, path);
  }
  return read_key_file(path);
}

}  // namespace

std::string key_dir_for(const std::string& db_path) { return db_path + ".keys"; }

Status check_private(const std::string& path, bool directory) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return io_error("cannot stat", path, errno);
  }
  const bool right_kind = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  if (!right_kind || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) return refuse(path, directory, st);
  return {};
}

Status check_key_dir(const std::string& dir) {
  HPCTUNE_TRY(check_private(dir, true));
  for (const char* name : {kServerKeyFile, kWorkerKeyFile}) HPCTUNE_TRY(check_private(dir + "/" + name, false));
  return {};
}

Result<CampaignKeys> load_or_create_keys(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return io_error("cannot stat", dir, errno);
    // mkdir's mode is cut by the umask; chmod sets exactly 0700 (never wider: 0700 & ~umask first).
    if (::mkdir(dir.c_str(), 0700) != 0) return io_error("cannot create", dir, errno);
    if (::chmod(dir.c_str(), 0700) != 0) return io_error("cannot set the permissions of", dir, errno);
  }
  HPCTUNE_TRY(check_key_dir(dir));
  CampaignKeys keys;
  HPCTUNE_ASSIGN(keys.server, load_or_create(dir, kServerKeyFile));
  HPCTUNE_ASSIGN(keys.worker, load_or_create(dir, kWorkerKeyFile));
  if (keys.server.public_key == keys.worker.public_key) {
    return err(Errc::kUnavailable, "the CURVE key files in " + dir + " hold the same key: the master's and the "
                                   "workers' keys must differ; remove " + dir + "/" + kWorkerKeyFile);
  }
  return keys;
}

void use_curve_server(TransportOptions& options, const CampaignKeys& keys) {
  options.security = TransportOptions::Security::kCurve;
  options.curve_server.public_key = keys.server.public_key;
  options.curve_server.secret_key = keys.server.secret_key;
  options.curve_server.allowed = {keys.worker.public_key};
}

std::map<std::string, std::string> worker_key_environment(const CampaignKeys& keys) {
  return {{kCurveServerKeyEnv, keys.server.public_key},
          {kCurvePublicKeyEnv, keys.worker.public_key},
          {kCurveSecretKeyEnv, keys.worker.secret_key}};
}

}  // namespace hpctune::protocol
