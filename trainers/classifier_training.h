// The classifier training loop of the `mlp` and `cnn` trainer kinds, the same code on one rank and
// on every rank of a trainer group (trainer_group.h). train_classifier() drives it:
//   1. the data split (classifier_data.h): the classes kept, the validation rows from data_seed
//      (the same in every trial, so that predictions line up for ensembles), the test rows;
//   2. the network from the init stream, `freeze`, the engine for the group's layout, and the
//      starting state (classifier_start.cpp): the trial's own checkpoint of this run, else
//      resume_from (PBT: the whole state, this trial's settings), else init_from (transfer:
//      every layer but the output), else the fresh initialisation; a failure on any rank fails all;
//   3. `epochs` epochs by the epoch runner chosen once from trainer.sync and the device
//      (classifier_run.h: allreduce, gpu, exchange, downpour, hogwild). An epoch's data order and
//      dropout masks depend only on (seed, epoch), so a crash resume or a PBT interval continued
//      from its own checkpoint ends bit-identical to the uninterrupted run. Epochs 1..head_epochs
//      train only the output layer, and the other layers train at lr * body_lr_scale. After each
//      epoch: validation, the report {val_loss, val_accuracy, train_loss, train_accuracy,
//      epoch_seconds} at step = epoch (the leader), the checkpoint (data rank 0 of each stage);
//   4. the outputs (classifier_outputs.cpp): {val_loss, val_accuracy, train_loss, test_loss,
//      test_accuracy, train_seconds, images_per_second} (+ resumed_epoch, and the runner's sync_*
//      metrics with 2 or more data replicas) at step = epochs; with save_predictions and a
//      trial_dir the leader writes val_probs.npy and test_probs.npy (float32, rows x classes,
//      softmax), val_indices.npy, val_labels.npy and test_labels.npy (int64) as artifacts.
// Stops are polled at every epoch start, every kStopPollBatches minibatches and before the test
// evaluation, at the same points on every rank; a stop returns stopped = true with the last report.
// A non-finite training or validation loss fails the trial (kFailed) on every rank.
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

// The learning rate of minibatch t (0-based) of T = epochs x batches_per_epoch:
//   peak = lr * (lr_scaling == linear ? batch_size / base_batch_size : 1)   (Goyal et al. 2017);
//   W = round(warmup_epochs x batches_per_epoch) minibatches of linear warmup from lr (when the
//   scaling raises the rate) or 0; then constant: peak, or cosine: peak (1 + cos(pi (t - W) / (T - W))) / 2.
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
