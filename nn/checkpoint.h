// Checkpoints of the classifier training loop (classifier_training.h): everything a trial needs to
// continue after its last finished epoch as if it had never stopped.
//
// One file per pipeline stage, <trial_dir>/checkpoint-stage<model_rank>.bin; data rank 0 of each
// stage writes it after every epoch, and every rank reads its stage's file when the trial starts.
//
// File format (little-endian, version 1):
//   header   8 bytes magic "HPTCKPT1" | u32 version | u32 0 | u64 config hash | u64 payload bytes |
//            u32 CRC-32 (zlib) of the payload | u32 0
//   payload  i64 epoch | i64 step | i64 optimizer steps | u32 buffer count | u32 rng count |
//            u64 n + n floats (the parameters) | per buffer: u64 n + n floats |
//            per rng: 4 x u64 words, f64 spare, u8 has_spare | u64 n + n bytes of JSON (meta)
// The config hash identifies the model and its training (network description, settings, seed,
// group layout, stage): a checkpoint of anything else is refused, never loaded into this trial.
//
// Atomicity: write_checkpoint() writes <path>.tmp in the same directory, fsyncs it, renames it over
// <path> and fsyncs the directory, so a crash at any point leaves either the old or the new file
// whole under <path>; a leftover .tmp is ignored (and overwritten by the next write).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/rng.h"
#include "nn/optimizer.h"

namespace hpctune::nn {

inline constexpr uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  uint64_t config_hash = 0;
  int64_t epoch = 0;  // epochs finished
  int64_t step = 0;   // optimizer steps (minibatches) finished
  std::vector<float> params;
  OptimizerState optimizer;
  std::vector<Rng::State> rngs;
  nlohmann::json meta = nlohmann::json::object();  // loop bookkeeping (last metrics, seconds)
};

// <trial_dir>/checkpoint-stage<model_rank>.bin
std::string checkpoint_path(const std::string& trial_dir, int model_rank);

// Writes `c` atomically to `path` (see above). kIo naming the path on failure.
Status write_checkpoint(const std::string& path, const Checkpoint& c);

// Reads `path`: kNotFound when there is no file; kIo when it cannot be read; kInvalidArgument when
// it is not a whole, intact checkpoint of this version (bad magic or version, truncated, checksum
// mismatch, malformed payload). The caller compares config_hash itself.
Result<Checkpoint> read_checkpoint(const std::string& path);

// FNV-1a 64 of a string: the config hash is of a canonical description of the trial's model.
uint64_t fnv1a64(const std::string& text) noexcept;

}  // namespace hpctune::nn
