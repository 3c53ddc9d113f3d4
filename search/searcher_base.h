// SearcherBase: the bookkeeping every algorithm shares (seq numbers, pending suggestions, the
// told observations, duplicate tells, restore, best / Pareto front in state()).
//
// restore() replays the history through the same paths a live run takes: every record's
// suggestion is re-issued (on_restore_suggestion), and every finished one is told (on_tell), in
// seq order. Algorithms that draw suggestion k from Rng(derive_seed(seed, k)) and whose model is a
// function of the observations therefore continue after a restart exactly as without one.
//
// No repeated evaluation (unless SearchSpec::noisy): issue() never hands out a configuration that
// was issued before (evaluated, running, or a warm-start trial). A repeat is replaced by the
// nearest configuration not issued yet (one parameter moved to a neighbouring level, then a few
// parameters, then a uniform draw, then, on a finite space small enough to list, a uniform pick
// among the points left), drawn from the per-seq RNG and marked "deduplicated": true in its meta.
// On a finite space exhausted() is true once every point was issued, and make_searcher wraps
// every searcher so that ask() never asks it for more points than are left.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "search/searcher.h"

namespace hpctune::search {

class SearcherBase : public Searcher {
 public:
  explicit SearcherBase(const SearchSpec& spec);

  // Ignores a second tell of the same seq and a tell with malformed values (treated as failed).
  void tell(const Observation& observation) final;
  void restore(const std::vector<Record>& history) override;
  // Records another searcher's suggestion as issued and pending (Searcher::adopt); a seq already
  // known is ignored.
  void adopt(const Suggestion& suggestion) override;
  nlohmann::json state() const override;
  // Under early stopping (SearchSpec::fidelity), keeps the value per seq and step (a later one of the
  // same step wins) for the models of one fidelity level (model_data.h); without one, ignores it.
  void tell_report(int64_t seq, int64_t step, double value) override;
  // True when the space is finite, not noisy, and every point was issued. An algorithm with an end
  // of its own (grid, genetic's generations) overrides this; make_searcher's wrapper ORs the two.
  bool exhausted() const override { return space_exhausted(); }
  // The notes of every algorithm (a space smaller than the budget), then the algorithm's own
  // (add_notes). Algorithms extend add_notes rather than overriding this.
  std::vector<std::string> notes() const override;

  // How many configurations have not been issued yet; nullopt when that is unbounded (a float
  // parameter, a space too large to count, or a noisy objective).
  std::optional<uint64_t> unissued() const noexcept;
  bool space_exhausted() const noexcept {
    const auto left = unissued();
    return left && *left == 0;
  }

 protected:
  // A finished trial, already recorded in observations().
  virtual void on_tell(const Observation& observation) = 0;
  // A suggestion re-issued by restore(), before any later one; default: nothing.
  virtual void on_restore_suggestion(const Suggestion& suggestion) { (void)suggestion; }
  // Extra state() keys; default: none.
  virtual void add_state(nlohmann::json& state) const { (void)state; }
  // Extra notes() lines of the algorithm; default: none.
  virtual void add_notes(std::vector<std::string>& notes) const { (void)notes; }

  // A new suggestion with the next seq, recorded as pending. A configuration issued before is
  // replaced by the nearest one that was not (see the top of this file) unless the objective is
  // noisy or no such configuration is left.
  Suggestion issue(Params params, nlohmann::json meta = nlohmann::json::object());
  // True when `params` was issued before (or is a warm-start trial): algorithms that choose among
  // candidates (acquisition, TPE's ratio) can prefer the ones that are not.
  bool issued(const Params& params) const;

  const SearchSpec& spec() const noexcept { return spec_; }
  const Space& space() const noexcept { return spec_.space; }
  const std::vector<Objective>& objectives() const noexcept { return spec_.objectives; }
  std::size_t num_objectives() const noexcept { return spec_.objectives.size(); }
  int64_t next_seq() const noexcept { return next_seq_; }
  const std::map<int64_t, Params>& pending() const noexcept { return pending_; }
  const std::vector<Observation>& observations() const noexcept { return observations_; }
  // tell_report()'s values: seq -> step -> raw value of the primary objective (under early stopping only).
  const std::map<int64_t, std::map<int64_t, double>>& reports() const noexcept { return reports_; }
  // How many reports came for a trial already told (a replay after restore()): a model's cache of
  // the told trials' values (RungCache) holds while this count does.
  uint64_t told_reports() const noexcept { return told_reports_; }
  bool multi_fidelity() const noexcept { return spec_.fidelity.max_step > 0; }
  // Per-seq RNG: suggestion k of an algorithm draws from rng_for(k, salt).
  Rng rng_for(int64_t seq, uint64_t salt = 0) const noexcept;

 private:
  void remember(const Params& params);
  // A configuration not issued yet, as near `params` as the search finds; nullopt when none is left.
  std::optional<Params> replacement(const Params& params, int64_t seq) const;

  SearchSpec spec_;
  std::optional<uint64_t> cardinality_;  // Space::cardinality(), once
  std::unordered_set<std::string> issued_;  // Space::config_key of every issued point in the space
  int64_t next_seq_ = 0;
  std::map<int64_t, Params> pending_;
  std::set<int64_t> told_;
  std::vector<Observation> observations_;
  std::map<int64_t, std::map<int64_t, double>> reports_;
  uint64_t told_reports_ = 0;
};

}  // namespace hpctune::search
