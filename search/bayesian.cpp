#include "search/bayesian.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "search/encoding.h"
#include "search/gaussian_process.h"
#include "search/random_forest.h"
#include "search/initial_design.h"
#include "search/model_data.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// The unit coordinate of the level one below or above (at random; inward at an end) of an int
// parameter's level at u.
double step_int_level(const ParamSpec& p, double u, Rng& rng) {
  const int64_t n = Space::int_levels(p);
  const int64_t idx = (Space::from_unit(p, u).get<int64_t>() - static_cast<int64_t>(p.low)) / p.step;
  const int64_t to = idx <= 0 ? 1 : (idx >= n - 1 ? n - 2 : (rng.bernoulli(0.5) ? idx + 1 : idx - 1));
  return Space::to_unit(p, static_cast<int64_t>(p.low) + to * p.step);
}
}  // namespace

std::vector<SettingDecl> bayesian_settings() {
  return {
      {"surrogate", SettingType::kString, "gp", -kInf, kInf, {"gp", "forest"},
       "the model: a Gaussian process or a random forest (SMAC's: bootstrap trees, variance across them)"},
      {"n_initial", SettingType::kInt, nullptr, 1, 100000, {}, "initial design size (default clamp(2 * d, 5, 20), at most half of max_trials)"},
      {"init", SettingType::kString, "sobol", -kInf, kInf, {"uniform", "sobol", "lhs"}, "initial design"},
      {"start_at_centre", SettingType::kBool, true, -kInf, kInf, {},
       "the design's first point is the middle of every numeric and ordered parameter's range"},
      {"acquisition", SettingType::kString, "ei", -kInf, kInf, {"ei", "ucb", "mes"},
       "acquisition function: expected improvement, a lower confidence bound, or max-value entropy search"},
      {"ucb_kappa", SettingType::kFloat, 2.0, 0, 100, {}, "ucb: minimize mean - kappa * stddev"},
      {"pending", SettingType::kString, "kriging_believer", -kInf, kInf, {"kriging_believer", "constant_liar"},
       "how running trials enter the model"},
      {"liar", SettingType::kString, "worst", -kInf, kInf, {"best", "mean", "worst"}, "constant_liar's value"},
      {"max_fantasies", SettingType::kInt, 64, 1, 100000, {},
       "the running trials the model takes in, the latest issued: each widens every prediction, so that a suggestion "
       "costs the same on 2,048 groups as on 64 (the others are left out of the model; none is suggested twice)"},
      {"output_transform", SettingType::kString, "power", -kInf, kInf, {"none", "log", "power", "copula"},
       "transform of the loss"},
      {"choice_kernel", SettingType::kString, "overlap", -kInf, kInf, {"overlap", "onehot"},
       "unordered choices: one lengthscale per choice (overlap) or per value (onehot)"},
      {"input_warping", SettingType::kBool, false, -kInf, kInf, {}, "Kumaraswamy warping of numeric inputs"},
      {"refit_every", SettingType::kInt, 5, 1, 100000, {}, "refit the hyperparameters every k observations"},
      {"fit_restarts", SettingType::kInt, 3, 0, 100, {}, "random starts of the hyperparameter fit"},
      {"max_fit_points", SettingType::kInt, 100, 10, 100000, {}, "points used to fit the hyperparameters"},
      {"acq_samples", SettingType::kInt, 1000, 10, 1000000, {}, "random candidates per suggestion"},
      {"acq_local_starts", SettingType::kInt, 5, 0, 1000, {}, "local searches per suggestion"},
      {"escape_after", SettingType::kInt, nullptr, 0, 100000, {},
       "after this many trials without a better loss, every other suggestion descends another basin of the model "
       "(0: never; default 6 where more than half the searched parameters are numbers or ordered levels, else 0)"},
      {"escape_radius", SettingType::kFloat, 0.15, 0, 10, {},
       "the radius of the region around another basin's best point where an escaping suggestion stays, in unit "
       "coordinates, times sqrt(searched parameters)"},
      {"polish_last", SettingType::kInt, nullptr, 0, 1000000000, {},
       "in the last this many trials of max_trials, a suggestion is the untried one-level neighbour of the best point "
       "with the best expected improvement, until every neighbour was tried; then escapes take every turn "
       "(default a third of max_trials on grids, spaces of ints and choices only; else 0: never)"},
  };
}

namespace {

struct BoConfig {
  int64_t n_initial;
  DesignKind init;
  bool ucb;
  bool mes;
  double kappa;
  bool kriging_believer;
  std::string liar;
  std::string output_transform;
  bool input_warping;
  bool overlap_kernel;
  std::size_t max_fantasies;
  int64_t refit_every;
  int fit_restarts;
  std::size_t max_fit_points;
  int64_t acq_samples;
  int64_t acq_local_starts;
  int64_t escape_after;
  double escape_radius;
  int64_t polish_last;
  bool start_at_centre;
  bool forest;
};

class Bayesian final : public SearcherBase {
 public:
  Bayesian(const SearchSpec& spec, const BoConfig& cfg)
      : SearcherBase(spec), cfg_(cfg), enc_(space()), design_(space(), cfg.init, spec.seed, cfg.n_initial) {
    data_ = warm_start_points(space(), enc_, this->spec());
    if (cfg.input_warping) {
      // Numbers only: a choice's coordinates are not a continuum a CDF could reshape.
      std::vector<Eigen::Index> warp;
      for (std::size_t i = 0; i < enc_.dims(); ++i)
        if (enc_.is_numeric(i)) warp.push_back(static_cast<Eigen::Index>(enc_.feature_offset(i)));
      (void)gp_.set_warping(warp);  // no data yet: nothing to factorize
    }
    if (cfg.overlap_kernel) {
      std::vector<Eigen::Index> groups;
      for (std::size_t i = 0; i < enc_.dims(); ++i) {
        const auto& p = enc_.spec(i);
        if (p.type == ParamType::kFixed) continue;
        const std::size_t width = p.type == ParamType::kChoice && !p.ordered ? p.choices.size() : 1;
        groups.insert(groups.end(), width, static_cast<Eigen::Index>(i));
      }
      // Parameter indices with fixed ones skipped: renumber densely.
      std::vector<Eigen::Index> dense(enc_.dims(), -1);
      Eigen::Index next = 0;
      for (auto& g : groups) {
        if (dense[static_cast<std::size_t>(g)] < 0) dense[static_cast<std::size_t>(g)] = next++;
        g = dense[static_cast<std::size_t>(g)];
      }
      (void)gp_.set_lengthscale_groups(groups);
    }
    for (const auto& p : data_) warm_usable_ += p.losses.empty() ? 0 : 1;
  }

  std::string name() const override { return "bayesian"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    bool model_ready = false, model_failed = false;
    std::size_t real_n = 0;
    // Under early stopping, the level this ask models: until one has enough values, the design goes on.
    if (multi_fidelity()) fit_ = fidelity_model_data(spec(), enc_, data_, pending(), reports(), &rung_cache_, told_reports());
    // Where this ask's escapes go, found on its first escape turn: nothing it reads (the observed
    // points, their basins under the model's mean, which a kriging believer's fantasy leaves as
    // they were) changes within one ask, and finding it costs 64 descents of the model.
    std::optional<Region> escape;
    for (std::size_t i = 0; i < n; ++i) {
      const int64_t seq = next_seq();
      const int64_t design_len = std::max<int64_t>(0, cfg_.n_initial - warm_usable_);
      if (seq < design_len || usable() < 2) {
        out.push_back(issue(design_point(seq), {{"source", "initial"}}));
        continue;
      }
      Rng rng = rng_for(seq, 0xB0);
      if (!model_ready && !model_failed) {
        auto built = build_model(seq);
        if (built.ok()) {
          real_n = *built;
          model_ready = true;
        } else {
          // ask() has no error channel: the failure is kept in state() (recorded in the store as
          // the search state) and on every suggestion it costs, which come from the design.
          model_failed = true;
          ++model_failures_;
          model_error_ = built.error().to_string();
        }
      }
      if (model_failed) {
        out.push_back(issue(design_.point(seq), {{"source", "initial"}, {"model_error", model_error_}}));
        continue;
      }
      if (cfg_.mes) fit_mes(seq);  // before the polish, which ranks by the acquisition too
      Polish polish = polish_step(seq, rng);
      Region region;
      if (escape_turn(seq, polish.confirmed)) {  // an escape's turn before the polish
        if (!escape) escape = escape_region(seq);
        region = *escape;
      }
      if (region.active) polish.next.reset();
      std::vector<double> u = polish.next ? *polish.next : optimize_acquisition(rng, region);
      Params params = enc_.decode(u);
      add_fantasy(u);
      running_.push_back(u);
      if (running_.size() >= 2 * cfg_.max_fantasies) refresh_fantasies(real_n);
      nlohmann::json meta = {{"source", "model"}};
      if (polish.next) meta["polish"] = true;  // a one-level neighbour of the best point
      if (multi_fidelity()) meta["level"] = fit_.level;  // the step whose values the model was fitted on
      if (region.active) meta["escape_from"] = region.head_seq;  // the trial whose basin it descends
      out.push_back(issue(std::move(params), std::move(meta)));
    }
    if (model_ready && !cfg_.forest) gp_.truncate(real_n);
    return out;
  }

 private:
  void on_tell(const Observation& obs) override { data_.push_back(make_data_point(enc_, obs, objectives())); }

  // "startup: 10 trials of 16; model from trial 11", as tpe says it (warm-start trials shorten
  // the design).
  void add_notes(std::vector<std::string>& out) const override {
    const int64_t design = std::max<int64_t>(0, cfg_.n_initial - warm_usable_);
    const int64_t budget = spec().max_trials;
    std::string line = "startup: " + std::to_string(design) + " trials";
    if (budget > 0) line += " of " + std::to_string(budget);
    if (warm_usable_ > 0) line += " (after " + std::to_string(warm_usable_) + " warm-start trials)";
    if (budget > 0 && design >= budget)
      line += "; the model is never used (lower search.settings.n_initial or raise search.max_trials)";
    else
      line += "; model from trial " + std::to_string(design + 1);
    out.push_back(std::move(line));
    if (multi_fidelity()) out.push_back(fidelity_note(spec(), cfg_.forest ? "random forest" : "Gaussian process"));
  }

  void add_state(nlohmann::json& s) const override {
    s["observations_in_model"] = gp_rows_;
    s["running_in_model"] = running_.size();  // at the last suggestion, itself included (max_fantasies)
    if (multi_fidelity()) s["fidelity"] = fidelity_state(fit_);
    if (model_failures_ > 0) {
      s["model_failures"] = model_failures_;
      s["model_error"] = model_error_;  // the latest
    }
    if (gp_.hyper().log_lengthscale.size() > 0) {
      std::vector<double> ls;
      for (Eigen::Index d = 0; d < gp_.hyper().log_lengthscale.size(); ++d)
        ls.push_back(std::exp(gp_.hyper().log_lengthscale(d)));
      s["lengthscales"] = ls;
      s["signal_var"] = std::exp(gp_.hyper().log_signal_var);
      s["noise_var"] = std::exp(gp_.hyper().log_noise_var);
      if (cfg_.output_transform == "power") s["power_lambda"] = power_lambda_;
      const auto& h = gp_.hyper();
      if (!h.warp_dims.empty()) {
        std::vector<double> wa, wb;  // the Kumaraswamy CDFs of the warped inputs, in their order
        for (Eigen::Index k = 0; k < h.log_warp_a.size(); ++k) wa.push_back(std::exp(h.log_warp_a(k)));
        for (Eigen::Index k = 0; k < h.log_warp_b.size(); ++k) wb.push_back(std::exp(h.log_warp_b(k)));
        s["warp_a"] = wa;
        s["warp_b"] = wb;
      }
    }
  }

  // The design's point k; with start_at_centre the first is the middle of every numeric and
  // ordered parameter's range (in its own scale: log-scaled ones at the geometric middle), the
  // unordered choices as the design drew them. Where a user centred a range on a value they
  // believe in, that value is tried first (CMA-ES starts there too; SMAC's design starts with the
  // default configuration).
  Params design_point(int64_t k) {
    if (k != 0 || !cfg_.start_at_centre) return design_.point(k);
    std::vector<double> u = enc_.encode(design_.point(0));
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      const auto& p = enc_.spec(i);
      if (std::isnan(u[i]) || p.type == ParamType::kFixed || (p.type == ParamType::kChoice && !p.ordered)) continue;
      u[i] = 0.5;
    }
    Rng rng = rng_for(0, 0xCE);
    enc_.repair(u, rng);
    return enc_.decode(u);
  }

  // The points the model is fitted on: every finished trial (and warm-start one), or under early
  // stopping those with a value at this ask's level (fit_, model_data.h).
  const std::vector<DataPoint>& model_data() const { return multi_fidelity() ? fit_.points : data_; }
  // Adds the trials the model takes as running as fantasies: the latest max_fantasies pending ones
  // (running_), or under early stopping the latest of those not at this ask's level (fit_.pending
  // names them by seq, pending() holds them), so that the model's size, and with it a suggestion's
  // cost, does not grow with the trainer groups; then the latest kMaxStoppedFantasies trials stopped
  // below the level (model_data.h: visited, their value there unknown).
  void add_pending_fantasies() {
    running_.clear();
    auto add = [&](int64_t, const Params& params) { running_.push_back(enc_.encode(params)); };
    if (!multi_fidelity()) {
      for (const auto& [pseq, params] : pending()) add(pseq, params);
    } else {
      for_each_pending(fit_.pending, pending(), add);
    }
    keep_latest_running();
    add_running_fantasies();
    add_stopped_fantasies();
  }
  // The running trials: in the GP one rank-one update each, in order (each at the prediction with
  // the ones before); in the forest all at once with one refit (one refit each made an ask beside
  // 64 running trials take 0.35-0.7 s).
  void add_running_fantasies() {
    if (!cfg_.forest) {
      for (const auto& u : running_) add_fantasy(u);
      return;
    }
    std::vector<const std::vector<double>*> points;
    for (const auto& u : running_) points.push_back(&u);
    add_forest_fantasies(points);
  }
  void keep_latest_running() {
    if (running_.size() > cfg_.max_fantasies)
      running_.erase(running_.begin(), running_.end() - static_cast<std::ptrdiff_t>(cfg_.max_fantasies));
  }
  // A batch of suggestions that took the running fantasies to 2 x max_fantasies: the model goes back
  // to its `real_n` observations and takes the latest max_fantasies again (amortised, one rank-one
  // update a suggestion), then the stopped trials.
  void refresh_fantasies(std::size_t real_n) {
    keep_latest_running();
    if (cfg_.forest) {
      forest_X_.conservativeResize(static_cast<Eigen::Index>(real_n), Eigen::NoChange);
      forest_y_.conservativeResize(static_cast<Eigen::Index>(real_n));
      Rng rng = rng_for(static_cast<int64_t>(real_n), 0xF0F);
      forest_.fit(forest_X_, forest_y_, rng);  // the fantasies' values: its predictions from the real rows
    } else {
      gp_.truncate(real_n);
    }
    y_best_ = model_y_.size() > 0 ? model_y_.minCoeff() : y_best_;
    add_running_fantasies();
    add_stopped_fantasies();
  }
  // Under early stopping, the latest kMaxStoppedFantasies trials stopped below this ask's level.
  void add_stopped_fantasies() {
    if (!multi_fidelity()) return;
    const std::size_t from = fit_.stopped.size() - std::min(fit_.stopped.size(), kMaxStoppedFantasies);
    std::vector<const std::vector<double>*> stopped;
    for (std::size_t i = from; i < fit_.stopped.size(); ++i) stopped.push_back(&data_[fit_.stopped[i]].u);
    if (cfg_.forest) return add_forest_fantasies(stopped);
    for (const auto* u : stopped) add_fantasy(*u);
  }
  static constexpr std::size_t kMaxStoppedFantasies = 64;

  // Fantasies in the forest at once: every point at the forest's prediction (or the liar), then one
  // refit (add_fantasy's refit per point would be 64 refits an ask).
  void add_forest_fantasies(const std::vector<const std::vector<double>*>& points) {
    if (points.empty()) return;
    Eigen::MatrixXd F(static_cast<Eigen::Index>(points.size()), static_cast<Eigen::Index>(enc_.feature_dims()));
    for (std::size_t r = 0; r < points.size(); ++r) F.row(static_cast<Eigen::Index>(r)) = features_of(*points[r]).transpose();
    Eigen::VectorXd mean, var;
    model_predict(F, mean, var);
    const Eigen::Index old = forest_X_.rows();
    forest_X_.conservativeResize(old + F.rows(), Eigen::NoChange);
    forest_X_.bottomRows(F.rows()) = F;
    forest_y_.conservativeResize(old + F.rows());
    for (Eigen::Index r = 0; r < F.rows(); ++r) forest_y_(old + r) = cfg_.kriging_believer ? mean(r) : liar_;
    Rng rng = rng_for(static_cast<int64_t>(forest_X_.rows()), 0xF0F);
    forest_.fit(forest_X_, forest_y_, rng);
    y_best_ = std::min(y_best_, forest_y_.tail(F.rows()).minCoeff());
  }

  int64_t usable() const {
    int64_t k = 0;
    for (const auto& p : model_data()) k += p.losses.empty() ? 0 : 1;
    return k;
  }

  Eigen::VectorXd features_of(const std::vector<double>& u) const {
    Eigen::VectorXd f(static_cast<Eigen::Index>(enc_.feature_dims()));
    enc_.features(u, f.data());
    return f;
  }

  // The model's inputs of several candidates, a row each.
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> features_of(
      const std::vector<std::vector<double>>& cands) const {
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> F(
        static_cast<Eigen::Index>(cands.size()), static_cast<Eigen::Index>(enc_.feature_dims()));
    for (std::size_t i = 0; i < cands.size(); ++i) enc_.features(cands[i], F.row(static_cast<Eigen::Index>(i)).data());
    return F;
  }

  // Scalar losses of the data for this batch (multi-objective: a random scalarization).
  std::vector<double> raw_targets(int64_t seq) const {
    std::vector<double> y;
    if (num_objectives() == 1) {
      for (const auto& p : model_data()) y.push_back(p.losses.empty() ? std::nan("") : p.losses[0]);
    } else {
      Rng rng = rng_for(seq, 0x5CA1);
      y = scalarize(model_data(), random_simplex_weights(num_objectives(), rng));
    }
    double worst = -kInf;
    for (double v : y)
      if (!std::isnan(v)) worst = std::max(worst, v);
    for (double& v : y)
      if (std::isnan(v)) v = worst;  // failed trials: the worst loss seen
    return y;
  }

  static void standardize(std::vector<double>& y) {
    if (y.empty()) return;
    const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
    double var = 0;
    for (double v : y) var += (v - mean) * (v - mean);
    const double sd = y.size() > 1 && var > 0 ? std::sqrt(var / static_cast<double>(y.size() - 1)) : 1.0;
    for (double& v : y) v = (v - mean) / sd;
  }

  // Standardized (optionally transformed: output_transform) targets; sets y_best_ and the liar value.
  Eigen::VectorXd transform(const std::vector<double>& raw) {
    std::vector<double> y = raw;
    const std::string& how = cfg_.output_transform;
    if (how == "log" && !y.empty()) {
      const double lo = *std::min_element(y.begin(), y.end()), hi = *std::max_element(y.begin(), y.end());
      const double delta = std::max(1e-3 * (hi - lo), 1e-12 * std::max(1.0, std::fabs(lo)));
      if (hi > lo)
        for (double& v : y) v = std::log(v - lo + delta);
    } else if (how == "power") {
      // As HEBO: standardize, Yeo-Johnson with its maximum-likelihood lambda, standardize again.
      standardize(y);
      power_lambda_ = fit_yeo_johnson_lambda(y);
      for (double& v : y) v = yeo_johnson(v, power_lambda_);
    } else if (how == "copula") {
      y = copula_transform(y);
    }
    standardize(y);
    Eigen::VectorXd out(static_cast<Eigen::Index>(y.size()));
    for (std::size_t i = 0; i < y.size(); ++i) out(static_cast<Eigen::Index>(i)) = y[i];
    y_best_ = out.minCoeff();
    if (cfg_.liar == "best") liar_ = y_best_;
    else if (cfg_.liar == "worst") liar_ = out.maxCoeff();
    else liar_ = out.mean();
    return out;
  }

  // Brings the GP up to date with model_data() (refit or incremental), then adds the pending trials
  // as fantasies. Returns the number of real points, or why the GP cannot take the data (its kernel
  // matrix cannot be factorised): the model is then rebuilt from scratch on the next ask.
  Result<std::size_t> build_model(int64_t seq) {
    // Every point takes part (failed ones at the worst loss), so rows of the GP are model_data() in order.
    const std::vector<DataPoint>& data = model_data();
    std::vector<std::size_t> rows(data.size());
    std::iota(rows.begin(), rows.end(), 0);
    batch_raw_ = raw_targets(seq);
    std::vector<double> raw;
    for (std::size_t i : rows) raw.push_back(batch_raw_[i]);
    const Eigen::VectorXd y = transform(raw);
    model_y_ = y;
    const std::size_t n = rows.size();
    if (cfg_.forest) {
      forest_X_.resize(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(enc_.feature_dims()));
      for (std::size_t r = 0; r < n; ++r) forest_X_.row(static_cast<Eigen::Index>(r)) = features_of(data[rows[r]].u).transpose();
      forest_y_ = y;
      Rng rng = rng_for(seq, 0xF0E);
      forest_.fit(forest_X_, forest_y_, rng);
      gp_rows_ = n;
      add_pending_fantasies();
      return n;
    }
    // Under early stopping a new level is a new problem (refit), and the rows of one level are not
    // the last ask's plus new ones (a running trial that reached it is told later): set anew.
    const bool refit = !fitted_ || n < 30 || n >= n_at_fit_ + static_cast<std::size_t>(cfg_.refit_every) ||
                       fit_.level != level_at_fit_;
    if (refit || n < gp_rows_ || multi_fidelity()) {
      Eigen::MatrixXd X(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(enc_.feature_dims()));
      for (std::size_t r = 0; r < n; ++r) X.row(static_cast<Eigen::Index>(r)) = features_of(data[rows[r]].u).transpose();
      if (auto set = gp_.set_data(X, y); !set.ok()) {
        fitted_ = false;
        gp_rows_ = 0;
        return std::move(set).error().with_context("bayesian: cannot model " + std::to_string(n) + " observations");
      }
      if (refit) {
        Rng rng = rng_for(seq, 0xF17);
        gp_.fit(rng, n < 60 ? cfg_.fit_restarts : std::min(cfg_.fit_restarts, 1), cfg_.max_fit_points);
        fitted_ = true;
        n_at_fit_ = n;
        level_at_fit_ = fit_.level;
      }
    } else {
      for (std::size_t r = gp_rows_; r < n; ++r) gp_.append(features_of(data[rows[r]].u), y(static_cast<Eigen::Index>(r)));
      gp_.set_targets(y);
    }
    gp_rows_ = n;
    add_pending_fantasies();
    return n;
  }

  void add_fantasy(const std::vector<double>& u) {
    const Eigen::VectorXd f = features_of(u);
    double y = liar_;
    if (cfg_.kriging_believer) {
      Eigen::VectorXd mean, var;
      if (cfg_.forest) model_predict(f.transpose(), mean, var);
      else gp_.predict_mean(f.transpose(), mean);  // the same mean, without the variance's O(n^2) solve
      y = mean(0);
    }
    if (cfg_.forest) {
      // Refit with the fantasy: a forest has no cheap update, and batches are small.
      forest_X_.conservativeResize(forest_X_.rows() + 1, Eigen::NoChange);
      forest_X_.row(forest_X_.rows() - 1) = f.transpose();
      forest_y_.conservativeResize(forest_y_.size() + 1);
      forest_y_(forest_y_.size() - 1) = y;
      Rng rng = rng_for(static_cast<int64_t>(forest_X_.rows()), 0xF0F);
      forest_.fit(forest_X_, forest_y_, rng);
    } else {
      gp_.append(f, y);
    }
    y_best_ = std::min(y_best_, y);
  }

  void model_predict(const Eigen::MatrixXd& F, Eigen::VectorXd& mean, Eigen::VectorXd& var) const {
    if (cfg_.forest) forest_.predict(F, mean, var);
    else gp_.predict(F, mean, var);
  }

  // Where an escaping suggestion must stay: the ball around another basin's best point (escape_after).
  struct Region {
    bool active = false;
    std::vector<double> center;
    double radius2 = 0;
    double y_ref = 0;  // the centre's transformed loss
    int64_t head_seq = -1;  // the centre's trial
    bool excludes(const std::vector<double>& u, const Encoder& enc) const {
      return active && distance2(u, center, enc) >= radius2;
    }
  };

  // Squared distance in unit coordinates; an unordered choice that differs counts 1/6 (the mean
  // squared distance of two uniform coordinates), as does a parameter active in one only.
  static double distance2(const std::vector<double>& a, const std::vector<double>& b, const Encoder& enc) {
    double d2 = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (enc.spec(i).type == ParamType::kFixed) continue;
      const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
      if (na || nb) {
        d2 += na == nb ? 0.0 : 1.0 / 6.0;
      } else if (enc.spec(i).type == ParamType::kChoice && !enc.spec(i).ordered) {
        d2 += a[i] == b[i] ? 0.0 : 1.0 / 6.0;
      } else {
        d2 += (a[i] - b[i]) * (a[i] - b[i]);
      }
    }
    return d2;
  }

  // One-level moves from u: a float by 0.05 of its range, an int or an ordered choice to the next
  // level (every 1/20 of an int's levels at least), an unordered choice to each other value.
  std::vector<std::vector<double>> neighbours(const std::vector<double>& u, Rng& rng) const {
    std::vector<std::vector<double>> out;
    auto add = [&](std::size_t i, double v) {
      if (v == u[i] || v < 0 || v > 1) return;
      std::vector<double> w = u;
      w[i] = v;
      enc_.repair(w, rng);
      out.push_back(std::move(w));
    };
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      const auto& p = enc_.spec(i);
      if (std::isnan(u[i]) || p.type == ParamType::kFixed) continue;
      if (p.type == ParamType::kFloat || (p.type == ParamType::kInt && p.log)) {
        add(i, std::clamp(u[i] - 0.05, 0.0, 1.0));
        add(i, std::clamp(u[i] + 0.05, 0.0, 1.0));
      } else if (p.type == ParamType::kInt) {
        const int64_t n = Space::int_levels(p);
        const int64_t idx = (Space::from_unit(p, u[i]).get<int64_t>() - static_cast<int64_t>(p.low)) / p.step;
        const int64_t by = std::max<int64_t>(1, n / 20);
        for (int64_t to : {idx - by, idx + by})
          if (to >= 0 && to < n) add(i, Space::to_unit(p, static_cast<int64_t>(p.low) + to * p.step));
      } else {
        const std::size_t k = enc_.num_choices(i), at = Encoder::choice_of(u[i], k);
        for (std::size_t c = 0; c < k; ++c)
          if (c != at && (!p.ordered || c + 1 == at || c == at + 1)) add(i, Encoder::unit_of_choice(c, k));
      }
    }
    return out;
  }

  // Where u ends when it descends the model's mean one level at a time: points that end at the
  // same place lie in one basin of the model.
  std::vector<double> basin_of(std::vector<double> u, Rng& rng) const {
    std::vector<double> m;
    score_mean({u}, m);
    double cur = m[0];
    for (int step = 0; step < 64; ++step) {
      auto nb = neighbours(u, rng);
      if (nb.empty()) break;
      score_mean(nb, m);
      const auto b = static_cast<std::size_t>(std::min_element(m.begin(), m.end()) - m.begin());
      if (!(m[b] < cur - 1e-12)) break;
      u = std::move(nb[b]);
      cur = m[b];
    }
    return u;
  }

  void score_mean(const std::vector<std::vector<double>>& cands, std::vector<double>& out) const {
    const auto F = features_of(cands);
    Eigen::VectorXd mean, var;
    if (cfg_.forest) forest_.predict(F, mean, var);
    else gp_.predict_mean(F, mean);
    out.assign(mean.data(), mean.data() + mean.size());
  }

  // Every other model suggestion (every one once the polish confirmed the best point), once
  // escape_after trials in a row have not improved on the best loss: a suggestion near the best
  // point of another basin of the model (the points whose descent of the model's mean ends
  // elsewhere than the best point's), by expected improvement over that point, until escape_after
  // suggestions near it have not improved on it either; then the next basin. A model that has
  // settled in one basin otherwise spends what is left on the points it knows least (the corners
  // of the space).
  bool escape_turn(int64_t seq, bool every_turn) const { return cfg_.escape_after > 0 && (seq % 2 == 0 || every_turn); }

  Region escape_region(int64_t seq) const {
    Region r;
    const std::vector<DataPoint>& data = model_data();
    if (model_y_.size() != static_cast<Eigen::Index>(data.size())) return r;
    std::size_t best = data.size();
    for (std::size_t j = 0; j < data.size(); ++j)
      if (!data[j].losses.empty() && (best == data.size() || batch_raw_[j] < batch_raw_[best])) best = j;
    if (best == data.size()) return r;
    const auto stall = static_cast<int64_t>(data.size() - 1 - best);
    if (stall < cfg_.escape_after) return r;
    int64_t searched = 0;
    for (std::size_t i = 0; i < enc_.dims(); ++i) searched += enc_.spec(i).type == ParamType::kFixed ? 0 : 1;
    const double radius2 = cfg_.escape_radius * cfg_.escape_radius * static_cast<double>(searched);
    Rng rng = rng_for(seq, 0xBA5);
    // Only the best kLabelled points get a basin (each descent costs up to 64 x 2d predictions):
    // the heads of the basins worth descending are among them, and an ask at 1,000 observations
    // stays near its cost without escapes.
    constexpr std::size_t kLabelled = 64;
    std::vector<std::size_t> by_loss;
    for (std::size_t j = 0; j < data.size(); ++j)
      if (!data[j].losses.empty()) by_loss.push_back(j);
    std::stable_sort(by_loss.begin(), by_loss.end(), [&](std::size_t a, std::size_t b) { return batch_raw_[a] < batch_raw_[b]; });
    if (by_loss.size() > kLabelled) by_loss.resize(kLabelled);
    std::vector<std::vector<double>> label(data.size());
    for (std::size_t j : by_loss) label[j] = basin_of(data[j].u, rng);
    // Other basins' best points, best first.
    std::vector<std::size_t> heads;
    for (std::size_t j = 0; j < data.size(); ++j) {
      if (label[j].empty() || label[j] == label[best]) continue;
      bool better_in_basin = false;
      for (std::size_t k = 0; k < data.size() && !better_in_basin; ++k)
        better_in_basin = k != j && !label[k].empty() && label[k] == label[j] &&
                          (batch_raw_[k] < batch_raw_[j] || (batch_raw_[k] == batch_raw_[j] && k < j));
      if (!better_in_basin) heads.push_back(j);
    }
    std::stable_sort(heads.begin(), heads.end(), [&](std::size_t a, std::size_t b) { return batch_raw_[a] < batch_raw_[b]; });
    for (std::size_t h : heads) {
      int64_t tried_near = 0;  // points told after the head, near it
      for (std::size_t k = h + 1; k < data.size(); ++k)
        tried_near += distance2(data[k].u, data[h].u, enc_) < radius2 ? 1 : 0;
      if (tried_near >= cfg_.escape_after) continue;
      r.active = true;
      r.center = data[h].u;
      r.radius2 = radius2;
      r.y_ref = model_y_(static_cast<Eigen::Index>(h));
      r.head_seq = data[h].seq;
      return r;
    }
    return r;
  }

  // The polish at the end of the budget (polish_last): the untried one-level neighbour of the best
  // point (neighbours(): an int or ordered level by one, an unordered choice to each other value, a
  // float by 0.05) with the best expected improvement. `confirmed` once every neighbour was tried:
  // the best point is a local minimum under one-level moves, and only another basin can better it.
  struct Polish {
    std::optional<std::vector<double>> next;
    bool confirmed = false;
  };
  Polish polish_step(int64_t seq, Rng& rng) const {
    Polish out;
    const std::vector<DataPoint>& data = model_data();
    const int64_t budget = spec().max_trials;
    if (cfg_.polish_last <= 0 || budget <= 0 || seq < budget - cfg_.polish_last) return out;
    std::size_t best = data.size();
    for (std::size_t j = 0; j < data.size(); ++j)
      if (!data[j].losses.empty() && (best == data.size() || batch_raw_[j] < batch_raw_[best])) best = j;
    if (best == data.size()) return out;
    std::vector<std::vector<double>> cands;
    for (auto& u : neighbours(data[best].u, rng))
      if (!known(u)) cands.push_back(std::move(u));
    if (cands.empty()) {
      out.confirmed = true;
      return out;
    }
    std::vector<double> scores;
    score(cands, scores, Region{});
    out.next = cands[static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin())];
    return out;
  }

  // Acquisition values (larger is better) of candidates.
  void score(const std::vector<std::vector<double>>& cands, std::vector<double>& out, const Region& region) const {
    const auto m = static_cast<Eigen::Index>(cands.size());
    const auto F = features_of(cands);
    Eigen::VectorXd mean, var;
    model_predict(F, mean, var);
    out.resize(cands.size());
    for (Eigen::Index i = 0; i < m; ++i) {
      const double sd = std::sqrt(var(i));
      const auto& u = cands[static_cast<std::size_t>(i)];
      out[static_cast<std::size_t>(i)] =
          region.excludes(u, enc_) ? -kInf
          : cfg_.ucb              ? -(mean(i) - cfg_.kappa * sd)
          : cfg_.mes && !region.active ? mes_value(mean(i), sd)
                                  : log_expected_improvement(mean(i), sd, region.active ? region.y_ref : y_best_);
    }
  }

  // Max-value entropy search (acquisition mes; Wang & Jegelka 2017) for a minimum: the information a
  // point's value gives about the minimum's value y*, the mean over draws of y* of
  // g phi(g) / (2 Phi(g)) - log Phi(g), g = (mu - y*) / sd (the formula for a maximum, of -f).
  double mes_value(double mu, double sd) const {
    sd = std::max(sd, 1e-12);
    double acc = 0;
    for (double ystar : mes_min_) {
      const double g = (mu - ystar) / sd;
      const double cdf = std::max(normal_cdf(g), 1e-300);
      acc += g * normal_pdf(g) / (2.0 * cdf) - std::log(cdf);
    }
    return acc / static_cast<double>(mes_min_.size());
  }

  // MES's draws of y*, from its Gumbel approximation of P(min > y) = prod_i Phi((mu_i - y) / sd_i)
  // over 1,000 random points (fitted at the quartiles), each below the best observed target.
  void fit_mes(int64_t seq) {
    constexpr int kDraws = 10, kCandidates = 1000;
    Rng rng = rng_for(seq, 0x3E5);
    std::vector<std::vector<double>> cands(kCandidates, std::vector<double>(enc_.dims()));
    for (auto& u : cands) {
      for (auto& x : u) x = rng.uniform();
      enc_.repair(u, rng);
    }
    Eigen::VectorXd mean, var;
    model_predict(features_of(cands), mean, var);
    auto p_above = [&](double y) {
      double lp = 0;
      for (Eigen::Index i = 0; i < mean.size(); ++i)
        lp += std::log(std::max(normal_cdf((mean(i) - y) / std::max(std::sqrt(var(i)), 1e-12)), 1e-300));
      return std::exp(lp);
    };
    auto quantile = [&](double q) {  // the y with P(min > y) = q; the targets are standardized
      double lo = y_best_ - 10.0, hi = y_best_;
      for (int k = 0; k < 60; ++k) {
        const double mid = 0.5 * (lo + hi);
        (p_above(mid) > q ? lo : hi) = mid;
      }
      return 0.5 * (lo + hi);
    };
    // The maximum z of -f as a Gumbel, P(z < t) = exp(-exp(-(t - a) / b)), through its quartiles.
    const double z25 = -quantile(0.25), z50 = -quantile(0.5), z75 = -quantile(0.75);
    const double b = std::max((z75 - z25) / (std::log(-std::log(0.25)) - std::log(-std::log(0.75))), 1e-12);
    const double a = z50 + b * std::log(-std::log(0.5));
    mes_min_.clear();
    for (int k = 0; k < kDraws; ++k) {
      const double r = std::clamp(rng.uniform(), 1e-12, 1 - 1e-12);
      mes_min_.push_back(std::min(-(a - b * std::log(-std::log(r))), y_best_ - 1e-6));
    }
  }

  void perturb(std::vector<double>& u, double sigma, Rng& rng) const {
    const double p_cat = 1.0 / std::max<std::size_t>(1, enc_.dims());
    for (std::size_t i = 0; i < enc_.dims(); ++i) {
      if (std::isnan(u[i])) continue;
      if (enc_.is_numeric(i)) {
        const double before = u[i];
        double x = u[i] + rng.normal() * sigma;
        x = std::fmod(std::fabs(x), 2.0);
        u[i] = x > 1.0 ? 2.0 - x : x;
        // A small step rounds back to the same int level (the model is flat within a level), so the
        // local search would never move an int of few levels: it steps by one level instead, as
        // often as a choice switches.
        const auto& p = enc_.spec(i);
        if (p.type == ParamType::kInt && rng.bernoulli(p_cat) && Space::int_levels(p) > 1 &&
            Space::from_unit(p, u[i]) == Space::from_unit(p, before))
          u[i] = step_int_level(p, before, rng);
      } else if (enc_.is_categorical(i) && enc_.num_choices(i) > 1 && rng.bernoulli(p_cat)) {
        u[i] = Encoder::unit_of_choice(rng.below(enc_.num_choices(i)), enc_.num_choices(i));
      }
    }
    enc_.repair(u, rng);
  }

  bool known(const std::vector<double>& u) const {
    auto same = [&](const std::vector<double>& a) {
      for (std::size_t i = 0; i < u.size(); ++i)
        if (!(a[i] == u[i] || (std::isnan(a[i]) && std::isnan(u[i])))) return false;
      return true;
    };
    for (const auto& p : data_)
      if (same(p.u)) return true;
    for (const auto& [seq, params] : pending())
      if (same(enc_.encode(params))) return true;
    return false;
  }

  std::vector<double> optimize_acquisition(Rng& rng, const Region& region) {
    const std::size_t d = enc_.dims();
    // Fewer candidates as n grows: each costs O(n^2).
    const double n = static_cast<double>(cfg_.forest ? forest_.size() : gp_.size());
    const double budget = std::clamp(1e8 / std::max(1.0, n * n), 400.0, 2500.0);
    const auto n_random = static_cast<std::size_t>(std::min<double>(static_cast<double>(cfg_.acq_samples), 0.4 * budget));
    std::vector<std::vector<double>> cands;
    for (std::size_t i = 0; i < n_random; ++i) {
      std::vector<double> u(d);
      for (auto& x : u) x = rng.uniform();
      enc_.repair(u, rng);
      cands.push_back(std::move(u));
    }
    // Perturbations of the best observations.
    const std::vector<DataPoint>& data = model_data();
    std::vector<std::size_t> order(data.size());
    std::iota(order.begin(), order.end(), 0);
    const std::vector<double>& y0 = batch_raw_;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return y0[a] < y0[b]; });
    for (std::size_t k = 0, taken = 0; k < order.size() && taken < 5; ++k) {
      if (data[order[k]].losses.empty() || region.excludes(data[order[k]].u, enc_)) continue;
      ++taken;
      for (int j = 0; j < 10; ++j) {
        std::vector<double> u = data[order[k]].u;
        perturb(u, 0.02 + 0.08 * rng.uniform(), rng);
        cands.push_back(std::move(u));
      }
    }
    std::vector<double> scores;
    score(cands, scores, region);
    std::vector<std::size_t> idx(cands.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });

    std::vector<double> best_u;
    double best_s = -kInf;
    auto consider = [&](const std::vector<double>& u, double s) {
      if (s > best_s && s > -kInf && !known(u)) {
        best_s = s;
        best_u = u;
      }
    };
    for (std::size_t k = 0; k < std::min<std::size_t>(idx.size(), 20) && best_u.empty(); ++k) consider(cands[idx[k]], scores[idx[k]]);

    // Local search from the best few.
    const auto starts = std::min<std::size_t>(static_cast<std::size_t>(cfg_.acq_local_starts), idx.size());
    const double per_start = starts ? 0.6 * budget / static_cast<double>(starts) : 0;
    const std::size_t neighbors = 12;
    for (std::size_t s = 0; s < starts; ++s) {
      std::vector<double> cur = cands[idx[s]];
      double cur_s = scores[idx[s]];
      double sigma = 0.1;
      double used = 0;
      while (sigma > 2e-3 && used + static_cast<double>(neighbors) <= per_start) {
        std::vector<std::vector<double>> nb;
        for (std::size_t j = 0; j < neighbors; ++j) {
          std::vector<double> u = cur;
          perturb(u, sigma * (j % 2 ? 1.0 : 0.3), rng);
          nb.push_back(std::move(u));
        }
        std::vector<double> ns;
        score(nb, ns, region);
        used += static_cast<double>(nb.size());
        const auto b = static_cast<std::size_t>(std::max_element(ns.begin(), ns.end()) - ns.begin());
        if (ns[b] > cur_s) {
          cur = nb[b];
          cur_s = ns[b];
        } else {
          sigma *= 0.5;
        }
      }
      consider(cur, cur_s);
    }
    if (best_u.empty()) {  // everything promising is already known: explore
      best_u = std::vector<double>(d);
      for (auto& x : best_u) x = rng.uniform();
      enc_.repair(best_u, rng);
    }
    return best_u;
  }

  BoConfig cfg_;
  Encoder enc_;
  InitialDesign design_;
  std::vector<DataPoint> data_;
  int64_t warm_usable_ = 0;
  GaussianProcess gp_;
  RandomForest forest_;  // surrogate: forest (refitted on every batch)
  Eigen::MatrixXd forest_X_;
  Eigen::VectorXd forest_y_;
  std::size_t gp_rows_ = 0;
  std::vector<std::vector<double>> running_;  // the running trials in the model as fantasies, oldest first
  std::size_t n_at_fit_ = 0;
  int64_t model_failures_ = 0;  // asks whose model could not be built (their suggestions came from the design)
  std::string model_error_;     // why, the latest time
  bool fitted_ = false;
  double y_best_ = 0;
  double liar_ = 0;
  std::vector<double> mes_min_;  // acquisition mes: this suggestion's draws of the minimum (transformed)
  double power_lambda_ = 1.0;  // output_transform power: the latest fitted lambda
  std::vector<double> batch_raw_;  // this batch's scalar losses of model_data(), before the transform
  Eigen::VectorXd model_y_;        // and after it: the GP's targets for model_data()
  LevelData fit_;                  // under early stopping: the level modelled (this ask's)
  RungCache rung_cache_;           // the told trials' values at its rungs (fidelity_model_data)
  int64_t level_at_fit_ = 0;       // the level of the latest hyperparameter fit
};

}  // namespace

int64_t default_n_initial(const Space& space, int64_t budget) {
  int64_t d = 0;
  for (const auto& p : space.params()) d += p.type == ParamType::kFixed ? 0 : 1;
  const int64_t n = std::clamp<int64_t>(2 * d, 5, 20);
  // Half the budget at most, so that a small campaign uses its model for half its trials (8
  // trials: 4 of design); measured budgets of 50 and 100 are not affected (2d <= 20 <= 25).
  return budget > 0 ? std::min<int64_t>(n, std::max<int64_t>(2, budget / 2)) : n;
}

// Escapes pay on numbers and ordered levels, whose basins are few and wide (Hartmann-6 on a
// 6-level grid: the optimum in 55 of 100 seeds instead of 41; levy, rosenbrock, ordinal grids). On
// unordered choices every value is one move from every other, the model's basins are many and
// shallow, and escapes lost more than they found (the NAS-like cells of bench/results/search.md).
int64_t default_escape_after(const Space& space) {
  int64_t searched = 0, unordered = 0;
  for (const auto& p : space.params()) {
    if (p.type == ParamType::kFixed) continue;
    ++searched;
    if (p.type == ParamType::kChoice && !p.ordered) ++unordered;
  }
  return 2 * unordered < searched ? 6 : 0;
}

// The polish pays where a point's neighbours are few and exact: on grids (every searched parameter an
// int or a choice), whose optimum is a point the search can land on. A float's one-level move (0.05
// of its range) is coarser than the acquisition's own local search, so spaces with floats have none.
int64_t default_polish_last(const Space& space, int64_t budget) {
  for (const auto& p : space.params())
    if (p.type == ParamType::kFloat || (p.type == ParamType::kInt && p.log)) return 0;
  return std::max<int64_t>(0, budget / 3);
}

Result<std::unique_ptr<Searcher>> make_bayesian(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto s, resolve_settings("bayesian", bayesian_settings(), spec.settings));
  BoConfig cfg;
  cfg.n_initial = s["n_initial"].is_null() ? default_n_initial(spec.space, spec.max_trials) : s["n_initial"].get<int64_t>();
  // The settings table admits only known designs; a name it admits but this cannot parse is a
  // table out of step with initial_design.cpp, said here rather than left uninitialised.
  if (!parse_design_kind(s["init"].get<std::string>(), cfg.init)) {
    return err(Errc::kConfig, "init: unknown initial design '" + s["init"].get<std::string>() + "'");
  }
  cfg.ucb = s["acquisition"] == "ucb";
  cfg.mes = s["acquisition"] == "mes";
  cfg.kappa = s["ucb_kappa"].get<double>();
  cfg.kriging_believer = s["pending"] == "kriging_believer";
  cfg.liar = s["liar"].get<std::string>();
  cfg.max_fantasies = static_cast<std::size_t>(s["max_fantasies"].get<int64_t>());
  cfg.output_transform = s["output_transform"].get<std::string>();
  cfg.input_warping = s["input_warping"].get<bool>();
  cfg.overlap_kernel = s["choice_kernel"] == "overlap";
  cfg.refit_every = s["refit_every"].get<int64_t>();
  cfg.fit_restarts = static_cast<int>(s["fit_restarts"].get<int64_t>());
  cfg.max_fit_points = static_cast<std::size_t>(s["max_fit_points"].get<int64_t>());
  cfg.acq_samples = s["acq_samples"].get<int64_t>();
  cfg.acq_local_starts = s["acq_local_starts"].get<int64_t>();
  cfg.escape_after = s["escape_after"].is_null() ? default_escape_after(spec.space) : s["escape_after"].get<int64_t>();
  cfg.escape_radius = s["escape_radius"].get<double>();
  cfg.polish_last = s["polish_last"].is_null() ? default_polish_last(spec.space, spec.max_trials) : s["polish_last"].get<int64_t>();
  cfg.start_at_centre = s["start_at_centre"].get<bool>();
  cfg.forest = s["surrogate"] == "forest";
  return std::unique_ptr<Searcher>(std::make_unique<Bayesian>(spec, cfg));
}

}  // namespace hpctune::search
