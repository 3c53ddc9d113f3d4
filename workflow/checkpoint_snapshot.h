// Snapshots of a checkpoint directory that a trainer's program wrote (a command trainer's
// <trial_dir>/checkpoint, its HPCTUNE_CHECKPOINT_DIR; the catalog's checkpoints.directory): the
// whole tree, whatever files the program likes, copied for a stage that later starts other attempts
// from it (a pbt member's snapshot; a transfer stage's source).
//
// A snapshot exists whole or not at all: the tree is copied into `<dest>.tmp`, made read-only
// (files 0400, directories 0500: an attempt resuming from it cannot change it for the next one),
// then renamed to `dest`. A `<dest>.tmp` left by a master killed mid-copy is removed and the copy
// made again. The source is walked with openat() one entry at a time: a FIFO, a device, another
// user's file or directory, and a symbolic link that may leave the directory it is in (an absolute
// target, or one through '..') are refused naming them (never followed, never waited on); a link
// that stays inside (`last.ckpt -> epoch=5.ckpt`) is made again as a link. The walk is bounded
// (kMaxCheckpointDepth levels, kMaxCheckpointEntries entries).
//
// A snapshot's directories are read-only: `chmod -R u+w` before `rm -rf` of a campaign's trial
// directories (remove_snapshot_tree does it).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/safe_open.h"

namespace hpctune::workflow {

inline constexpr int kMaxCheckpointDepth = 16;            // directories below the checkpoint directory
inline constexpr std::size_t kMaxCheckpointEntries = 100'000;  // files and directories in all

// Whether `name` is one of the built-in trainers' checkpoint files in a trial's directory
// (checkpoint-stage<k>.bin, nn/checkpoint.h: one per model stage), the checkpoint of a kind
// without a checkpoints.directory.
inline bool is_checkpoint_file(std::string_view name) {
  return name.starts_with("checkpoint-stage") && name.ends_with(".bin");
}

// Whether the directory `dir_fd` holds anything (besides . and ..); an error when it cannot be listed.
Result<bool> directory_has_entries(int dir_fd, const std::string& shown);

// Copies the tree under the open directory `from_dir` (shown as `shown` in messages) into the new
// snapshot `name` of the open directory `dest_dir` (shown as `dest`), whole or not at all (see
// above; `name`.tmp is made there, never through a link). kInvalidArgument names an entry that is
// refused (a link, a FIFO, another user's, too deep, too many); kIo a copy that failed. `name` must
// not exist.
Status copy_checkpoint_tree(int from_dir, const std::string& shown, int dest_dir, const std::string& name,
                            const std::string& dest);

// Copies the open file `from` (read from its start; shown as `shown`) into the new file `name` of
// the open directory `to_dir` (shown as `to_shown`), never through a link, and makes it read-only
// (0400). kIo when it cannot.
Status copy_file_into(int from, const std::string& shown, int to_dir, const std::string& name, const std::string& to_shown);

// Removes everything inside the open directory `dir_fd` (not the directory itself), links as links
// (never followed); bounded as the copy is.
Status clear_directory(int dir_fd, const std::string& shown);

// Moves the checkpoint a trainer left in `trial_dir` (<run_dir>/<trial>) into the new snapshot `dest`,
// whole or not at all, then removes it from the trial's directory (the next attempt starts from
// its resume_from, never from a checkpoint the trial left before). `dest` must be below <db>.trials
// (the directory of `trial_dir`): the directories on its way are made or opened there without
// following a link, and a link at `dest`, its `.tmp` or any directory on the way (a trial's program
// can plant one in its directory) is refused naming it, or removed as a link (the `.tmp`), never
// followed: nothing outside <db>.trials is written. `subdir` is the catalog's
// checkpoints.directory (a command's "checkpoint": that tree is copied, checkpoint_snapshot.h
// rules), "" for the built-ins' checkpoint-stage*.bin files. A `dest` that exists was made before
// from the same files and is kept. Messages start with `what` ("pbt: trial 3 at step 4: ");
// kFailed when there is no checkpoint or an entry is refused, kIo when a copy fails.
Status snapshot_trial_checkpoint(const std::string& trial_dir, const std::string& subdir, const std::string& dest,
                                 const std::string& what);

// Whether the snapshot `dest` of the trial at `trial_dir` is there: a directory of the user's own
// below <db>.trials (the directory of `trial_dir`), reached without following a link (one planted
// at <trial>/pbt or at the snapshot's name says it is not).
bool snapshot_present(const std::string& trial_dir, const std::string& dest);

// Removes the entry `name` of the open directory `dir_fd` (shown as `shown`) and everything under
// it, read-only directories of a snapshot included; one that does not exist is fine. A link is
// removed as a link, never followed.
Status remove_tree_at(int dir_fd, const std::string& name, const std::string& shown);

// remove_tree_at for `path`, whose directory is opened as named (the caller's own path).
Status remove_snapshot_tree(const std::string& path);

}  // namespace hpctune::workflow
