// Secrets a command takes without showing them in `ps`: read from a file only its owner can read,
// or from an environment variable that is then removed (its children do not inherit it).
// Header-only: cli/ uses it for the dashboard's token (`--token-file`, HPCTUNE_DASHBOARD_TOKEN).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "common/result.h"
#include "common/safe_open.h"

namespace hpctune {

inline constexpr std::size_t kMaxSecretFileBytes = 4096;

// The secret in `path`: the file's first line without trailing blanks. Refused (kUsage, naming the
// file and what to do): a link, anything but a regular file, a file of another user, one that its
// group or others may read or write (it must be 0600 or stricter), one over kMaxSecretFileBytes,
// and an empty secret.
inline Result<std::string> read_secret_file(const std::string& path, const std::string& option) {
  auto bad = [&](const std::string& why) { return err(Errc::kUsage, option + " " + path + ": " + why); };
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid())
    return bad(errno == ELOOP ? "is a symbolic link (give the file itself)" : std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return bad(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return bad("is not a regular file");
  if (st.st_uid != ::geteuid()) return bad("belongs to another user (uid " + std::to_string(st.st_uid) + ")");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return bad(std::string("may be read by others (mode ") + mode + "); chmod 600 it");
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretFileBytes))
    return bad("is larger than " + std::to_string(kMaxSecretFileBytes) + " bytes");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  if (const auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) text.pop_back();
  if (text.empty()) return bad("holds no secret (its first line is empty)");
  return text;
}

// The value of environment variable `name`, wiped from this process's environment block and unset
// (so that neither /proc/PID/environ nor a child shows it); nullopt when it is not set.
inline std::optional<std::string> take_secret_env(const char* name) {
  char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  std::string out(value);
  std::memset(value, 'x', std::strlen(value));
  ::unsetenv(name);
  return out;
}

}  // namespace hpctune
