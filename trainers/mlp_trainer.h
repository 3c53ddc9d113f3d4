// The `mlp` trainer: a multilayer perceptron classifier on an IDX image-classification dataset,
// trained by the shared classifier loop (classifier_training.h: data split, epochs, reports, stop
// requests, optimizers, lr schedule, checkpoints, predictions, one rank or a trainer group).
//
// The network is the hidden dense layers (`hidden` widths, `activation`), each followed by dropout
// when `dropout` > 0, then the output layer (network.h). Bad settings are kInvalidArgument naming
// the setting; an unknown key is refused with a "did you mean".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainers/classifier_training.h"
#include "trainers/idx_dataset.h"
#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

struct MlpSettings : ClassifierSettings {
  std::vector<int64_t> hidden{256};
  std::string activation = "relu";  // relu, tanh or sigmoid
  double dropout = 0.0;
};

// Reads and checks ctx.settings(); kInvalidArgument naming the setting on any bad value or
// unknown key. Fills ClassifierSettings::layers from hidden/activation/dropout. Does not touch the
// file system.
Result<MlpSettings> parse_mlp_settings(const nlohmann::json& settings);

// Trains on already-loaded data. Exposed for benchmarks and tests.
Result<TrialResult> train_mlp(const MlpSettings& settings, const ImageClassificationData& data, const TrialContext& ctx);

class MlpTrainer final : public Trainer {
 public:
  static constexpr int64_t kStopPollBatches = trainers::kStopPollBatches;

  // `datasets` may be null: each run() then loads its own copy.
  explicit MlpTrainer(std::shared_ptr<DatasetCache> datasets = nullptr) : datasets_(std::move(datasets)) {}
  std::string kind() const override { return "mlp"; }
  Result<TrialResult> run(const TrialContext& ctx) override;

 private:
  std::shared_ptr<DatasetCache> datasets_;
};

}  // namespace hpctune::trainers
