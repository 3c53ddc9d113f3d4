// What a stage needs from the trainers of the stages it reads (an ensemble their predictions, a
// transfer their checkpoints, a pbt stage its own trainer's checkpoints and step setting), as the
// trainer catalog declares them (trainers/trainer_settings.h), and the messages that say what is
// missing. Internal to hpctune_config: not part of the public API (config.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace hpctune::config {

// The kinds of the catalog that write `what` (predictions or checkpoints): "mlp and cnn".
std::string writers_of(std::string_view what);

// Why the trainer of stage `input` does not give a `consumer` stage the `what` it needs
// (trainers::kProvidesPredictions or kProvidesCheckpoints), naming the key that says so; nullopt
// when it does. A kind with a provides_setting (command) declares it there: an ensemble reads the
// program's prediction files, a transfer and a pbt stage its checkpoint directory. A consumer that
// trains its trials to a step (`trains_to_step`: a pbt stage) also needs the kind's step setting.
std::optional<std::string> trainer_lacks(const std::string& consumer, const std::string& input, const nlohmann::json& trainer,
                                         const char* what, bool trains_to_step);

// Why the predictions of stage `input`'s trainer cannot serve the `task` a consumer stage asks for
// (an ensemble's classification or regression), when the trainer kind declares the task its
// prediction files serve; nullopt when they can or nothing is declared.
std::optional<std::string> task_mismatch(const StageConfig& consumer, const std::string& input, const nlohmann::json& trainer,
                                         const char* needs);

}  // namespace hpctune::config
