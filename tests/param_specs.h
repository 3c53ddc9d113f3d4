// Short builders of search::ParamSpec for the search tests (flt, integer, choice, when).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/space.h"

namespace hpctune::testing {

inline search::ParamSpec flt(std::string name, double lo, double hi, bool log = false) {
  search::ParamSpec p;
  p.name = std::move(name);
  p.type = search::ParamType::kFloat;
  p.low = lo;
  p.high = hi;
  p.log = log;
  return p;
}

inline search::ParamSpec integer(std::string name, double lo, double hi, int64_t step = 1, bool log = false) {
  search::ParamSpec p = flt(std::move(name), lo, hi, log);
  p.type = search::ParamType::kInt;
  p.step = step;
  return p;
}

inline search::ParamSpec choice(std::string name, std::vector<nlohmann::json> values, bool ordered = false) {
  search::ParamSpec p;
  p.name = std::move(name);
  p.type = search::ParamType::kChoice;
  p.choices = std::move(values);
  p.ordered = ordered;
  return p;
}

inline search::ParamSpec when(search::ParamSpec p, std::string parent, std::vector<nlohmann::json> values) {
  p.when = search::Condition{std::move(parent), std::move(values)};
  return p;
}

}  // namespace hpctune::testing
