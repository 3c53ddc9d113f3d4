// A Gaussian process regressor with a Matérn 5/2 ARD kernel (Eigen), for the bayesian searcher.
//
//   k(x, x') = s2 * (1 + sqrt(5) r + 5/3 r^2) exp(-sqrt(5) r),   r^2 = sum_d (x_d - x'_d)^2 / l_d^2
//   y = f(x) + eps, eps ~ N(0, noise)
//
// Targets are expected standardized (the searcher does it), so the prior mean is 0.
// Hyperparameters (log l_d, log s2, log noise) are fitted by maximizing the log marginal likelihood
// plus weak Gamma priors on l, s2 and noise (those of BoTorch's classic SingleTaskGP: without them
// a handful of points makes the fit degenerate), multi-start L-BFGS in a box. With input warping
// (set_warping), the two parameters of each warped dimension's Kumaraswamy CDF are fitted with
// them (log a, log b in [-2, 2], log-normal priors of BoTorch's Warp around the identity).
// Lengthscales may be tied over groups of inputs (set_lengthscale_groups: a choice's one-hot inputs).
//
// Cost control: the Cholesky factor is extended by append() in O(n^2) per point (fantasies for
// pending trials, new observations between refits) and truncate() drops appended points exactly,
// since the leading block of a Cholesky factor is the factor of the leading block.
#pragma once

#include <cstddef>
#include <vector>

#include <Eigen/Dense>

#include "common/result.h"
#include "common/rng.h"

namespace hpctune::search {

// Standard normal density and distribution.
double normal_pdf(double z) noexcept;
double normal_cdf(double z) noexcept;
// The inverse of normal_cdf for p in (0, 1) (Acklam's approximation and one Newton step:
// relative error about 1e-15); -inf at 0, +inf at 1, NaN outside.
double normal_quantile(double p) noexcept;
// log(z * Phi(z) + phi(z)), accurate for every z (no underflow for z -> -inf).
double log_h(double z) noexcept;
// Expected improvement below `best` (minimization) of Y ~ N(mu, sigma^2), and its log.
// EI >= 0 always; log EI is finite for every finite input with sigma > 0.
double expected_improvement(double mu, double sigma, double best) noexcept;
double log_expected_improvement(double mu, double sigma, double best) noexcept;

struct GpHyper {
  Eigen::VectorXd log_lengthscale;  // one per input dimension
  double log_signal_var = 0.0;
  double log_noise_var = -9.2;  // about 1e-4
  // Input warping (Snoek et al. 2014): the inputs of these dimensions (in [0, 1]) go through the
  // Kumaraswamy CDF w(x) = 1 - (1 - x^a)^b before the kernel; log a and log b per warped dimension
  // (0, 0 is the identity). Empty: no warping.
  std::vector<Eigen::Index> warp_dims;
  Eigen::VectorXd log_warp_a, log_warp_b;
  // Input d uses log_lengthscale(ls_group[d]); empty: one lengthscale per input. The one-hot
  // inputs of a choice share one: the kernel then depends on whether two choices differ, not on
  // which values they take (an overlap, Hamming-distance kernel), with one parameter to fit.
  std::vector<Eigen::Index> ls_group;
};

// The inputs as the kernel sees them: X with hyper's warped columns through their Kumaraswamy CDF.
Eigen::MatrixXd warp_inputs(const Eigen::MatrixXd& X, const GpHyper& hyper);

class GaussianProcess {
 public:
  // Replaces the data (rows of X are points) and factorizes with the current hyperparameters
  // (defaults when their dimension does not match X).
  Status set_data(const Eigen::MatrixXd& X, const Eigen::VectorXd& y);
  // New targets for the same inputs: the factor is kept, only the weights are recomputed.
  void set_targets(const Eigen::VectorXd& y);
  Status set_hyper(const GpHyper& hyper);
  // Warps these input dimensions (identity until the next fit()); empty: none.
  Status set_warping(const std::vector<Eigen::Index>& dims);
  // Ties the lengthscales of inputs (GpHyper::ls_group; defaults until the next fit()).
  Status set_lengthscale_groups(const std::vector<Eigen::Index>& groups);
  const GpHyper& hyper() const noexcept { return hyper_; }
  std::size_t size() const noexcept { return n_; }
  std::size_t dims() const noexcept { return static_cast<std::size_t>(X_.cols()); }

  // Adds one point in O(n^2) with the current hyperparameters.
  void append(const Eigen::VectorXd& x, double y);
  // Keeps the first n points.
  void truncate(std::size_t n);

  // Posterior mean and variance of the latent f at each row of Xs.
  void predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd& mean, Eigen::VectorXd& var) const;
  // The mean alone: O(n) per row instead of the variance's O(n^2).
  void predict_mean(const Eigen::MatrixXd& Xs, Eigen::VectorXd& mean) const;

  // log p(y | X, hyper) of the current data.
  double log_marginal_likelihood() const;
  // The same for any data and hyperparameters, with the gradient w.r.t. (log l, log s2, log noise,
  // log a, log b of the warped dimensions) when `grad` is given. -infinity when K is not positive
  // definite.
  static double log_marginal_likelihood(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpHyper& hyper,
                                        Eigen::VectorXd* grad);

  // Fits the hyperparameters: multi-start L-BFGS from the current ones, the defaults and
  // `restarts` random points. Uses at most `max_points` points (the best third by y plus a random
  // rest) to bound the cost. Then refactorizes on all data.
  void fit(Rng& rng, int restarts, std::size_t max_points);

  static GpHyper default_hyper(std::size_t dims);

 private:
  Status factorize();
  void recompute_alpha();
  Eigen::MatrixXd cross_kernel(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) const;

  Eigen::MatrixXd X_;  // n_ x D, capacity rows: the inputs as the kernel sees them (warped)
  Eigen::MatrixXd X_raw_;  // the same rows before the warping
  Eigen::VectorXd y_;
  Eigen::MatrixXd L_;  // lower Cholesky factor, top-left n_ x n_ valid
  Eigen::VectorXd alpha_;
  std::size_t n_ = 0;
  double jitter_ = 0.0;
  GpHyper hyper_;
};

}  // namespace hpctune::search
