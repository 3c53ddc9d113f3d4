#include "search/model_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "search/gaussian_process.h"
#include "search/pareto.h"

namespace hpctune::search {

DataPoint make_data_point(const Encoder& encoder, const Observation& obs, const std::vector<Objective>& objectives) {
  DataPoint p;
  p.seq = obs.seq;
  p.u = encoder.encode(obs.params);
  p.outcome = obs.outcome;
  p.step = obs.step;
  if (obs.outcome != Outcome::kFailed) p.losses = observation_losses(obs, objectives);
  if (p.losses.empty()) p.outcome = Outcome::kFailed;
  return p;
}

std::vector<DataPoint> warm_start_points(const Space& space, const Encoder& encoder, const SearchSpec& spec) {
  std::vector<DataPoint> out;
  Rng rng(derive_seed(spec.seed, 0x3A93));
  int64_t k = 0;
  for (const auto& w : spec.warm_start) {
    Observation obs = w;
    space.repair(obs.params, rng);
    obs.seq = -1 - k++;
    out.push_back(make_data_point(encoder, obs, spec.objectives));
  }
  return out;
}

std::vector<double> random_simplex_weights(std::size_t m, Rng& rng) {
  std::vector<double> w(m);
  double sum = 0;
  for (auto& x : w) {
    x = -std::log(1.0 - rng.uniform());  // Exp(1): normalized, uniform on the simplex
    sum += x;
  }
  for (auto& x : w) x /= sum;
  return w;
}

std::vector<double> scalarize(const std::vector<DataPoint>& data, const std::vector<double>& weights) {
  const std::size_t m = weights.size();
  std::vector<double> lo(m, std::numeric_limits<double>::infinity()), hi(m, -std::numeric_limits<double>::infinity());
  for (const auto& p : data) {
    if (p.losses.size() != m) continue;
    for (std::size_t i = 0; i < m; ++i) {
      lo[i] = std::min(lo[i], p.losses[i]);
      hi[i] = std::max(hi[i], p.losses[i]);
    }
  }
  std::vector<double> out;
  out.reserve(data.size());
  for (const auto& p : data) {
    if (p.losses.size() != m) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const double f = hi[i] > lo[i] ? (p.losses[i] - lo[i]) / (hi[i] - lo[i]) : 0.0;
      mx = std::max(mx, weights[i] * f);
      sum += weights[i] * f;
    }
    out.push_back(mx + 0.05 * sum);
  }
  return out;
}

double yeo_johnson(double y, double lambda) noexcept {
  if (y >= 0) return std::fabs(lambda) < 1e-9 ? std::log1p(y) : (std::pow(y + 1.0, lambda) - 1.0) / lambda;
  const double l2 = 2.0 - lambda;
  return std::fabs(l2) < 1e-9 ? -std::log1p(-y) : -(std::pow(1.0 - y, l2) - 1.0) / l2;
}

namespace {

// The profile log likelihood of lambda: -n/2 log var(psi(y)) + (lambda - 1) sum sign(y) log(|y| + 1).
double yeo_johnson_llf(const std::vector<double>& y, double lambda) {
  const auto n = static_cast<double>(y.size());
  double mean = 0, jac = 0;
  std::vector<double> t(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    t[i] = yeo_johnson(y[i], lambda);
    mean += t[i];
    jac += std::copysign(std::log1p(std::fabs(y[i])), y[i]);
  }
  mean /= n;
  double var = 0;
  for (double v : t) var += (v - mean) * (v - mean);
  var /= n;
  if (!(var > 0) || !std::isfinite(var)) return -std::numeric_limits<double>::infinity();
  return -0.5 * n * std::log(var) + (lambda - 1.0) * jac;
}

}  // namespace

double fit_yeo_johnson_lambda(const std::vector<double>& y) {
  if (y.size() < 3) return 1.0;
  // A grid, then golden-section search around its best point: the likelihood is smooth and, on
  // [-2, 4], has one maximum for the data seen here, but a grid start costs little and is safe.
  constexpr double kLo = -2.0, kHi = 4.0;
  constexpr int kGrid = 24;
  double best = 1.0, best_f = yeo_johnson_llf(y, 1.0);
  for (int i = 0; i <= kGrid; ++i) {
    const double l = kLo + (kHi - kLo) * i / kGrid;
    const double f = yeo_johnson_llf(y, l);
    if (f > best_f) best_f = f, best = l;
  }
  const double step = (kHi - kLo) / kGrid;
  double a = std::max(kLo, best - step), b = std::min(kHi, best + step);
  const double g = 0.5 * (std::sqrt(5.0) - 1.0);
  double c = b - g * (b - a), d = a + g * (b - a);
  double fc = yeo_johnson_llf(y, c), fd = yeo_johnson_llf(y, d);
  for (int it = 0; it < 40 && b - a > 1e-6; ++it) {
    if (fc > fd) {
      b = d, d = c, fd = fc;
      c = b - g * (b - a);
      fc = yeo_johnson_llf(y, c);
    } else {
      a = c, c = d, fc = fd;
      d = a + g * (b - a);
      fd = yeo_johnson_llf(y, d);
    }
  }
  const double l = 0.5 * (a + b);
  return yeo_johnson_llf(y, l) >= best_f ? l : best;
}

std::vector<double> copula_transform(const std::vector<double>& y) {
  const std::size_t n = y.size();
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return y[a] < y[b]; });
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && y[order[j + 1]] == y[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + j);  // mean rank of the tie
    const double q = normal_quantile((rank + 0.5) / static_cast<double>(n));
    for (std::size_t k = i; k <= j; ++k) out[order[k]] = q;
    i = j + 1;
  }
  return out;
}

int64_t fidelity_min_points(const Space& space) {
  int64_t d = 0;
  for (const auto& p : space.params()) d += p.type == ParamType::kFixed ? 0 : 1;
  return std::max<int64_t>(d + 1, 6);
}

std::vector<int64_t> fidelity_levels(const Fidelity& fidelity, std::size_t objectives) {
  std::vector<int64_t> out;
  if (fidelity.max_step <= 0) return out;
  if (objectives <= 1)
    for (const int64_t r : fidelity.rungs)
      if (r > 0 && r < fidelity.max_step) out.push_back(r);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  out.push_back(fidelity.max_step);
  return out;
}

namespace {

// Every trial's values at the rungs, in one flat table (a row per trial, a column per rung: the
// RungCache's), built without a container per trial: this runs on every ask.
class RungValues {
 public:
  RungValues(const std::vector<int64_t>& levels, const Fidelity& fidelity, bool maximize, RungCache& table)
      : levels_(levels), rungs_(levels.size() - 1), max_step_(fidelity.max_step), maximize_(maximize),
        value_(table.value), has_(table.has) {}

  // `rows` rows, those from `first` on empty.
  void reset(std::size_t first, std::size_t rows) {
    value_.resize(rows * rungs_);
    has_.resize(rows * rungs_);
    std::fill(has_.begin() + static_cast<std::ptrdiff_t>(std::min(first, rows) * rungs_), has_.end(), 0);
  }

  // Row `row`: each rung takes the first value at a step in [rung, next level), from `reports`
  // (raw values, below max_step, up to `last` when last > 0, finite ones) and `own` (a partial
  // observation's loss at its step, which wins over a report of the same step).
  void fill(std::size_t row, const std::map<int64_t, double>* reports, int64_t last, std::optional<std::pair<int64_t, double>> own) {
    if (own && own->first >= max_step_) own.reset();
    auto take = [&](int64_t step, double loss) {
      const auto k = static_cast<std::size_t>(std::upper_bound(levels_.begin(), levels_.begin() + static_cast<std::ptrdiff_t>(rungs_), step) -
                                              levels_.begin());
      if (k == 0) return;  // below the first rung
      const std::size_t at = row * rungs_ + k - 1;
      if (!has_[at]) has_[at] = 1, value_[at] = loss;
    };
    if (reports) {
      for (const auto& [step, value] : *reports) {
        if (step >= max_step_ || (last > 0 && step > last)) break;  // map order is step order
        if (own && own->first <= step) {
          take(own->first, own->second);
          const bool same = own->first == step;
          own.reset();
          if (same) continue;
        }
        if (std::isfinite(value)) take(step, maximize_ ? -value : value);
      }
    }
    if (own) take(own->first, own->second);
  }

  bool has(std::size_t row, std::size_t k) const { return has_[row * rungs_ + k] != 0; }
  double value(std::size_t row, std::size_t k) const { return value_[row * rungs_ + k]; }

 private:
  const std::vector<int64_t>& levels_;
  std::size_t rungs_;
  int64_t max_step_;
  bool maximize_;
  std::vector<double>& value_;
  std::vector<char>& has_;
};

}  // namespace

LevelData fidelity_model_data(const SearchSpec& spec, const Encoder& encoder, const std::vector<DataPoint>& told,
                              const std::map<int64_t, Params>& pending, const ReportLog& reports, RungCache* cache,
                              uint64_t told_reports) {
  LevelData out;
  out.needed = fidelity_min_points(spec.space);
  const std::size_t m = std::max<std::size_t>(1, spec.objectives.size());
  const std::vector<int64_t> levels = fidelity_levels(spec.fidelity, m);
  if (levels.empty()) return out;
  const std::size_t top = levels.size() - 1;
  const bool maximize = spec.objectives.empty() || spec.objectives.front().maximize;

  // Rows: the told trials in their order, then the pending ones by seq. The top level holds only
  // final values (a told trial's own losses); the rungs come from reports (the primary objective).
  // The told rows come from the cache where it still holds (RungCache), filled from `table.rows` on.
  const std::size_t rows = told.size() + pending.size();
  RungCache local;
  RungCache& table = cache ? *cache : local;
  if (table.told_reports != told_reports || table.rows > told.size() || table.final.size() != table.rows ||
      (table.rows > 0 && told[table.rows - 1].seq != table.last_seq))
    table = RungCache{};
  RungValues rung(levels, spec.fidelity, maximize, table);
  rung.reset(table.rows, rows);
  std::vector<char>& final = table.final;
  final.resize(told.size(), 0);
  auto reports_of = [&](int64_t seq) -> const std::map<int64_t, double>* {
    if (m != 1 || seq < 0) return nullptr;
    auto it = reports.find(seq);
    return it == reports.end() ? nullptr : &it->second;
  };
  for (std::size_t i = table.rows; i < told.size(); ++i) {
    const DataPoint& p = told[i];
    const bool failed = p.losses.empty();
    final[i] = !failed && p.outcome == Outcome::kCompleted && completes_training(p.step, spec.fidelity);
    // A partial value (pruned, or a completed trial short of a full training) belongs to its step only;
    // with several objectives it has no level (the top one needs the final values). A pruned or
    // partial trial never counts above its last step; a failed one's step may be unknown.
    std::optional<std::pair<int64_t, double>> own;
    if (!failed && !final[i] && m == 1 && p.step > 0) own.emplace(p.step, p.losses[0]);
    rung.fill(i, reports_of(p.seq), !final[i] && p.step > 0 ? p.step : 0, own);
  }
  table.rows = told.size();
  table.last_seq = told.empty() ? 0 : told.back().seq;
  table.told_reports = told_reports;
  std::size_t row = told.size();
  for (const auto& [seq, params] : pending) rung.fill(row++, reports_of(seq), 0, std::nullopt);

  auto has = [&](std::size_t r, std::size_t k) { return k == top ? r < told.size() && final[r] : rung.has(r, k); };
  // The highest level with enough values.
  std::optional<std::size_t> chosen;
  for (std::size_t k = 0; k < levels.size(); ++k) {
    int64_t n = 0;
    for (std::size_t r = 0; r < rows; ++r) n += has(r, k) ? 1 : 0;
    out.counts.emplace_back(levels[k], n);
    if (n >= out.needed) chosen = k;
  }
  if (!chosen) return out;
  const std::size_t k = *chosen;
  out.level = levels[k];
  auto at_level = [&](DataPoint p, std::size_t r) {
    if (k != top) p.losses = {rung.value(r, k)};
    p.outcome = Outcome::kCompleted;
    p.step = out.level;
    return p;
  };
  for (std::size_t r = 0; r < told.size(); ++r) {
    if (has(r, k)) out.points.push_back(at_level(told[r], r));
    else if (told[r].losses.empty()) out.points.push_back(told[r]);  // failed, without a value here
    else if (!final[r]) out.stopped.push_back(r);
  }
  row = told.size();
  for (const auto& [seq, params] : pending) {
    const std::size_t r = row++;
    if (!has(r, k)) {
      out.pending.push_back(seq);
      continue;
    }
    DataPoint p;
    p.seq = seq;
    p.u = encoder.encode(params);
    out.points.push_back(at_level(std::move(p), r));
  }
  return out;
}

nlohmann::json fidelity_state(const LevelData& data) {
  nlohmann::json levels = nlohmann::json::array();
  for (const auto& [step, n] : data.counts) levels.push_back({{"step", step}, {"values", n}});
  int64_t values = 0;
  for (const auto& p : data.points) values += p.losses.empty() ? 0 : 1;
  return {{"level", data.level},
          {"needed", data.needed},
          {"observations", values},
          {"pending", data.pending.size()},
          {"stopped", data.stopped.size()},
          {"levels", std::move(levels)}};
}

std::string fidelity_note(const SearchSpec& spec, const std::string& model) {
  const std::vector<int64_t> levels = fidelity_levels(spec.fidelity, std::max<std::size_t>(1, spec.objectives.size()));
  std::string rungs;
  for (std::size_t k = 0; k + 1 < levels.size(); ++k) rungs += (k ? ", " : "") + std::to_string(levels[k]);
  const std::string n = std::to_string(fidelity_min_points(spec.space));
  std::string line = "multi-fidelity: under early stopping (full training at step " + std::to_string(spec.fidelity.max_step) +
                     (rungs.empty() ? "" : ", rungs at " + rungs) + ") the " + model + " is fitted on the values at one level";
  if (levels.size() == 1) {
    line += spec.objectives.size() > 1 ? ", the final values (the reports carry the primary objective only)"
                                       : ", the final values (no rungs)";
    line += ", once " + n + " trials have one";
  } else {
    line += ", the highest of the rungs and the final step with at least " + n + " values (as BOHB)";
  }
  return line + "; a pruned trial counts only at the rungs it reached, and a running or paused one is pending "
                "until it reaches the level; until then the start-up design goes on";
}

}  // namespace hpctune::search
