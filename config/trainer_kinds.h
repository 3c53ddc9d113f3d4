// What the configured trainer kind can do, for the master's side (scheduler/, workflow/, report/),
// asked of the catalog that each kind declares beside its settings (trainers/trainer_settings.h).
// Nothing outside trainers/ compares a kind's name (tools/check-trainer-names).
#pragma once

#include <string>
#include <string_view>

#include "trainers/trainer_settings.h"

namespace hpctune::config {

// Whether the kind's trainer starts its own ranks (a command runs mpirun or torchrun itself), so
// that a launcher starts one process per group; false for an unknown kind.
inline bool trainer_starts_ranks(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->starts_own_ranks;
}

// The setting that counts the kind's steps ("epochs", "steps"): what a stage that trains to a step
// sets; "" for a kind whose steps are its reports' own, or an unknown one.
inline std::string trainer_step_setting(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->step_setting != nullptr ? can->step_setting : "";
}

// The bool setting that turns the kind's predictions off (mlp's save_predictions); "" when there is
// none: a stage that needs them sets it to true.
inline std::string trainer_predictions_switch(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->predictions.switch_setting != nullptr ? can->predictions.switch_setting : "";
}

// The subdirectory of a trial's directory that holds the kind's checkpoint as a tree of the
// program's own files (command: "checkpoint"); "" for the built-ins' checkpoint-stage*.bin files in
// the trial directory itself, or an unknown kind.
inline std::string trainer_checkpoint_directory(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->checkpoints.directory != nullptr ? can->checkpoints.directory : "";
}

// The kinds that can give a stage checkpoints, for a message: "mlp, cnn, command with
// trainer.provides: [checkpoints]".
inline std::string checkpoint_writers() {
  std::string out;
  for (const auto& k : trainers::trainer_catalog()) {
    std::string item;
    if (k.can.checkpoints.written) item = k.kind;
    else if (k.can.provides_setting != nullptr && k.can.checkpoints.directory != nullptr)
      item = k.kind + " with trainer." + k.can.provides_setting + ": [" + trainers::kProvidesCheckpoints + "]";
    if (!item.empty()) out += (out.empty() ? "" : ", ") + item;
  }
  return out;
}
// The parameters by which a trial of the kind is given a source's checkpoint and the source trial's
// id (TrainerCapabilities::init_setting, source_trial_setting); "" when it takes none.
inline std::string trainer_init_setting(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->init_setting != nullptr ? can->init_setting : "";
}
inline std::string trainer_source_trial_setting(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->source_trial_setting != nullptr ? can->source_trial_setting : "";
}
// The settings a transfer's baseline twin resets, with their from-scratch values (an object; empty
// for a kind without them).
inline nlohmann::json trainer_twin_resets(std::string_view kind) {
  nlohmann::json out = nlohmann::json::object();
  if (const auto* can = trainers::trainer_capabilities(kind))
    for (const auto& [key, value] : can->twin_resets) out[key] = value;
  return out;
}
// Whether the kind declares the setting `name` (mlp's classes); false for an unknown kind.
inline bool trainer_declares(const std::string& kind, std::string_view name) {
  auto specs = trainers::trainer_setting_specs(kind);
  if (!specs.ok()) return false;
  for (const auto& d : **specs)
    if (d.key == name) return true;
  return false;
}

}  // namespace hpctune::config
