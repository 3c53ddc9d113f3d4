#include "search/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

namespace hpctune::search {

namespace {

constexpr double kSqrt5 = 2.23606797749979;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Bounds of the hyperparameters in log space (inputs in [0, 1], targets standardized).
constexpr double kLogLsMin = -5.3, kLogLsMax = 2.3;       // 0.005 .. 10
constexpr double kLogSigMin = -3.0, kLogSigMax = 3.0;     // 0.05 .. 20
constexpr double kLogNoiseMin = -13.8, kLogNoiseMax = -0.7;  // 1e-6 .. 0.5
constexpr double kLogWarpMin = -2.0, kLogWarpMax = 2.0;       // a, b in 0.14 .. 7.4
constexpr double kWarpPriorVar = 0.75;  // log a, log b ~ N(0, 0.75), as BoTorch's Warp
constexpr double kWarpEps = 1e-7;       // inputs pulled into [eps, 1 - eps]: x^a and log x stay finite

// The Kumaraswamy CDF at x in [0, 1], and its derivatives w.r.t. log a and log b when asked.
double kumaraswamy(double x, double a, double b, double* d_log_a = nullptr, double* d_log_b = nullptr) {
  x = std::clamp(x, 0.0, 1.0) * (1 - 2 * kWarpEps) + kWarpEps;
  const double xa = std::pow(x, a);
  const double one_m = 1.0 - xa;
  const double pb = std::pow(one_m, b);
  if (d_log_a) *d_log_a = a * b * std::pow(one_m, b - 1.0) * xa * std::log(x);
  if (d_log_b) *d_log_b = -b * pb * std::log(one_m);
  return 1.0 - pb;
}

// Gamma(a, b) log density in log coordinates (with the Jacobian): a log x - b x.
double log_gamma_prior(double log_x, double a, double b) { return a * log_x - b * std::exp(log_x); }

// Squared scaled distances between the rows of A and B.
Eigen::MatrixXd sq_dist(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) {
  Eigen::MatrixXd D = (-2.0 * A) * B.transpose();
  D.colwise() += A.rowwise().squaredNorm();
  D.rowwise() += B.rowwise().squaredNorm().transpose();
  return D.cwiseMax(0.0);
}

double matern(double r2) {
  const double r = std::sqrt(r2);
  return (1.0 + kSqrt5 * r + 5.0 / 3.0 * r2) * std::exp(-kSqrt5 * r);
}

// The number of lengthscales of D inputs tied by `groups`.
Eigen::Index num_lengthscales(const std::vector<Eigen::Index>& groups, Eigen::Index D) {
  if (groups.empty()) return D;
  return *std::max_element(groups.begin(), groups.end()) + 1;
}

// The log lengthscale of each input.
Eigen::VectorXd input_log_lengthscales(const GpHyper& h) {
  if (h.ls_group.empty()) return h.log_lengthscale;
  Eigen::VectorXd out(static_cast<Eigen::Index>(h.ls_group.size()));
  for (std::size_t d = 0; d < h.ls_group.size(); ++d) out(static_cast<Eigen::Index>(d)) = h.log_lengthscale(h.ls_group[d]);
  return out;
}

Eigen::MatrixXd scaled(const Eigen::MatrixXd& X, const Eigen::VectorXd& log_ls) {
  return X * (-log_ls).array().exp().matrix().asDiagonal();
}

}  // namespace

Eigen::MatrixXd warp_inputs(const Eigen::MatrixXd& X, const GpHyper& hyper) {
  if (hyper.warp_dims.empty()) return X;
  Eigen::MatrixXd W = X;
  for (std::size_t k = 0; k < hyper.warp_dims.size(); ++k) {
    const Eigen::Index d = hyper.warp_dims[k];
    const double a = std::exp(hyper.log_warp_a(static_cast<Eigen::Index>(k)));
    const double b = std::exp(hyper.log_warp_b(static_cast<Eigen::Index>(k)));
    for (Eigen::Index i = 0; i < X.rows(); ++i) W(i, d) = kumaraswamy(X(i, d), a, b);
  }
  return W;
}

double normal_pdf(double z) noexcept { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * std::numbers::pi); }
double normal_cdf(double z) noexcept { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

double normal_quantile(double p) noexcept {
  if (!(p >= 0 && p <= 1)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0) return -std::numeric_limits<double>::infinity();
  if (p == 1) return std::numeric_limits<double>::infinity();
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01,  -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x;
  if (p < kLow) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - kLow) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log1p(-p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  // One Halley step on normal_cdf(x) - p.
  const double e = normal_cdf(x) - p;
  const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(0.5 * x * x);
  return x - u / (1 + 0.5 * x * u);
}

double log_h(double z) noexcept {
  if (z > -5.0) {
    const double h = z * normal_cdf(z) + normal_pdf(z);
    return std::log(std::max(h, std::numeric_limits<double>::min()));
  }
  // h(z) = phi(z) (1 - t m(t)) with t = -z and m the Mills ratio Phi(-t)/phi(t) = sqrt(pi/2) erfcx(t/sqrt2).
  const double t = -z;
  const double u = t / std::numbers::sqrt2;
  double tm;  // t * m(t)
  if (u < 25.0) {
    tm = t * std::sqrt(std::numbers::pi / 2.0) * std::erfc(u) * std::exp(u * u);
  } else {
    // The asymptotic series of the Mills ratio: 1 - t m(t) ~ 1/t^2 - 3/t^4 + 15/t^6 - 105/t^8.
    const double t2 = t * t;
    const double t4 = t2 * t2;
    const double one_minus = 1.0 / t2 - 3.0 / t4 + 15.0 / (t4 * t2) - 105.0 / (t4 * t4);
    return -0.5 * z * z - 0.5 * std::log(2.0 * std::numbers::pi) + std::log(one_minus);
  }
  const double one_minus = std::max(1.0 - tm, 1.0 / (t * t) * 0.5);  // guards a rounding-induced <= 0
  return -0.5 * z * z - 0.5 * std::log(2.0 * std::numbers::pi) + std::log(one_minus);
}

double expected_improvement(double mu, double sigma, double best) noexcept {
  if (!(sigma > 0)) return std::max(best - mu, 0.0);
  const double z = (best - mu) / sigma;
  return std::max(0.0, sigma * std::exp(log_h(z)));
}

double log_expected_improvement(double mu, double sigma, double best) noexcept {
  if (!(sigma > 0)) return best > mu ? std::log(best - mu) : kNegInf;
  return std::log(sigma) + log_h((best - mu) / sigma);
}

GpHyper GaussianProcess::default_hyper(std::size_t dims) {
  GpHyper h;
  h.log_lengthscale = Eigen::VectorXd::Constant(static_cast<Eigen::Index>(dims), std::log(0.3));
  h.log_signal_var = 0.0;
  h.log_noise_var = std::log(1e-4);
  return h;
}

Eigen::MatrixXd GaussianProcess::cross_kernel(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) const {
  // No points on a side (a model before its data, whose X has no columns yet): nothing to scale.
  if (A.rows() == 0 || B.rows() == 0) return Eigen::MatrixXd(A.rows(), B.rows());
  const Eigen::VectorXd ls = input_log_lengthscales(hyper_);
  Eigen::MatrixXd K = sq_dist(scaled(A, ls), scaled(B, ls));
  const double s2 = std::exp(hyper_.log_signal_var);
  return K.unaryExpr([s2](double r2) { return s2 * matern(r2); });
}

Status GaussianProcess::set_data(const Eigen::MatrixXd& X, const Eigen::VectorXd& y) {
  X_raw_ = X;
  y_ = y;
  n_ = static_cast<std::size_t>(X.rows());
  const bool groups_fit = hyper_.ls_group.empty() || static_cast<Eigen::Index>(hyper_.ls_group.size()) == X.cols();
  auto groups = groups_fit ? hyper_.ls_group : std::vector<Eigen::Index>{};
  const Eigen::Index G = num_lengthscales(groups, X.cols());
  if (!groups_fit || hyper_.log_lengthscale.size() != G) {
    auto warp = hyper_.warp_dims;
    hyper_ = default_hyper(static_cast<std::size_t>(G));
    hyper_.ls_group = std::move(groups);
    if (std::all_of(warp.begin(), warp.end(), [&](Eigen::Index d) { return d >= 0 && d < X.cols(); })) {
      hyper_.warp_dims = std::move(warp);
      hyper_.log_warp_a = hyper_.log_warp_b = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(hyper_.warp_dims.size()));
    }
  }
  X_ = warp_inputs(X_raw_, hyper_);
  return factorize();
}

Status GaussianProcess::set_hyper(const GpHyper& hyper) {
  hyper_ = hyper;
  X_ = warp_inputs(X_raw_, hyper_);
  return factorize();
}

Status GaussianProcess::set_lengthscale_groups(const std::vector<Eigen::Index>& groups) {
  GpHyper h = hyper_;
  h.ls_group = groups;
  h.log_lengthscale = default_hyper(static_cast<std::size_t>(num_lengthscales(groups, X_raw_.cols()))).log_lengthscale;
  return set_hyper(h);
}

Status GaussianProcess::set_warping(const std::vector<Eigen::Index>& dims) {
  GpHyper h = hyper_;
  h.warp_dims = dims;
  h.log_warp_a = h.log_warp_b = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(dims.size()));
  return set_hyper(h);
}

Status GaussianProcess::factorize() {
  const auto n = static_cast<Eigen::Index>(n_);
  const Eigen::MatrixXd Xn = X_.topRows(n);
  Eigen::MatrixXd K = cross_kernel(Xn, Xn);
  const double noise = std::exp(hyper_.log_noise_var);
  const double s2 = std::exp(hyper_.log_signal_var);
  jitter_ = 0.0;
  // Eigen's LLT reports success on a matrix holding NaN (its pivot test `<= 0` is false for NaN):
  // such a model would predict NaN everywhere, so it is refused here, as an unfactorisable one is.
  if (!K.allFinite()) return err(Errc::kInternal, "the GP kernel matrix has non-finite entries: it is not positive definite");
  for (int attempt = 0; attempt < 8; ++attempt) {
    Eigen::MatrixXd Kj = K;
    Kj.diagonal().array() += noise + jitter_;
    Eigen::LLT<Eigen::MatrixXd> llt(Kj);
    if (llt.info() == Eigen::Success) {
      L_ = Eigen::MatrixXd::Zero(std::max<Eigen::Index>(n, 1), std::max<Eigen::Index>(n, 1));
      L_.topLeftCorner(n, n) = llt.matrixL();
      recompute_alpha();
      return Status::Ok();
    }
    jitter_ = jitter_ == 0.0 ? 1e-8 * s2 : jitter_ * 10.0;
  }
  return err(Errc::kInternal, "the GP kernel matrix is not positive definite even with jitter");
}

void GaussianProcess::recompute_alpha() {
  const auto n = static_cast<Eigen::Index>(n_);
  alpha_ = y_.head(n);
  if (n == 0) return;
  auto L = L_.topLeftCorner(n, n).triangularView<Eigen::Lower>();
  L.solveInPlace(alpha_);
  L.transpose().solveInPlace(alpha_);
}

void GaussianProcess::set_targets(const Eigen::VectorXd& y) {
  y_.head(static_cast<Eigen::Index>(n_)) = y;
  recompute_alpha();
}

void GaussianProcess::append(const Eigen::VectorXd& x, double y) {
  const auto n = static_cast<Eigen::Index>(n_);
  if (X_.rows() <= n) {
    const Eigen::Index cap = std::max<Eigen::Index>(8, 2 * n);
    X_.conservativeResize(cap, x.size());
    X_raw_.conservativeResize(cap, x.size());
    y_.conservativeResize(cap);
  }
  if (L_.rows() <= n) {
    const Eigen::Index cap = std::max<Eigen::Index>(8, 2 * n);
    Eigen::MatrixXd L = Eigen::MatrixXd::Zero(cap, cap);
    L.topLeftCorner(n, n) = L_.topLeftCorner(n, n);
    L_ = std::move(L);
  }
  X_raw_.row(n) = x.transpose();
  X_.row(n) = warp_inputs(x.transpose(), hyper_);
  y_(n) = y;
  Eigen::VectorXd k = cross_kernel(X_.topRows(n), X_.row(n)).col(0);
  const double kxx = std::exp(hyper_.log_signal_var) + std::exp(hyper_.log_noise_var) + jitter_;
  Eigen::VectorXd l = k;
  if (n > 0) L_.topLeftCorner(n, n).triangularView<Eigen::Lower>().solveInPlace(l);
  const double d2 = kxx - l.squaredNorm();
  L_.row(n).head(n) = l.transpose();
  L_(n, n) = std::sqrt(std::max(d2, 1e-10 * kxx));
  n_ += 1;
  recompute_alpha();
}

void GaussianProcess::truncate(std::size_t n) {
  if (n >= n_) return;
  n_ = n;
  recompute_alpha();
}

void GaussianProcess::predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd& mean, Eigen::VectorXd& var) const {
  const auto n = static_cast<Eigen::Index>(n_);
  const double s2 = std::exp(hyper_.log_signal_var);
  if (n == 0) {
    mean = Eigen::VectorXd::Zero(Xs.rows());
    var = Eigen::VectorXd::Constant(Xs.rows(), s2);
    return;
  }
  Eigen::MatrixXd Ks = cross_kernel(X_.topRows(n), warp_inputs(Xs, hyper_));  // n x m
  mean = Ks.transpose() * alpha_;
  L_.topLeftCorner(n, n).triangularView<Eigen::Lower>().solveInPlace(Ks);
  var = (s2 - Ks.colwise().squaredNorm().transpose().array()).cwiseMax(1e-12 * s2).matrix();
}

void GaussianProcess::predict_mean(const Eigen::MatrixXd& Xs, Eigen::VectorXd& mean) const {
  const auto n = static_cast<Eigen::Index>(n_);
  if (n == 0) {
    mean = Eigen::VectorXd::Zero(Xs.rows());
    return;
  }
  mean = cross_kernel(X_.topRows(n), warp_inputs(Xs, hyper_)).transpose() * alpha_;
}

double GaussianProcess::log_marginal_likelihood() const {
  const auto n = static_cast<Eigen::Index>(n_);
  double out = -0.5 * y_.head(n).dot(alpha_) - 0.5 * static_cast<double>(n) * std::log(2.0 * std::numbers::pi);
  for (Eigen::Index i = 0; i < n; ++i) out -= std::log(L_(i, i));
  return out;
}

double GaussianProcess::log_marginal_likelihood(const Eigen::MatrixXd& X, const Eigen::VectorXd& y,
                                                const GpHyper& hyper, Eigen::VectorXd* grad) {
  const Eigen::Index n = X.rows(), D = X.cols();
  const auto nw = static_cast<Eigen::Index>(hyper.warp_dims.size());
  const Eigen::VectorXd lsx = input_log_lengthscales(hyper);
  const Eigen::Index nls = hyper.log_lengthscale.size();
  const Eigen::MatrixXd Xs = scaled(warp_inputs(X, hyper), lsx);
  const Eigen::MatrixXd R2 = sq_dist(Xs, Xs);
  const double s2 = std::exp(hyper.log_signal_var), noise = std::exp(hyper.log_noise_var);
  Eigen::MatrixXd M = R2.unaryExpr([](double r2) { return matern(r2); });
  Eigen::MatrixXd K = s2 * M;
  K.diagonal().array() += noise;
  Eigen::LLT<Eigen::MatrixXd> llt(K);
  if (llt.info() != Eigen::Success) return kNegInf;
  const Eigen::MatrixXd L = llt.matrixL();
  Eigen::VectorXd alpha = llt.solve(y);
  double lml = -0.5 * y.dot(alpha) - 0.5 * static_cast<double>(n) * std::log(2.0 * std::numbers::pi);
  for (Eigen::Index i = 0; i < n; ++i) lml -= std::log(L(i, i));
  if (!std::isfinite(lml)) return kNegInf;
  if (grad) {
    // d lml / d theta = 0.5 tr((alpha alpha^T - K^-1) dK/dtheta).
    Eigen::MatrixXd W = llt.solve(Eigen::MatrixXd::Identity(n, n));
    W = alpha * alpha.transpose() - W;
    grad->setZero(nls + 2 + 2 * nw);
    (*grad)(nls) = 0.5 * (W.cwiseProduct(s2 * M)).sum();
    (*grad)(nls + 1) = 0.5 * noise * W.trace();
    // dk/dlog l_d = s2 * 5/3 (1 + sqrt5 r) exp(-sqrt5 r) * (x_d - x'_d)^2 / l_d^2.
    Eigen::MatrixXd G = R2.unaryExpr([s2](double r2) {
      const double r = std::sqrt(r2);
      return s2 * 5.0 / 3.0 * (1.0 + kSqrt5 * r) * std::exp(-kSqrt5 * r);
    });
    G = G.cwiseProduct(W);
    const Eigen::VectorXd g = G.rowwise().sum();
    const Eigen::MatrixXd GX = G * Xs;
    for (Eigen::Index d = 0; d < D; ++d) {
      // sum_ij G_ij (xs_id - xs_jd)^2 = 2 sum_i xs_id^2 g_i - 2 xs_d^T G xs_d  (G symmetric)
      const double s = 2.0 * Xs.col(d).array().square().matrix().dot(g) - 2.0 * Xs.col(d).dot(GX.col(d));
      (*grad)(hyper.ls_group.empty() ? d : hyper.ls_group[static_cast<std::size_t>(d)]) += 0.5 * s;
    }
    // Warping: d lml / d xs_id = -(xs_id g_i - (G xs)_id) / l_d (the kernel's derivative in row i
    // and column i), chained through xs_id = w(x_id) / l_d and the CDF's derivatives.
    for (Eigen::Index k = 0; k < nw; ++k) {
      const Eigen::Index d = hyper.warp_dims[static_cast<std::size_t>(k)];
      const double l = std::exp(lsx(d));
      const double a = std::exp(hyper.log_warp_a(k)), b = std::exp(hyper.log_warp_b(k));
      double ga = 0, gb = 0;
      for (Eigen::Index i = 0; i < n; ++i) {
        const double dx = -(Xs(i, d) * g(i) - GX(i, d)) / l;
        double da, db;
        (void)kumaraswamy(X(i, d), a, b, &da, &db);
        ga += dx * da;
        gb += dx * db;
      }
      (*grad)(nls + 2 + k) = ga;
      (*grad)(nls + 2 + nw + k) = gb;
    }
  }
  return lml;
}

namespace {

struct Box {
  Eigen::VectorXd lo, hi;
  GpHyper shape;  // warped dimensions and lengthscale groups
};

// theta = (log l (D), log s2, log noise, log a (W), log b (W)), W the warped dimensions.
Eigen::VectorXd pack(const GpHyper& h) {
  const Eigen::Index D = h.log_lengthscale.size();
  const auto W = static_cast<Eigen::Index>(h.warp_dims.size());
  Eigen::VectorXd t(D + 2 + 2 * W);
  t.head(D) = h.log_lengthscale;
  t(D) = h.log_signal_var;
  t(D + 1) = h.log_noise_var;
  if (W > 0) {
    t.segment(D + 2, W) = h.log_warp_a;
    t.segment(D + 2 + W, W) = h.log_warp_b;
  }
  return t;
}

// The warped dimensions and lengthscale groups come from `shape`.
GpHyper unpack(const Eigen::VectorXd& t, const GpHyper& shape) {
  const auto& warp_dims = shape.warp_dims;
  const auto W = static_cast<Eigen::Index>(warp_dims.size());
  const Eigen::Index D = t.size() - 2 - 2 * W;
  GpHyper h;
  h.log_lengthscale = t.head(D);
  h.log_signal_var = t(D);
  h.log_noise_var = t(D + 1);
  h.warp_dims = warp_dims;
  h.ls_group = shape.ls_group;
  h.log_warp_a = t.segment(D + 2, W);
  h.log_warp_b = t.segment(D + 2 + W, W);
  return h;
}

// Negative log posterior (to minimize) in unconstrained z, theta = lo + (hi - lo) sigmoid(z).
double objective(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Box& box, const Eigen::VectorXd& z,
                 Eigen::VectorXd& gz) {
  const auto W = static_cast<Eigen::Index>(box.shape.warp_dims.size());
  const Eigen::Index P = z.size(), D = P - 2 - 2 * W;  // D: the lengthscales
  Eigen::VectorXd s = (1.0 + (-z).array().exp()).inverse().matrix();
  Eigen::VectorXd theta = box.lo + (box.hi - box.lo).cwiseProduct(s);
  GpHyper h = unpack(theta, box.shape);
  Eigen::VectorXd g;
  double f = GaussianProcess::log_marginal_likelihood(X, y, h, &g);
  if (!std::isfinite(f)) {
    gz = Eigen::VectorXd::Zero(P);
    return std::numeric_limits<double>::infinity();
  }
  // Priors: lengthscale Gamma(3, 6), signal variance Gamma(2, 0.15), noise Gamma(1.1, 0.05).
  for (Eigen::Index d = 0; d < D; ++d) {
    f += log_gamma_prior(theta(d), 3.0, 6.0);
    g(d) += 3.0 - 6.0 * std::exp(theta(d));
  }
  f += log_gamma_prior(theta(D), 2.0, 0.15);
  g(D) += 2.0 - 0.15 * std::exp(theta(D));
  f += log_gamma_prior(theta(D + 1), 1.1, 0.05);
  g(D + 1) += 1.1 - 0.05 * std::exp(theta(D + 1));
  for (Eigen::Index k = D + 2; k < P; ++k) {
    f -= 0.5 * theta(k) * theta(k) / kWarpPriorVar;
    g(k) -= theta(k) / kWarpPriorVar;
  }
  gz = -(g.array() * (box.hi - box.lo).array() * s.array() * (1.0 - s.array())).matrix();
  return -f;
}

Eigen::VectorXd to_z(const Box& box, const Eigen::VectorXd& theta) {
  Eigen::VectorXd p = ((theta - box.lo).array() / (box.hi - box.lo).array()).cwiseMax(1e-4).cwiseMin(1 - 1e-4).matrix();
  return (p.array() / (1.0 - p.array())).log().matrix();
}

// L-BFGS with a backtracking Armijo line search. Returns the best point found.
Eigen::VectorXd lbfgs(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Box& box, Eigen::VectorXd z,
                      int max_iter, double& best_f) {
  const int m = 6;
  std::vector<Eigen::VectorXd> S, Y;
  Eigen::VectorXd g;
  double f = objective(X, y, box, z, g);
  best_f = f;
  if (!std::isfinite(f)) return z;
  for (int it = 0; it < max_iter; ++it) {
    // Two-loop recursion.
    Eigen::VectorXd q = g;
    std::vector<double> a(S.size());
    for (int i = static_cast<int>(S.size()) - 1; i >= 0; --i) {
      a[i] = S[i].dot(q) / Y[i].dot(S[i]);
      q -= a[i] * Y[i];
    }
    if (!S.empty()) q *= S.back().dot(Y.back()) / Y.back().squaredNorm();
    for (std::size_t i = 0; i < S.size(); ++i) {
      const double b = Y[i].dot(q) / Y[i].dot(S[i]);
      q += S[i] * (a[i] - b);
    }
    Eigen::VectorXd dir = -q;
    double slope = g.dot(dir);
    if (!(slope < 0)) {
      dir = -g;
      slope = -g.squaredNorm();
      S.clear();
      Y.clear();
    }
    if (-slope < 1e-10) break;
    double step = S.empty() ? std::min(1.0, 1.0 / std::sqrt(g.squaredNorm())) : 1.0;
    Eigen::VectorXd z_new, g_new;
    double f_new = f;
    bool accepted = false;
    for (int ls = 0; ls < 20; ++ls) {
      z_new = z + step * dir;
      f_new = objective(X, y, box, z_new, g_new);
      if (std::isfinite(f_new) && f_new <= f + 1e-4 * step * slope) {
        accepted = true;
        break;
      }
      step *= 0.5;
    }
    if (!accepted) break;
    Eigen::VectorXd s = z_new - z, yv = g_new - g;
    if (s.dot(yv) > 1e-12) {
      S.push_back(s);
      Y.push_back(yv);
      if (static_cast<int>(S.size()) > m) {
        S.erase(S.begin());
        Y.erase(Y.begin());
      }
    }
    const double rel = std::fabs(f - f_new) / std::max(1.0, std::fabs(f));
    z = z_new;
    g = g_new;
    f = f_new;
    if (rel < 1e-7) break;
  }
  best_f = f;
  return z;
}

}  // namespace

void GaussianProcess::fit(Rng& rng, int restarts, std::size_t max_points) {
  const auto n = static_cast<Eigen::Index>(n_);
  const Eigen::Index D = X_.cols();
  if (n < 2) return;
  // The subset the hyperparameters are fitted on.
  Eigen::MatrixXd Xf;
  Eigen::VectorXd yf;
  if (static_cast<std::size_t>(n) <= max_points) {
    Xf = X_raw_.topRows(n);
    yf = y_.head(n);
  } else {
    std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return y_(a) < y_(b); });
    const std::size_t best = max_points / 3;
    std::vector<Eigen::Index> rest(order.begin() + static_cast<std::ptrdiff_t>(best), order.end());
    for (std::size_t i = rest.size(); i > 1; --i) std::swap(rest[i - 1], rest[rng.below(i)]);
    std::vector<Eigen::Index> pick(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(best));
    pick.insert(pick.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(max_points - best));
    Xf.resize(static_cast<Eigen::Index>(pick.size()), D);
    yf.resize(static_cast<Eigen::Index>(pick.size()));
    for (std::size_t i = 0; i < pick.size(); ++i) {
      Xf.row(static_cast<Eigen::Index>(i)) = X_raw_.row(pick[i]);
      yf(static_cast<Eigen::Index>(i)) = y_(pick[i]);
    }
  }
  const auto W = static_cast<Eigen::Index>(hyper_.warp_dims.size());
  const bool groups_fit = static_cast<Eigen::Index>(hyper_.ls_group.size()) == D;
  if (!groups_fit) hyper_.ls_group.clear();
  const Eigen::Index G = num_lengthscales(hyper_.ls_group, D);
  Box box;
  box.shape = hyper_;
  box.lo.resize(G + 2 + 2 * W);
  box.hi.resize(G + 2 + 2 * W);
  box.lo.tail(2 * W).setConstant(kLogWarpMin);
  box.hi.tail(2 * W).setConstant(kLogWarpMax);
  box.lo.head(G).setConstant(kLogLsMin);
  box.hi.head(G).setConstant(kLogLsMax);
  box.lo(G) = kLogSigMin;
  box.hi(G) = kLogSigMax;
  box.lo(G + 1) = kLogNoiseMin;
  box.hi(G + 1) = kLogNoiseMax;

  GpHyper fallback = default_hyper(static_cast<std::size_t>(G));
  fallback.warp_dims = hyper_.warp_dims;
  fallback.ls_group = hyper_.ls_group;
  fallback.log_warp_a = fallback.log_warp_b = Eigen::VectorXd::Zero(W);
  const bool current_fits = hyper_.log_lengthscale.size() == G && hyper_.log_warp_a.size() == W;
  std::vector<Eigen::VectorXd> starts;
  if (current_fits) starts.push_back(pack(hyper_));
  starts.push_back(pack(fallback));
  for (int r = 0; r < restarts; ++r) {
    Eigen::VectorXd t = Eigen::VectorXd::Zero(G + 2 + 2 * W);  // random starts begin unwarped
    for (Eigen::Index d = 0; d < G; ++d) t(d) = std::log(rng.uniform(0.05, 2.0));
    t(G) = std::log(rng.uniform(0.3, 3.0));
    t(G + 1) = rng.uniform(std::log(1e-6), std::log(1e-1));
    starts.push_back(t);
  }
  double best_f = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best_theta = pack(current_fits ? hyper_ : fallback);
  for (const auto& t : starts) {
    double f;
    Eigen::VectorXd z = lbfgs(Xf, yf, box, to_z(box, t), 60, f);
    if (f < best_f) {
      best_f = f;
      Eigen::VectorXd s = (1.0 + (-z).array().exp()).inverse().matrix();
      best_theta = box.lo + (box.hi - box.lo).cwiseProduct(s);
    }
  }
  if (!set_hyper(unpack(best_theta, box.shape)).ok()) (void)set_hyper(fallback);
}

}  // namespace hpctune::search
