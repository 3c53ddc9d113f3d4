// Searcher: the ask/tell interface every search algorithm implements.
//
// The scheduler drives every algorithm the same way:
//   HPCTUNE_ASSIGN(auto suggestions, searcher.ask(n));  // up to n new configurations, each with a seq
//   ... runs trials ...
//   searcher.tell(observation);              // a finished trial: completed, pruned or failed
//
// seq is the searcher's own 0-based counter of suggestions; the scheduler stores it with the trial
// and passes it back in Observation. A suggestion that was asked but not yet told is "pending"
// (running); algorithms that model pending trials (constant liar, kriging believer) use them.
//
// Determinism: all randomness comes from an Rng seeded from SearchSpec::seed. The same spec and
// the same sequence of ask/tell calls give the same suggestions.
//
// Early stopping (SearchSpec::fidelity): a trial's intermediate values come through tell_report();
// a pruned trial's Observation carries its value at its last step, which is not a final value. The
// model-based searchers (bayesian, tpe, auto) then model one fidelity level at a time (model_data.h:
// fidelity_model_data); the others ignore the fidelity.
//
// Restart: after a crash the scheduler rebuilds a fresh searcher and calls restore() with every
// recorded suggestion in seq order (finished ones with their outcome). Random search then
// continues exactly where the uninterrupted run would be.
//
// search/ is a pure library: no sockets, no files, no SQLite.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "search/settings.h"
#include "search/space.h"

namespace hpctune::search {

struct Objective {
  std::string metric;     // e.g. "val_accuracy"
  bool maximize = true;
};

enum class Outcome { kCompleted, kPruned, kFailed };

struct Suggestion {
  int64_t seq = 0;        // the searcher's counter, 0-based
  Params params;
  nlohmann::json meta = nlohmann::json::object();  // e.g. {"generation": 3, "island": 1, "parents": [4, 9]}
};

struct Observation {
  int64_t seq = 0;
  Params params;
  Outcome outcome = Outcome::kCompleted;
  std::vector<double> values;  // one per objective, raw (not negated); empty for kFailed
  int64_t step = 0;            // the last reported step (for pruned trials)
};

// A recorded suggestion, for restore(): `observation` is set once the trial finished.
struct Record {
  Suggestion suggestion;
  std::optional<Observation> observation;
};

// The fidelity of a campaign under early stopping (SearchSpec::fidelity); max_step 0 = none (every value is final).
struct Fidelity {
  int64_t max_step = 0;          // the step of a full training (a trial that reaches it is final)
  std::vector<int64_t> rungs;    // the steps where the stopper judges, ascending, all < max_step (may be empty)
};

// True when a completed trial that ended at `step` trained all of `fidelity`'s steps: it reached
// max_step, or max_step - 1, where a program that reports the index of the epoch it just trained,
// counted from 0 (Optuna's trial.report(value, epoch)), ends a full training (step 0: not said,
// taken as full). Before, such a program's every trial was partial, and the model never left the
// highest rung. One step short of a full training is as good as full for a model's level.
inline bool completes_training(int64_t step, const Fidelity& fidelity) {
  return fidelity.max_step <= 0 || step <= 0 || step >= fidelity.max_step - 1;
}

// True when `obs` carries a final value under `fidelity`: always without early stopping; with it, a
// completed trial that completes_training(). A pruned trial's value, or a completed one's further
// from max_step, belongs to its step only.
inline bool is_final(const Observation& obs, const Fidelity& fidelity) {
  return obs.outcome == Outcome::kCompleted && completes_training(obs.step, fidelity);
}

struct SearchSpec {
  std::string algorithm = "random";
  nlohmann::json settings = nlohmann::json::object();  // algorithm-specific keys, already validated
  Space space;
  std::vector<Objective> objectives;
  uint64_t seed = 0;
  int64_t max_trials = 0;  // the budget; grid refuses a grid larger than this
  std::vector<Observation> warm_start;  // trials of an earlier campaign, already filtered to the space
  // objective.noisy: the same configuration may give another value, so a repeat is worth running;
  // off (the default), no configuration is suggested twice (SearcherBase::issue).
  bool noisy = false;
  // Under early stopping: which values are final and where the stopper's rungs are (Fidelity).
  Fidelity fidelity;
};

class Searcher {
 public:
  virtual ~Searcher() = default;

  virtual std::string name() const = 0;

  // Up to n new suggestions. Fewer (even none) when the algorithm must wait (a generation barrier)
  // or has nothing left (a finished grid); exhausted() tells the two apart. An error is a failure
  // inside the algorithm that it cannot work around: the master logs it, records it as an event
  // and ends the campaign (failed, exit 1) after committing what it received. (A model that cannot
  // be fitted is not such a failure where the algorithm has a documented fallback: bayesian.)
  virtual Result<std::vector<Suggestion>> ask(std::size_t n) = 0;

  // Records the outcome of a suggestion. Any order; each seq at most once.
  virtual void tell(const Observation& observation) = 0;

  // An intermediate value of a running or paused trial: its primary objective's raw value at `step` (every report,
  // in order; the same seq and step may come again after a retry: the later one wins). Default: ignored.
  virtual void tell_report(int64_t seq, int64_t step, double value) { (void)seq, (void)step, (void)value; }

  // True when ask() will never return anything again.
  virtual bool exhausted() const { return false; }

  // Rebuilds the state after a restart from the recorded suggestions, in seq order.
  virtual void restore(const std::vector<Record>& history) = 0;

  // A suggestion that another searcher of the same campaign made (a member of auto's portfolio,
  // search/portfolio.h): recorded as issued and running, so that this searcher never suggests it
  // again, models it as pending, and numbers its own next suggestion after it. Its outcome comes
  // through tell() as usual. Default: ignored (algorithms that are never a portfolio member).
  virtual void adopt(const Suggestion& suggestion) { (void)suggestion; }

  // Algorithm state worth recording (generation numbers, Pareto front); JSON, may be empty.
  virtual nlohmann::json state() const { return nlohmann::json::object(); }

  // Lines for the user at the start of the search, each a sentence without a trailing newline:
  // what the algorithm will do with this space and budget that a user could not guess (its
  // start-up design, "startup: 10 trials of 16; model from trial 11"; a space with fewer points
  // than the budget; what `auto` picked and why). The master prints and records them.
  virtual std::vector<std::string> notes() const { return {}; }
};

// The algorithms this build knows, for error messages and `hpctune validate`.
std::vector<std::string> searcher_names();

// The settings an algorithm reads from SearchSpec::settings (key, type, default, bounds, help);
// kConfig listing the valid names for an unknown algorithm.
Result<std::vector<SettingDecl>> searcher_settings(const std::string& algorithm);

// How a generation-based algorithm sizes its generations: one that breeds the next generation only
// once (most of) the last has finished, and so runs at most a generation's trials at once, leaving
// any other trainer group idle. `trials`: the trials of one generation with these settings
// (defaults filled in; genetic: population x islands); `per_unit`: the trials each unit of
// `population_setting` adds (genetic: islands); `carried`: the members every generation after the
// first carries over unchanged, not run again (genetic's elites with one objective), so that it
// runs trials - carried; `in_step`: the next generation waits for every trial of the last (genetic's
// min_complete_fraction of 1), so a generation that does not fill the groups' waves leaves groups
// idle at its end. Declared beside the algorithm (genetic.h).
struct GenerationSize {
  std::string population_setting;
  int64_t trials = 0;
  int64_t per_unit = 1;
  int64_t carried = 0;
  bool in_step = true;
  // The trials a generation after the first runs.
  int64_t runs() const { return trials - carried; }
};
// The generation size of `algorithm` with `settings` and `objectives` objectives; nullopt for an
// algorithm that keeps every free group busy (random, tpe, evolution's asynchronous tournaments,
// ...) or an unknown one.
std::optional<GenerationSize> generation_size(const std::string& algorithm, const nlohmann::json& settings,
                                              std::size_t objectives = 1);

// Builds the searcher named by spec.algorithm; kConfig error listing the valid names otherwise.
Result<std::unique_ptr<Searcher>> make_searcher(const SearchSpec& spec);

}  // namespace hpctune::search
