// Opening the files of a campaign's trials that the store names (artifacts a trainer group
// recorded: predictions, checkpoints) or that a trainer left in a trial's directory, for the
// workflow stages: each opened under <run_dir>/<trial> one component at a time, without following
// a symbolic link, as the user's own regular file, and never waited on (a FIFO is refused)
// (common/safe_open.h). The caller reads the open descriptor, never the name again.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/result.h"
#include "common/safe_open.h"

namespace hpctune::workflow {

// The directory `run_dir` ("<db>.trials"), opened without following a link at its last
// component, as the user's own; the directory that holds it is the user's choice and is opened as named.
inline Result<UniqueFd> open_run_dir(const std::string& run_dir) {
  const std::filesystem::path root(run_dir);
  const std::string parent = root.parent_path().empty() ? std::string(".") : root.parent_path().string();
  UniqueFd up(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!up.valid()) {
    const int e = errno;
    return err(e == ENOENT ? Errc::kNotFound : Errc::kIo, "cannot open " + parent + ": " + std::strerror(e));
  }
  return open_own_at(up.get(), root.filename().string(), /*directory=*/true);
}

// The directory of trial `trial` under `run_dir` (open_run_dir): opened without following a link,
// as the user's own.
inline Result<UniqueFd> open_trial_dir(const std::string& run_dir, const std::string& trial) {
  HPCTUNE_ASSIGN(UniqueFd trials, open_run_dir(run_dir));
  return open_own_at(trials.get(), trial, /*directory=*/true);
}
inline Result<UniqueFd> open_trial_dir(const std::string& run_dir, int64_t trial) {
  return open_trial_dir(run_dir, std::to_string(trial));
}

// `path` (absolute, or relative to `trial_dir`) relative to `trial_dir`, lexically; "" when it
// is not inside it.
inline std::string relative_to_trial(const std::string& trial_dir, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::absolute(trial_dir, ec).lexically_normal();
  if (ec) return "";
  const fs::path full = fs::path(path).is_absolute() ? fs::path(path) : dir / path;
  const std::string normal = full.lexically_normal().string();
  const std::string inside = dir.string() + "/";
  if (normal.size() <= inside.size() || normal.compare(0, inside.size(), inside) != 0) return "";
  return normal.substr(inside.size());
}

// Opens the file `path` recorded for trial `trial`: with trial directories (`run_dir` not empty),
// inside <run_dir>/<trial> only (see above). A path outside it (or any path, without trial
// directories) is an error unless `outside_allowed`; then a link on its way is followed only where
// nobody else can have made it (resolve_without_planted_links) and the file must be the user's own
// regular file. The error says why, without the trial (the caller names it).
inline Result<UniqueFd> open_trial_file(const std::string& run_dir, int64_t trial, const std::string& path,
                                        bool outside_allowed = false) {
  const std::string trial_dir = run_dir.empty() ? std::string() : run_dir + "/" + std::to_string(trial);
  const std::string relative = run_dir.empty() ? std::string() : relative_to_trial(trial_dir, path);
  if (relative.empty()) {
    if (!outside_allowed && !run_dir.empty())
      return err(Errc::kInvalidArgument, "it is outside the trial directory " + trial_dir);
    HPCTUNE_ASSIGN(ResolvedPath at, resolve_without_planted_links(path));
    return open_own_at(at.dir.get(), at.name, /*directory=*/false);
  }
  HPCTUNE_ASSIGN(UniqueFd dir, open_trial_dir(run_dir, trial));
  return open_own_file_under(dir.get(), relative);
}

}  // namespace hpctune::workflow
