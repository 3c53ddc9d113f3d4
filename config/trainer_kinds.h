// What the configured trainer kind can do, for the master's side (scheduler/, workflow/, report/),
// asked of the catalog that each kind declares beside its settings (trainers/trainer_settings.h).
// Nothing outside trainers/ compares a kind's name (tools/check-trainer-names).
#pragma once

#include <string>
#include <string_view>

#include "search/space.h"
#include "trainers/internal_params.h"
#include "trainers/trainer_settings.h"

namespace hpctune::config {

// "" when trials of the kind with these trainer settings can train packed, k to a GPU
// (TrainerCapabilities::packs); else why not.
inline std::string trainer_packs(std::string_view kind, const nlohmann::json& settings) {
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr || can->packs == nullptr) return "trainer kind " + std::string(kind) + " does not train packed";
  return can->packs(settings);
}

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

// The bool setting that keeps the kind's program alive across a group's trials (command's
// `persistent`); "" for a kind without one, or an unknown one.
inline std::string trainer_persistent_setting(std::string_view kind) {
  const auto* can = trainers::trainer_capabilities(kind);
  return can != nullptr && can->persistent_setting != nullptr ? can->persistent_setting : "";
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
// Whether a trial of the kind with these fixed settings and this space can survive the loss of one of
// its group's ranks (TrainerCapabilities::rank_loss_setting fixed at, or searched over, one of its
// rank_loss_values; a searched value that is not a choice counts too).
inline bool trainer_survives_rank_loss(std::string_view kind, const nlohmann::json& trainer, const search::Space& space) {
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr || can->rank_loss_setting == nullptr) return false;
  const std::string key = can->rank_loss_setting;
  auto survives = [&](const nlohmann::json& v) {
    if (!v.is_string()) return false;
    for (const auto& ok : can->rank_loss_values)
      if (v.get<std::string>() == ok) return true;
    return false;
  };
  if (const search::ParamSpec* p = space.find(key)) {
    if (p->type == search::ParamType::kChoice) {
      for (const auto& c : p->choices)
        if (survives(c)) return true;
      return false;
    }
    return p->type == search::ParamType::kFixed ? survives(p->value) : true;
  }
  return trainer.is_object() && trainer.contains(key) && survives(trainer[key]);
}

// The declaration of a key hpctune adds to a trial's params beside the searched values (a transfer
// target's source, the step a stage trains to: trainers/internal_params.h), for the views that
// show it as lineage or a run setting; nullptr for a searched or user-given parameter.
inline const trainers::InternalParam* internal_param(std::string_view key) { return trainers::find_internal_param(key); }

// Whether the kind declares the setting `name` (mlp's classes); false for an unknown kind.
inline bool trainer_declares(const std::string& kind, std::string_view name) {
  auto specs = trainers::trainer_setting_specs(kind);
  if (!specs.ok()) return false;
  for (const auto& d : **specs)
    if (d.key == name) return true;
  return false;
}

}  // namespace hpctune::config
