// What each search algorithm is, declared beside it in the registry (searcher_factory.cpp, next to
// its settings and its factory), the way trainer kinds declare TrainerCapabilities
// (trainers/trainer_settings.h) and stage kinds their StageKind (workflow/stage_settings.h). The
// config, the dashboard (through report/) and `simulate` ask these instead of comparing names, so
// that an algorithm added to the registry is handled everywhere by what it declares
// (tools/check-algorithm-names fails on a name compared outside search/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/searcher.h"

namespace hpctune::search {

// A combination of settings an algorithm refuses, found on its resolved settings: `keys` are the
// settings involved, the one to name first when the user gave it (the config locates the error at
// the first given key, else at the last of them).
struct SettingsProblem {
  std::vector<std::string> keys;
  std::string message;
};

struct AlgorithmTraits {
  std::string help;  // one clause: what it is
  // Fits a model of the observations; its first `startup_setting` trials are random, by default
  // default_startup(space, max_trials) of them (tpe: n_startup, bayesian: n_initial).
  bool model_based = false;
  const char* startup_setting = nullptr;
  int64_t (*default_startup)(const Space& space, int64_t max_trials) = nullptr;
  // Breeds children of earlier trials: its trials carry a generation number worth showing.
  bool breeds = false;
  // Keeps a population (its size the setting named here, "" for none); a generation-based one
  // also sizes its generations by it (generation_size, searcher.h).
  const char* population_setting = "";
  // Takes several objectives (a Pareto front); false: one only, its factory refuses more.
  bool multi_objective = true;
  // Lists every point of the space: a float needs a resolution, and the points are counted
  // before the search starts (grid).
  bool enumerates = false;
  // Picks another algorithm from the space and the budget and delegates to it (auto).
  bool picks_another = false;
  // The settings it refuses together, on its resolved settings; nullptr: none.
  std::optional<SettingsProblem> (*check_settings)(const nlohmann::json& settings) = nullptr;
};

// The traits of a registered algorithm; nullptr for an unknown name.
const AlgorithmTraits* algorithm_traits(const std::string& algorithm);
// The algorithm a config without search.algorithm runs.
std::string default_algorithm();

// The random start-up of the model-based algorithm the spec runs (auto resolved to what it picks;
// a portfolio to its first member, whose design it runs): its name, the setting and the number of
// random trials. nullopt for an algorithm that fits no model.
struct ModelStartupInfo {
  std::string algorithm;
  std::string setting;
  int64_t random_trials = 0;
};
std::optional<ModelStartupInfo> model_startup_of(const SearchSpec& spec);

// The trials of one population of `algorithm` with `settings` (a generation's of every island for a
// generation-based one); nullopt for an algorithm without a population.
std::optional<int64_t> population_trials(const std::string& algorithm, const nlohmann::json& settings);

}  // namespace hpctune::search
