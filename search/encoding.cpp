#include "search/encoding.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hpctune::search {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

Encoder::Encoder(const Space& space) : specs_(space.params()) {
  parent_.assign(specs_.size(), -1);
  parent_mask_.resize(specs_.size());
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const auto& p = specs_[i];
    if (p.when) {
      parent_[i] = space.index_of(p.when->parent);
      const auto& parent = specs_[static_cast<std::size_t>(parent_[i])];
      if (parent.type == ParamType::kChoice) {
        parent_mask_[i].assign(parent.choices.size(), 0);
        for (const auto& v : p.when->values) {
          const int64_t idx = Space::choice_index(parent, v);
          if (idx >= 0) parent_mask_[i][static_cast<std::size_t>(idx)] = 1;
        }
      }
    }
    feature_offset_.push_back(feature_dims_);
    if (p.type == ParamType::kFixed) continue;
    feature_dims_ += (p.type == ParamType::kChoice && !p.ordered) ? p.choices.size() : 1;
  }
}

bool Encoder::is_numeric(std::size_t i) const noexcept {
  return specs_[i].type == ParamType::kFloat || specs_[i].type == ParamType::kInt;
}
bool Encoder::is_categorical(std::size_t i) const noexcept { return specs_[i].type == ParamType::kChoice; }

std::size_t Encoder::choice_of(double u, std::size_t k) noexcept {
  if (!(u >= 0)) return 0;
  return std::min(k - 1, static_cast<std::size_t>(u * static_cast<double>(k)));
}
double Encoder::unit_of_choice(std::size_t idx, std::size_t k) noexcept {
  return (static_cast<double>(idx) + 0.5) / static_cast<double>(k);
}

std::vector<double> Encoder::encode(const Params& params) const {
  std::vector<double> u(specs_.size(), kNaN);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (!active(i, u)) continue;
    const auto& p = specs_[i];
    if (!params.is_object() || !params.contains(p.name)) continue;
    u[i] = Space::to_unit(p, params.at(p.name));
  }
  return u;
}

Params Encoder::decode(const std::vector<double>& u) const {
  Params out = Params::object();
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (std::isnan(u[i]) || !active(i, u)) continue;
    out[specs_[i].name] = Space::from_unit(specs_[i], u[i]);
  }
  return out;
}

bool Encoder::active(std::size_t i, const std::vector<double>& u) const {
  if (parent_[i] < 0) return true;
  const auto pi = static_cast<std::size_t>(parent_[i]);
  const double pu = u[pi];
  if (std::isnan(pu) || !active(pi, u)) return false;
  const auto& parent = specs_[pi];
  if (parent.type == ParamType::kChoice) return parent_mask_[i][choice_of(pu, parent.choices.size())] != 0;
  const nlohmann::json v = Space::from_unit(parent, pu);
  for (const auto& c : specs_[i].when->values)
    if (v == c) return true;
  return false;
}

void Encoder::canonicalize(std::vector<double>& u) const {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (std::isnan(u[i])) continue;
    const auto& p = specs_[i];
    switch (p.type) {
      case ParamType::kFloat: u[i] = std::clamp(u[i], 0.0, 1.0); break;
      case ParamType::kInt: u[i] = Space::to_unit(p, Space::from_unit(p, u[i])); break;
      case ParamType::kChoice: u[i] = unit_of_choice(choice_of(u[i], p.choices.size()), p.choices.size()); break;
      case ParamType::kFixed: u[i] = 0.5; break;
    }
  }
}

void Encoder::repair(std::vector<double>& u, Rng& rng) const {
  u.resize(specs_.size(), kNaN);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (!active(i, u)) {
      u[i] = kNaN;
      continue;
    }
    if (std::isnan(u[i])) u[i] = rng.uniform();
  }
  canonicalize(u);
}

void Encoder::features(const std::vector<double>& u, double* out) const {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const auto& p = specs_[i];
    if (p.type == ParamType::kFixed) continue;
    double* f = out + feature_offset_[i];
    if (p.type == ParamType::kChoice && !p.ordered) {
      const std::size_t k = p.choices.size();
      std::fill(f, f + k, 0.0);
      if (!std::isnan(u[i])) f[choice_of(u[i], k)] = 1.0;
    } else if (std::isnan(u[i])) {
      f[0] = 0.5;
    } else if (p.type == ParamType::kInt) {
      // Rounded inside (Garrido-Merchan & Hernandez-Lobato 2020): every point of a level has the
      // features of the level, so the model is flat within it and no acquisition prefers one of them.
      f[0] = Space::to_unit(p, Space::from_unit(p, u[i]));
    } else if (p.type == ParamType::kChoice) {
      f[0] = unit_of_choice(choice_of(u[i], p.choices.size()), p.choices.size());
    } else {
      f[0] = u[i];
    }
  }
}

void Encoder::mutate(std::vector<double>& u, double rate, double sigma, Rng& rng, bool at_least_one) const {
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (std::isnan(u[i]) || specs_[i].type == ParamType::kFixed) continue;
    if (specs_[i].type == ParamType::kChoice && specs_[i].choices.size() < 2) continue;
    if (specs_[i].type == ParamType::kInt && Space::int_levels(specs_[i]) < 2) continue;
    candidates.push_back(i);
  }
  if (candidates.empty()) return;
  auto mutate_one = [&](std::size_t i) {
    const auto& p = specs_[i];
    if (p.type == ParamType::kChoice && !p.ordered) {
      const std::size_t k = p.choices.size();
      const std::size_t cur = choice_of(u[i], k);
      std::size_t next = static_cast<std::size_t>(rng.below(k - 1));
      if (next >= cur) ++next;
      u[i] = unit_of_choice(next, k);
      return;
    }
    if (p.type == ParamType::kChoice || (p.type == ParamType::kInt && !p.log)) {
      // Ordinal: a step of k levels, k = max(1, round(|N(0, 1)| * sigma * levels)), up or down
      // at random, reflected at the ends. sigma is the same unit-space step as for numbers, but
      // counted in levels and never 0: for a few levels that is +-1 almost always (a 6-level
      // parameter with sigma 0.15: +-1 in 9 of 10 mutations, +-2 in the rest), for many levels
      // it is the Gaussian step. A Gaussian step in unit space would mostly round back to the
      // same level; a uniformly random level would ignore the order.
      const bool choice = p.type == ParamType::kChoice;
      const auto n = static_cast<int64_t>(choice ? p.choices.size() : static_cast<std::size_t>(Space::int_levels(p)));
      const int64_t cur = choice ? static_cast<int64_t>(choice_of(u[i], static_cast<std::size_t>(n)))
                                 : (Space::from_unit(p, u[i]).get<int64_t>() - static_cast<int64_t>(p.low)) / p.step;
      const auto k = std::max<int64_t>(1, std::llround(std::fabs(rng.normal()) * sigma * static_cast<double>(n)));
      int64_t to = cur + (rng.bernoulli(0.5) ? k : -k);
      const int64_t period = 2 * (n - 1);
      to = ((to % period) + period) % period;  // reflect into [0, n - 1]
      if (to > n - 1) to = period - to;
      if (to == cur) to = cur == 0 ? 1 : cur - 1;  // a reflection back onto the start: one step instead
      u[i] = choice ? unit_of_choice(static_cast<std::size_t>(to), static_cast<std::size_t>(n))
                    : Space::to_unit(p, static_cast<int64_t>(p.low) + to * p.step);
      return;
    }
    const double before = u[i];
    for (int attempt = 0; attempt < 8; ++attempt) {
      double x = before + rng.normal() * sigma;
      // Reflect into [0, 1].
      x = std::fmod(std::fabs(x), 2.0);
      if (x > 1.0) x = 2.0 - x;
      u[i] = x;
      if (p.type != ParamType::kInt) return;
      const double snapped = Space::to_unit(p, Space::from_unit(p, x));
      if (snapped != before) return;  // an int step must change the value
    }
    // Still the same (log-scaled) int: move one step.
    const int64_t n = Space::int_levels(p);
    const auto v = Space::from_unit(p, before).get<int64_t>();
    const int64_t idx = (v - static_cast<int64_t>(p.low)) / p.step;
    const int64_t to = idx == 0 ? 1 : (idx == n - 1 ? n - 2 : (rng.bernoulli(0.5) ? idx + 1 : idx - 1));
    u[i] = Space::to_unit(p, static_cast<int64_t>(p.low) + to * p.step);
  };
  bool any = false;
  for (std::size_t i : candidates) {
    if (rng.bernoulli(rate)) {
      mutate_one(i);
      any = true;
    }
  }
  if (!any && at_least_one) mutate_one(candidates[rng.below(candidates.size())]);
  repair(u, rng);
}

}  // namespace hpctune::search
