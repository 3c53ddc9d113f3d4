// How to make each trainer kind. The kinds themselves (their names, help and settings) are
// declared once, in the catalog (trainer_settings.cpp); a new kind is a line there, one here and
// its own files.
#include <memory>

#include <algorithm>

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

const KindEntry kKinds[] = {
    {"cnn", [](const TrainerServices& s) -> std::unique_ptr<Trainer> { return std::make_unique<CnnTrainer>(s.datasets); }},
    {"command", [](const TrainerServices& s) -> std::unique_ptr<Trainer> { return std::make_unique<CommandTrainer>(s.commands); }},
    {"function", [](const TrainerServices&) -> std::unique_ptr<Trainer> { return std::make_unique<FunctionTrainer>(); }},
    {"mlp", [](const TrainerServices& s) -> std::unique_ptr<Trainer> { return std::make_unique<MlpTrainer>(s.datasets); }},
    {"sleep", [](const TrainerServices&) -> std::unique_ptr<Trainer> { return std::make_unique<SleepTrainer>(); }},
};

const KindEntry* find_kind(const std::string& kind) {
  for (const auto& entry : kKinds)
    if (kind == entry.name) return &entry;
  return nullptr;
}

}  // namespace

std::vector<std::string> trainer_kinds() {
  std::vector<std::string> out;
  for (const auto& k : trainer_catalog()) out.push_back(k.kind);
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::unique_ptr<Trainer>> make_trainer(const std::string& kind) { return make_trainer(kind, TrainerServices{}); }

Result<std::unique_ptr<Trainer>> make_trainer(const std::string& kind, const TrainerServices& services) {
  if (auto declared = trainer_setting_specs(kind); !declared.ok()) return std::move(declared).error();  // unknown kind
  const KindEntry* entry = find_kind(kind);
  if (entry == nullptr) return err(Errc::kInternal, "trainer kind '" + kind + "' is declared but has no constructor");
  return entry->make(services);
}

MakeTrainer trainer_factory() {
  TrainerServices services{std::make_shared<DatasetCache>(), std::make_shared<CommandPrograms>()};
  return [services](const std::string& kind) { return make_trainer(kind, services); };
}

}  // namespace hpctune::trainers
