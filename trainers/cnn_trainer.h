// The `cnn` trainer: a convolutional classifier on an IDX image-classification dataset, trained by
// the shared classifier loop (classifier_training.h), with the layers from the `layers` setting
// (parse_layer_specs, layer_spec.h: the parser `hpctune validate` asks too, through the kind's
// value_problem). The default is the Fashion-MNIST benchmark CNN: conv 5x5 32,
// max-pool 2, conv 5x5 64, max-pool 2, dense 1024, then the output layer. Entries of `layers` may
// name blocks (block1..block4, head) that other settings (searched parameters) fill in.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainers/classifier_training.h"
#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

using CnnSettings = ClassifierSettings;

// `layers` with its block names (kCnnBlocks, trainer_settings.h) replaced (kInvalidArgument for another string, or for a block that
// is set but not placed by `layers`).
Result<nlohmann::json> expand_cnn_blocks(const nlohmann::json& layers, const nlohmann::json& settings);

// The default `layers` list, as config JSON (declared in cnn_settings.cpp).
const nlohmann::json& default_cnn_layers();

Result<CnnSettings> parse_cnn_settings(const nlohmann::json& settings);

class CnnTrainer final : public Trainer {
 public:
  explicit CnnTrainer(std::shared_ptr<DatasetCache> datasets = nullptr) : datasets_(std::move(datasets)) {}
  std::string kind() const override { return "cnn"; }
  Result<TrialResult> run(const TrialContext& ctx) override;

 private:
  std::shared_ptr<DatasetCache> datasets_;
};

}  // namespace hpctune::trainers
