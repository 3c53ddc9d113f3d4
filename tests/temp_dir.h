// TempDir: a fresh directory under the system's temporary directory for one test, removed with
// everything in it when the test ends.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include <doctest/doctest.h>

namespace hpctune::testing {

// Removes the directories `prefix`-XXXXXX (mkdtemp's) in the system's temporary directory that a
// test run left when it was killed (SIGKILL, a ctest timeout: no destructor runs): only
// directories (lstat: never a link, never followed) that this user owns and that nothing changed
// for a day, so another run's live ones stay. At most 100,000 entries are looked at; done once per
// prefix in a process; best effort, silent.
inline void remove_stale_temp_dirs(const std::string& prefix, time_t older_than_s = 24 * 3600) {
  static std::mutex mu;
  static std::set<std::string> swept;
  {
    std::lock_guard lock(mu);
    if (!swept.insert(prefix).second) return;
  }
  constexpr std::size_t kMaxScanned = 100000;
  std::error_code ec;
  const std::string base = std::filesystem::temp_directory_path(ec).string();
  if (ec) return;
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return;
  const time_t now = std::time(nullptr);
  std::size_t scanned = 0;
  while (const dirent* e = ::readdir(d)) {
    if (++scanned > kMaxScanned) break;
    const std::string name = e->d_name;
    if (name.size() != prefix.size() + 7 || name.compare(0, prefix.size() + 1, prefix + "-") != 0) continue;
    const std::string dir = base + "/" + name;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        now - st.st_mtime < older_than_s) {
      continue;
    }
    std::filesystem::remove_all(dir, ec);  // links inside are removed, not followed
  }
  ::closedir(d);
}

struct TempDir {
  TempDir() {
    remove_stale_temp_dirs("hpctune-test");
    std::string tmpl = (std::filesystem::temp_directory_path() / "hpctune-test-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
  // Writes `text` to file(name) and returns that path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
  std::string path;
};

}  // namespace hpctune::testing
