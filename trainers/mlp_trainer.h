// The `mlp` trainer: an MLP trained with minibatch SGD on an IDX image-classification dataset.
//
// Per trial (all randomness from ctx.seed, through derive_seed streams):
//   1. Load the dataset (through the worker's DatasetCache when it has one).
//   2. Carve the validation split out of the training file: a seeded permutation, capped at
//      max_train_samples, of which the first val_fraction are validation. The test file is used
//      only for the final test metrics.
//   3. Train `epochs` epochs over reshuffled minibatches. After each epoch, report
//      {val_loss, val_accuracy, train_loss, train_accuracy, epoch_seconds} at step = epoch.
//   4. Return {val_loss, val_accuracy, test_loss, test_accuracy, train_loss, train_seconds,
//      images_per_second} at step = epochs.
//
// Stop requests are polled every kStopPollBatches minibatches and between epochs; on a stop the
// trainer returns stopped = true with the last reported metrics (plus train_seconds) and skips the
// test evaluation. A non-finite training loss (a learning rate that diverges) fails the trial
// with kFailed rather than reporting NaN. Bad settings are kInvalidArgument naming the setting.
//
// Threads: OpenBLAS's thread count is process-wide; train_mlp() sets it from ctx.threads (0 means
// 1) and calls blas_select_kernels() before training, which is safe because a worker runs one
// trial at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainers/idx_dataset.h"
#include "trainers/mlp.h"
#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

enum class LrSchedule { kConstant, kCosine };

struct MlpSettings {
  std::string data = kDefaultDataDir;
  bool standardize = false;
  double val_fraction = 0.1;
  int64_t max_train_samples = 0;  // 0 = the whole training file (before the validation split)
  int64_t max_test_samples = 0;   // 0 = the whole test file
  std::vector<int64_t> hidden{256};
  Activation activation = Activation::kRelu;
  double dropout = 0.0;
  double lr = 0.05;
  LrSchedule lr_schedule = LrSchedule::kCosine;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  int64_t batch_size = 128;
  int64_t epochs = 10;
};

// The declared settings of the `mlp` kind: names, types, defaults and help.
const std::vector<SettingSpec>& mlp_setting_specs();

// Reads and checks ctx.settings(); kInvalidArgument naming the setting on any bad value or
// unknown key. Does not touch the file system.
Result<MlpSettings> parse_mlp_settings(const nlohmann::json& settings);

// Trains on already-loaded data (steps 2-4 above). Exposed for benchmarks and tests.
Result<TrialResult> train_mlp(const MlpSettings& settings, const ImageClassificationData& data, const TrialContext& ctx);

class MlpTrainer final : public Trainer {
 public:
  static constexpr int64_t kStopPollBatches = 16;

  // `datasets` may be null: each run() then loads its own copy.
  explicit MlpTrainer(std::shared_ptr<DatasetCache> datasets = nullptr) : datasets_(std::move(datasets)) {}
  std::string kind() const override { return "mlp"; }
  Result<TrialResult> run(const TrialContext& ctx) override;

 private:
  std::shared_ptr<DatasetCache> datasets_;
};

}  // namespace hpctune::trainers
