#include "search/tpe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

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
  return {
      {"n_startup", SettingType::kInt, 10, 0, 1000000, {}, "random suggestions until this many trials finished"},
      {"init", SettingType::kString, "uniform", -kInf, kInf, {"uniform", "sobol", "lhs"}, "startup design"},
      {"n_ei_candidates", SettingType::kInt, 24, 1, 100000, {}, "samples from l(x) per suggestion"},
      {"multivariate", SettingType::kBool, false, -kInf, kInf, {}, "joint estimator over unconditional parameters"},
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

// A mixture of truncated Gaussians on [0, 1].
struct Numeric1D {
  std::vector<double> mu, sigma, log_w, log_norm;  // log_norm: log(sigma * sqrt(2pi) * mass in [0, 1])

  void finish() {
    log_norm.resize(mu.size());
    for (std::size_t k = 0; k < mu.size(); ++k) {
      // Far from both ends the truncation removes less than 1e-15 of the mass.
      const bool inside = mu[k] > 8 * sigma[k] && 1 - mu[k] > 8 * sigma[k];
      const double mass = inside ? 1.0 : phi_cdf((1 - mu[k]) / sigma[k]) - phi_cdf(-mu[k] / sigma[k]);
      log_norm[k] = std::log(sigma[k]) + kLogSqrt2Pi + std::log(std::max(mass, 1e-300));
    }
  }
  // Per-kernel log density (without weights) at x.
  double kernel_log_pdf(std::size_t k, double x) const {
    const double z = (x - mu[k]) / sigma[k];
    return -0.5 * z * z - log_norm[k];
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
  std::vector<double> log_w;                // per kernel
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

class Tpe final : public SearcherBase {
 public:
  Tpe(const SearchSpec& spec, const TpeConfig& cfg)
      : SearcherBase(spec), cfg_(cfg), enc_(space()), design_(space(), cfg.init, spec.seed, std::max<int64_t>(cfg.n_startup, 1)) {
    data_ = warm_start_points(space(), enc_, this->spec());
    for (std::size_t i = 0; i < enc_.dims(); ++i)
      if (!enc_.spec(i).when && enc_.spec(i).type != ParamType::kFixed) joint_.push_back(i);
  }

  std::string name() const override { return "tpe"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    for (std::size_t i = 0; i < n; ++i) {
      const int64_t seq = next_seq();
      if (finished_usable() < cfg_.n_startup || finished_usable() < 2) {
        out.push_back(issue(design_.point(seq), {{"source", "startup"}}));
        continue;
      }
      Rng rng = rng_for(seq, 0x7E);
      out.push_back(issue(enc_.decode(suggest(rng)), {{"source", "model"}}));
    }
    return out;
  }

 private:
  void on_tell(const Observation& obs) override { data_.push_back(make_data_point(enc_, obs, objectives())); }

  int64_t finished_usable() const {
    int64_t k = 0;
    for (const auto& p : data_) k += p.losses.empty() ? 0 : 1;
    return k;
  }

  // Splits the data (plus running trials, as the worst) into below/above, each in seq order.
  void split(std::vector<std::vector<double>>& below, std::vector<std::vector<double>>& above) const {
    std::vector<const DataPoint*> usable;
    for (const auto& p : data_)
      if (!p.losses.empty()) usable.push_back(&p);
    const std::size_t n_total = usable.size() + (cfg_.constant_liar ? pending().size() : 0);
    const auto n_below = std::min<std::size_t>(
        std::min<std::size_t>(static_cast<std::size_t>(std::ceil(cfg_.gamma * static_cast<double>(n_total))),
                              static_cast<std::size_t>(cfg_.gamma_max)),
        usable.size());
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
    std::vector<char> is_below(usable.size(), 0);
    for (std::size_t r = 0; r < n_below; ++r) is_below[rank[r]] = 1;
    // Seq order within each group (data_ is in tell order; sort by seq).
    std::vector<std::size_t> by_seq(usable.size());
    std::iota(by_seq.begin(), by_seq.end(), 0);
    std::stable_sort(by_seq.begin(), by_seq.end(), [&](std::size_t a, std::size_t b) { return usable[a]->seq < usable[b]->seq; });
    for (std::size_t i : by_seq) (is_below[i] ? below : above).push_back(usable[i]->u);
    if (cfg_.constant_liar)
      for (const auto& [seq, params] : pending()) above.push_back(enc_.encode(params));
  }

  // Univariate estimator of numeric parameter i from the points where it is active.
  Numeric1D numeric_estimator(const std::vector<double>& xs, const std::vector<double>& w) const {
    Numeric1D e;
    const std::size_t n = xs.size();
    const double prior_mu = 0.5;
    std::vector<double> mus = xs;
    if (cfg_.prior_weight > 0) mus.push_back(prior_mu);
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
    double wsum = cfg_.prior_weight;
    for (double x : w) wsum += x;
    for (std::size_t k = 0; k < n; ++k) {
      e.mu.push_back(xs[k]);
      e.sigma.push_back(std::clamp(sig[k], minsigma, 1.0));
      e.log_w.push_back(std::log(w[k] / wsum));
    }
    if (cfg_.prior_weight > 0) {
      e.mu.push_back(prior_mu);
      e.sigma.push_back(1.0);
      e.log_w.push_back(std::log(cfg_.prior_weight / wsum));
    }
    e.finish();
    return e;
  }

  Categorical1D categorical_estimator(const std::vector<std::size_t>& idx, const std::vector<double>& w, std::size_t k) const {
    Categorical1D c;
    const std::size_t n_kernels = idx.size() + (cfg_.prior_weight > 0 ? 1 : 0);
    double wsum = cfg_.prior_weight;
    for (double x : w) wsum += x;
    for (std::size_t j = 0; j < idx.size(); ++j) {
      std::vector<double> p(k, cfg_.prior_weight / static_cast<double>(n_kernels));
      p[idx[j]] += 1.0;
      const double s = std::accumulate(p.begin(), p.end(), 0.0);
      for (auto& x : p) x = std::log(x / s);
      c.log_p.push_back(std::move(p));
      c.log_w.push_back(std::log(w[j] / wsum));
    }
    if (cfg_.prior_weight > 0 || idx.empty()) {
      c.log_p.emplace_back(k, -std::log(static_cast<double>(k)));
      c.log_w.push_back(std::log(std::max(cfg_.prior_weight, 1e-300) / std::max(wsum, 1e-300)));
    }
    return c;
  }

  // One parameter, univariately: sample from l, keep the best log l - log g. Writes u[i].
  void suggest_univariate(std::size_t i, const std::vector<std::vector<double>>& below,
                          const std::vector<std::vector<double>>& above, std::vector<double>& u, Rng& rng) const {
    auto gather = [&](const std::vector<std::vector<double>>& pts, std::vector<double>& xs, std::vector<double>& w) {
      const std::vector<double>& all_w = &pts == &below ? below_w_ : above_w_;
      for (std::size_t j = 0; j < pts.size(); ++j)
        if (!std::isnan(pts[j][i])) {
          xs.push_back(pts[j][i]);
          w.push_back(all_w[j]);
        }
    };
    std::vector<double> xb, wb, xa, wa;
    gather(below, xb, wb);
    gather(above, xa, wa);
    const auto nc = static_cast<std::size_t>(cfg_.n_ei_candidates);
    if (enc_.is_categorical(i)) {
      const std::size_t k = enc_.num_choices(i);
      std::vector<std::size_t> ib, ia;
      for (double x : xb) ib.push_back(Encoder::choice_of(x, k));
      for (double x : xa) ia.push_back(Encoder::choice_of(x, k));
      const Categorical1D l = categorical_estimator(ib, wb, k), g = categorical_estimator(ia, wa, k);
      auto logpdf = [&](const Categorical1D& e, std::size_t c) {
        std::vector<double> t(e.log_w.size());
        for (std::size_t j = 0; j < t.size(); ++j) t[j] = e.log_w[j] + e.log_p[j][c];
        return log_sum_exp(t.data(), t.size());
      };
      // Score every choice once; sample candidates from l.
      std::vector<double> score(k);
      for (std::size_t c = 0; c < k; ++c) score[c] = logpdf(l, c) - logpdf(g, c);
      std::size_t best = 0;
      double best_s = -kInf;
      for (std::size_t s = 0; s < nc; ++s) {
        const std::size_t kern = pick(l.log_w, rng);
        const std::size_t c = pick(l.log_p[kern], rng);
        if (score[c] > best_s) {
          best_s = score[c];
          best = c;
        }
      }
      u[i] = Encoder::unit_of_choice(best, k);
      return;
    }
    const Numeric1D l = numeric_estimator(xb, wb), g = numeric_estimator(xa, wa);
    std::vector<double> tmp(std::max(l.mu.size(), g.mu.size()));
    auto logpdf = [&](const Numeric1D& e, double x) {
      for (std::size_t k = 0; k < e.mu.size(); ++k) tmp[k] = e.log_w[k] + e.kernel_log_pdf(k, x);
      return log_sum_exp(tmp.data(), e.mu.size());
    };
    double best_x = 0.5, best_s = -kInf;
    for (std::size_t s = 0; s < nc; ++s) {
      double x = l.sample_kernel(pick(l.log_w, rng), rng);
      // Score ints at the value they stand for.
      if (enc_.spec(i).type == ParamType::kInt) x = Space::to_unit(enc_.spec(i), Space::from_unit(enc_.spec(i), x));
      const double sc = logpdf(l, x) - logpdf(g, x);
      if (sc > best_s) {
        best_s = sc;
        best_x = x;
      }
    }
    u[i] = best_x;
  }

  // The unconditional parameters jointly (product kernels).
  void suggest_joint(const std::vector<std::vector<double>>& below, const std::vector<std::vector<double>>& above,
                     std::vector<double>& u, Rng& rng) const {
    const std::size_t dj = joint_.size();
    struct Joint {
      std::vector<double> log_w;
      std::vector<Numeric1D> num;       // per joint dim (numeric dims only used)
      std::vector<Categorical1D> cat;   // per joint dim (categorical only used)
    };
    auto build = [&](const std::vector<std::vector<double>>& pts) {
      Joint j;
      const std::vector<double> w = default_weights(pts.size());
      double wsum = cfg_.prior_weight;
      for (double x : w) wsum += x;
      for (double x : w) j.log_w.push_back(std::log(x / wsum));
      if (cfg_.prior_weight > 0) j.log_w.push_back(std::log(cfg_.prior_weight / wsum));
      const double n = static_cast<double>(pts.size() + (cfg_.prior_weight > 0 ? 1 : 0));
      const double bw = 0.2 * std::pow(std::max(n, 1.0), -1.0 / (static_cast<double>(dj) + 4.0));
      const double minsigma = cfg_.magic_clip ? 1.0 / std::min(100.0, 1.0 + n) : 1e-12;
      j.num.resize(dj);
      j.cat.resize(dj);
      for (std::size_t t = 0; t < dj; ++t) {
        const std::size_t i = joint_[t];
        if (enc_.is_categorical(i)) {
          const std::size_t k = enc_.num_choices(i);
          std::vector<std::size_t> idx;
          for (const auto& p : pts) idx.push_back(Encoder::choice_of(p[i], k));
          j.cat[t] = categorical_estimator(idx, w, k);
        } else {
          Numeric1D& e = j.num[t];
          for (const auto& p : pts) {
            e.mu.push_back(std::isnan(p[i]) ? 0.5 : p[i]);
            e.sigma.push_back(std::clamp(bw, minsigma, 1.0));
          }
          if (cfg_.prior_weight > 0) {
            e.mu.push_back(0.5);
            e.sigma.push_back(1.0);
          }
          e.log_w.assign(e.mu.size(), 0.0);
          e.finish();
        }
      }
      return j;
    };
    const Joint l = build(below), g = build(above);
    auto logpdf = [&](const Joint& e, const std::vector<double>& x) {
      std::vector<double> t(e.log_w);
      for (std::size_t d = 0; d < dj; ++d) {
        const std::size_t i = joint_[d];
        if (enc_.is_categorical(i)) {
          const std::size_t c = Encoder::choice_of(x[d], enc_.num_choices(i));
          for (std::size_t k = 0; k < t.size(); ++k) t[k] += e.cat[d].log_p[k][c];
        } else {
          for (std::size_t k = 0; k < t.size(); ++k) t[k] += e.num[d].kernel_log_pdf(k, x[d]);
        }
      }
      return log_sum_exp(t.data(), t.size());
    };
    std::vector<double> best;
    double best_s = -kInf;
    for (int64_t s = 0; s < cfg_.n_ei_candidates; ++s) {
      const std::size_t kern = pick(l.log_w, rng);
      std::vector<double> x(dj);
      for (std::size_t d = 0; d < dj; ++d) {
        const std::size_t i = joint_[d];
        if (enc_.is_categorical(i)) {
          const std::size_t k = enc_.num_choices(i);
          x[d] = Encoder::unit_of_choice(pick(l.cat[d].log_p[kern], rng), k);
        } else {
          x[d] = l.num[d].sample_kernel(kern, rng);
          if (enc_.spec(i).type == ParamType::kInt) x[d] = Space::to_unit(enc_.spec(i), Space::from_unit(enc_.spec(i), x[d]));
        }
      }
      const double sc = logpdf(l, x) - logpdf(g, x);
      if (sc > best_s) {
        best_s = sc;
        best = x;
      }
    }
    for (std::size_t d = 0; d < dj; ++d) u[joint_[d]] = best[d];
  }

  std::vector<double> suggest(Rng& rng) const {
    std::vector<std::vector<double>> below, above;
    split(below, above);
    below_w_ = default_weights(below.size());
    above_w_ = default_weights(above.size());
    std::vector<double> u(enc_.dims(), std::nan(""));
    const bool joint = cfg_.multivariate && !joint_.empty();
    if (joint) suggest_joint(below, above, u, rng);
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      if (!enc_.active(i, u)) continue;
      if (enc_.spec(i).type == ParamType::kFixed) {
        u[i] = 0.5;
        continue;
      }
      if (joint && !enc_.spec(i).when) continue;
      suggest_univariate(i, below, above, u, rng);
    }
    enc_.repair(u, rng);
    return u;
  }

  TpeConfig cfg_;
  Encoder enc_;
  InitialDesign design_;
  std::vector<DataPoint> data_;
  std::vector<std::size_t> joint_;
  // Weights of the current split's groups (scratch for suggest(); ask() is not reentrant).
  mutable std::vector<double> below_w_, above_w_;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_tpe(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto s, resolve_settings("tpe", tpe_settings(), spec.settings));
  TpeConfig cfg;
  cfg.n_startup = s["n_startup"].get<int64_t>();
  (void)parse_design_kind(s["init"].get<std::string>(), cfg.init);
  cfg.n_ei_candidates = s["n_ei_candidates"].get<int64_t>();
  cfg.multivariate = s["multivariate"].get<bool>();
  cfg.constant_liar = s["constant_liar"].get<bool>();
  cfg.gamma = s["gamma"].get<double>();
  cfg.gamma_max = s["gamma_max"].get<int64_t>();
  cfg.prior_weight = s["prior_weight"].get<double>();
  cfg.magic_clip = s["magic_clip"].get<bool>();
  return std::unique_ptr<Searcher>(std::make_unique<Tpe>(spec, cfg));
}

}  // namespace hpctune::search
