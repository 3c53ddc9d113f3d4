#include "search/cmaes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include <Eigen/Dense>

#include "search/encoding.h"
#include "search/model_data.h"
#include "search/pareto.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEps = 1e-8;        // the `cmaes` package's _EPS
constexpr double kSigmaMax = 1e32;   // ... and _SIGMA_MAX
constexpr int kMaxResampling = 100;  // ... and n_max_resampling
constexpr double kTolX = 1e-8;       // restart when sigma * max sqrt(C_ii) falls below this
constexpr double kMaxCondition = 1e14;
constexpr int64_t kMaxPopsize = 1000000;
}  // namespace

std::vector<SettingDecl> cmaes_settings() {
  return {
      {"popsize", SettingType::kInt, nullptr, 4, kMaxPopsize, {}, "population lambda (default 4 + floor(3 ln d))"},
      {"sigma0", SettingType::kFloat, 1.0 / 6.0, 0.0, 1.0, {}, "initial step size in the unit cube", true},
      {"margin", SettingType::kBool, true, -kInf, kInf, {}, "keep ints and ordered choices from collapsing on one level"},
      {"restart", SettingType::kString, "ipop", -kInf, kInf, {"ipop", "none"}, "on stagnation: ipop grows the population"},
      {"inc_popsize", SettingType::kInt, 2, 1, 100, {}, "ipop: population factor at each restart"},
  };
}

namespace {

struct CmaesConfig {
  int64_t popsize = 0;  // 0: derived
  double sigma0 = 1.0 / 6.0;
  bool margin = true;
  bool ipop = true;
  int64_t inc_popsize = 2;
};

double phi_cdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

class Cmaes final : public SearcherBase {
 public:
  Cmaes(const SearchSpec& spec, const CmaesConfig& cfg) : SearcherBase(spec), cfg_(cfg), enc_(space()) {
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      const auto& p = enc_.spec(i);
      if (p.when) continue;
      const bool discrete = p.type == ParamType::kInt || (p.type == ParamType::kChoice && p.ordered);
      if (p.type == ParamType::kInt && Space::int_levels(p) < 2) continue;
      if (p.type == ParamType::kChoice && (!p.ordered || p.choices.size() < 2)) continue;
      if (p.type == ParamType::kFixed) continue;
      gauss_.push_back(i);
      discrete_.push_back(discrete ? 1 : 0);
    }
    n_ = static_cast<Eigen::Index>(gauss_.size());
    if (n_ == 0) return;
    const double d = static_cast<double>(n_);
    lambda_ = cfg_.popsize > 0 ? cfg_.popsize : 4 + static_cast<int64_t>(std::floor(3.0 * std::log(d)));
    Eigen::VectorXd m = Eigen::VectorXd::Constant(n_, 0.5);
    // The best warm-start trial is the first mean (and the best point so far).
    for (const auto& p : warm_start_points(space(), enc_, this->spec())) {
      if (p.losses.empty() || !(p.losses[0] < best_loss_)) continue;
      best_loss_ = p.losses[0];
      for (Eigen::Index j = 0; j < n_; ++j) {
        const double u = p.u[gauss_[static_cast<std::size_t>(j)]];
        m(j) = std::isnan(u) ? 0.5 : u;
      }
      best_x_ = m;
    }
    start_run(m);
  }

  std::string name() const override { return "cmaes"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    for (std::size_t i = 0; i < n; ++i) {
      const int64_t seq = next_seq();
      if (n_ == 0) {  // nothing to adapt: uniform draws
        Rng rng = rng_for(seq, 0xC3A);
        std::vector<double> u(enc_.dims(), kNaN);
        enc_.repair(u, rng);
        out.push_back(issue(enc_.decode(u), {{"source", "uniform"}}));
        continue;
      }
      if (static_cast<int64_t>(members_.size()) >= lambda_) break;  // wait for the generation's update
      Member mem = sample_member(seq);
      Params params = decode_member(mem.x, seq);
      members_.push_back(std::move(mem));
      out.push_back(issue(std::move(params), {{"source", "cmaes"}, {"generation", generation_}}));
    }
    return out;
  }

  void add_notes(std::vector<std::string>& out) const override {
    if (n_ == 0) {
      out.emplace_back("cmaes: the space has no unconditional float, int or ordered choice to adapt; every suggestion is drawn uniformly");
      return;
    }
    std::string in, outside;
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      if (enc_.spec(i).type == ParamType::kFixed) continue;
      const bool g = std::find(gauss_.begin(), gauss_.end(), i) != gauss_.end();
      std::string& list = g ? in : outside;
      list += (list.empty() ? "" : ", ") + enc_.spec(i).name;
    }
    out.push_back("cmaes: a population of " + std::to_string(lambda_) + " per generation over " + std::to_string(n_) +
                  " dimensions (" + in + "); a generation is updated when all its trials have finished");
    if (!outside.empty())
      out.push_back("cmaes: " + outside + " (unordered or conditional) are drawn uniformly, outside the Gaussian");
    if (spec().max_trials > 0 && spec().max_trials < 2 * lambda_)
      out.push_back("cmaes: max_trials " + std::to_string(spec().max_trials) + " allows fewer than 2 generations of " +
                    std::to_string(lambda_) + " trials: the covariance will barely adapt");
  }

 private:
  struct Member {
    int64_t seq = 0;
    Eigen::VectorXd x;  // the sample in the unit cube (before rounding and margin)
    bool told = false;
    double loss = kInf;
  };

  // Restore: a recorded suggestion of the current generation is re-derived, as ask() made it.
  void on_restore_suggestion(const Suggestion& s) override {
    if (n_ == 0 || static_cast<int64_t>(members_.size()) >= lambda_) return;
    members_.push_back(sample_member(s.seq));
  }

  void on_tell(const Observation& obs) override {
    if (n_ == 0) return;
    auto it = std::find_if(members_.begin(), members_.end(), [&](const Member& m) { return m.seq == obs.seq; });
    if (it == members_.end() || it->told) return;
    it->told = true;
    if (obs.outcome != Outcome::kFailed) {
      const auto losses = observation_losses(obs, objectives());
      if (!losses.empty() && std::isfinite(losses[0])) it->loss = losses[0];
    }
    if (it->loss < best_loss_) {
      best_loss_ = it->loss;
      best_x_ = it->x;
    }
    if (static_cast<int64_t>(members_.size()) < lambda_) return;
    for (const auto& m : members_)
      if (!m.told) return;
    update();
  }

  void add_state(nlohmann::json& s) const override {
    if (n_ == 0) return;
    nlohmann::json mean = nlohmann::json::array();
    for (Eigen::Index j = 0; j < n_; ++j) mean.push_back(mean_(j));
    s["cmaes"] = {{"generation", generation_}, {"popsize", lambda_}, {"sigma", sigma_},
                  {"mean", mean},             {"restarts", restarts_}};
  }

  // --- the strategy ---------------------------------------------------------------------------

  // The constants of a population size (the `cmaes` package's __init__).
  void set_constants() {
    const double d = static_cast<double>(n_);
    const auto lam = static_cast<Eigen::Index>(lambda_);
    mu_ = lam / 2;
    Eigen::VectorXd wp(lam);
    for (Eigen::Index i = 0; i < lam; ++i)
      wp(i) = std::log((static_cast<double>(lam) + 1) / 2) - std::log(static_cast<double>(i) + 1);
    const double pos = wp.head(mu_).sum(), neg_sq = wp.tail(lam - mu_).squaredNorm();
    mu_eff_ = pos * pos / wp.head(mu_).squaredNorm();
    const double neg = wp.tail(lam - mu_).sum();
    const double mu_eff_minus = neg_sq > 0 ? neg * neg / neg_sq : 0.0;
    const double alpha_cov = 2;
    c1_ = alpha_cov / ((d + 1.3) * (d + 1.3) + mu_eff_);
    cmu_ = std::min(1 - c1_ - 1e-8, alpha_cov * (mu_eff_ - 2 + 1 / mu_eff_) / ((d + 2) * (d + 2) + alpha_cov * mu_eff_ / 2));
    const double min_alpha =
        std::min({1 + c1_ / cmu_, 1 + 2 * mu_eff_minus / (mu_eff_ + 2), (1 - c1_ - cmu_) / (d * cmu_)});
    double positive_sum = 0, negative_sum = 0;
    for (Eigen::Index i = 0; i < lam; ++i) (wp(i) > 0 ? positive_sum : negative_sum) += std::fabs(wp(i));
    weights_.resize(lam);
    for (Eigen::Index i = 0; i < lam; ++i)
      weights_(i) = wp(i) >= 0 ? wp(i) / positive_sum : (negative_sum > 0 ? min_alpha * wp(i) / negative_sum : 0.0);
    cs_ = (mu_eff_ + 2) / (d + mu_eff_ + 5);
    ds_ = 1 + 2 * std::max(0.0, std::sqrt((mu_eff_ - 1) / (d + 1)) - 1) + cs_;
    cc_ = (4 + mu_eff_ / d) / (d + 4 + 2 * mu_eff_ / d);
    chi_n_ = std::sqrt(d) * (1.0 - 1.0 / (4.0 * d) + 1.0 / (21.0 * d * d));
  }

  void start_run(const Eigen::VectorXd& mean) {
    set_constants();
    mean_ = mean;
    sigma_ = cfg_.sigma0;
    C_ = Eigen::MatrixXd::Identity(n_, n_);
    B_ = Eigen::MatrixXd::Identity(n_, n_);
    D_ = Eigen::VectorXd::Ones(n_);
    ps_ = Eigen::VectorXd::Zero(n_);
    pc_ = Eigen::VectorXd::Zero(n_);
    run_generations_ = 0;
    flat_generations_ = 0;
    update_margin();
  }

  Member sample_member(int64_t seq) const {
    Rng rng = rng_for(seq, 0xC3A);
    Member m;
    m.seq = seq;
    Eigen::VectorXd z(n_);
    for (int attempt = 0; attempt < kMaxResampling; ++attempt) {
      for (Eigen::Index j = 0; j < n_; ++j) z(j) = rng.normal();
      m.x = mean_ + sigma_ * (B_ * D_.cwiseProduct(z));
      if ((m.x.array() >= 0.0).all() && (m.x.array() <= 1.0).all()) return m;
    }
    m.x = m.x.cwiseMax(0.0).cwiseMin(1.0);
    return m;
  }

  // The member as params: Gaussian coordinates (discrete ones through the margin), the rest drawn
  // uniformly from a stream of its own.
  Params decode_member(const Eigen::VectorXd& x, int64_t seq) const {
    std::vector<double> u(enc_.dims(), kNaN);
    for (Eigen::Index j = 0; j < n_; ++j) {
      const auto k = static_cast<std::size_t>(j);
      double v = x(j);
      if (discrete_[k]) v = mean_(j) + a_[k] * (v - mean_(j));
      u[gauss_[k]] = std::clamp(v, 0.0, 1.0);
    }
    Rng rng = rng_for(seq, 0xC3B);
    enc_.repair(u, rng);
    return enc_.decode(u);
  }

  // The interval of unit coordinates that decode to the same level as u (of Gaussian dim j), the
  // outer ends open (a sample beyond [0, 1] is clipped onto the first / last level).
  std::pair<double, double> level_cell(std::size_t j, double u) const {
    const ParamSpec& p = enc_.spec(gauss_[j]);
    const nlohmann::json level = Space::from_unit(p, u);
    auto edge = [&](double inside, double outside) {
      if (Space::from_unit(p, outside) == level) return outside > inside ? kInf : -kInf;
      for (int it = 0; it < 60; ++it) {
        const double mid = 0.5 * (inside + outside);
        (Space::from_unit(p, mid) == level ? inside : outside) = mid;
      }
      return 0.5 * (inside + outside);
    };
    return {edge(u, 0.0), edge(u, 1.0)};
  }

  // Margin (simplified CMA-ES with margin): the smallest a_j >= 1 for which a sample of dim j,
  // scaled by a_j around the mean, leaves the mean's level with probability >= 1 / (d lambda).
  void update_margin() {
    a_.assign(static_cast<std::size_t>(n_), 1.0);
    if (!cfg_.margin) return;
    const double alpha = 1.0 / (static_cast<double>(n_) * static_cast<double>(lambda_));
    for (Eigen::Index j = 0; j < n_; ++j) {
      const auto k = static_cast<std::size_t>(j);
      if (!discrete_[k]) continue;
      const double m = std::clamp(mean_(j), 0.0, 1.0);
      // Not a structured binding: clang before 16 cannot capture one in the lambda below (the
      // fuzzers build with clang).
      const auto cell = level_cell(k, m);
      const double lo = cell.first, hi = cell.second;
      const double s = sigma_ * std::sqrt(std::max(C_(j, j), 0.0));
      auto leave = [&](double scale) {
        const double sd = s * scale;
        if (!(sd > 0)) return 0.0;
        return (std::isfinite(lo) ? phi_cdf((lo - m) / sd) : 0.0) + (std::isfinite(hi) ? 1.0 - phi_cdf((hi - m) / sd) : 0.0);
      };
      if (!(s > 0) || leave(1.0) >= alpha) continue;
      double a_lo = 1.0, a_hi = 2.0;
      while (leave(a_hi) < alpha && a_hi < 1e15) a_hi *= 2;
      for (int it = 0; it < 60; ++it) {
        const double mid = 0.5 * (a_lo + a_hi);
        (leave(mid) >= alpha ? a_hi : a_lo) = mid;
      }
      a_[k] = a_hi;
    }
  }

  // One generation's update (the `cmaes` package's tell), then the next generation.
  void update() {
    std::vector<const Member*> order;
    for (const auto& m : members_) order.push_back(&m);
    std::stable_sort(order.begin(), order.end(), [](const Member* a, const Member* b) {
      return a->loss < b->loss || (a->loss == b->loss && a->seq < b->seq);
    });
    ++run_generations_;
    const auto lam = static_cast<Eigen::Index>(lambda_);
    Eigen::MatrixXd y(n_, lam);
    for (Eigen::Index i = 0; i < lam; ++i) y.col(i) = (order[static_cast<std::size_t>(i)]->x - mean_) / sigma_;
    const Eigen::VectorXd y_w = y.leftCols(mu_) * weights_.head(mu_);
    mean_ += sigma_ * y_w;  // cm = 1

    const Eigen::MatrixXd c_inv_sqrt = B_ * D_.cwiseInverse().asDiagonal() * B_.transpose();
    ps_ = (1 - cs_) * ps_ + std::sqrt(cs_ * (2 - cs_) * mu_eff_) * (c_inv_sqrt * y_w);
    const double norm_ps = ps_.norm();
    sigma_ = std::min(sigma_ * std::exp((cs_ / ds_) * (norm_ps / chi_n_ - 1)), kSigmaMax);

    const double h_left = norm_ps / std::sqrt(1 - std::pow(1 - cs_, 2.0 * static_cast<double>(run_generations_ + 1)));
    const double h_sigma = h_left < (1.4 + 2 / (static_cast<double>(n_) + 1)) * chi_n_ ? 1.0 : 0.0;
    pc_ = (1 - cc_) * pc_ + h_sigma * std::sqrt(cc_ * (2 - cc_) * mu_eff_) * y_w;
    Eigen::MatrixXd rank_mu = Eigen::MatrixXd::Zero(n_, n_);
    for (Eigen::Index i = 0; i < lam; ++i) {
      double w = weights_(i);
      if (w < 0) w *= static_cast<double>(n_) / ((c_inv_sqrt * y.col(i)).squaredNorm() + kEps);
      rank_mu += w * y.col(i) * y.col(i).transpose();
    }
    const double delta_h = (1 - h_sigma) * cc_ * (2 - cc_);
    C_ = (1 + c1_ * delta_h - c1_ - cmu_ * weights_.sum()) * C_ + c1_ * pc_ * pc_.transpose() + cmu_ * rank_mu;
    decompose();

    // Stagnation: values all equal twice in a row, a vanishing step, or a degenerate C.
    double lo = kInf, hi = -kInf;
    for (const auto& m : members_) {
      lo = std::min(lo, m.loss);
      hi = std::max(hi, m.loss);
    }
    const bool flat = !(hi - lo > 1e-12 * std::max(1.0, std::fabs(lo)));
    flat_generations_ = flat ? flat_generations_ + 1 : 0;
    const double spread = sigma_ * std::max(C_.diagonal().cwiseMax(0.0).cwiseSqrt().maxCoeff(), pc_.cwiseAbs().maxCoeff());
    const double cond = D_.maxCoeff() / std::max(D_.minCoeff(), 1e-300);
    members_.clear();
    ++generation_;
    if (flat_generations_ >= 2 || spread < kTolX || cond * cond > kMaxCondition || !std::isfinite(sigma_)) {
      ++restarts_;
      if (cfg_.ipop) lambda_ = std::min(kMaxPopsize, lambda_ * cfg_.inc_popsize);
      start_run(best_x_.size() == n_ ? best_x_ : Eigen::VectorXd::Constant(n_, 0.5));
      return;
    }
    update_margin();
  }

  // B, D from C (the `cmaes` package's _eigen_decomposition), C rebuilt from them.
  void decompose() {
    C_ = 0.5 * (C_ + C_.transpose());
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(C_);
    Eigen::VectorXd d2 = eig.eigenvalues();
    for (Eigen::Index j = 0; j < n_; ++j)
      if (!(d2(j) > 0)) d2(j) = kEps;
    B_ = eig.eigenvectors();
    D_ = d2.cwiseSqrt();
    C_ = B_ * d2.asDiagonal() * B_.transpose();
  }

  CmaesConfig cfg_;
  Encoder enc_;
  std::vector<std::size_t> gauss_;  // encoder indices of the Gaussian dimensions
  std::vector<char> discrete_;      // per Gaussian dimension: int or ordered choice
  Eigen::Index n_ = 0;
  int64_t lambda_ = 0;
  Eigen::Index mu_ = 0;
  Eigen::VectorXd weights_;
  double mu_eff_ = 0, cs_ = 0, ds_ = 0, cc_ = 0, c1_ = 0, cmu_ = 0, chi_n_ = 0;
  Eigen::VectorXd mean_, ps_, pc_, D_;
  Eigen::MatrixXd C_, B_;
  double sigma_ = 0;
  std::vector<double> a_;  // margin factors, per Gaussian dimension
  int64_t generation_ = 0, run_generations_ = 0, restarts_ = 0;
  int flat_generations_ = 0;
  std::vector<Member> members_;  // the current generation, in seq order
  double best_loss_ = kInf;
  Eigen::VectorXd best_x_;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_cmaes(const SearchSpec& spec) {
  if (spec.objectives.size() > 1) {
    return err(Errc::kConfig, "algorithm: cmaes optimizes one objective, got " + std::to_string(spec.objectives.size()) +
                                  " (tpe, bayesian, genetic and evolution handle several)");
  }
  HPCTUNE_ASSIGN(auto s, resolve_settings("cmaes", cmaes_settings(), spec.settings));
  CmaesConfig cfg;
  cfg.popsize = s["popsize"].is_null() ? 0 : s["popsize"].get<int64_t>();
  cfg.sigma0 = s["sigma0"].get<double>();
  cfg.margin = s["margin"].get<bool>();
  cfg.ipop = s["restart"].get<std::string>() == "ipop";
  cfg.inc_popsize = s["inc_popsize"].get<int64_t>();
  return std::unique_ptr<Searcher>(std::make_unique<Cmaes>(spec, cfg));
}

}  // namespace hpctune::search
