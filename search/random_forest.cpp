#include "search/random_forest.h"

#include <algorithm>
#include <numeric>

namespace hpctune::search {

void RandomForest::fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, Rng& rng) {
  n_ = static_cast<std::size_t>(X.rows());
  trees_.assign(static_cast<std::size_t>(opt_.trees), {});
  if (n_ == 0) return;
  for (auto& tree : trees_) {
    std::vector<int> rows(n_);
    for (auto& r : rows) r = static_cast<int>(rng.below(n_));  // bootstrap
    std::sort(rows.begin(), rows.end());
    grow(tree, X, y, rows, 0, static_cast<int>(rows.size()), 0, rng);
  }
}

int RandomForest::grow(std::vector<Node>& tree, const Eigen::MatrixXd& X, const Eigen::VectorXd& y, std::vector<int>& rows,
                       int begin, int end, int depth, Rng& rng) {
  const int id = static_cast<int>(tree.size());
  tree.emplace_back();
  const int count = end - begin;
  double sum = 0, sum2 = 0;
  for (int i = begin; i < end; ++i) {
    const double v = y(rows[static_cast<std::size_t>(i)]);
    sum += v;
    sum2 += v * v;
  }
  const double mean = sum / count;
  tree[static_cast<std::size_t>(id)].mean = mean;
  tree[static_cast<std::size_t>(id)].var = std::max(opt_.min_variance, sum2 / count - mean * mean);
  if (count < 2 * opt_.min_leaf || depth >= opt_.max_depth || sum2 / count - mean * mean <= 1e-12) return id;

  const auto dims = static_cast<int>(X.cols());
  std::vector<int> features(static_cast<std::size_t>(dims));
  std::iota(features.begin(), features.end(), 0);
  const int tried = std::max(1, static_cast<int>(std::ceil(opt_.feature_ratio * dims)));
  for (int k = 0; k < tried; ++k)
    std::swap(features[static_cast<std::size_t>(k)],
              features[static_cast<std::size_t>(k + static_cast<int>(rng.below(static_cast<uint64_t>(dims - k))))]);
  double best_sse = sum2 - sum * sum / count - 1e-12;  // a split must reduce the error
  int best_f = -1;
  double best_t = 0;
  std::vector<std::pair<double, double>> vals(static_cast<std::size_t>(count));
  for (int k = 0; k < tried; ++k) {
    const int f = features[static_cast<std::size_t>(k)];
    for (int i = begin; i < end; ++i) {
      const int r = rows[static_cast<std::size_t>(i)];
      vals[static_cast<std::size_t>(i - begin)] = {X(r, f), y(r)};
    }
    std::sort(vals.begin(), vals.end());
    double ls = 0, ls2 = 0;
    for (int i = 0; i + 1 < count; ++i) {
      ls += vals[static_cast<std::size_t>(i)].second;
      ls2 += vals[static_cast<std::size_t>(i)].second * vals[static_cast<std::size_t>(i)].second;
      const int nl = i + 1, nr = count - nl;
      if (nl < opt_.min_leaf || nr < opt_.min_leaf) continue;
      const double a = vals[static_cast<std::size_t>(i)].first, b = vals[static_cast<std::size_t>(i + 1)].first;
      if (!(b > a)) continue;
      const double rs = sum - ls, rs2 = sum2 - ls2;
      const double sse = (ls2 - ls * ls / nl) + (rs2 - rs * rs / nr);
      if (sse < best_sse) {
        best_sse = sse;
        best_f = f;
        best_t = a + (b - a) * rng.uniform(0.25, 0.75);  // within the gap (ties between trees differ)
      }
    }
  }
  if (best_f < 0) return id;
  const auto mid = std::partition(rows.begin() + begin, rows.begin() + end, [&](int r) { return X(r, best_f) <= best_t; });
  const int split = static_cast<int>(mid - rows.begin());
  const int left = grow(tree, X, y, rows, begin, split, depth + 1, rng);
  const int right = grow(tree, X, y, rows, split, end, depth + 1, rng);
  Node& node = tree[static_cast<std::size_t>(id)];
  node.feature = best_f;
  node.threshold = best_t;
  node.left = left;
  node.right = right;
  return id;
}

void RandomForest::predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd& mean, Eigen::VectorXd& var) const {
  const auto m = Xs.rows();
  mean = Eigen::VectorXd::Zero(m);
  var = Eigen::VectorXd::Zero(m);
  if (trees_.empty() || n_ == 0) {
    var.setOnes();
    return;
  }
  const double t = static_cast<double>(trees_.size());
  for (Eigen::Index i = 0; i < m; ++i) {
    double s = 0, s2 = 0;
    for (const auto& tree : trees_) {
      const Node* node = &tree[0];
      while (node->feature >= 0) node = &tree[static_cast<std::size_t>(Xs(i, node->feature) <= node->threshold ? node->left : node->right)];
      s += node->mean;
      s2 += node->var + node->mean * node->mean;
    }
    mean(i) = s / t;
    var(i) = std::max(opt_.min_variance, s2 / t - mean(i) * mean(i));
  }
}

}  // namespace hpctune::search
