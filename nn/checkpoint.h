// Checkpoints: the classifier training loop's resume points (classifier_training.h), and the
// model files that transfer learning and population-based training load into other trials.
//
// One file per pipeline stage, <trial_dir>/checkpoint-stage<model_rank>.bin; data rank 0 of each
// stage writes it after every epoch, and every rank reads its stage's file when the trial starts.
// A stage's file holds the parameters of its layers [first_layer, last_layer) only;
// read_trial_checkpoint() joins a trial's stage files into one checkpoint of the whole model (the
// single-file export, independent of the rank layout that wrote it), and load_layers() /
// load_model() split any checkpoint by layer into a network, whatever layout will train it.
//
// Two identities:
//   run hash    (run_hash) everything that shapes one attempt's trajectory: network, settings,
//               seed, group layout, stage. A trial resumes only from a checkpoint with its own run
//               hash: another trial's or another layout's checkpoint never continues this run.
//   model hash  (model_hash) the architecture alone: the input shape and, per layer, its kind,
//               structure and parameter shapes (model_identity()). Not the settings, the seed,
//               the rank layout, nor a dropout rate (a training setting without parameters, which
//               PBT may change). A checkpoint of another trial loads when its model is the same;
//               a different model is refused naming the first mismatching layer.
// The layer manifest (Manifest) written in every file says what each parameter means: per layer,
// in order, its kind, name (Layer::describe()) and parameter block shapes.
//
// File format (little-endian, version 2; version 1 files, without a manifest, are still read and
// can still resume their own trial, but load into no other):
//   header   8 bytes magic "HPTCKPT1" | u32 version | u32 0 | u64 run hash | u64 payload bytes |
//            u32 CRC-32 (zlib) of the payload | u32 0
//   payload  i64 epoch | i64 step | i64 optimizer steps | u32 buffer count | u32 rng count |
//            u64 n + n floats (the parameters) | per buffer: u64 n + n floats |
//            per rng: 4 x u64 words, f64 spare, u8 has_spare | u64 n + n bytes of JSON (meta) |
//            (version 2) u64 model hash | u64 n + n bytes of JSON (the manifest:
//            {"input": [c, h, w], "layers": [{"kind", "name", "shapes": [[...], ...]}, ...],
//             "first": first_layer, "last": last_layer}; an empty object without a manifest)
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
#include "nn/network.h"
#include "nn/optimizer.h"

namespace hpctune::nn {

inline constexpr uint32_t kCheckpointVersion = 2;
// The most payload bytes read_checkpoint() reads (and allocates): 16 GiB, four billion parameters
// with their optimizer state, far beyond the models the built-in trainers train on CPUs. A larger
// header, or a file larger or smaller than its header says, is refused before anything of its size
// is allocated.
inline constexpr uint64_t kMaxCheckpointPayloadBytes = uint64_t{1} << 34;

// One layer of a model as a manifest records it.
struct LayerEntry {
  std::string kind;  // Layer::kind(): dense, conv, maxpool, dropout
  std::string name;  // Layer::describe(): "conv 5x5 32 same relu"
  std::vector<std::vector<int64_t>> shapes;  // Layer::param_shapes(), one per parameter block
  size_t num_params() const noexcept;
  bool operator==(const LayerEntry&) const = default;
};

// The architecture of a model: every layer in order, the output layer last.
struct Manifest {
  Shape input;
  std::vector<LayerEntry> layers;
  bool empty() const noexcept { return layers.empty(); }
  // The parameter count of layers [first, last) (clamped to the layers there are).
  size_t num_params(size_t first, size_t last) const noexcept;
};

// The manifest of `net`'s layers.
Manifest manifest_of(const Network& net);
// The model identity (see above); equal for two networks exactly when their parameters mean the
// same thing (up to FNV-1a collisions).
uint64_t model_identity(const Manifest& m);

struct Checkpoint {
  uint64_t run_hash = 0;    // the run identity; 0 in exports (they resume no run)
  uint64_t model_hash = 0;  // model_identity(manifest), set by write_checkpoint(); 0 without a manifest
  Manifest manifest;        // the whole model (empty in version 1 files)
  size_t first_layer = 0;   // params (and each optimizer buffer) hold layers [first_layer, last_layer)
  size_t last_layer = 0;    //   of the manifest
  int64_t epoch = 0;  // epochs finished
  int64_t step = 0;   // optimizer steps (minibatches) finished
  std::vector<float> params;
  OptimizerState optimizer;
  std::vector<Rng::State> rngs;
  nlohmann::json meta = nlohmann::json::object();  // loop bookkeeping (last metrics, seconds)
};

// A checkpoint of layers [first, last) of `net`, with its manifest and those layers' parameters
// (epoch, step, optimizer and rngs left for the caller).
Checkpoint checkpoint_of(const Network& net, size_t first, size_t last);

// <trial_dir>/checkpoint-stage<model_rank>.bin
std::string checkpoint_path(const std::string& trial_dir, int model_rank);

// Writes `c` atomically to `path` (see above). kIo naming the path on failure; kInvalidArgument
// when a manifest is given and the parameters or optimizer buffers do not hold exactly the
// manifest's layers [first_layer, last_layer).
Status write_checkpoint(const std::string& path, const Checkpoint& c);

// Reads `path`: kNotFound when there is no file; kIo when it cannot be read; kInvalidArgument when
// it is not a whole, intact checkpoint of a known version (bad magic or version, truncated or
// padded, a payload over kMaxCheckpointPayloadBytes, checksum mismatch, malformed payload or
// manifest, a model hash that is not its manifest's). The caller compares run_hash (to resume) or
// the manifest (to load, below) itself.
Result<Checkpoint> read_checkpoint(const std::string& path);
// The same from a file already open (`fd`, read from offset 0 with pread, not closed), named `path`
// in messages; what is not a regular file is kInvalidArgument.
Result<Checkpoint> read_checkpoint(int fd, const std::string& path);

// ---- layout independence ----
// One checkpoint of the whole model from the stage checkpoints of one pipeline (any order): the
// same model and epoch, layer ranges that tile [0, layers) (a part beyond the tiling is ignored:
// a stale file of an earlier attempt's wider pipeline). Parameters and optimizer buffers are
// joined by layer; epoch, step, rngs and meta are the first stage's; run_hash is 0.
// kInvalidArgument naming what does not fit.
Result<Checkpoint> merge_checkpoints(std::vector<Checkpoint> parts);
// Layers [first, last) of `c` (which must hold them) as a checkpoint of its own, optimizer buffers
// included: a whole-model file cut into a pipeline stage's. run_hash is 0.
Result<Checkpoint> slice_checkpoint(const Checkpoint& c, size_t first, size_t last);
// Reads <trial_dir>/checkpoint-stage0.bin, -stage1.bin, ... and merges them: the trial's model,
// whatever layout wrote it. kNotFound when the trial has no checkpoint; a stage file that is a
// symbolic link (or not a regular file) is kInvalidArgument, never followed.
Result<Checkpoint> read_trial_checkpoint(const std::string& trial_dir);
// The same from the trial directory open at `dir_fd` (named `trial_dir` in messages).
Result<Checkpoint> read_trial_checkpoint_at(int dir_fd, const std::string& trial_dir);
// The checkpoint `path` names below the directory `root` (a trial directory of stage files, or a
// checkpoint file), opened one component at a time from `root` (opened as named) without following
// a symbolic link, every directory on the way and the last one the user's own: a link swapped in
// after a check of `path` is refused (kInvalidArgument naming it) when the file is opened, not
// followed. A `path` that is not below `root`, or holds "." or "..", is kInvalidArgument.
Result<Checkpoint> read_checkpoint_under(const std::string& root, const std::string& path);
// read_trial_checkpoint(trial_dir) written atomically to `path`: the single-file export. A trial
// that is still training rewrites its stage files after every epoch, each atomically; stages caught
// at different epochs fail the merge (kInvalidArgument) and the caller tries again. The file is a
// snapshot: what a PBT exploit copies stays what it was however the source trains on.
Status export_checkpoint(const std::string& trial_dir, const std::string& path);

// ---- loading into a network (surgery) ----
// Ok when layers [first, first + count) of `expected` and `found` agree (kind, name, parameter
// shapes); otherwise kInvalidArgument naming the first layer that does not, by index and name,
// with the expected and found shapes.
Status check_layers(const Manifest& expected, const Manifest& found, size_t first, size_t count);
// Copies the parameters of layers [first, first + count) from `c` into the same layers of `net`,
// after check_layers() against net's manifest. `c` must hold those layers (a whole-model
// checkpoint holds every layer; a stage's file only its own). Nothing is written on an error.
Status load_layers(Network& net, const Checkpoint& c, size_t first, size_t count);
// The whole model: the input shape and every layer must match (the same model identity), then
// every layer is loaded. With skip_output, the output layer is neither compared nor loaded (a
// head of another size, Network::replace_output_layer()), nor is the layer count beyond it.
Status load_model(Network& net, const Checkpoint& c, bool skip_output = false);

// FNV-1a 64 of a string: the run and model hashes are of canonical descriptions.
uint64_t fnv1a64(const std::string& text) noexcept;

}  // namespace hpctune::nn
