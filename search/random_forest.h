// RandomForest: a regression forest as a surrogate model (SMAC's, Hutter et al. 2011): each tree
// grown on a bootstrap sample, each split the best of a random subset of the inputs (5/6 of them)
// by the reduction of squared error, leaves of at least `min_leaf` points. A prediction is the
// mean of the trees' leaf means; its variance the law of total variance over the trees (the
// spread of the leaf means plus the mean of the leaves' own variances), so expected improvement
// works on it as on a Gaussian process. Splits on one-hot inputs are "this value or not", so
// unordered choices need no distance at all.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "common/rng.h"

namespace hpctune::search {

struct ForestOptions {
  int trees = 16;
  int min_leaf = 2;
  int max_depth = 20;
  double feature_ratio = 5.0 / 6.0;
  double min_variance = 1e-6;  // floor of a leaf's variance (standardized targets)
};

class RandomForest {
 public:
  explicit RandomForest(ForestOptions options = {}) : opt_(options) {}

  // Rows of X are points. Deterministic for a given rng state.
  void fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, Rng& rng);
  std::size_t size() const noexcept { return n_; }
  // Mean and variance at each row of Xs.
  void predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd& mean, Eigen::VectorXd& var) const;

 private:
  struct Node {
    int feature = -1;  // -1: a leaf
    double threshold = 0;
    int left = -1, right = -1;
    double mean = 0, var = 0;
  };
  int grow(std::vector<Node>& tree, const Eigen::MatrixXd& X, const Eigen::VectorXd& y, std::vector<int>& rows, int begin,
           int end, int depth, Rng& rng);

  ForestOptions opt_;
  std::vector<std::vector<Node>> trees_;
  std::size_t n_ = 0;
};

}  // namespace hpctune::search
