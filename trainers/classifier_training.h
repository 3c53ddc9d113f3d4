// The classifier training loop shared by the `mlp` and `cnn` trainer kinds, the same code on one
// rank and on every rank of a trainer group (trainer_group.h).
//
// Per trial (the data split from data_seed, every other random choice from ctx.seed, through
// derive_seed streams):
//   1. Choose the images. With `classes: [c0, c1, ...]` only the images of those classes are used,
//      training and test files alike, relabelled 0..k-1 in the order listed (the output layer has k
//      units); a listed class the training file does not have fails the trial (kInvalidArgument
//      naming it). Then carve the validation split out of the (filtered) training file: a
//      permutation seeded by data_seed (the campaign's seed unless the config gives one, the same
//      for every trial, so that trials' predictions line up row by row for ensembles), capped at
//      max_train_samples, of which the first val_fraction are validation (kept in increasing file
//      order). The test file is used only for the final test metrics: the first max_test_samples
//      of its (filtered) images.
//   2. Build the Network (network.h) from the trainer's layer specs, initialise it from the init
//      stream, freeze its first `freeze` layers (more than the layers before the output layer is
//      a trial error) and take a GradientEngine for ctx.group (gradient_engine.h). The weights then
//      come from the first of these that applies:
//        a. with checkpoints on and a trial_dir, <trial_dir>/checkpoint-stage<model_rank>.bin when
//           it holds this run (its run hash, below): a crash resume of the same attempt;
//        b. ctx.resume_from (PBT: a paused trial continued, possibly from another member's
//           weights): a checkpoint file or a directory of checkpoint-stage*.bin (joined). The WHOLE
//           state loads: every layer, the optimizer's buffers (this rank's layers; SGD's velocity
//           starts at 0 or is dropped when momentum moves to or from 0), the epoch and step
//           counters and the last metrics; training goes on from its epoch + 1 to `epochs` with
//           this trial's settings (the new lr, momentum, ...), reporting the global epoch as the
//           step. Any run hash is accepted, but the model must be this one (check_layers: a
//           mismatch names the layer), its epoch at most `epochs`; an unreadable source fails the
//           trial (kInvalidArgument or kIo naming the path), it never trains from scratch. The
//           starting state is written as the trial's checkpoint at once, so the trial directory
//           never holds an earlier interval's weights.
//        c. init_from (transfer): a checkpoint file or a trial directory; every layer but the
//           output layer loads (load_model(skip_output)), the architecture must otherwise be the
//           source's (a mismatch fails the trial naming the layer); the output layer keeps its
//           fresh initialisation even when its size is the source's (the classes mean something
//           else), and the optimizer starts fresh. One line on stderr says what was loaded.
//        d. the fresh initialisation.
//      Groups: every rank reads the source itself and loads the whole model into its network
//      (a pipeline stage then trains its own layers, with its slice of the optimizer state); a
//      failure on any rank fails every rank (agreed through the group), so that no rank waits in
//      a collective. Freeze works in every layout too (made before the engine). Tested on one rank.
//   3. Train `epochs` epochs. An epoch is a permutation of the training indices from a stream
//      reseeded at the epoch's start from (seed, epoch), cut into GLOBAL minibatches of
//      batch_size (the last one may be smaller); every rank gathers the same global batch and the
//      engine takes the rows it needs (data-parallel shards, pipeline micro-batches). Dropout draws
//      from a stream reseeded at every epoch start from (seed, rank, epoch). So an epoch's data
//      order and masks depend only on the trial's seed and the epoch number, not on where the run
//      started: a crash resume, and a PBT interval continued from the trial's own checkpoint with
//      unchanged settings (and lr_schedule: constant, as PBT uses: the cosine plan spans `epochs`,
//      which PBT raises every interval), end bit-identical to the uninterrupted run. An interval
//      continued from another member's checkpoint trains that member's weights and optimizer state
//      on this trial's data order and dropout masks.
//      Transfer refinements: epochs 1..head_epochs update only the output layer (every other block
//      is passed to the optimizer as frozen: no update, no change to its optimizer buffers; LP-FT),
//      and every block outside the output layer updates at lr * body_lr_scale (discriminative
//      rates). Both work on the optimizer's block list only, so every layout runs them unchanged.
//      After each epoch: validation, report {val_loss, val_accuracy, train_loss, train_accuracy,
//      epoch_seconds} at step = epoch (the leader), then the checkpoint (data rank 0 of each stage).
//      Data replicas combine gradients as trainer.sync says (data_parallel.h): the group's
//      allreduce, or with sync: ssp or gradient_compression: 1bit the replica exchange
//      (replica_exchange.h), which ends every epoch with every replica's clocks applied, so the
//      validation, reports and checkpoints above are the same collectives on the same weights.
//   4. Return {val_loss, val_accuracy, train_loss, test_loss, test_accuracy, train_seconds,
//      images_per_second} (plus resumed_epoch when it started from a checkpoint, the trial's own or
//      resume_from's) at step = epochs; with save_predictions and a trial_dir the leader writes
//      val_probs.npy, test_probs.npy, val_indices.npy, val_labels.npy and test_labels.npy (below)
//      and returns them (artifact kinds val_probs, test_probs, val_indices, val_labels,
//      test_labels), and the checkpoints (kind checkpoint), as artifacts. With 2 or more data
//      replicas also sync_bytes_per_step (what this replica sends per step: the ring allreduce's
//      2 (D - 1) / D x 4 bytes a parameter, or the exchange's bytes as posted),
//      sync_staleness_max and sync_staleness_mean (the steps of other replicas' gradients a
//      gradient was computed without; 0 for allreduce) and sync_replica_fraction_min (the smallest
//      fraction of steps a replica contributed a gradient to; 1 unless replicas are dropped).
//      With sync: ssp and a trial_dir, every replica writes sync_clocks_replica<r>.csv: a line
//      "begin,<clock>,<clocks applied>,<ns>" when it starts a clock and "publish,<clock>,-1,<ns>"
//      when its gradient leaves (steady clock), the record that no replica ran more than
//      `staleness` ahead.
//
// Stops: ctx.stop_requested() is polled at every epoch start, every kStopPollBatches minibatches
// and before the test evaluation, the same points on every rank (it is a collective in a group).
// On a stop the loop returns stopped = true with the last reported metrics plus train_seconds.
//
// Divergence: a non-finite global training loss (the engine sums it over the group, so every rank
// sees the same value) or validation loss fails the trial with kFailed, on every rank.
//
// Learning rate (per minibatch t of T = epochs * batches_per_epoch):
//   peak   = lr * (lr_scaling == linear ? batch_size / base_batch_size : 1)   (Goyal et al. 2017)
//   warmup W = round(warmup_epochs * batches_per_epoch) minibatches of Goyal et al.'s gradual warmup:
//          lr_t = start + (peak - start) * t / W for t < W, with start = lr (the small-batch rate)
//          when the scaling raises the rate, else 0 (a plain linear warmup).
//   after  constant: peak; cosine: peak * (1 + cos(pi * (t - W) / (T - W))) / 2.
//
// Checkpoint resume: a checkpoint is used only when every rank of the group has a valid one for
// this trial's configuration (same run hash: network, settings, seed, layout, stage, and with
// resume_from its path and a digest of its contents) at the same epoch; otherwise every rank
// starts afresh (2b-2d above) and a warning naming the reason goes to stderr (a corrupt or
// foreign checkpoint never trains into this trial). The settings include init_from, freeze and
// classes, so a crashed fine-tune resumes its own checkpoint, not init_from again; the digest of
// resume_from's contents makes a trial continued from another source (even one copied to the
// same path) another run, so its checkpoint of an earlier interval never wins over the weights it
// was told to continue from. Resumed and uninterrupted runs end with bit-identical weights for a
// fixed thread count.
//
// Predictions (.npy, NumPy format 1.0, common/npy.h): float32, C order, shape (rows, classes), row
// i the softmax probabilities of validation image i (in increasing training-file index) or of test
// image i (in test-file order, the kept classes only). val_indices.npy: int64, shape (rows,), the
// training-file index of validation image i; the same file for every trial of a campaign (same
// data_seed, val_fraction, max_train_samples and classes). val_labels.npy, test_labels.npy:
// int64, shape (rows,), the label of row i as trained (after the classes relabelling), so that a
// reader scores blends without the dataset and checks that members' rows line up.
//
// Data loading: the minibatch gather copies the batch's rows (random rows of the decoded dataset in
// memory) into one buffer. Measured here: 0.11 ms for 128 x 784 floats, against 3.3 ms for the
// 784-256-10 MLP's step at 128 (38,800 images/s, 2 threads; about 3%) and ~1 s for the default
// CNN's (under 0.1%). A prefetch thread could hide at most those 3%, while competing with the
// compute threads for the same cores, so the gather runs inline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainers/data_parallel.h"
#include "trainers/gradient_engine.h"
#include "trainers/idx_dataset.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

enum class LrSchedule { kConstant, kCosine };
enum class LrScaling { kNone, kLinear };

// Settings common to the classifier kinds; the kind adds its layers.
struct ClassifierSettings {
  std::string data = kDefaultDataDir;
  bool standardize = false;
  double val_fraction = 0.1;
  uint64_t data_seed = 0;         // seeds the validation split (the campaign's seed in a campaign)
  int64_t max_train_samples = 0;  // 0 = the whole training file (before the validation split)
  int64_t max_test_samples = 0;   // 0 = the whole test file
  nn::OptimizerOptions optimizer{nn::OptimizerKind::kSgd, 0.9};
  bool gpu = false;                 // device: gpu (classifier_gpu.h)
  std::string precision = "fp32";   // fp32 | tf32 | bf16 (gpu only)
  bool deterministic = false;       // gpu: deterministic kernels
  double lr = 0.05;
  LrSchedule lr_schedule = LrSchedule::kCosine;
  LrScaling lr_scaling = LrScaling::kNone;
  int64_t base_batch_size = 128;
  double warmup_epochs = 0.0;
  int64_t batch_size = 128;  // the global batch
  int64_t epochs = 10;
  bool checkpoint = true;
  int64_t micro_batches = 0;  // pipeline micro-batches per global batch; 0 = 2 x model ranks
  bool save_predictions = true;
  std::vector<int64_t> classes;  // the classes trained on, relabelled 0..k-1 in this order; empty = all
  std::string init_from;         // a checkpoint file or trial directory to start from (transfer); "" = none
  int64_t freeze = 0;            // layers [0, freeze) are not trained
  int64_t head_epochs = 0;       // epochs 1..head_epochs train only the output layer (LP-FT)
  double body_lr_scale = 1.0;    // the rate of every layer but the output layer: lr * this
  std::vector<nn::LayerSpec> layers;  // hidden layers; the output layer is added by Network::create
  DataParallelSettings parallel;      // trainer.sync and the settings beside it (data_parallel.h)
};

// Reads the settings of the classifier loop (declared in classifier_settings.cpp);
// kInvalidArgument naming the setting.
Status parse_classifier_common(const SettingsReader& r, ClassifierSettings& s);

// The learning rate of minibatch `t` (0-based) of a run of `total` minibatches, as above.
struct LrPlan {
  double start = 0.0;  // at t = 0 when warming up
  double peak = 0.0;
  int64_t warmup = 0;  // minibatches
  int64_t total = 1;
  LrSchedule schedule = LrSchedule::kCosine;
  double at(int64_t t) const noexcept;
};
LrPlan make_lr_plan(const ClassifierSettings& s, int64_t batches_per_epoch) noexcept;

inline constexpr int64_t kStopPollBatches = 16;

// Runs the loop above for trainer kind `kind` (used in messages and the config hash).
Result<TrialResult> train_classifier(const std::string& kind, const ClassifierSettings& s,
                                     const ImageClassificationData& data, const TrialContext& ctx);

// Loads the dataset of `s` (through `cache` when not null) and runs train_classifier().
Result<TrialResult> run_classifier_trial(const std::string& kind, const ClassifierSettings& s, DatasetCache* cache,
                                         const TrialContext& ctx);

}  // namespace hpctune::trainers
