// Encoder: a configuration as a vector of unit coordinates, the representation the model-based
// and evolutionary algorithms work in.
//
// Coordinate i belongs to parameter i of the space (parents-first order): numbers through
// Space::to_unit (log-scaled ones in log space), choices as (index + 0.5) / k, fixed values 0.5,
// and NaN for a parameter that is inactive (its condition does not hold). canonicalize() moves
// int and choice coordinates to the point that represents their value exactly, so two vectors of
// the same configuration are equal.
//
// features() is the GP input: numbers and ordered choices as one coordinate (0.5 when inactive),
// unordered choices one-hot (all zero when inactive), fixed parameters nothing. Ints and ordered
// choices are rounded to their level's coordinate first and a one-hot group is the one-hot of its
// choice, so every point of a level has the same features (the GP is flat within a level).
#pragma once

#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "search/space.h"

namespace hpctune::search {

class Encoder {
 public:
  explicit Encoder(const Space& space);

  std::size_t dims() const noexcept { return specs_.size(); }
  std::size_t feature_dims() const noexcept { return feature_dims_; }
  // The first feature of parameter i (none for a fixed one).
  std::size_t feature_offset(std::size_t i) const noexcept { return feature_offset_[i]; }
  const ParamSpec& spec(std::size_t i) const noexcept { return specs_[i]; }
  bool is_numeric(std::size_t i) const noexcept;    // float or int
  bool is_categorical(std::size_t i) const noexcept;  // choice (ordered or not)
  std::size_t num_choices(std::size_t i) const noexcept { return specs_[i].choices.size(); }

  // Params -> coordinates (NaN where absent or inactive). Unknown values map to 0.5.
  std::vector<double> encode(const Params& params) const;
  // Coordinates -> params; inactive ones are left out. Expects repair()ed coordinates.
  Params decode(const std::vector<double>& u) const;

  // Sets inactive coordinates to NaN and draws the newly active NaN ones uniformly; then
  // canonicalizes. After repair(), decode(u) is inside the space.
  void repair(std::vector<double>& u, Rng& rng) const;
  void canonicalize(std::vector<double>& u) const;
  // Whether parameter i is active, given the coordinates of its parents.
  bool active(std::size_t i, const std::vector<double>& u) const;

  // Choice coordinate <-> index.
  static std::size_t choice_of(double u, std::size_t k) noexcept;
  static double unit_of_choice(std::size_t idx, std::size_t k) noexcept;

  void features(const std::vector<double>& u, double* out) const;

  // Mutation: each active parameter, with probability `rate` (and at least one when
  // `at_least_one`), changes: a float (or log-scaled int) by a Gaussian step of `sigma` in unit
  // space (reflected at the bounds); a linear int or an ordered choice to a neighbouring level
  // (+-k levels, k = max(1, round(|N(0, 1)| * sigma * levels)), reflected at the ends); an
  // unordered choice to a different value uniformly. Then repair().
  void mutate(std::vector<double>& u, double rate, double sigma, Rng& rng, bool at_least_one) const;

 private:
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> parent_;                 // index of the parent, -1 without condition
  std::vector<std::vector<char>> parent_mask_;  // choice parents: allowed indices
  std::vector<std::size_t> feature_offset_;
  std::size_t feature_dims_ = 0;
};

}  // namespace hpctune::search
