// The built-in trainer kinds (trainer_factory.cpp has their table): what the worker process makes
// its trainers with. The Trainer interface itself is trainer.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "trainers/trainer.h"

namespace hpctune::trainers {

// The trainer kinds this build knows ("sleep", "mlp", ...).
std::vector<std::string> trainer_kinds();
// kInvalidArgument naming the valid kinds when `kind` is unknown.
Result<std::unique_ptr<Trainer>> make_trainer(const std::string& kind);
Result<std::unique_ptr<Trainer>> make_trainer(const std::string& kind, const TrainerServices& services);
// make_trainer() over services shared by every trial of one process (datasets decoded once).
MakeTrainer trainer_factory();

}  // namespace hpctune::trainers
