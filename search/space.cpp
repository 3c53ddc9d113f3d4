#include "search/space.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>

#include "common/text.h"

namespace hpctune::search {

const char* param_type_name(ParamType type) noexcept {
  switch (type) {
    case ParamType::kFloat: return "float";
    case ParamType::kInt: return "int";
    case ParamType::kChoice: return "choice";
    case ParamType::kFixed: return "fixed";
  }
  return "unknown";
}

namespace {

std::string values_text(const std::vector<nlohmann::json>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + values[i].dump();
  return out + "]";
}

Status config_error(const ParamSpec& p, const std::string& what) { return err(Errc::kConfig, p.name + ": " + what); }

bool is_whole(double x) { return std::isfinite(x) && std::floor(x) == x; }

// Bounds of the log-scaled int range, half a step beyond the extreme values so that every value
// gets a share of the unit interval (the end values would otherwise get half a share).
void log_int_range(const ParamSpec& p, double& lo, double& hi) {
  const double last = p.low + static_cast<double>(Space::int_levels(p) - 1) * static_cast<double>(p.step);
  const double half = 0.5 * static_cast<double>(p.step);
  lo = p.low - half > 0 ? p.low - half : 0.5 * p.low;
  hi = last + half;
}

Status validate_one(const ParamSpec& p) {
  if (p.name.empty()) return err(Errc::kConfig, "a parameter has an empty name");
  switch (p.type) {
    case ParamType::kFloat:
    case ParamType::kInt: {
      if (!std::isfinite(p.low) || !std::isfinite(p.high)) return config_error(p, "bounds must be finite numbers");
      if (p.type == ParamType::kInt && (!is_whole(p.low) || !is_whole(p.high)))
        return config_error(p, "int bounds must be whole numbers (low " + format_number(p.low) + ", high " + format_number(p.high) + ")");
      if (p.low >= p.high)
        return config_error(p, "low (" + format_number(p.low) + ") must be below high (" + format_number(p.high) + ")");
      if (p.log && p.low <= 0)
        return config_error(p, "a log range must be above 0, but low is " + format_number(p.low));
      if (p.type == ParamType::kInt && p.step < 1) return config_error(p, "step must be at least 1, got " + std::to_string(p.step));
      if (p.resolution < 0 || p.resolution == 1)
        return config_error(p, "resolution must be at least 2, got " + std::to_string(p.resolution));
      break;
    }
    case ParamType::kChoice: {
      if (p.choices.empty()) return config_error(p, "a choice needs at least one value");
      std::unordered_set<std::string> seen;
      for (const auto& c : p.choices)
        if (auto key = Space::choice_key(c); key && !seen.insert(*key).second)
          return config_error(p, "the choice " + c.dump() + " is listed twice");
      break;
    }
    case ParamType::kFixed: break;
  }
  return Status::Ok();
}

}  // namespace

Result<Space> Space::create(std::vector<ParamSpec> specs) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    HPCTUNE_TRY(validate_one(specs[i]));
    for (std::size_t j = 0; j < i; ++j)
      if (specs[j].name == specs[i].name) return config_error(specs[i], "the parameter is declared twice").error();
  }
  auto by_name = [&](const std::string& name) -> const ParamSpec* {
    for (const auto& s : specs)
      if (s.name == name) return &s;
    return nullptr;
  };
  for (const auto& p : specs) {
    if (!p.when) continue;
    const auto& c = *p.when;
    if (c.parent == p.name) return config_error(p, "the condition is on the parameter itself").error();
    const ParamSpec* parent = by_name(c.parent);
    if (!parent) return config_error(p, "the condition is on an unknown parameter '" + c.parent + "'").error();
    if (c.values.empty()) return config_error(p, "the condition on '" + c.parent + "' lists no values").error();
    for (const auto& v : c.values) {
      if (!check_value(*parent, v).ok())
        return config_error(p, "the condition value " + v.dump() + " is never taken by '" + c.parent + "'").error();
    }
  }
  // Parents first, otherwise in declaration order; what cannot be placed is on a cycle.
  std::vector<ParamSpec> ordered;
  std::vector<bool> placed(specs.size(), false);
  while (ordered.size() < specs.size()) {
    bool progress = false;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (placed[i]) continue;
      bool ready = !specs[i].when;
      if (!ready)
        for (const auto& o : ordered) ready = ready || o.name == specs[i].when->parent;
      if (ready) {
        ordered.push_back(specs[i]);
        placed[i] = true;
        progress = true;
        break;  // restart from the top, so declaration order wins among the ready ones
      }
    }
    if (!progress) {
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (placed[i]) continue;
        std::string chain = specs[i].name;
        std::string at = specs[i].when->parent;
        std::set<std::string> seen{specs[i].name};
        while (!seen.count(at)) {
          chain += " -> " + at;
          seen.insert(at);
          at = by_name(at)->when->parent;
        }
        chain += " -> " + at;
        return config_error(specs[i], "conditions form a cycle (" + chain + ")").error();
      }
    }
  }
  Space space;
  space.params_ = std::move(ordered);
  return space;
}

const ParamSpec* Space::find(const std::string& name) const noexcept {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

int64_t Space::index_of(const std::string& name) const noexcept {
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

bool Space::active(const ParamSpec& spec, const Params& params) {
  if (!spec.when) return true;
  if (!params.is_object()) return false;
  auto it = params.find(spec.when->parent);
  if (it == params.end()) return false;
  for (const auto& v : spec.when->values)
    if (*it == v) return true;
  return false;
}

int64_t Space::int_levels(const ParamSpec& spec) noexcept {
  if (spec.type != ParamType::kInt || spec.step < 1 || spec.high < spec.low) return 1;
  return static_cast<int64_t>(std::floor((spec.high - spec.low) / static_cast<double>(spec.step))) + 1;
}

std::optional<std::string> Space::choice_key(const nlohmann::json& v) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isnan(x)) return std::nullopt;
    // Not "i" + ...: GCC 12's -Wrestrict false positive (PR 105329).
    if (std::floor(x) == x && std::fabs(x) < 9.2e18) return std::string("i").append(std::to_string(static_cast<int64_t>(x)));
    return std::string("f").append(v.dump());
  }
  if (v.is_number()) return std::string("i").append(v.dump());
  return std::string("j").append(v.dump());
}

int64_t Space::choice_index(const ParamSpec& spec, const nlohmann::json& value) noexcept {
  for (std::size_t i = 0; i < spec.choices.size(); ++i)
    if (spec.choices[i] == value) return static_cast<int64_t>(i);
  return -1;
}

Status Space::check_value(const ParamSpec& p, const nlohmann::json& v) {
  auto bad = [&](const std::string& what) -> Status { return err(Errc::kInvalidArgument, p.name + ": " + what); };
  switch (p.type) {
    case ParamType::kFloat: {
      if (!v.is_number()) return bad("expected a number, got " + v.dump());
      const double x = v.get<double>();
      if (!(x >= p.low && x <= p.high)) return bad(format_number(x) + " is outside [" + format_number(p.low) + ", " + format_number(p.high) + "]");
      return Status::Ok();
    }
    case ParamType::kInt: {
      if (!v.is_number()) return bad("expected an integer, got " + v.dump());
      const double x = v.get<double>();
      if (!is_whole(x)) return bad("expected an integer, got " + v.dump());
      if (x < p.low || x > p.high) return bad(format_number(x) + " is outside [" + format_number(p.low) + ", " + format_number(p.high) + "]");
      const auto off = static_cast<int64_t>(x - p.low);
      if (off % p.step != 0) return bad(format_number(x) + " is not on the step " + std::to_string(p.step) + " from " + format_number(p.low));
      return Status::Ok();
    }
    case ParamType::kChoice:
      if (choice_index(p, v) < 0) return bad(v.dump() + " is not one of " + values_text(p.choices));
      return Status::Ok();
    case ParamType::kFixed:
      if (v != p.value) return bad("expected the fixed value " + p.value.dump() + ", got " + v.dump());
      return Status::Ok();
  }
  return Status::Ok();
}

Status Space::contains(const Params& params) const {
  if (!params.is_object()) return err(Errc::kInvalidArgument, "a configuration must be an object, got " + params.dump());
  for (const auto& p : params_) {
    const bool is_active = active(p, params);
    const bool present = params.contains(p.name);
    if (is_active && !present) return err(Errc::kInvalidArgument, p.name + ": missing");
    if (!is_active && present)
      return err(Errc::kInvalidArgument, p.name + ": present although its condition (" + p.when->parent + " in " +
                                             values_text(p.when->values) + ") does not hold");
    if (present) HPCTUNE_TRY(check_value(p, params.at(p.name)));
  }
  for (auto it = params.begin(); it != params.end(); ++it)
    if (!find(it.key())) return err(Errc::kInvalidArgument, it.key() + ": not a parameter of the search space");
  return Status::Ok();
}

nlohmann::json Space::sample_one(const ParamSpec& spec, Rng& rng) {
  switch (spec.type) {
    case ParamType::kChoice: return spec.choices[rng.below(spec.choices.size())];
    case ParamType::kFixed: return spec.value;
    default: return from_unit(spec, rng.uniform());
  }
}

Params Space::sample(Rng& rng) const {
  Params out = Params::object();
  for (const auto& p : params_)
    if (active(p, out)) out[p.name] = sample_one(p, rng);
  return out;
}

double Space::to_unit(const ParamSpec& spec, const nlohmann::json& value) {
  auto clamp01 = [](double u) { return std::isfinite(u) ? std::clamp(u, 0.0, 1.0) : 0.5; };
  switch (spec.type) {
    case ParamType::kFloat: {
      if (!value.is_number()) return 0.5;
      const double x = value.get<double>();
      if (spec.log) {
        if (x <= 0) return 0.0;
        return clamp01((std::log(x) - std::log(spec.low)) / (std::log(spec.high) - std::log(spec.low)));
      }
      return clamp01((x - spec.low) / (spec.high - spec.low));
    }
    case ParamType::kInt: {
      if (!value.is_number()) return 0.5;
      const double x = value.get<double>();
      const int64_t n = int_levels(spec);
      if (spec.log) {
        double lo, hi;
        log_int_range(spec, lo, hi);
        if (x <= 0) return 0.0;
        return clamp01((std::log(x) - std::log(lo)) / (std::log(hi) - std::log(lo)));
      }
      const double idx = std::clamp(std::round((x - spec.low) / static_cast<double>(spec.step)), 0.0, static_cast<double>(n - 1));
      return (idx + 0.5) / static_cast<double>(n);
    }
    case ParamType::kChoice: {
      const int64_t i = choice_index(spec, value);
      if (i < 0) return 0.5;
      return (static_cast<double>(i) + 0.5) / static_cast<double>(spec.choices.size());
    }
    case ParamType::kFixed: return 0.5;
  }
  return 0.5;
}

nlohmann::json Space::from_unit(const ParamSpec& spec, double u) {
  if (!std::isfinite(u)) u = 0.5;
  u = std::clamp(u, 0.0, 1.0);
  switch (spec.type) {
    case ParamType::kFloat: {
      double x = spec.log ? std::exp(std::log(spec.low) + u * (std::log(spec.high) - std::log(spec.low)))
                          : spec.low + u * (spec.high - spec.low);
      return std::clamp(x, spec.low, spec.high);
    }
    case ParamType::kInt: {
      const int64_t n = int_levels(spec);
      int64_t idx;
      if (spec.log) {
        double lo, hi;
        log_int_range(spec, lo, hi);
        const double x = std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo)));
        idx = static_cast<int64_t>(std::llround((x - spec.low) / static_cast<double>(spec.step)));
      } else {
        idx = static_cast<int64_t>(std::floor(u * static_cast<double>(n)));
      }
      idx = std::clamp<int64_t>(idx, 0, n - 1);
      return static_cast<int64_t>(spec.low) + idx * spec.step;
    }
    case ParamType::kChoice: {
      const auto k = static_cast<int64_t>(spec.choices.size());
      const auto idx = std::clamp<int64_t>(static_cast<int64_t>(std::floor(u * static_cast<double>(k))), 0, k - 1);
      return spec.choices[static_cast<std::size_t>(idx)];
    }
    case ParamType::kFixed: return spec.value;
  }
  return nullptr;
}

Params Space::from_unit_vector(const std::vector<double>& u) const {
  Params out = Params::object();
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (active(params_[i], out)) out[params_[i].name] = from_unit(params_[i], i < u.size() ? u[i] : 0.5);
  return out;
}

void Space::repair(Params& params, Rng& rng) const {
  Params out = Params::object();
  for (const auto& p : params_) {
    if (!active(p, out)) continue;
    if (params.is_object() && params.contains(p.name) && check_value(p, params.at(p.name)).ok())
      out[p.name] = params.at(p.name);
    else
      out[p.name] = sample_one(p, rng);
  }
  params = std::move(out);
}


// --- the finite space --------------------------------------------------------------------------
namespace {

using Count = std::optional<uint64_t>;  // nullopt: infinite (a float) or more than 64 bits hold

Count mul(Count a, Count b) {
  if (!a || !b) return std::nullopt;
  if (*a != 0 && *b > UINT64_MAX / *a) return std::nullopt;
  return *a * *b;
}
Count add(Count a, Count b) {
  if (!a || !b) return std::nullopt;
  if (*b > UINT64_MAX - *a) return std::nullopt;
  return *a + *b;
}

// The number of values a parameter takes; nullopt for a float.
Count levels(const ParamSpec& p) {
  switch (p.type) {
    case ParamType::kFloat: return std::nullopt;
    case ParamType::kInt: return static_cast<uint64_t>(Space::int_levels(p));
    case ParamType::kChoice: return static_cast<uint64_t>(p.choices.size());
    case ParamType::kFixed: return 1;
  }
  return std::nullopt;
}

nlohmann::json level_value(const ParamSpec& p, uint64_t i) {
  switch (p.type) {
    case ParamType::kInt: return static_cast<int64_t>(p.low) + static_cast<int64_t>(i) * p.step;
    case ParamType::kChoice: return p.choices[static_cast<std::size_t>(i)];
    default: return p.value;
  }
}

// A parent with more values than this is not walked value by value (an int over a huge range that
// another parameter depends on): the space then counts as too large to count.
constexpr uint64_t kMaxParentLevels = 100'000;

// Walks the space as the grid search does (grid_search.cpp): parameters nobody depends on just
// multiply; at the first active parent the count is the sum over its values of the rest, given
// that value (which decides which later parameters exist).
struct Walker {
  const std::vector<ParamSpec>& params;
  std::vector<bool> is_parent;

  explicit Walker(const Space& space) : params(space.params()), is_parent(space.size(), false) {
    for (const auto& p : params)
      if (p.when) is_parent[static_cast<std::size_t>(space.index_of(p.when->parent))] = true;
  }

  Count count_from(std::size_t i, Params& partial) const {
    Count mult = 1;
    for (; i < params.size(); ++i) {
      if (!Space::active(params[i], partial)) continue;
      const Count n = levels(params[i]);
      if (!n) return std::nullopt;
      if (!is_parent[i]) {
        mult = mul(mult, n);
        if (!mult) return std::nullopt;
        continue;
      }
      if (*n > kMaxParentLevels) return std::nullopt;
      Count sum = 0;
      for (uint64_t v = 0; v < *n && sum; ++v) {
        partial[params[i].name] = level_value(params[i], v);
        sum = add(sum, count_from(i + 1, partial));
      }
      partial.erase(params[i].name);
      return mul(mult, sum);
    }
    return mult;
  }

  // Sets the parameters from i on to configuration `index` of the subtree below `partial`.
  void unrank(std::size_t i, uint64_t index, Params& partial) const {
    std::vector<std::size_t> plain;  // active non-parents before the next active parent
    auto decode_plain = [&](uint64_t k) {
      for (auto it = plain.rbegin(); it != plain.rend(); ++it) {
        const uint64_t n = *levels(params[*it]);
        partial[params[*it].name] = level_value(params[*it], k % n);
        k /= n;
      }
    };
    for (; i < params.size(); ++i) {
      if (!Space::active(params[i], partial)) continue;
      if (!is_parent[i]) {
        plain.push_back(i);
        continue;
      }
      const uint64_t n = *levels(params[i]);
      std::vector<uint64_t> branch(n);
      uint64_t sum = 0;
      for (uint64_t v = 0; v < n; ++v) {
        partial[params[i].name] = level_value(params[i], v);
        branch[v] = *count_from(i + 1, partial);
        sum += branch[v];
      }
      decode_plain(index / sum);
      uint64_t rest = index % sum, v = 0;
      while (rest >= branch[v]) rest -= branch[v++];
      partial[params[i].name] = level_value(params[i], v);
      unrank(i + 1, rest, partial);
      return;
    }
    decode_plain(index);
  }
};

}  // namespace

std::optional<uint64_t> Space::cardinality() const {
  Params partial = Params::object();
  return Walker(*this).count_from(0, partial);
}

std::optional<Params> Space::point(uint64_t index) const {
  const auto n = cardinality();
  if (!n || index >= *n) return std::nullopt;
  Params partial = Params::object();
  Walker(*this).unrank(0, index, partial);
  // In params() order, as sample() builds them (a JSON object sorts its keys anyway).
  return partial;
}

std::optional<std::vector<Params>> Space::enumerate(uint64_t limit) const {
  const auto n = cardinality();
  if (!n || *n > limit) return std::nullopt;
  std::vector<Params> out;
  out.reserve(static_cast<std::size_t>(*n));
  const Walker walker(*this);
  for (uint64_t k = 0; k < *n; ++k) {
    Params partial = Params::object();
    walker.unrank(0, k, partial);
    out.push_back(std::move(partial));
  }
  return out;
}

std::string Space::config_key(const Params& params) const {
  std::string key;
  if (!params.is_object()) return "!" + params.dump();
  for (const auto& p : params_) {
    auto it = params.find(p.name);
    if (it == params.end() || !active(p, params)) continue;
    key.append(p.name).push_back('\x1f');
    key.append(choice_key(*it).value_or("nan")).push_back('\x1e');
  }
  // Keys outside the space (never in a valid configuration) still make it a different one.
  for (auto it = params.begin(); it != params.end(); ++it)
    if (!find(it.key())) key.append("?").append(it.key()).append("\x1f").append(it.value().dump()).push_back('\x1e');
  return key;
}

}  // namespace hpctune::search
