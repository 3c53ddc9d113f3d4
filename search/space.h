// The search space: typed, possibly log-scaled, possibly conditional parameters.
//
// A configuration ("Params") is a JSON object name -> value. A parameter with a condition
// (`when: {optimizer: sgd}`) exists in a configuration only while its parent has one of the
// listed values; otherwise it is absent from the object. Parameters are kept in an order where
// every parent comes before its children, so sampling in order always sees the parent's value.
//
// Numeric parameters map to the unit interval (log-scaled ones through log), which is the space
// the model-based algorithms (GP, TPE, mutation) work in; from_unit() rounds ints to their step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/rng.h"

namespace hpctune::search {

using Params = nlohmann::json;  // a JSON object: parameter name -> value

enum class ParamType { kFloat, kInt, kChoice, kFixed };
const char* param_type_name(ParamType type) noexcept;

struct Condition {
  std::string parent;                  // the parameter this one depends on
  std::vector<nlohmann::json> values;  // active while params[parent] is one of these
};

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kFloat;
  // kFloat / kInt: inclusive bounds; log scale needs low > 0. step: kInt only (>= 1).
  double low = 0.0;
  double high = 0.0;
  bool log = false;
  int64_t step = 1;
  // kFloat: number of grid points for the grid search (0 = not set; grid then refuses the space).
  int64_t resolution = 0;
  // kChoice: the values; `ordered` lets numeric algorithms treat the index as an ordinal.
  std::vector<nlohmann::json> choices;
  bool ordered = false;
  // kFixed: the value.
  nlohmann::json value;
  std::optional<Condition> when;
};

class Space {
 public:
  Space() = default;

  // Validates the specs and orders them parents-first. Errors (kConfig) name the parameter:
  // low >= high, a log range including 0, an empty choice, a step < 1, a condition on an
  // unknown parameter or on itself, a cycle of conditions, duplicate names.
  static Result<Space> create(std::vector<ParamSpec> specs);

  const std::vector<ParamSpec>& params() const noexcept { return params_; }
  const ParamSpec* find(const std::string& name) const noexcept;
  std::size_t size() const noexcept { return params_.size(); }

  // True when `spec` has no condition or its condition holds in `params`.
  static bool active(const ParamSpec& spec, const Params& params);

  // Checks that `params` has exactly the active parameters, each inside its range/choices.
  // The error (kInvalidArgument) names the offending parameter.
  Status contains(const Params& params) const;

  // A uniform draw (log-uniform for log parameters), conditions respected.
  Params sample(Rng& rng) const;

  // Unit-interval transform of a numeric parameter, and back (clamped; ints rounded to step).
  // kChoice maps index i of k choices to (i + 0.5) / k and back.
  static double to_unit(const ParamSpec& spec, const nlohmann::json& value);
  static nlohmann::json from_unit(const ParamSpec& spec, double u);

  // Fills in the active parameters missing from `params` by sampling and drops inactive ones,
  // in parents-first order. Used by algorithms that change a parent (mutation, crossover).
  void repair(Params& params, Rng& rng) const;

  // --- helpers shared by the algorithms -------------------------------------------------------
  // Position of `name` in params() (parents-first order), or -1.
  int64_t index_of(const std::string& name) const noexcept;
  // kInt: how many values low, low+step, ... <= high there are.
  static int64_t int_levels(const ParamSpec& spec) noexcept;
  // kChoice: the index of `value` among the choices, or -1.
  static int64_t choice_index(const ParamSpec& spec, const nlohmann::json& value) noexcept;
  // A text equal for choice values that are == (1 and 1.0 alike), to find duplicates by hashing
  // rather than pairwise; nullopt for NaN, which equals nothing.
  static std::optional<std::string> choice_key(const nlohmann::json& value);
  // One value against its parameter's range/choices (kInvalidArgument naming the parameter).
  static Status check_value(const ParamSpec& spec, const nlohmann::json& value);
  // A uniform draw of one parameter (log-uniform for log ones).
  static nlohmann::json sample_one(const ParamSpec& spec, Rng& rng);
  // Params from a point of the unit cube, one coordinate per parameter in params() order;
  // coordinates of inactive parameters are ignored.
  Params from_unit_vector(const std::vector<double>& u) const;

  // --- the finite space (no float parameter) ----------------------------------------------------
  // The number of distinct configurations: ints count their levels, choices their values, a fixed
  // value 1, and a conditional parameter multiplies only the branches where it is active.
  // nullopt when the space has a float parameter (infinite), the count overflows 64 bits, or a
  // parameter with conditions on it has more than 100,000 values (too many branches to walk).
  std::optional<uint64_t> cardinality() const;
  // Configuration number `index` (0 <= index < cardinality()) in a fixed order: every
  // configuration exactly once, the same for the same space. nullopt for an
  // infinite space or an index out of range.
  std::optional<Params> point(uint64_t index) const;
  // Every configuration, in point() order, when there are at most `limit`; nullopt otherwise.
  std::optional<std::vector<Params>> enumerate(uint64_t limit) const;
  // A text equal for two configurations exactly when they are the same point: parameters in
  // params() order, inactive ones ignored, numbers compared by value (1 and 1.0 alike).
  std::string config_key(const Params& params) const;

 private:
  std::vector<ParamSpec> params_;
};

}  // namespace hpctune::search
