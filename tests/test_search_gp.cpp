// Gaussian process: interpolation, log marginal likelihood against an independent computation,
// its gradient, incremental updates, and expected improvement; the bayesian searcher when its GP
// cannot be built; rounding inside (ints and choices), input warping, output transforms.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "search/encoding.h"
#include "search/gaussian_process.h"
#include "search/model_data.h"
#include "search/space.h"
#include "search/searcher.h"

using namespace hpctune;
using namespace hpctune::search;

namespace {

Eigen::MatrixXd random_points(int n, int d, uint64_t seed) {
  Rng rng(seed);
  Eigen::MatrixXd X(n, d);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) X(i, j) = rng.uniform();
  return X;
}

double f(const Eigen::VectorXd& x) { return std::sin(6 * x(0)) + x(1) * x(1) - 0.5 * x(0) * x(1); }

GpHyper hyper(int d, double ls, double s2, double noise) {
  GpHyper h;
  h.log_lengthscale = Eigen::VectorXd::Constant(d, std::log(ls));
  for (int j = 0; j < d; ++j) h.log_lengthscale(j) += 0.1 * j;  // distinct lengthscales (ARD)
  h.log_signal_var = std::log(s2);
  h.log_noise_var = std::log(noise);
  return h;
}

// The textbook formula with plain loops and a different factorization (LU), as a check.
double naive_lml(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpHyper& h) {
  const int n = static_cast<int>(X.rows());
  Eigen::MatrixXd K(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double r2 = 0;
      for (int d = 0; d < X.cols(); ++d) {
        const double l = std::exp(h.log_lengthscale(d));
        r2 += (X(i, d) - X(j, d)) * (X(i, d) - X(j, d)) / (l * l);
      }
      const double r = std::sqrt(r2);
      K(i, j) = std::exp(h.log_signal_var) * (1 + std::sqrt(5.0) * r + 5.0 / 3.0 * r2) * std::exp(-std::sqrt(5.0) * r);
      if (i == j) K(i, j) += std::exp(h.log_noise_var);
    }
  Eigen::FullPivLU<Eigen::MatrixXd> lu(K);
  const double logdet = std::log(lu.determinant());
  return -0.5 * y.dot(lu.solve(y)) - 0.5 * logdet - 0.5 * n * std::log(2 * std::numbers::pi);
}

}  // namespace

TEST_CASE("the GP posterior interpolates noiseless training points") {
  const int n = 25, d = 2;
  Eigen::MatrixXd X = random_points(n, d, 1);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) y(i) = f(X.row(i).transpose());
  GaussianProcess gp;
  REQUIRE(gp.set_data(X, y).ok());
  REQUIRE(gp.set_hyper(hyper(d, 0.3, 1.0, 1e-8)).ok());
  Eigen::VectorXd mean, var;
  gp.predict(X, mean, var);
  for (int i = 0; i < n; ++i) {
    CHECK(mean(i) == doctest::Approx(y(i)).epsilon(1e-5));
    CHECK(var(i) < 1e-5);
  }
  // Away from the data the variance is larger, and never above the prior's.
  Eigen::MatrixXd far(1, d);
  far << 5.0, 5.0;
  gp.predict(far, mean, var);
  CHECK(var(0) == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(mean(0) == doctest::Approx(0.0).epsilon(1e-6));
}

TEST_CASE("the log marginal likelihood matches an independent computation, and so does its gradient") {
  const int n = 30, d = 3;
  Eigen::MatrixXd X = random_points(n, d, 2);
  Eigen::VectorXd y(n);
  Rng rng(5);
  for (int i = 0; i < n; ++i) y(i) = f(X.row(i).transpose()) + 0.05 * rng.normal();
  for (double ls : {0.1, 0.4, 2.0}) {
    const GpHyper h = hyper(d, ls, 1.3, 0.01);
    Eigen::VectorXd grad;
    const double lml = GaussianProcess::log_marginal_likelihood(X, y, h, &grad);
    CHECK(lml == doctest::Approx(naive_lml(X, y, h)).epsilon(1e-9));
    GaussianProcess gp;
    REQUIRE(gp.set_data(X, y).ok());
    REQUIRE(gp.set_hyper(h).ok());
    CHECK(gp.log_marginal_likelihood() == doctest::Approx(lml).epsilon(1e-9));
    // Central differences on every hyperparameter.
    for (int k = 0; k < d + 2; ++k) {
      GpHyper hp = h, hm = h;
      const double eps = 1e-5;
      auto bump = [&](GpHyper& g, double e) {
        if (k < d) g.log_lengthscale(k) += e;
        else if (k == d) g.log_signal_var += e;
        else g.log_noise_var += e;
      };
      bump(hp, eps);
      bump(hm, -eps);
      const double fd = (GaussianProcess::log_marginal_likelihood(X, y, hp, nullptr) -
                         GaussianProcess::log_marginal_likelihood(X, y, hm, nullptr)) / (2 * eps);
      CHECK(grad(k) == doctest::Approx(fd).epsilon(1e-4).scale(1.0));
    }
  }
}

TEST_CASE("fitting raises the marginal likelihood and finds the irrelevant dimension") {
  const int n = 40, d = 3;
  Eigen::MatrixXd X = random_points(n, d, 3);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) y(i) = std::sin(5 * X(i, 0)) + 0.5 * X(i, 1);  // x3 plays no part
  y = (y.array() - y.mean()) / std::sqrt((y.array() - y.mean()).square().sum() / (n - 1));
  GaussianProcess gp;
  REQUIRE(gp.set_data(X, y).ok());
  const double before = gp.log_marginal_likelihood();
  Rng rng(1);
  gp.fit(rng, 3, 200);
  CHECK(gp.log_marginal_likelihood() > before);
  const auto& ls = gp.hyper().log_lengthscale;
  CHECK(ls(2) > ls(0) + 1.0);  // the irrelevant dimension gets a much longer lengthscale
}

TEST_CASE("append extends the Cholesky factor exactly; truncate undoes it") {
  const int n = 20, d = 2;
  Eigen::MatrixXd X = random_points(n + 5, d, 4);
  Eigen::VectorXd y(n + 5);
  for (int i = 0; i < n + 5; ++i) y(i) = f(X.row(i).transpose());
  const GpHyper h = hyper(d, 0.3, 1.0, 1e-4);
  GaussianProcess full, inc;
  REQUIRE(full.set_data(X, y).ok());
  REQUIRE(full.set_hyper(h).ok());
  REQUIRE(inc.set_data(X.topRows(n), y.head(n)).ok());
  REQUIRE(inc.set_hyper(h).ok());
  for (int i = n; i < n + 5; ++i) inc.append(X.row(i).transpose(), y(i));
  Eigen::MatrixXd Q = random_points(10, d, 9);
  Eigen::VectorXd m1, v1, m2, v2;
  full.predict(Q, m1, v1);
  inc.predict(Q, m2, v2);
  CHECK((m1 - m2).cwiseAbs().maxCoeff() < 1e-8);
  CHECK((v1 - v2).cwiseAbs().maxCoeff() < 1e-8);
  CHECK(inc.log_marginal_likelihood() == doctest::Approx(full.log_marginal_likelihood()).epsilon(1e-9));
  inc.truncate(n);
  GaussianProcess head;
  REQUIRE(head.set_data(X.topRows(n), y.head(n)).ok());
  REQUIRE(head.set_hyper(h).ok());
  head.predict(Q, m1, v1);
  inc.predict(Q, m2, v2);
  CHECK((m1 - m2).cwiseAbs().maxCoeff() < 1e-10);
  CHECK((v1 - v2).cwiseAbs().maxCoeff() < 1e-10);
}

TEST_CASE("expected improvement is never negative and its log is stable") {
  // Against the closed form where it is representable, and finite far below it.
  for (double mu = -5; mu <= 40; mu += 0.37) {
    for (double sigma : {1e-6, 1e-3, 0.1, 1.0, 7.0}) {
      const double ei = expected_improvement(mu, sigma, 0.0);
      CHECK(ei >= 0.0);
      const double z = -mu / sigma;
      const double closed = sigma * (z * normal_cdf(z) + normal_pdf(z));
      if (closed > 1e-250) {
        CHECK(ei == doctest::Approx(closed).epsilon(1e-6));
        CHECK(std::exp(log_expected_improvement(mu, sigma, 0.0)) == doctest::Approx(closed).epsilon(1e-6));
      }
      CHECK(std::isfinite(log_expected_improvement(mu, sigma, 0.0)));
    }
  }
  // log EI keeps ordering deep in the tail where EI itself underflows to 0.
  double prev = log_expected_improvement(0, 1, 10.0);
  for (double best = 5.0; best >= -1e4; best -= 17.3) {
    const double cur = log_expected_improvement(0, 1, best);
    CHECK(cur < prev);
    CHECK(std::isfinite(cur));
    prev = cur;
  }
  CHECK(log_h(-1e3) == doctest::Approx(-0.5e6 - 0.5 * std::log(2 * std::numbers::pi) - 2 * std::log(1e3)).epsilon(1e-9));
  // Continuity across the switch between the two formulas.
  CHECK(log_h(-5.0 + 1e-9) == doctest::Approx(log_h(-5.0 - 1e-9)).epsilon(1e-6));
  const double t_switch = 25.0 * std::numbers::sqrt2;
  CHECK(log_h(-t_switch + 1e-10) == doctest::Approx(log_h(-t_switch - 1e-10)).epsilon(1e-10));
}

TEST_CASE("set_data reports a kernel matrix that cannot be factorised (the bayesian searcher falls back on it)") {
  GaussianProcess gp;
  Eigen::MatrixXd X = random_points(4, 2, 9);
  X(2, 1) = std::numeric_limits<double>::quiet_NaN();
  const Eigen::VectorXd y = Eigen::VectorXd::LinSpaced(4, 0.0, 1.0);
  const Status status = gp.set_data(X, y);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().message().find("positive definite") != std::string::npos);
}

TEST_CASE("the GP rounds ints and ordered choices inside: a level's points have the same features and predictions") {
  // Field by field: designated initializers that skip members warn (-Wmissing-field-initializers).
  ParamSpec n_layers, width, act, lr;
  n_layers.name = "layers", n_layers.type = ParamType::kInt, n_layers.low = 1, n_layers.high = 4;
  width.name = "width", width.type = ParamType::kChoice, width.choices = {16, 32, 64}, width.ordered = true;
  act.name = "act", act.type = ParamType::kChoice, act.choices = {"relu", "tanh", "gelu"};
  lr.name = "lr", lr.type = ParamType::kFloat, lr.low = 0, lr.high = 1;
  const Space space = Space::create({n_layers, width, act, lr}).value();
  const Encoder enc(space);
  REQUIRE(enc.feature_dims() == 6);
  // Two points inside the same level of each discrete parameter (not canonicalized: as a local
  // search's step may leave them), the float equal.
  const std::vector<double> a = {0.26, 0.30, 0.40, 0.7}, b = {0.49, 0.01, 0.66, 0.7};
  std::vector<double> fa(6), fb(6);
  enc.features(a, fa.data());
  enc.features(b, fb.data());
  CHECK(fa == fb);
  CHECK(fa[0] == doctest::Approx(Space::to_unit(n_layers, 2)));  // the level's coordinate
  CHECK(fa[1] == doctest::Approx(0.5 / 3));
  // In the GP: covariance 1 (of the signal variance) between them, identical predictions.
  Eigen::MatrixXd X(3, 6);
  const std::vector<double> c = {0.9, 0.9, 0.1, 0.2}, e = {0.6, 0.5, 0.9, 0.5};
  enc.features(c, X.row(0).data());
  enc.features(e, X.row(1).data());
  X.row(2) = Eigen::Map<Eigen::RowVectorXd>(fa.data(), 6);
  GaussianProcess gp;
  REQUIRE(gp.set_data(X, Eigen::Vector3d(1.0, -0.5, 0.3)).ok());
  REQUIRE(gp.set_hyper(hyper(6, 0.4, 1.0, 1e-8)).ok());
  Eigen::MatrixXd Q(2, 6);
  Q.row(0) = Eigen::Map<Eigen::RowVectorXd>(fa.data(), 6);
  Q.row(1) = Eigen::Map<Eigen::RowVectorXd>(fb.data(), 6);
  Eigen::VectorXd mean, var;
  gp.predict(Q, mean, var);
  CHECK(mean(0) == mean(1));
  CHECK(mean(1) == doctest::Approx(0.3).epsilon(1e-6));  // b is a's training point, exactly
  CHECK(var(1) < 1e-6);
}

TEST_CASE("input warping: its gradient is exact, and fitted on a function that needs it, it raises the marginal likelihood") {
  // A function of x^4 (flat near 0, steep near 1): a stationary kernel on x fits it badly, one on a
  // warped x well.
  const int n = 30;
  Eigen::MatrixXd X = random_points(n, 2, 11);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) y(i) = std::sin(12 * std::pow(X(i, 0), 4)) + 0.3 * X(i, 1);
  y = (y.array() - y.mean()) / std::sqrt((y.array() - y.mean()).square().sum() / (n - 1));

  GpHyper h = hyper(2, 0.3, 1.2, 1e-3);
  h.warp_dims = {0, 1};
  h.log_warp_a = Eigen::Vector2d(0.4, -0.3);
  h.log_warp_b = Eigen::Vector2d(-0.2, 0.5);
  Eigen::VectorXd grad;
  (void)GaussianProcess::log_marginal_likelihood(X, y, h, &grad);
  REQUIRE(grad.size() == 2 + 2 + 4);
  for (int k = 0; k < 4; ++k) {
    GpHyper hp = h, hm = h;
    const double eps = 1e-6;
    (k < 2 ? hp.log_warp_a(k) : hp.log_warp_b(k - 2)) += eps;
    (k < 2 ? hm.log_warp_a(k) : hm.log_warp_b(k - 2)) -= eps;
    const double fd = (GaussianProcess::log_marginal_likelihood(X, y, hp, nullptr) -
                       GaussianProcess::log_marginal_likelihood(X, y, hm, nullptr)) / (2 * eps);
    CHECK(grad(4 + k) == doctest::Approx(fd).epsilon(1e-4).scale(1.0));
  }

  GaussianProcess plain, warped;
  REQUIRE(plain.set_data(X, y).ok());
  REQUIRE(warped.set_data(X, y).ok());
  REQUIRE(warped.set_warping({0, 1}).ok());
  Rng r1(3), r2(3);
  plain.fit(r1, 3, 100);
  warped.fit(r2, 3, 100);
  CHECK(warped.log_marginal_likelihood() > plain.log_marginal_likelihood() + 3.0);
  // The warp of x0 stretches the steep end: a > 1 (x^a pushes small x towards 0).
  REQUIRE(warped.hyper().log_warp_a.size() == 2);
  CHECK(warped.hyper().log_warp_a(0) > 0.3);
}

TEST_CASE("output transforms: Yeo-Johnson's lambda by maximum likelihood, the copula's normal scores") {
  // Data that is exactly normal after a Yeo-Johnson transform of a known lambda: the fit
  // finds the lambda back.
  for (double lambda : {0.0, 0.5, 1.0, 1.5}) {
    std::vector<double> y;
    for (int i = 0; i < 2000; ++i) {
      const double z = normal_quantile((i + 0.5) / 2000.0);
      // The inverse transform.
      double v;
      if (z >= 0) v = std::fabs(lambda) < 1e-12 ? std::expm1(z) : std::pow(lambda * z + 1, 1 / lambda) - 1;
      else v = 1 - std::pow(1 - (2 - lambda) * z, 1 / (2 - lambda));
      if (!std::isfinite(v)) continue;
      CHECK(yeo_johnson(v, lambda) == doctest::Approx(z).epsilon(1e-9).scale(1.0));
      y.push_back(v);
    }
    CHECK(fit_yeo_johnson_lambda(y) == doctest::Approx(lambda).epsilon(0.1).scale(1.0));
  }
  CHECK(normal_quantile(0.975) == doctest::Approx(1.959963984540054).epsilon(1e-12));
  CHECK(normal_quantile(1e-10) == doctest::Approx(-6.361340902404056).epsilon(1e-10));
  CHECK(normal_cdf(normal_quantile(0.3)) == doctest::Approx(0.3).epsilon(1e-14));
  // Copula: order kept, ties share a score, symmetric around 0.
  const std::vector<double> c = copula_transform({5.0, 1e9, -3.0, 5.0, 7.0});
  CHECK(c[2] == doctest::Approx(normal_quantile(0.1)));
  CHECK(c[0] == c[3]);
  CHECK(c[0] == doctest::Approx(normal_quantile(0.4)));  // mean of ranks 1 and 2 -> (1.5 + 0.5) / 5
  CHECK(c[1] == doctest::Approx(-c[2]));
}

TEST_CASE("tied lengthscales (the one-hot inputs of a choice share one): the gradient sums over the group") {
  const int n = 20;
  Eigen::MatrixXd X = random_points(n, 4, 21);
  for (int i = 0; i < n; ++i) {  // inputs 1..3: a one-hot choice
    const int c = i % 3;
    for (int j = 0; j < 3; ++j) X(i, 1 + j) = j == c ? 1.0 : 0.0;
  }
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) y(i) = std::sin(4 * X(i, 0)) + (i % 3 == 1 ? 0.8 : 0.0);
  GpHyper h;
  h.log_lengthscale = Eigen::Vector2d(std::log(0.3), std::log(0.8));
  h.log_signal_var = 0.1;
  h.log_noise_var = std::log(1e-3);
  h.ls_group = {0, 1, 1, 1};
  GpHyper untied = hyper(4, 1.0, 1.0, 1.0);
  untied.log_lengthscale = Eigen::Vector4d(std::log(0.3), std::log(0.8), std::log(0.8), std::log(0.8));
  untied.log_signal_var = h.log_signal_var;
  untied.log_noise_var = h.log_noise_var;
  Eigen::VectorXd g, gu;
  const double lml = GaussianProcess::log_marginal_likelihood(X, y, h, &g);
  CHECK(lml == doctest::Approx(GaussianProcess::log_marginal_likelihood(X, y, untied, &gu)).epsilon(1e-12));
  REQUIRE(g.size() == 4);
  CHECK(g(0) == doctest::Approx(gu(0)).epsilon(1e-9));
  CHECK(g(1) == doctest::Approx(gu(1) + gu(2) + gu(3)).epsilon(1e-9));
  CHECK(g(2) == doctest::Approx(gu(4)).epsilon(1e-9));
  GaussianProcess gp;
  REQUIRE(gp.set_data(X, y).ok());
  REQUIRE(gp.set_lengthscale_groups({0, 1, 1, 1}).ok());
  Rng rng(2);
  gp.fit(rng, 2, 100);
  CHECK(gp.hyper().log_lengthscale.size() == 2);
  CHECK(gp.hyper().ls_group.size() == 4);
}
