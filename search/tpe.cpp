#include "search/tpe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "search/encoding.h"
#include "search/initial_design.h"
#include "search/model_data.h"
#include "search/pareto.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLogSqrt2Pi = 0.91893853320467274178;
}  // namespace

std::vector<SettingDecl> tpe_settings() {
  SettingDecl n_startup{"n_startup", SettingType::kInt, nullptr, 0, 1000000, {}, "random suggestions until this many trials finished"};
  n_startup.default_note = "min(clamp(ceil(d / 2), 5, 10), max(2, max_trials / 4)), d the searched parameters";
  return {
      n_startup,
      {"init", SettingType::kString, "uniform", -kInf, kInf, {"uniform", "sobol", "lhs"}, "startup design"},
      {"n_ei_candidates", SettingType::kInt, 24, 1, 100000, {}, "samples from l(x) per suggestion"},
      {"multivariate", SettingType::kBool, true, -kInf, kInf, {}, "joint estimator over parameters that occur together"},
      {"group", SettingType::kBool, true, -kInf, kInf, {}, "with multivariate, conditional parameters jointly per condition"},
      {"constant_liar", SettingType::kBool, true, -kInf, kInf, {}, "running trials count as the worst"},
      {"gamma", SettingType::kFloat, 0.1, 0.001, 1.0, {}, "fraction of trials in the good group"},
      {"gamma_max", SettingType::kInt, 25, 1, 1000000, {}, "cap on the good group"},
      {"prior_weight", SettingType::kFloat, 1.0, 0.0, 1e6, {}, "weight of the prior kernel"},
      {"magic_clip", SettingType::kBool, true, -kInf, kInf, {}, "lower bound on the bandwidths"},
  };
}

namespace {

struct TpeConfig {
  int64_t n_startup;
  DesignKind init;
  int64_t n_ei_candidates;
  bool multivariate;
  bool group;
  bool constant_liar;
  double gamma;
  int64_t gamma_max;
  double prior_weight;
  bool magic_clip;
};

// Optuna's default_weights: flat up to 25, then a ramp from 1/n for the oldest.
std::vector<double> default_weights(std::size_t n) {
  std::vector<double> w(n, 1.0);
  if (n < 25) return w;
  const std::size_t ramp = n - 25;
  for (std::size_t i = 0; i < ramp; ++i)
    w[i] = ramp == 1 ? 1.0 / static_cast<double>(n)
                     : 1.0 / static_cast<double>(n) + (1.0 - 1.0 / static_cast<double>(n)) * static_cast<double>(i) /
                                                          static_cast<double>(ramp - 1);
  return w;
}

double log_sum_exp(const double* v, std::size_t n) {
  double mx = -kInf;
  for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (v[i] - mx > -40.0) s += std::exp(v[i] - mx);  // the rest adds less than 4e-18 each
  return mx + std::log(s);
}

double phi_cdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

// A mixture of truncated Gaussians on [0, 1] (the weights live in the Mixture that holds it).
struct Numeric1D {
  std::vector<double> mu, sigma;
  std::vector<double> log_mass;  // log of each kernel's mass in [0, 1]
  std::vector<double> log_sigma;  // log(sigma), once per kernel rather than per density
  std::vector<std::vector<double>> level_log_prob;  // discrete, few levels: [level][kernel]

  void finish() {
    log_mass.resize(mu.size());
    log_sigma.resize(mu.size());
    for (std::size_t k = 0; k < mu.size(); ++k) {
      log_sigma[k] = std::log(sigma[k]);
      // Far from both ends the truncation removes less than 1e-15 of the mass.
      const bool inside = mu[k] > 8 * sigma[k] && 1 - mu[k] > 8 * sigma[k];
      const double mass = inside ? 1.0 : phi_cdf((1 - mu[k]) / sigma[k]) - phi_cdf(-mu[k] / sigma[k]);
      log_mass[k] = std::log(std::max(mass, 1e-300));
    }
  }
  // Kernel k's log density at x (a continuous parameter).
  double kernel_log_pdf(std::size_t k, double x) const {
    const double z = (x - mu[k]) / sigma[k];
    return -0.5 * z * z - log_sigma[k] - kLogSqrt2Pi - log_mass[k];
  }
  // Kernel k's log probability of [a, b] (a level of a discrete parameter), as Optuna's discrete
  // truncated normal: the mass of the level's interval over the mass of [0, 1].
  double kernel_log_prob(std::size_t k, double a, double b) const {
    const double za = (a - mu[k]) / sigma[k], zb = (b - mu[k]) / sigma[k];
    // The difference of the tails on the side away from the mean keeps its precision.
    const double mass = za > 0 ? 0.5 * (std::erfc(za / std::numbers::sqrt2) - std::erfc(zb / std::numbers::sqrt2))
                               : 0.5 * (std::erfc(-zb / std::numbers::sqrt2) - std::erfc(-za / std::numbers::sqrt2));
    if (mass > 1e-280) return std::log(mass) - log_mass[k];
    // Deep in a tail: the density at the nearer end times the width bounds it well enough.
    const double z = za > 0 ? za : -zb;
    return -0.5 * z * z - log_sigma[k] - kLogSqrt2Pi + std::log(std::max(b - a, 1e-300)) - log_mass[k];
  }
  double sample_kernel(std::size_t k, Rng& rng) const {
    for (int i = 0; i < 64; ++i) {
      const double x = rng.normal(mu[k], sigma[k]);
      if (x >= 0 && x <= 1) return x;
    }
    return std::clamp(mu[k], 0.0, 1.0);
  }
};

struct Categorical1D {
  std::vector<double> log_w;                // per kernel (the univariate estimator's own weights)
  std::vector<std::vector<double>> log_p;   // [kernel][choice]
};

std::size_t pick(const std::vector<double>& log_w, Rng& rng) {
  double mx = -kInf;
  for (double v : log_w) mx = std::max(mx, v);
  double total = 0;
  for (double v : log_w) total += std::exp(v - mx);
  double x = rng.uniform() * total;
  for (std::size_t k = 0; k < log_w.size(); ++k) {
    x -= std::exp(log_w[k] - mx);
    if (x < 0) return k;
  }
  return log_w.size() - 1;
}

// How TPE treats a parameter: a continuous density, a discrete one (ints and ordered choices: a
// level's probability is the mass of its interval), or a histogram (unordered choices).
enum class Kind { kContinuous, kDiscrete, kCategorical, kFixed };

// A Parzen estimator over the parameters of one group: product kernels with shared weights.
struct Mixture {
  std::vector<double> log_w;         // per kernel, normalized
  std::vector<Numeric1D> num;        // per dim of the group (numeric dims)
  std::vector<Categorical1D> cat;    // per dim of the group (categorical dims)
};

// Points in unit coordinates, by address (an estimator reads them; at 20,000 trials a copy of each
// on every ask cost more than reading them).
using Points = std::vector<const std::vector<double>*>;

// The finished trials with a value and the failed ones (split()), when any failed.
struct Feasibility {
  Points ok, failed;
};

// A group of parameters sampled together: the unconditional ones, or the ones sharing a
// condition (multivariate), or one parameter (univariate).
struct Group {
  std::vector<std::size_t> dims;
  bool joint = false;  // Scott-like bandwidth over the group; else the univariate neighbour rule
};

class Tpe final : public SearcherBase {
 public:
  Tpe(const SearchSpec& spec, const TpeConfig& cfg)
      : SearcherBase(spec), cfg_(cfg), enc_(space()), design_(space(), cfg.init, spec.seed, std::max<int64_t>(cfg.n_startup, 1)) {
    data_ = warm_start_points(space(), enc_, this->spec());
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      const auto& p = enc_.spec(i);
      kind_.push_back(p.type == ParamType::kFixed                           ? Kind::kFixed
                      : p.type == ParamType::kFloat                         ? Kind::kContinuous
                      : p.type == ParamType::kInt || p.ordered              ? Kind::kDiscrete
                                                                            : Kind::kCategorical);
    }
    make_groups();
  }

  std::string name() const override { return "tpe"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    for (std::size_t i = 0; i < n; ++i) {
      const int64_t seq = next_seq();
      // The start-up counts the failed trials too (where trials fail is what the model learns
      // first on a space that mostly fails: counting only values, tpe drew 18 of 20 trials at random
      // where 70% of the space diverges), once one has a value. Under early stopping the model also
      // waits for a level with enough values (model_data.h).
      const auto [usable, failed] = finished_counts();
      const bool startup = usable + failed < std::max<int64_t>(cfg_.n_startup, 2) || usable < 1;
      LevelData level;
      if (!startup && multi_fidelity()) level = level_data();
      if (startup || (multi_fidelity() && level.level == 0)) {
        out.push_back(issue(design_.point(seq), {{"source", "startup"}}));
        continue;
      }
      Rng rng = rng_for(seq, 0x7E);
      out.push_back(issue(enc_.decode(suggest(rng, level)), {{"source", "model"}}));
    }
    return out;
  }

  void add_notes(std::vector<std::string>& out) const override {
    out.push_back(startup_note());
    if (multi_fidelity()) out.push_back(fidelity_note(spec(), "Parzen estimators' split"));
  }

  void add_state(nlohmann::json& s) const override {
    if (multi_fidelity()) s["fidelity"] = fidelity_state(level_data());
  }

 private:
  void on_tell(const Observation& obs) override { data_.push_back(make_data_point(enc_, obs, objectives())); }

  // "startup: 10 trials of 16; model from trial 11": the trials before the model is first used
  // when trials run one at a time (the warm-start trials count towards n_startup).
  std::string startup_note() const {
    const int64_t warm = finished_counts().first;
    const int64_t first_model = std::max<int64_t>(std::max<int64_t>(cfg_.n_startup, 2) - warm, 0) + 1;
    const int64_t budget = spec().max_trials;
    std::string line = "startup: " + std::to_string(first_model - 1) + " trials";
    if (budget > 0) line += " of " + std::to_string(budget);
    if (warm > 0) line += " (after " + std::to_string(warm) + " warm-start trials)";
    if (budget > 0 && first_model > budget)
      return line + "; the model is never used (lower search.settings.n_startup or raise search.max_trials)";
    return line + "; model from trial " + std::to_string(first_model);
  }

  void make_groups() {
    std::map<std::string, std::size_t> by_condition;
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      if (kind_[i] == Kind::kFixed) continue;
      const auto& when = enc_.spec(i).when;
      if (!cfg_.multivariate || (when && !cfg_.group)) {
        groups_.push_back({{i}, false});
        continue;
      }
      std::string key;
      if (when) {
        key = when->parent;
        for (const auto& v : when->values) key.append("\n").append(v.dump());
      }
      auto [it, fresh] = by_condition.emplace(key, groups_.size());
      if (fresh) groups_.push_back({{}, true});
      groups_[it->second].dims.push_back(i);
    }
    // Parents first: a group's parent is in a group that starts before it.
    std::stable_sort(groups_.begin(), groups_.end(), [](const Group& a, const Group& b) { return a.dims[0] < b.dims[0]; });
  }

  // The finished (and warm-start) trials with a value, and the failed ones.
  std::pair<int64_t, int64_t> finished_counts() const {
    int64_t usable = 0;
    for (const auto& p : data_) usable += p.losses.empty() ? 0 : 1;
    return {usable, static_cast<int64_t>(data_.size()) - usable};
  }

  // Under early stopping, the values at one level and the trials pending there (model_data.h),
  // from the current history: a pure function of it, so it is rebuilt on every use.
  LevelData level_data() const {
    return fidelity_model_data(spec(), enc_, data_, pending(), reports(), &rung_cache_, told_reports());
  }

  // The indices of `usable`, best first: completed trials before partial ones (the later step
  // first), then by loss; with several objectives by non-dominated front, then crowding distance.
  std::vector<std::size_t> ranked(const std::vector<const DataPoint*>& usable) const {
    std::vector<std::size_t> rank(usable.size());
    std::iota(rank.begin(), rank.end(), 0);
    if (num_objectives() == 1) {
      std::stable_sort(rank.begin(), rank.end(), [&](std::size_t a, std::size_t b) {
        const DataPoint& x = *usable[a];
        const DataPoint& y = *usable[b];
        const bool xc = x.outcome == Outcome::kCompleted, yc = y.outcome == Outcome::kCompleted;
        if (xc != yc) return xc;
        if (!xc && x.step != y.step) return x.step > y.step;
        return x.losses[0] < y.losses[0];
      });
    } else {
      std::vector<std::vector<double>> losses;
      for (const auto* p : usable) losses.push_back(p->losses);
      rank.clear();
      for (const auto& front : nondominated_sort(losses)) {
        const auto cd = crowding_distance(losses, front);
        std::vector<std::size_t> order(front.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cd[a] > cd[b]; });
        for (std::size_t o : order) rank.push_back(front[o]);
      }
    }
    return rank;
  }

  // Splits the data (plus running trials, as the worst) into below/above, each in seq order. Under
  // early stopping, the data at the level modelled (`level`, this ask's level_data()); its running
  // trials those that have not reached it; the trials stopped below it are above too
  // (model_data.h: a pruned trial is bad, where Optuna ranks it). A failed trial (no value: a
  // crash, a diverged training) is above, as the GP counts it the worst loss: left out, as Optuna
  // leaves it, l(x)/g(x) never learns where trials fail, and a good group peaked at the edge of a
  // diverging region kept proposing past it (24 of 30 trials failed on such a space, 4 for the
  // GP). `feasibility`, when any failed: the trials with a value and the failed ones (score()).
  void split(const LevelData& level, Points& below, Points& above, Feasibility* feasibility = nullptr) const {
    const std::vector<DataPoint>& data = multi_fidelity() ? level.points : data_;
    const std::size_t running = multi_fidelity() ? level.pending.size() : pending().size();
    std::vector<const DataPoint*> usable, failed;
    for (const auto& p : data) (p.losses.empty() ? failed : usable).push_back(&p);
    if (feasibility && !failed.empty()) {
      for (const auto* p : usable) feasibility->ok.push_back(&p->u);
      for (const auto* p : failed) feasibility->failed.push_back(&p->u);
    }
    const std::size_t n_total = usable.size() + (cfg_.constant_liar ? running : 0);
    const auto n_below = std::min<std::size_t>(
        std::min<std::size_t>(static_cast<std::size_t>(std::ceil(cfg_.gamma * static_cast<double>(n_total))),
                              static_cast<std::size_t>(cfg_.gamma_max)),
        usable.size());
    const std::vector<std::size_t> rank = ranked(usable);
    std::vector<char> is_below(usable.size() + failed.size(), 0);
    for (std::size_t r = 0; r < n_below; ++r) is_below[rank[r]] = 1;
    // Seq order within each group (data_ is in tell order; sort by seq). The failed trials follow
    // the usable ones in `usable`, none of them below.
    usable.insert(usable.end(), failed.begin(), failed.end());
    std::vector<std::size_t> by_seq(usable.size());
    std::iota(by_seq.begin(), by_seq.end(), 0);
    std::stable_sort(by_seq.begin(), by_seq.end(), [&](std::size_t a, std::size_t b) { return usable[a]->seq < usable[b]->seq; });
    for (std::size_t i : by_seq) (is_below[i] ? below : above).push_back(&usable[i]->u);
    if (multi_fidelity())
      for (std::size_t r : level.stopped) above.push_back(&data_[r].u);  // stopped below the level
    if (!cfg_.constant_liar) return;
    auto lie = [&](int64_t seq, const Params& params) { above.push_back(&running_trial(seq, params).u); };
    if (multi_fidelity()) for_each_pending(level.pending, pending(), lie);
    else for (const auto& [seq, params] : pending()) lie(seq, params);
  }

  // --- discrete parameters: levels and their intervals in unit space --------------------------
  std::size_t levels(std::size_t i) const {
    const auto& p = enc_.spec(i);
    return p.type == ParamType::kChoice ? p.choices.size() : static_cast<std::size_t>(Space::int_levels(p));
  }
  std::size_t level_of(std::size_t i, double u) const {
    const auto& p = enc_.spec(i);
    if (p.type == ParamType::kChoice) return Encoder::choice_of(u, p.choices.size());
    if (!p.log) return Encoder::choice_of(u, levels(i));  // the same floor(u n) as Space::from_unit
    return static_cast<std::size_t>((Space::from_unit(p, u).get<int64_t>() - static_cast<int64_t>(p.low)) / p.step);
  }
  double level_centre(std::size_t i, std::size_t idx) const {
    const auto& p = enc_.spec(i);
    if (p.type == ParamType::kChoice) return Encoder::unit_of_choice(idx, p.choices.size());
    return Space::to_unit(p, static_cast<int64_t>(p.low) + static_cast<int64_t>(idx) * p.step);
  }
  // The unit interval that decodes to level idx: [idx/n, (idx+1)/n] for choices and linear ints
  // (level v covers [v - step/2, v + step/2], as Optuna's int distributions), the same in log
  // space for log-scaled ints (Space's log range runs from low - step/2 to high + step/2).
  void level_bounds(std::size_t i, std::size_t idx, double& a, double& b) const {
    const auto& p = enc_.spec(i);
    const std::size_t n = levels(i);
    if (p.type == ParamType::kChoice || !p.log) {
      a = static_cast<double>(idx) / static_cast<double>(n);
      b = static_cast<double>(idx + 1) / static_cast<double>(n);
      return;
    }
    const double half = 0.5 * static_cast<double>(p.step);
    const double last = p.low + static_cast<double>(n - 1) * static_cast<double>(p.step);
    const double lo = p.low - half > 0 ? p.low - half : 0.5 * p.low, hi = last + half;
    auto unit = [&](double x) { return std::clamp((std::log(x) - std::log(lo)) / (std::log(hi) - std::log(lo)), 0.0, 1.0); };
    const double v = p.low + static_cast<double>(idx) * static_cast<double>(p.step);
    a = idx == 0 ? 0.0 : unit(v - half);
    b = idx + 1 == n ? 1.0 : unit(v + half);
  }

  // Univariate estimator of a numeric parameter from the points where it is active: kernels at
  // the observations with bandwidths from the neighbours, plus the prior. Writes the weights.
  Numeric1D numeric_estimator(const std::vector<double>& xs, const std::vector<double>& w, double prior_weight,
                              std::vector<double>& log_w) const {
    Numeric1D e;
    const std::size_t n = xs.size();
    const double prior_mu = 0.5;
    std::vector<double> mus = xs;
    if (prior_weight > 0) mus.push_back(prior_mu);
    std::vector<std::size_t> order(mus.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return mus[a] < mus[b]; });
    std::vector<double> sorted(mus.size() + 2);
    sorted[0] = 0.0;
    for (std::size_t k = 0; k < order.size(); ++k) sorted[k + 1] = mus[order[k]];
    sorted.back() = 1.0;
    std::vector<double> sig_sorted(order.size());
    for (std::size_t k = 0; k < order.size(); ++k)
      sig_sorted[k] = std::max(sorted[k + 1] - sorted[k], sorted[k + 2] - sorted[k + 1]);
    if (order.size() >= 2) {  // consider_endpoints = false
      sig_sorted[0] = sorted[2] - sorted[1];
      sig_sorted[order.size() - 1] = sorted[order.size()] - sorted[order.size() - 1];
    }
    std::vector<double> sig(mus.size());
    for (std::size_t k = 0; k < order.size(); ++k) sig[order[k]] = sig_sorted[k];
    const double minsigma = cfg_.magic_clip ? 1.0 / std::min(100.0, 1.0 + static_cast<double>(mus.size())) : 1e-12;
    double wsum = prior_weight;
    for (double x : w) wsum += x;
    log_w.clear();
    for (std::size_t k = 0; k < n; ++k) {
      e.mu.push_back(xs[k]);
      e.sigma.push_back(std::clamp(sig[k], minsigma, 1.0));
      log_w.push_back(std::log(w[k] / wsum));
    }
    if (prior_weight > 0) {
      e.mu.push_back(prior_mu);
      e.sigma.push_back(1.0);
      log_w.push_back(std::log(prior_weight / wsum));
    }
    e.finish();
    return e;
  }

  // Optuna's categorical kernels: observation j puts weight 1 on its own choice and
  // prior_weight / n_kernels on every choice (then normalized); the prior kernel is uniform.
  Categorical1D categorical_estimator(const std::vector<std::size_t>& idx, const std::vector<double>& w, std::size_t k,
                                      double prior_weight) const {
    Categorical1D c;
    const std::size_t n_kernels = idx.size() + (prior_weight > 0 ? 1 : 0);
    double wsum = prior_weight;
    for (double x : w) wsum += x;
    for (std::size_t j = 0; j < idx.size(); ++j) {
      std::vector<double> p(k, prior_weight / static_cast<double>(n_kernels));
      p[idx[j]] += 1.0;
      const double s = std::accumulate(p.begin(), p.end(), 0.0);
      for (auto& x : p) x = std::log(x / s);
      c.log_p.push_back(std::move(p));
      c.log_w.push_back(std::log(w[j] / wsum));
    }
    if (prior_weight > 0) {
      c.log_p.emplace_back(k, -std::log(static_cast<double>(k)));
      c.log_w.push_back(std::log(prior_weight / wsum));
    }
    return c;
  }

  // The estimator of one group from the points where it is active (the group's parameters are
  // active together), oldest first.
  Mixture build(const Group& grp, const Points& all) const {
    Points pts;
    for (const auto* p : all) {
      bool ok = true;
      for (std::size_t i : grp.dims) ok = ok && !std::isnan((*p)[i]);
      if (ok) pts.push_back(p);
    }
    const std::vector<double> w = default_weights(pts.size());
    // Without observations the prior alone, whatever its configured weight.
    const double pw = pts.empty() ? std::max(cfg_.prior_weight, 1.0) : cfg_.prior_weight;
    Mixture m;
    const std::size_t dg = grp.dims.size();
    m.num.resize(dg);
    m.cat.resize(dg);
    if (!grp.joint) {
      const std::size_t i = grp.dims[0];
      if (kind_[i] == Kind::kCategorical) {
        const std::size_t k = enc_.num_choices(i);
        std::vector<std::size_t> idx;
        for (const auto* p : pts) idx.push_back(Encoder::choice_of((*p)[i], k));
        m.cat[0] = categorical_estimator(idx, w, k, pw);
        m.log_w = m.cat[0].log_w;
      } else {
        std::vector<double> xs;
        for (const auto* p : pts) xs.push_back((*p)[i]);
        m.num[0] = numeric_estimator(xs, w, pw, m.log_w);
        tabulate_levels(i, m.num[0]);
      }
      return m;
    }
    double wsum = pw;
    for (double x : w) wsum += x;
    for (double x : w) m.log_w.push_back(std::log(x / wsum));
    if (pw > 0) m.log_w.push_back(std::log(pw / wsum));
    const double n = static_cast<double>(pts.size() + (pw > 0 ? 1 : 0));
    const double bw = 0.2 * std::pow(std::max(n, 1.0), -1.0 / (static_cast<double>(dg) + 4.0));
    const double minsigma = cfg_.magic_clip ? 1.0 / std::min(100.0, 1.0 + n) : 1e-12;
    for (std::size_t t = 0; t < dg; ++t) {
      const std::size_t i = grp.dims[t];
      if (kind_[i] == Kind::kCategorical) {
        const std::size_t k = enc_.num_choices(i);
        std::vector<std::size_t> idx;
        for (const auto* p : pts) idx.push_back(Encoder::choice_of((*p)[i], k));
        m.cat[t] = categorical_estimator(idx, w, k, pw);
      } else {
        Numeric1D& e = m.num[t];
        for (const auto* p : pts) {
          e.mu.push_back((*p)[i]);
          e.sigma.push_back(std::clamp(bw, minsigma, 1.0));
        }
        if (pw > 0) {
          e.mu.push_back(0.5);
          e.sigma.push_back(1.0);
        }
        e.finish();
        tabulate_levels(i, e);
      }
    }
    return m;
  }

  // The probability of every level under every kernel, once per model, where there are few
  // levels (most discrete parameters): the candidates then look them up.
  void tabulate_levels(std::size_t i, Numeric1D& e) const {
    if (kind_[i] != Kind::kDiscrete || levels(i) > 64) return;
    e.level_log_prob.assign(levels(i), std::vector<double>(e.mu.size()));
    for (std::size_t v = 0; v < levels(i); ++v) {
      double a, b;
      level_bounds(i, v, a, b);
      for (std::size_t k = 0; k < e.mu.size(); ++k) e.level_log_prob[v][k] = e.kernel_log_prob(k, a, b);
    }
  }

  // Log of the estimator at x (the group's coordinates, levels at their centres).
  double log_pdf(const Group& grp, const Mixture& m, const std::vector<double>& x, std::vector<double>& t) const {
    t = m.log_w;
    for (std::size_t d = 0; d < grp.dims.size(); ++d) {
      const std::size_t i = grp.dims[d];
      switch (kind_[i]) {
        case Kind::kCategorical: {
          const std::size_t c = Encoder::choice_of(x[d], enc_.num_choices(i));
          for (std::size_t k = 0; k < t.size(); ++k) t[k] += m.cat[d].log_p[k][c];
          break;
        }
        case Kind::kDiscrete: {
          const std::size_t v = level_of(i, x[d]);
          if (!m.num[d].level_log_prob.empty()) {
            const std::vector<double>& lp = m.num[d].level_log_prob[v];
            for (std::size_t k = 0; k < t.size(); ++k) t[k] += lp[k];
            break;
          }
          double a, b;
          level_bounds(i, v, a, b);
          for (std::size_t k = 0; k < t.size(); ++k) t[k] += m.num[d].kernel_log_prob(k, a, b);
          break;
        }
        default:
          for (std::size_t k = 0; k < t.size(); ++k) t[k] += m.num[d].kernel_log_pdf(k, x[d]);
      }
    }
    return log_sum_exp(t.data(), t.size());
  }

  // One draw from the estimator: a kernel, then each coordinate from it (levels snapped).
  std::vector<double> sample(const Group& grp, const Mixture& m, Rng& rng) const {
    const std::size_t kern = pick(m.log_w, rng);
    std::vector<double> x(grp.dims.size());
    for (std::size_t d = 0; d < grp.dims.size(); ++d) {
      const std::size_t i = grp.dims[d];
      if (kind_[i] == Kind::kCategorical) {
        x[d] = Encoder::unit_of_choice(pick(m.cat[d].log_p[kern], rng), enc_.num_choices(i));
      } else {
        x[d] = m.num[d].sample_kernel(kern, rng);
        if (kind_[i] == Kind::kDiscrete) x[d] = level_centre(i, level_of(i, x[d]));
      }
    }
    return x;
  }

  struct Models {
    std::vector<Mixture> l, g;  // per group
    // Where trials failed (c-TPE's feasibility, Watanabe & Hutter 2023): per group, estimators over
    // the trials with a value and the failed ones, and how many of each; empty: none failed.
    std::vector<Mixture> ok, failed;
    std::vector<std::pair<double, double>> log_counts;  // per group: log #ok, log #failed
  };

  // log l(x) - log g(x), plus the log of the share of trials near x that did not fail:
  // log(n_ok f_ok(x) / (n_ok f_ok(x) + n_failed f_failed(x))). Failed trials are also in g, but g's
  // bandwidth at the edge of a diverging region spans both sides of it (the good group peaks at
  // the edge): the share falls off where trials failed, whatever the loss there would have been.
  double score(const Models& models, std::size_t gi, const std::vector<double>& x, std::vector<double>& t) const {
    const Group& grp = groups_[gi];
    double s = log_pdf(grp, models.l[gi], x, t) - log_pdf(grp, models.g[gi], x, t);
    // Only where the group was active in trials of both kinds: a share of 0 or 1 everywhere says
    // nothing about x.
    if (models.failed.empty() || !std::isfinite(models.log_counts[gi].first) || !std::isfinite(models.log_counts[gi].second))
      return s;
    const double a = models.log_counts[gi].first + log_pdf(grp, models.ok[gi], x, t);
    const double b = models.log_counts[gi].second + log_pdf(grp, models.failed[gi], x, t);
    const double ab[2] = {a, b};
    const double share = a - log_sum_exp(ab, 2);
    return std::isnan(share) ? s : s + share;
  }

  Models build_models(const Points& below, const Points& above, const Feasibility& feasibility) const {
    Models models;
    for (const auto& grp : groups_) {
      models.l.push_back(build(grp, below));
      models.g.push_back(build(grp, above));
    }
    if (feasibility.failed.empty()) return models;
    auto log_active = [&](const Group& grp, const Points& pts) {
      std::size_t n = 0;
      for (const auto* p : pts) n += std::isnan((*p)[grp.dims[0]]) ? 0 : 1;
      return std::log(static_cast<double>(n));  // -inf for none
    };
    for (const auto& grp : groups_) {
      models.ok.push_back(build(grp, feasibility.ok));
      models.failed.push_back(build(grp, feasibility.failed));
      models.log_counts.emplace_back(log_active(grp, feasibility.ok), log_active(grp, feasibility.failed));
    }
    return models;
  }

  // A configuration as its canonical coordinates (-1 where inactive): equal for equal
  // configurations of ints and choices, and cheaper to compare than decoded JSON.
  std::vector<double> key(std::vector<double> u) const {
    enc_.canonicalize(u);
    for (auto& x : u)
      if (std::isnan(x)) x = -1;
    return u;
  }
  // A running trial's coordinates and their key, computed once (a campaign on thousands of groups
  // has thousands running, and each ask reads them all).
  struct Running {
    std::vector<double> u, key;
  };
  Running make_running(const Params& params) const {
    Running r{enc_.encode(params), {}};
    r.key = key(r.u);
    return r;
  }
  const Running& running_trial(int64_t seq, const Params& params) const {
    auto it = pending_u_.find(seq);
    if (it == pending_u_.end()) it = pending_u_.emplace(seq, make_running(params)).first;
    return it->second;
  }
  // True when the configuration of key `k` was evaluated or is running. The keys of the evaluated
  // ones are kept as data_ grows; those of the running ones in pending_u_, walked beside pending()
  // (both in seq order), which drops the trials told since.
  bool seen(const std::vector<double>& k) const {
    for (; told_keyed_ < data_.size(); ++told_keyed_) told_keys_.insert(key(data_[told_keyed_].u));
    if (told_keys_.count(k)) return true;
    auto cached = pending_u_.begin();
    for (const auto& [seq, params] : pending()) {
      while (cached != pending_u_.end() && cached->first < seq) cached = pending_u_.erase(cached);  // told since
      if (cached == pending_u_.end() || cached->first != seq) cached = pending_u_.emplace_hint(cached, seq, make_running(params));
      if (cached->second.key == k) return true;
      ++cached;
    }
    pending_u_.erase(cached, pending_u_.end());
    return false;
  }

  std::vector<double> suggest(Rng& rng, const LevelData& level) const {
    Points below, above;  // into level.points, data_ and pending_u_, which outlive the models
    Feasibility feasibility;
    split(level, below, above, &feasibility);
    const Models models = build_models(below, above, feasibility);
    std::vector<double> scratch;
    // Each group in turn (parents first), the best of n_ei_candidates draws from l by score().
    std::vector<double> u(enc_.dims(), std::nan(""));
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      const Group& grp = groups_[gi];
      fill_fixed(u);  // a fixed parameter may be a parent
      if (!enc_.active(grp.dims[0], u)) continue;
      std::vector<double> best;
      double best_s = -kInf;
      for (int64_t s = 0; s < cfg_.n_ei_candidates; ++s) {
        std::vector<double> x = sample(grp, models.l[gi], rng);
        const double sc = score(models, gi, x, scratch);
        if (best.empty() || sc > best_s) {
          best_s = std::isnan(sc) ? -kInf : sc;
          best = std::move(x);
        }
      }
      for (std::size_t d = 0; d < grp.dims.size(); ++d) u[grp.dims[d]] = best[d];
    }
    fill_fixed(u);
    enc_.repair(u, rng);
    if (!seen(key(u))) return u;
    // Evaluated or running already (the usual end of a small discrete space, where the best of
    // each group is the same every time): whole configurations drawn from l, ranked by their
    // summed log l - log g, and the best one not seen yet. All seen: the first choice stands.
    struct Cand {
      double score;
      std::vector<double> u;
    };
    std::vector<Cand> cands;
    for (int64_t c = 0; c < 8 * cfg_.n_ei_candidates; ++c) {
      std::vector<double> v(enc_.dims(), std::nan(""));
      double total = 0;
      for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& grp = groups_[gi];
        fill_fixed(v);
        if (!enc_.active(grp.dims[0], v)) continue;
        const std::vector<double> x = sample(grp, models.l[gi], rng);
        total += score(models, gi, x, scratch);
        for (std::size_t d = 0; d < grp.dims.size(); ++d) v[grp.dims[d]] = x[d];
      }
      fill_fixed(v);
      enc_.repair(v, rng);
      cands.push_back({total, std::move(v)});
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.score > b.score; });
    for (auto& c : cands)
      if (!seen(key(c.u))) return std::move(c.u);
    return u;
  }

  void fill_fixed(std::vector<double>& u) const {
    for (std::size_t i = 0; i < enc_.dims(); ++i)
      if (kind_[i] == Kind::kFixed && enc_.active(i, u)) u[i] = 0.5;
  }

  TpeConfig cfg_;
  Encoder enc_;
  InitialDesign design_;
  std::vector<DataPoint> data_;
  // Caches of what data_ and pending() say, for seen() and split(): the keys of data_[0, told_keyed_),
  // and the encodings of running trials by seq.
  mutable std::set<std::vector<double>> told_keys_;
  mutable std::size_t told_keyed_ = 0;
  mutable std::map<int64_t, Running> pending_u_;
  mutable RungCache rung_cache_;  // the told trials' values at the rungs (level_data())
  std::vector<Kind> kind_;      // per parameter
  std::vector<Group> groups_;   // parents first
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_tpe(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto s, resolve_settings("tpe", tpe_settings(), spec.settings));
  TpeConfig cfg;
  int64_t searched = 0;
  for (const auto& p : spec.space.params()) searched += p.type == ParamType::kFixed ? 0 : 1;
  cfg.n_startup = s["n_startup"].is_null() ? startup_trials(spec.max_trials, searched) : s["n_startup"].get<int64_t>();
  (void)parse_design_kind(s["init"].get<std::string>(), cfg.init);
  cfg.n_ei_candidates = s["n_ei_candidates"].get<int64_t>();
  cfg.multivariate = s["multivariate"].get<bool>();
  cfg.group = s["group"].get<bool>();
  cfg.constant_liar = s["constant_liar"].get<bool>();
  cfg.gamma = s["gamma"].get<double>();
  cfg.gamma_max = s["gamma_max"].get<int64_t>();
  cfg.prior_weight = s["prior_weight"].get<double>();
  cfg.magic_clip = s["magic_clip"].get<bool>();
  return std::unique_ptr<Searcher>(std::make_unique<Tpe>(spec, cfg));
}

}  // namespace hpctune::search
