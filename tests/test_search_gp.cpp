// Gaussian process: interpolation, log marginal likelihood against an independent computation,
// its gradient, incremental updates, and expected improvement; the bayesian searcher when its GP
// cannot be built.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "search/gaussian_process.h"
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
