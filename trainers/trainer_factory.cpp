// The table of trainer kinds. A new kind is one line in kKinds, one in the catalog of declared
// settings (trainer_settings.cpp), and its own files.
#include <memory>

#include "trainers/cnn_trainer.h"
#include "trainers/command_trainer.h"
#include "trainers/function_trainer.h"
#include "trainers/mlp_trainer.h"
#include "trainers/sleep_trainer.h"
#include "trainers/trainer.h"
#include "trainers/trainer_factory.h"
#include "trainers/idx_dataset.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {
namespace {

struct KindEntry {
  const char* name;
  std::unique_ptr<Trainer> (*make)(const TrainerServices& services);
};

// Sorted by name: trainer_kinds() and the error messages list them in this order.
const KindEntry kKinds[] = {
    {"cnn", [](const TrainerServices& s) -> std::unique_ptr<Trainer> { return std::make_unique<CnnTrainer>(s.datasets); }},
    {"command", [](const TrainerServices&) -> std::unique_ptr<Trainer> { return std::make_unique<CommandTrainer>(); }},
    {"function", [](const TrainerServices&) -> std::unique_ptr<Trainer> { return std::make_unique<FunctionTrainer>(); }},
    {"mlp", [](const TrainerServices& s) -> std::unique_ptr<Trainer> { return std::make_unique<MlpTrainer>(s.datasets); }},
    {"sleep", [](const TrainerServices&) -> std::unique_ptr<Trainer> { return std::make_unique<SleepTrainer>(); }},
};

const KindEntry* find_kind(const std::string& kind) {
  for (const auto& entry : kKinds)
    if (kind == entry.name) return &entry;
  return nullptr;
}

Error unknown_kind(const std::string& kind) {
  std::string known;
  for (const auto& entry : kKinds) known += (known.empty() ? "" : ", ") + std::string(entry.name);
  return err(Errc::kInvalidArgument, "unknown trainer kind '" + kind + "' (known: " + known + ")");
}

}  // namespace

std::vector<std::string> trainer_kinds() {
  std::vector<std::string> out;
  for (const auto& entry : kKinds) out.emplace_back(entry.name);
  return out;
}

Result<std::unique_ptr<Trainer>> make_trainer(const std::string& kind) { return make_trainer(kind, TrainerServices{}); }

Result<std::unique_ptr<Trainer>> make_trainer(const std::string& kind, const TrainerServices& services) {
  const KindEntry* entry = find_kind(kind);
  if (entry == nullptr) return unknown_kind(kind);
  return entry->make(services);
}

MakeTrainer trainer_factory() {
  TrainerServices services{std::make_shared<DatasetCache>()};
  return [services](const std::string& kind) { return make_trainer(kind, services); };
}

}  // namespace hpctune::trainers
