// What a stage needs from its inputs' trainers (stage_inputs.h): the compatibility checks between a
// stage and the trainers of the stages it reads, against the trainer catalog.
#include "config/stage_inputs.h"

#include <vector>

#include "common/text.h"
#include "trainers/trainer_settings.h"

namespace hpctune::config {

using nlohmann::json;

// The kinds of the catalog that write `what` (predictions or checkpoints): "mlp and cnn".
std::string writers_of(std::string_view what) {
  std::vector<std::string> kinds;
  for (const auto& k : trainers::trainer_catalog()) {
    const auto& out = what == trainers::kProvidesPredictions ? k.can.predictions : k.can.checkpoints;
    if (out.written) kinds.push_back(k.kind);
  }
  if (kinds.empty()) return "none";
  std::string last = kinds.back();
  kinds.pop_back();
  return kinds.empty() ? last : join(kinds, ", ") + " and " + last;
}

// Why the trainer of stage `input` does not give a `consumer` stage the `what` it needs
// (trainers::kProvidesPredictions or kProvidesCheckpoints), naming the key that says so; nullopt
// when it does (stage_inputs.h).
std::optional<std::string> trainer_lacks(const std::string& consumer, const std::string& input, const json& trainer,
                                         const char* what, bool trains_to_step) {
  const std::string kind = trainer.value("kind", "");
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr) return std::nullopt;  // the walker refused the kind
  const std::string of = "trainer kind '" + kind + "' of stage '" + input + "'";
  const std::string needs = "the " + consumer + " needs " + what + ", and ";
  if (can->provides_setting != nullptr) {
    const std::string key = std::string("trainer.") + can->provides_setting;
    bool declared = false;
    const json none = json::array();
    const json& list = trainer.contains(can->provides_setting) ? trainer[can->provides_setting] : none;
    for (const auto& v : list) declared = declared || v == what;
    if (!declared) return needs + of + " provides none (" + key + ")";
    // An ensemble reads the program's prediction files, a transfer its checkpoint directory, and a
    // stage that trains to a step snapshots that directory whole (checkpoints.directory).
    if (std::string_view(what) == trainers::kProvidesCheckpoints && can->checkpoints.directory == nullptr)
      return std::string(what) + " declared by " + of + " (" + key + "), and the kind names no checkpoint directory "
             "(trainers/trainer_settings.h: checkpoints.directory)";
    return std::nullopt;
  }
  const trainers::TrainerOutput& out = std::string_view(what) == trainers::kProvidesPredictions ? can->predictions
                                                                                               : can->checkpoints;
  if (!out.written) return needs + of + " writes none (" + writers_of(what) + " do)";
  if (out.switch_setting != nullptr && trainer.contains(out.switch_setting) && trainer[out.switch_setting].is_boolean() &&
      !trainer[out.switch_setting].get<bool>())
    return needs + "stage '" + input + "' turns them off (its trainer." + out.switch_setting + " is false)";
  if (trains_to_step && can->step_setting == nullptr)
    return needs + "a step setting to train each interval to, and " + of + " has none";
  return std::nullopt;
}

// Why the predictions of stage `input`'s trainer cannot serve the `task` a consumer stage asks for
// (an ensemble's classification or regression), when the trainer kind declares the task its
// prediction files serve; nullopt when they can or nothing is declared.
std::optional<std::string> task_mismatch(const StageConfig& consumer, const std::string& input, const json& trainer,
                                         const char* needs) {
  if (std::string_view(needs) != trainers::kProvidesPredictions || !consumer.settings.contains("task") ||
      !consumer.settings["task"].is_string())
    return std::nullopt;
  const std::string task = consumer.settings["task"].get<std::string>();
  const std::string kind = trainer.value("kind", "");
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr || can->predictions.task == nullptr || task == can->predictions.task) return std::nullopt;
  return "the " + consumer.kind + " is a " + task + " ensemble, and trainer kind '" + kind + "' of stage '" + input +
         "' writes " + can->predictions.task + " predictions";
}

}  // namespace hpctune::config
