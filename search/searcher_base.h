// SearcherBase: the bookkeeping every algorithm shares (seq numbers, pending suggestions, the
// told observations, duplicate tells, restore, best / Pareto front in state()).
//
// restore() replays the history through the same paths a live run takes: every record's
// suggestion is re-issued (on_restore_suggestion), and every finished one is told (on_tell), in
// seq order. Algorithms that draw suggestion k from Rng(derive_seed(seed, k)) and whose model is a
// function of the observations therefore continue after a restart exactly as without one.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "search/searcher.h"

namespace hpctune::search {

class SearcherBase : public Searcher {
 public:
  explicit SearcherBase(const SearchSpec& spec);

  // Ignores a second tell of the same seq and a tell with malformed values (treated as failed).
  void tell(const Observation& observation) final;
  void restore(const std::vector<Record>& history) override;
  nlohmann::json state() const override;

 protected:
  // A finished trial, already recorded in observations().
  virtual void on_tell(const Observation& observation) = 0;
  // A suggestion re-issued by restore(), before any later one; default: nothing.
  virtual void on_restore_suggestion(const Suggestion& suggestion) { (void)suggestion; }
  // Extra state() keys; default: none.
  virtual void add_state(nlohmann::json& state) const { (void)state; }

  // A new suggestion with the next seq, recorded as pending.
  Suggestion issue(Params params, nlohmann::json meta = nlohmann::json::object());

  const SearchSpec& spec() const noexcept { return spec_; }
  const Space& space() const noexcept { return spec_.space; }
  const std::vector<Objective>& objectives() const noexcept { return spec_.objectives; }
  std::size_t num_objectives() const noexcept { return spec_.objectives.size(); }
  int64_t next_seq() const noexcept { return next_seq_; }
  const std::map<int64_t, Params>& pending() const noexcept { return pending_; }
  const std::vector<Observation>& observations() const noexcept { return observations_; }
  // Per-seq RNG: suggestion k of an algorithm draws from rng_for(k, salt).
  Rng rng_for(int64_t seq, uint64_t salt = 0) const noexcept;

 private:
  SearchSpec spec_;
  int64_t next_seq_ = 0;
  std::map<int64_t, Params> pending_;
  std::set<int64_t> told_;
  std::vector<Observation> observations_;
};

}  // namespace hpctune::search
