// Snapshots of a program's checkpoint directory (checkpoint_snapshot.h).
#include "workflow/checkpoint_snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "config/trainer_kinds.h"
#include "workflow/trial_files.h"

namespace hpctune::workflow {

namespace {

// A copy is read-only once written.
Status finish_copy(UniqueFd& out, const std::string& to_shown) {
  if (::fchmod(out.get(), 0400) != 0) return err(Errc::kIo, "cannot make " + to_shown + " read-only: " + std::strerror(errno));
  if (::close(out.release()) != 0) return err(Errc::kIo, "cannot write " + to_shown + ": " + std::strerror(errno));
  return {};
}

// Copies `from` (from its start) to `to` in the kernel: a reflink where the file system shares
// blocks (btrfs, XFS: no data moves), else copy_file_range (no trip through user space; a server-side
// copy on NFS 4.2). False where neither applies (another file system, an old kernel, a pipe): the
// caller copies by hand, from the start again. A checkpoint of gigabytes is copied at every PBT
// interval, so this is most of a pause's cost.
Result<bool> copy_in_kernel(int from, const std::string& shown, int to, const std::string& to_shown) {
  if (::ioctl(to, FICLONE, from) == 0) return true;
  off_t in = 0, out = 0;
  while (true) {
    const ssize_t n = ::copy_file_range(from, &in, to, &out, std::size_t{1} << 30, 0);
    if (n > 0) continue;
    if (n == 0) return true;
    if (errno == EINTR) continue;
    if (in == 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL || errno == EBADF))
      return false;
    return err(Errc::kIo, "cannot copy " + shown + " to " + to_shown + ": " + std::strerror(errno));
  }
}

}  // namespace

Status copy_file_into(int from, const std::string& shown, int to_dir, const std::string& name, const std::string& to_shown) {
  UniqueFd out(::openat(to_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) return err(Errc::kIo, "cannot create " + to_shown + ": " + std::strerror(errno));
  HPCTUNE_ASSIGN(const bool copied, copy_in_kernel(from, shown, out.get(), to_shown));
  if (copied) return finish_copy(out, to_shown);
  char buf[1 << 16];
  off_t offset = 0;
  while (true) {
    const ssize_t n = ::pread(from, buf, sizeof buf, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return err(Errc::kIo, "cannot read " + shown + ": " + std::strerror(errno));
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out.get(), buf + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return err(Errc::kIo, "cannot write " + to_shown + ": " + std::strerror(errno));
      done += w;
    }
    offset += n;
  }
  return finish_copy(out, to_shown);
}

namespace {

// The names in the open directory `dir_fd`, sorted, without . and ..; at most `room` of them.
Result<std::vector<std::string>> names_in(int dir_fd, const std::string& shown, std::size_t room) {
  const int listed = ::dup(dir_fd);
  DIR* d = listed < 0 ? nullptr : ::fdopendir(listed);
  if (d == nullptr) {
    const int e = errno;
    if (listed >= 0) ::close(listed);
    return err(Errc::kIo, "cannot list " + shown + ": " + std::strerror(e));
  }
  ::rewinddir(d);  // the duplicate shares its offset with dir_fd
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (names.size() >= room) {
      ::closedir(d);
      return err(Errc::kInvalidArgument, shown + " holds more than " + std::to_string(kMaxCheckpointEntries) +
                                             " files and directories in all");
    }
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// A symbolic link of the program's that stays inside the directory it is in (a relative target
// without a '..' component: `last.ckpt -> epoch=5.ckpt`, as PyTorch Lightning's save_last: link
// writes) is made again as the same link in the copy, never followed: whatever it names is copied
// (or refused) as its own entry. Any other link (absolute, through '..', another user's) is refused.
Status copy_link(int from_dir, const std::string& name, const std::string& from_name, const struct stat& st, int to_dir,
                 const std::string& to_name) {
  if (st.st_uid != ::geteuid()) return err(Errc::kInvalidArgument, from_name + ": a symbolic link of another user: not followed");
  char target[4096];
  const ssize_t n = ::readlinkat(from_dir, name.c_str(), target, sizeof target);
  if (n < 0) return err(Errc::kIo, "cannot read the link " + from_name + ": " + std::strerror(errno));
  if (static_cast<std::size_t>(n) >= sizeof target) return err(Errc::kInvalidArgument, from_name + ": a symbolic link too long");
  const std::string to(target, static_cast<std::size_t>(n));
  bool inside = !to.empty() && to.front() != '/';
  for (const auto& part : std::filesystem::path(to)) inside = inside && part != "..";
  if (!inside)
    return err(Errc::kInvalidArgument, from_name + " is a symbolic link to '" + to + "', out of the checkpoint " +
                                           "directory (an absolute target or one through '..'): not followed; a link " +
                                           "that stays inside it (a relative target without '..') is kept");
  if (::symlinkat(to.c_str(), to_dir, name.c_str()) != 0) return err(Errc::kIo, "cannot create " + to_name + ": " + std::strerror(errno));
  return {};
}

Status copy_dir(int from_dir, const std::string& shown, int to_dir, const std::string& to_shown, int depth,
                std::size_t& entries) {
  HPCTUNE_ASSIGN(std::vector<std::string> names, names_in(from_dir, shown, kMaxCheckpointEntries - entries));
  for (const std::string& name : names) {
    const std::string from_name = shown + "/" + name, to_name = to_shown + "/" + name;
    if (++entries > kMaxCheckpointEntries)
      return err(Errc::kInvalidArgument, "the checkpoint holds more than " + std::to_string(kMaxCheckpointEntries) +
                                             " files and directories in all (at " + from_name + ")");
    struct stat st {};
    if (::fstatat(from_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return err(Errc::kIo, "cannot stat " + from_name + ": " + std::strerror(errno));
    if (S_ISLNK(st.st_mode)) {
      HPCTUNE_TRY(copy_link(from_dir, name, from_name, st, to_dir, to_name));
      continue;
    }
    const bool directory = S_ISDIR(st.st_mode);
    // Refuses a FIFO, a device or another user's entry (checked again on the open file).
    auto opened = open_own_at(from_dir, name, directory);
    if (!opened.ok()) return err(Errc::kInvalidArgument, from_name + ": " + opened.error().message());
    if (!directory) {
      HPCTUNE_TRY(copy_file_into(opened.value().get(), from_name, to_dir, name, to_name));
      continue;
    }
    if (depth >= kMaxCheckpointDepth)
      return err(Errc::kInvalidArgument, from_name + " is more than " + std::to_string(kMaxCheckpointDepth) +
                                             " directories deep in the checkpoint");
    if (::mkdirat(to_dir, name.c_str(), 0700) != 0) return err(Errc::kIo, "cannot create " + to_name + ": " + std::strerror(errno));
    UniqueFd sub(::openat(to_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) return err(Errc::kIo, "cannot open " + to_name + ": " + std::strerror(errno));
    HPCTUNE_TRY(copy_dir(opened.value().get(), from_name, sub.get(), to_name, depth + 1, entries));
    if (::fchmod(sub.get(), 0500) != 0) return err(Errc::kIo, "cannot make " + to_name + " read-only: " + std::strerror(errno));
  }
  return {};
}

// Removes what the open directory holds; its subdirectories are made writable first (a snapshot's
// are read-only). Links are removed, never followed.
Status clear_at(int dir_fd, const std::string& shown, int depth, std::size_t& entries) {
  HPCTUNE_ASSIGN(std::vector<std::string> names, names_in(dir_fd, shown, kMaxCheckpointEntries - entries));
  for (const std::string& name : names) {
    const std::string path = shown + "/" + name;
    if (++entries > kMaxCheckpointEntries)
      return err(Errc::kInvalidArgument, "more than " + std::to_string(kMaxCheckpointEntries) + " entries to remove (at " + path + ")");
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return err(Errc::kIo, "cannot stat " + path + ": " + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxCheckpointDepth)
        return err(Errc::kInvalidArgument, path + " is more than " + std::to_string(kMaxCheckpointDepth) + " directories deep");
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) return err(Errc::kIo, "cannot open " + path + ": " + std::strerror(errno));
      if ((st.st_mode & S_IWUSR) == 0 && ::fchmod(sub.get(), 0700) != 0)
        return err(Errc::kIo, "cannot make " + path + " writable to remove it: " + std::strerror(errno));
      HPCTUNE_TRY(clear_at(sub.get(), path, depth + 1, entries));
      if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        return err(Errc::kIo, "cannot remove " + path + ": " + std::strerror(errno));
    } else if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return err(Errc::kIo, "cannot remove " + path + ": " + std::strerror(errno));
    }
  }
  return {};
}

}  // namespace

Result<bool> directory_has_entries(int dir_fd, const std::string& shown) {
  HPCTUNE_ASSIGN(std::vector<std::string> names, names_in(dir_fd, shown, kMaxCheckpointEntries));
  return !names.empty();
}

Status copy_checkpoint_tree(int from_dir, const std::string& shown, int dest_dir, const std::string& name,
                            const std::string& dest) {
  const std::string tmp = name + ".tmp", tmp_shown = dest + ".tmp";
  HPCTUNE_TRY(remove_tree_at(dest_dir, tmp, tmp_shown));  // a copy cut short by a crash
  if (::mkdirat(dest_dir, tmp.c_str(), 0700) != 0) return err(Errc::kIo, "cannot create " + tmp_shown + ": " + std::strerror(errno));
  auto top = open_own_at(dest_dir, tmp, /*directory=*/true);
  if (!top.ok()) return err(top.error().code(), tmp_shown + ": " + top.error().message());
  std::size_t entries = 0;
  HPCTUNE_TRY(copy_dir(from_dir, shown, top.value().get(), tmp_shown, 0, entries));
  if (::fchmod(top.value().get(), 0500) != 0) return err(Errc::kIo, "cannot make " + tmp_shown + " read-only: " + std::strerror(errno));
  // Same parent: renaming a read-only directory needs no write permission on it.
  if (::renameat(dest_dir, tmp.c_str(), dest_dir, name.c_str()) != 0)
    return err(Errc::kIo, "cannot rename " + tmp_shown + " to " + dest + ": " + std::strerror(errno));
  return {};
}

Status clear_directory(int dir_fd, const std::string& shown) {
  std::size_t entries = 0;
  return clear_at(dir_fd, shown, 0, entries);
}

Status remove_tree_at(int dir_fd, const std::string& name, const std::string& shown) {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return err(Errc::kIo, "cannot stat " + shown + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT)
      return err(Errc::kIo, "cannot remove " + shown + ": " + std::strerror(errno));
    return {};
  }
  {
    UniqueFd dir(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return err(Errc::kIo, "cannot open " + shown + ": " + std::strerror(errno));
    if ((st.st_mode & S_IWUSR) == 0 && ::fchmod(dir.get(), 0700) != 0)
      return err(Errc::kIo, "cannot make " + shown + " writable to remove it: " + std::strerror(errno));
    HPCTUNE_TRY(clear_directory(dir.get(), shown));
  }
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    return err(Errc::kIo, "cannot remove " + shown + ": " + std::strerror(errno));
  return {};
}

Status remove_snapshot_tree(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::filesystem::path p(trimmed);
  const std::string parent = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") return err(Errc::kInvalidArgument, "'" + path + "' names no entry to remove");
  UniqueFd up(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!up.valid()) {
    if (errno == ENOENT) return {};
    return err(Errc::kIo, "cannot open " + parent + ": " + std::strerror(errno));
  }
  return remove_tree_at(up.get(), name, trimmed);
}

namespace {

namespace fs = std::filesystem;

// Where a snapshot `dest` goes: below <db>.trials (the directory that holds `trial_dir`), every
// directory on the way made like the trial directories or opened, none through a link (a trial's
// own program can write in its directory and plant one at <trial>/pbt); the open directory that
// holds the snapshot and its name there.
struct SnapshotPlace {
  UniqueFd dir;
  std::string name;
};

Result<SnapshotPlace> snapshot_place(const std::string& trial_dir, const std::string& dest) {
  const std::string run_dir = fs::path(trial_dir).parent_path().string();
  const std::vector<std::string> parts = plain_components(relative_to_trial(run_dir, dest));
  if (parts.empty()) return err(Errc::kInvalidArgument, "it is not below " + run_dir);
  HPCTUNE_ASSIGN(UniqueFd at, open_run_dir(run_dir));
  std::string shown = run_dir;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    shown += "/" + parts[i];
    auto next = make_own_directory_at(at.get(), parts[i]);
    if (!next.ok()) return err(next.error().code(), shown + ": " + next.error().message());
    at = std::move(next).value();
  }
  return SnapshotPlace{std::move(at), parts.back()};
}

// Whether the snapshot at `place` was made before: a directory of the user's own is; nothing there
// is not; a link (never followed) or anything else is an error naming it.
Result<bool> snapshot_made_before(const SnapshotPlace& place, const std::string& dest) {
  struct stat st {};
  if (::fstatat(place.dir.get(), place.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return err(Errc::kIo, "cannot stat " + dest + ": " + std::strerror(errno));
  }
  auto there = open_own_at(place.dir.get(), place.name, /*directory=*/true);
  if (!there.ok()) return err(Errc::kInvalidArgument, there.error().message());
  return true;
}

// The place of the snapshot `dest` and whether it was made before; kFailed naming what is refused.
Result<std::pair<SnapshotPlace, bool>> find_snapshot(const std::string& trial_dir, const std::string& dest,
                                                     const std::string& what) {
  auto place = snapshot_place(trial_dir, dest);
  if (!place.ok()) return err(Errc::kFailed, what + "its snapshot " + dest + " is refused: " + place.error().message());
  auto made = snapshot_made_before(place.value(), dest);
  if (!made.ok()) return err(Errc::kFailed, what + "its snapshot " + dest + " is refused: " + made.error().message());
  return std::make_pair(std::move(place).value(), made.value());
}

// The checkpoint files a trainer left in `trial_dir` (<run_dir>/<trial>), sorted, each opened
// without following a link as the user's own regular file (trial_files.h): a link planted there,
// a FIFO or another user's file is an error naming it, never copied into a snapshot that another
// member then trains from.
struct CheckpointFiles {
  UniqueFd dir;
  std::vector<std::pair<std::string, UniqueFd>> files;  // by name
};

Result<CheckpointFiles> checkpoint_files(const std::string& trial_dir, const std::string& what) {
  const fs::path td(trial_dir);
  CheckpointFiles out;
  {
    auto dir = open_trial_dir(td.parent_path().string(), td.filename().string());
    if (!dir.ok()) return err(Errc::kFailed, what + "its directory " + trial_dir + " is refused: " + dir.error().message());
    out.dir = std::move(dir).value();
  }
  const int listed = ::dup(out.dir.get());
  DIR* d = listed < 0 ? nullptr : ::fdopendir(listed);
  if (d == nullptr) {
    if (listed >= 0) ::close(listed);
    return err(Errc::kIo, what + "cannot list its directory " + trial_dir + ": " + std::strerror(errno));
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (is_checkpoint_file(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    auto fd = open_own_at(out.dir.get(), name, /*directory=*/false);
    if (!fd.ok()) {
      return err(Errc::kFailed, what + "its checkpoint " + trial_dir + "/" + name + " is refused: " + fd.error().message());
    }
    out.files.emplace_back(name, std::move(fd).value());
  }
  return out;
}

// Moves the checkpoint of `trial_dir` into the snapshot `dest`, whole or not at all: copied into a
// temporary directory, renamed at the end, and only then removed from the trial's directory. A
// `dest` that exists was made before (by this master, or by one that died before recording the
// pause) from the same files, and is kept as it is.
//
// Why the trial's own files go: the trainer prefers a trial's own checkpoint of the same run over
// resume_from (its crash-resume), and an exploited member's new params may equal the ones it had
// (a space of choices, a source one interval behind): its old weights would then win over the
// source's. With none left, the next attempt starts from resume_from; it writes its own again as
// it trains, for its own crash-resume.
//
// A trainer whose checkpoint is a directory of the program's own files (`subdir`, the catalog's
// checkpoints.directory: a command's <trial_dir>/checkpoint) has the whole tree copied the same
// way (checkpoint_snapshot.h: read-only, links and others' files refused), then emptied.
Status make_tree_snapshot(const std::string& trial_dir, const std::string& subdir, const std::string& dest,
                          const std::string& what) {
  const fs::path td(trial_dir);
  const std::string shown = trial_dir + "/" + subdir;
  auto dir = open_trial_dir(td.parent_path().string(), td.filename().string());
  if (!dir.ok()) return err(Errc::kFailed, what + "its directory " + trial_dir + " is refused: " + dir.error().message());
  auto opened = open_own_at(dir.value().get(), subdir, /*directory=*/true);
  if (!opened.ok() && opened.error().code() != Errc::kNotFound)
    return err(Errc::kFailed, what + "its checkpoint directory " + shown + " is refused: " + opened.error().message());
  bool saved = false;
  if (opened.ok()) {
    HPCTUNE_ASSIGN(saved, directory_has_entries(opened.value().get(), shown));
  }
  HPCTUNE_ASSIGN(auto found, find_snapshot(trial_dir, dest, what));
  if (!found.second) {
    if (!saved) {
      return err(Errc::kFailed, what + "its program saved nothing in " + shown +
                                    " (HPCTUNE_CHECKPOINT_DIR) before it reported the step: this stage needs a trainer "
                                    "that saves checkpoints (" + config::checkpoint_writers() + ")");
    }
    if (auto st = copy_checkpoint_tree(opened.value().get(), shown, found.first.dir.get(), found.first.name, dest); !st.ok())
      return err(st.error().code() == Errc::kInvalidArgument ? Errc::kFailed : Errc::kIo,
                 what + "cannot snapshot its checkpoint into " + dest + ": " + st.error().message());
  }
  if (saved) {
    if (auto st = clear_directory(opened.value().get(), shown); !st.ok())
      return err(Errc::kIo, what + "cannot empty " + shown + " (kept in " + dest + "): " + st.error().message());
  }
  return {};
}

}  // namespace

Status snapshot_trial_checkpoint(const std::string& trial_dir, const std::string& subdir, const std::string& dest,
                                 const std::string& what) {
  if (!subdir.empty()) return make_tree_snapshot(trial_dir, subdir, dest, what);
  HPCTUNE_ASSIGN(CheckpointFiles found, checkpoint_files(trial_dir, what));
  HPCTUNE_ASSIGN(auto place, find_snapshot(trial_dir, dest, what));
  if (!place.second) {
    if (found.files.empty()) {
      return err(Errc::kFailed, what + "its trainer left no checkpoint-stage*.bin in " + trial_dir +
                                    ": this stage needs a trainer that saves checkpoints (" +
                                    config::checkpoint_writers() + ")");
    }
    const int at = place.first.dir.get();
    const std::string tmp = place.first.name + ".tmp", tmp_shown = dest + ".tmp";
    // A copy cut short by a crash goes; the new one is made like the trial directories (the modes
    // of storage_access), never as the umask says: a snapshot that others could write into would
    // hand the next trial their checkpoint.
    if (Status removed = remove_tree_at(at, tmp, tmp_shown); !removed.ok())
      return err(Errc::kIo, what + "cannot remove " + tmp_shown + ": " + removed.error().message());
    auto tmp_dir = make_own_directory_at(at, tmp, /*fresh=*/true);
    if (!tmp_dir.ok()) return err(Errc::kIo, what + "cannot create " + tmp_shown + ": " + tmp_dir.error().message());
    for (const auto& [name, fd] : found.files) {
      const std::string shown = trial_dir + "/" + name;
      if (auto st = copy_file_into(fd.get(), shown, tmp_dir.value().get(), name, tmp_shown + "/" + name); !st.ok())
        return err(Errc::kIo, what + "cannot copy " + shown + " into " + tmp_shown + ": " + st.error().message());
    }
    if (::renameat(at, tmp.c_str(), at, place.first.name.c_str()) != 0)
      return err(Errc::kIo, what + "cannot rename " + tmp_shown + " to " + dest + ": " + std::strerror(errno));
  }
  for (const auto& [name, fd] : found.files) {
    if (::unlinkat(found.dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
      return err(Errc::kIo, what + "cannot remove " + trial_dir + "/" + name + " (kept in " + dest + "): " +
                                std::strerror(errno));
  }
  return {};
}


bool snapshot_present(const std::string& trial_dir, const std::string& dest) {
  const std::string run_dir = fs::path(trial_dir).parent_path().string();
  const std::vector<std::string> parts = plain_components(relative_to_trial(run_dir, dest));
  if (parts.empty()) return false;
  auto at = open_run_dir(run_dir);
  for (const std::string& part : parts) {
    if (!at.ok()) return false;
    at = open_own_at(at.value().get(), part, /*directory=*/true);
  }
  return at.ok();
}

}  // namespace hpctune::workflow
