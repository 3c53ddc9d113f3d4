#include "search/grid_search.h"

#include <algorithm>

#include <cmath>
#include <limits>
#include <set>

#include "search/searcher_base.h"

namespace hpctune::search {

std::vector<SettingDecl> grid_search_settings() {
  return {
      {"shuffle", SettingType::kBool, false, -INFINITY, INFINITY, {}, "visit the grid in a seeded random order"},
  };
}

Result<std::vector<nlohmann::json>> grid_values(const ParamSpec& p) {
  std::vector<nlohmann::json> out;
  switch (p.type) {
    case ParamType::kFloat: {
      if (p.resolution < 2)
        return err(Errc::kConfig, p.name + ": a grid over a float needs a resolution (the number of grid points)");
      for (int64_t i = 0; i < p.resolution; ++i) {
        const double u = static_cast<double>(i) / static_cast<double>(p.resolution - 1);
        out.push_back(Space::from_unit(p, u));
      }
      out.front() = p.low;  // exact ends, whatever the rounding of exp(log(x))
      out.back() = p.high;
      break;
    }
    case ParamType::kInt: {
      const int64_t n = Space::int_levels(p);
      if (p.resolution >= 2 && p.resolution < n) {
        std::set<int64_t> seen;
        for (int64_t i = 0; i < p.resolution; ++i) {
          double x;
          const double u = static_cast<double>(i) / static_cast<double>(p.resolution - 1);
          if (p.log) x = std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
          else x = p.low + u * (p.high - p.low);
          int64_t idx = std::llround((x - p.low) / static_cast<double>(p.step));
          idx = std::clamp<int64_t>(idx, 0, n - 1);
          const int64_t v = static_cast<int64_t>(p.low) + idx * p.step;
          if (seen.insert(v).second) out.push_back(v);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int64_t>(p.low) + i * p.step);
      }
      break;
    }
    case ParamType::kChoice: out = p.choices; break;
    case ParamType::kFixed: out.push_back(p.value); break;
  }
  return out;
}

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t sat_add(int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; }
int64_t sat_mul(int64_t a, int64_t b) { return (a != 0 && b > kMax / a) ? kMax : a * b; }

struct GridPlan {
  const Space* space;
  std::vector<std::vector<nlohmann::json>> values;
  std::vector<bool> is_parent;
};

// Points below parameter i given the partial configuration: branches only on parents, whose value
// decides which later parameters exist; every other parameter just multiplies.
int64_t count_from(const GridPlan& plan, std::size_t i, Params& partial) {
  const auto& params = plan.space->params();
  int64_t mult = 1;
  for (; i < params.size(); ++i) {
    if (!Space::active(params[i], partial)) continue;
    if (!plan.is_parent[i]) {
      mult = sat_mul(mult, static_cast<int64_t>(plan.values[i].size()));
      continue;
    }
    int64_t sum = 0;
    for (const auto& v : plan.values[i]) {
      partial[params[i].name] = v;
      sum = sat_add(sum, count_from(plan, i + 1, partial));
    }
    partial.erase(params[i].name);
    return sat_mul(mult, sum);
  }
  return mult;
}

void enumerate(const GridPlan& plan, std::size_t i, Params& partial, std::vector<Params>& out) {
  const auto& params = plan.space->params();
  while (i < params.size() && !Space::active(params[i], partial)) ++i;
  if (i == params.size()) {
    out.push_back(partial);
    return;
  }
  for (const auto& v : plan.values[i]) {
    partial[params[i].name] = v;
    enumerate(plan, i + 1, partial, out);
  }
  partial.erase(params[i].name);
}

// The grid of a parameter is never larger than the whole grid, so a parameter with more values
// than `limit` is refused before its values are listed (an int over 0..9e18, a float with a
// resolution of 9.2e18 would otherwise be enumerated until memory runs out).
Result<GridPlan> plan_for(const Space& space, int64_t limit) {
  GridPlan plan{&space, {}, std::vector<bool>(space.size(), false)};
  for (const auto& p : space.params()) {
    const int64_t n = grid_value_count(p);
    if (n > limit)
      return err(Errc::kConfig, p.name + ": " + std::to_string(n) + " grid values, more than the " +
                                    std::to_string(limit) + " points the grid may have" +
                                    (p.type == ParamType::kInt ? " (raise step or give a resolution)"
                                                               : " (lower the resolution)"));
    HPCTUNE_ASSIGN(auto v, grid_values(p));
    plan.values.push_back(std::move(v));
    if (p.when) plan.is_parent[static_cast<std::size_t>(space.index_of(p.when->parent))] = true;
  }
  return plan;
}

class GridSearch final : public SearcherBase {
 public:
  GridSearch(const SearchSpec& spec, std::vector<Params> points, bool shuffle)
      : SearcherBase(spec), points_(std::move(points)), shuffle_(shuffle) {
    if (shuffle_) {
      Rng rng(derive_seed(spec.seed, 0x6121D));
      for (std::size_t i = points_.size(); i > 1; --i) std::swap(points_[i - 1], points_[rng.below(i)]);
    }
  }
  std::string name() const override { return "grid"; }
  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    while (out.size() < n && next_seq() < static_cast<int64_t>(points_.size()))
      out.push_back(issue(points_[static_cast<std::size_t>(next_seq())]));
    return out;
  }
  bool exhausted() const override { return next_seq() >= static_cast<int64_t>(points_.size()); }

 private:
  void on_tell(const Observation&) override {}
  void add_state(nlohmann::json& s) const override {
    s["grid_size"] = points_.size();
    s["shuffle"] = shuffle_;
  }
  std::vector<Params> points_;
  bool shuffle_;
};

}  // namespace

int64_t grid_value_count(const ParamSpec& p) {
  switch (p.type) {
    case ParamType::kFloat: return p.resolution;
    case ParamType::kInt: {
      const int64_t n = Space::int_levels(p);
      return p.resolution >= 2 && p.resolution < n ? p.resolution : n;
    }
    case ParamType::kChoice: return static_cast<int64_t>(p.choices.size());
    case ParamType::kFixed: return 1;
  }
  return 1;
}

Result<int64_t> grid_size(const Space& space, int64_t limit) {
  HPCTUNE_ASSIGN(auto plan, plan_for(space, limit));
  Params partial = Params::object();
  return count_from(plan, 0, partial);
}

Result<std::unique_ptr<Searcher>> make_grid_search(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto settings, resolve_settings("grid", grid_search_settings(), spec.settings));
  // Without a budget, still refuse a grid nobody could run (and we could not hold in memory).
  const int64_t limit = spec.max_trials > 0 ? std::min(spec.max_trials, kMaxGridPoints) : kMaxGridPoints;
  HPCTUNE_ASSIGN(auto plan, plan_for(spec.space, limit));
  Params partial = Params::object();
  const int64_t size = count_from(plan, 0, partial);
  if (size > limit) {
    const std::string size_text = size == kMax ? "more than " + std::to_string(kMax) : std::to_string(size);
    return err(Errc::kConfig, "grid: the grid has " + size_text + " points, more than " +
                                  (limit == spec.max_trials ? "max_trials (" + std::to_string(spec.max_trials) + ")"
                                                            : std::to_string(kMaxGridPoints)) +
                                  "; lower the resolutions or raise max_trials");
  }
  std::vector<Params> points;
  points.reserve(static_cast<std::size_t>(size));
  enumerate(plan, 0, partial, points);
  return std::unique_ptr<Searcher>(std::make_unique<GridSearch>(spec, std::move(points), settings["shuffle"].get<bool>()));
}

}  // namespace hpctune::search
