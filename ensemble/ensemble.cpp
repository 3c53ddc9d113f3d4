// Ensembles from trials' predictions (ensemble.h).
#include "ensemble/ensemble.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "common/rng.h"

namespace hpctune::ensemble {
namespace {

constexpr double kClip = 1e-15;

Error invalid(const std::string& what) { return err(Errc::kInvalidArgument, what); }

// The log loss of the blend of `sum` (unnormalized: picks) over `count` picks.
double loss_of_sum(const std::vector<double>& sum, double count, std::size_t classes, const std::vector<int>& labels) {
  double total = 0;
  for (std::size_t r = 0; r < labels.size(); ++r)
    total -= std::log(std::clamp(sum[r * classes + static_cast<std::size_t>(labels[r])] / count, kClip, 1.0));
  return total / static_cast<double>(labels.size());
}

Status check_weights(const std::vector<Probabilities>& members, const std::vector<double>& weights) {
  if (members.empty()) return invalid("an ensemble needs at least one member");
  if (weights.size() != members.size())
    return invalid(std::to_string(weights.size()) + " weights for " + std::to_string(members.size()) + " members");
  double total = 0;
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0) return invalid("a weight is negative or not finite");
    total += w;
  }
  if (std::fabs(total - 1.0) > 1e-9) return invalid("the weights sum to " + std::to_string(total) + ", not 1");
  return Status::Ok();
}

// Forward selection with replacement (optionally bagged) of the members that most lower
// `loss_of_sum(sum, picks)`, the loss of the blend of `sum` (the picks' values added up) over
// `picks` picks: pick counts / picks. Shared by classification (log loss) and regression (MSE).
template <typename LossOfSum>
std::vector<double> greedy_core(const std::vector<Probabilities>& members, const GreedyOptions& options,
                                const LossOfSum& loss_of_sum) {
  const std::size_t n = members.size(), cells = members[0].values.size();
  // One forward selection over `pool`: pick counts per member.
  auto select = [&](const std::vector<std::size_t>& pool) {
    std::vector<double> counts(n, 0.0), sum(cells, 0.0), trial(cells);
    for (int pick = 1; pick <= options.max_size; ++pick) {
      std::size_t best = pool[0];
      double best_loss = INFINITY;
      for (std::size_t m : pool) {  // ties: the first in the pool, so the result is deterministic
        for (std::size_t i = 0; i < cells; ++i) trial[i] = sum[i] + members[m].values[i];
        const double loss = loss_of_sum(trial, static_cast<double>(pick));
        if (loss < best_loss) best_loss = loss, best = m;
      }
      for (std::size_t i = 0; i < cells; ++i) sum[i] += members[best].values[i];
      counts[best] += 1;
    }
    return counts;
  };
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<double> counts(n, 0.0);
  if (options.bags == 0 || n < 2) {
    counts = select(all);
  } else {
    Rng rng(options.seed);
    for (int b = 0; b < options.bags; ++b) {
      std::vector<std::size_t> pool = all;
      for (std::size_t i = pool.size() - 1; i > 0; --i) std::swap(pool[i], pool[rng.below(i + 1)]);
      pool.resize(std::max<std::size_t>(1, n / 2));
      std::sort(pool.begin(), pool.end());
      const auto c = select(pool);
      for (std::size_t m = 0; m < n; ++m) counts[m] += c[m];
    }
  }
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  for (double& c : counts) c /= total;
  return counts;
}

Status check_greedy(const GreedyOptions& options) {
  if (options.max_size < 1) return invalid("max_size must be at least 1");
  if (options.bags < 0) return invalid("bags must be 0 or more");
  return Status::Ok();
}

// Equal weights on the k members of lowest `losses` (ties: the lower index).
Result<std::vector<double>> top_k_core(const std::vector<double>& losses, int k) {
  if (k < 1) return invalid("k must be at least 1");
  std::vector<std::pair<double, std::size_t>> ranked;
  for (std::size_t m = 0; m < losses.size(); ++m) ranked.emplace_back(losses[m], m);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(k), losses.size());
  std::vector<double> weights(losses.size(), 0.0);
  for (std::size_t i = 0; i < take; ++i) weights[ranked[i].second] = 1.0 / static_cast<double>(take);
  return weights;
}

// Exponentiated-gradient descent on the simplex from equal weights: `gradient(w, grad)` fills the
// loss's gradient at w; each step is multiplicative and renormalized (stays on the simplex).
template <typename Gradient>
std::vector<double> exponentiated_gradient(std::size_t n, int iterations, double step, const Gradient& gradient) {
  std::vector<double> w(n, 1.0 / static_cast<double>(n)), grad(n);
  for (int it = 0; it < iterations; ++it) {
    gradient(w, grad);
    const double shift = *std::min_element(grad.begin(), grad.end());
    double total = 0;
    for (std::size_t m = 0; m < n; ++m) total += (w[m] *= std::exp(-step * (grad[m] - shift)));
    for (double& x : w) x /= total;
  }
  return w;
}

}  // namespace

Status check_members(const std::vector<Probabilities>& members, const std::vector<int>& labels) {
  if (members.empty()) return invalid("no members");
  const std::size_t rows = members[0].rows, classes = members[0].classes;
  if (rows == 0 || classes == 0) return invalid("members have no rows or no classes");
  if (labels.size() != rows)
    return invalid(std::to_string(labels.size()) + " labels for " + std::to_string(rows) + " rows");
  for (int l : labels)
    if (l < 0 || static_cast<std::size_t>(l) >= classes) return invalid("label " + std::to_string(l) + " is not a class");
  for (std::size_t m = 0; m < members.size(); ++m) {
    const auto& p = members[m];
    if (p.rows != rows || p.classes != classes || p.values.size() != rows * classes)
      return invalid("member " + std::to_string(m) + " is " + std::to_string(p.rows) + " x " +
                     std::to_string(p.classes) + ", not " + std::to_string(rows) + " x " + std::to_string(classes) +
                     " like the first (predictions of the same rows are needed)");
    for (double v : p.values)
      if (!std::isfinite(v) || v < 0 || v > 1 + 1e-6) return invalid("member " + std::to_string(m) + " holds a value that is not a probability");
  }
  return Status::Ok();
}

double log_loss(const Probabilities& p, const std::vector<int>& labels) {
  double total = 0;
  for (std::size_t r = 0; r < p.rows; ++r)
    total -= std::log(std::clamp(p.at(r, static_cast<std::size_t>(labels[r])), kClip, 1.0));
  return total / static_cast<double>(p.rows);
}

double accuracy(const Probabilities& p, const std::vector<int>& labels) {
  std::size_t right = 0;
  for (std::size_t r = 0; r < p.rows; ++r) {
    const auto row = p.values.begin() + static_cast<std::ptrdiff_t>(r * p.classes);
    const auto best = std::max_element(row, row + static_cast<std::ptrdiff_t>(p.classes)) - row;
    right += best == labels[r];
  }
  return static_cast<double>(right) / static_cast<double>(p.rows);
}

Result<Probabilities> blend(const std::vector<Probabilities>& members, const std::vector<double>& weights) {
  HPCTUNE_TRY(check_weights(members, weights));
  Probabilities out{members[0].rows, members[0].classes, std::vector<double>(members[0].values.size(), 0.0)};
  for (std::size_t m = 0; m < members.size(); ++m) {
    if (members[m].values.size() != out.values.size()) return invalid("members of different shapes");
    if (weights[m] == 0) continue;
    for (std::size_t i = 0; i < out.values.size(); ++i) out.values[i] += weights[m] * members[m].values[i];
  }
  return out;
}

Result<std::vector<double>> greedy_selection(const std::vector<Probabilities>& members, const std::vector<int>& labels,
                                             const GreedyOptions& options) {
  HPCTUNE_TRY(check_members(members, labels));
  HPCTUNE_TRY(check_greedy(options));
  const std::size_t classes = members[0].classes;
  return greedy_core(members, options, [&](const std::vector<double>& sum, double picks) {
    return loss_of_sum(sum, picks, classes, labels);
  });
}

Result<std::vector<double>> top_k(const std::vector<Probabilities>& members, const std::vector<int>& labels, int k) {
  HPCTUNE_TRY(check_members(members, labels));
  std::vector<double> losses;
  for (const auto& m : members) losses.push_back(log_loss(m, labels));
  return top_k_core(losses, k);
}

Result<std::vector<double>> fit_weights(const std::vector<Probabilities>& members, const std::vector<int>& labels,
                                        int iterations) {
  HPCTUNE_TRY(check_members(members, labels));
  if (iterations < 1) return invalid("iterations must be at least 1");
  const std::size_t n = members.size(), rows = labels.size(), classes = members[0].classes;
  // p_m[r]: member m's probability of row r's label; the loss is -mean log sum_m w_m p_m[r].
  std::vector<double> label_p(n * rows);
  for (std::size_t m = 0; m < n; ++m)
    for (std::size_t r = 0; r < rows; ++r)
      label_p[m * rows + r] = members[m].values[r * classes + static_cast<std::size_t>(labels[r])];
  std::vector<double> mix(rows);
  return exponentiated_gradient(n, iterations, 1.0, [&](const std::vector<double>& w, std::vector<double>& grad) {
    std::fill(mix.begin(), mix.end(), 0.0);
    for (std::size_t m = 0; m < n; ++m)
      for (std::size_t r = 0; r < rows; ++r) mix[r] += w[m] * label_p[m * rows + r];
    for (std::size_t m = 0; m < n; ++m) {
      double g = 0;
      for (std::size_t r = 0; r < rows; ++r) g -= label_p[m * rows + r] / std::max(mix[r], kClip);
      grad[m] = g / static_cast<double>(rows);
    }
  });
}

Status check_members(const std::vector<Probabilities>& members, const Probabilities& targets) {
  if (members.empty()) return invalid("no members");
  const std::size_t rows = targets.rows, outputs = targets.classes;
  if (rows == 0 || outputs == 0 || targets.values.size() != rows * outputs)
    return invalid("the targets are " + std::to_string(rows) + " x " + std::to_string(outputs) +
                   " (at least one row and one output are needed)");
  for (double v : targets.values)
    if (!std::isfinite(v)) return invalid("a target is not finite");
  for (std::size_t m = 0; m < members.size(); ++m) {
    const auto& p = members[m];
    if (p.rows != rows || p.classes != outputs || p.values.size() != rows * outputs)
      return invalid("member " + std::to_string(m) + " is " + std::to_string(p.rows) + " x " +
                     std::to_string(p.classes) + ", not " + std::to_string(rows) + " x " + std::to_string(outputs) +
                     " like the targets (predictions of the same rows are needed)");
    for (double v : p.values)
      if (!std::isfinite(v)) return invalid("member " + std::to_string(m) + " holds a value that is not finite");
  }
  return Status::Ok();
}

double mean_squared_error(const Probabilities& predictions, const Probabilities& targets) {
  double total = 0;
  for (std::size_t i = 0; i < targets.values.size(); ++i) {
    const double d = predictions.values[i] - targets.values[i];
    total += d * d;
  }
  return total / static_cast<double>(targets.values.size());
}

Result<std::vector<double>> greedy_selection(const std::vector<Probabilities>& members, const Probabilities& targets,
                                             const GreedyOptions& options) {
  HPCTUNE_TRY(check_members(members, targets));
  HPCTUNE_TRY(check_greedy(options));
  return greedy_core(members, options, [&](const std::vector<double>& sum, double picks) {
    double total = 0;
    for (std::size_t i = 0; i < sum.size(); ++i) {
      const double d = sum[i] / picks - targets.values[i];
      total += d * d;
    }
    return total / static_cast<double>(sum.size());
  });
}

Result<std::vector<double>> top_k(const std::vector<Probabilities>& members, const Probabilities& targets, int k) {
  HPCTUNE_TRY(check_members(members, targets));
  std::vector<double> losses;
  for (const auto& m : members) losses.push_back(mean_squared_error(m, targets));
  return top_k_core(losses, k);
}

Result<std::vector<double>> fit_weights(const std::vector<Probabilities>& members, const Probabilities& targets,
                                        int iterations) {
  HPCTUNE_TRY(check_members(members, targets));
  if (iterations < 1) return invalid("iterations must be at least 1");
  // With the members' mean m and D_i = p_i - m, MSE(w) = |m - y + sum_i w_i D_i|^2 / cells on the
  // simplex: the gradient 2(Gw - b), G_ij = <D_i, D_j> / cells and b_i = <D_i, y - m> / cells, costs
  // n^2 per step whatever the rows (the part shared by all members, which the simplex cancels, is
  // left out). Its change is bounded in the sup norm by 2 max|G_ij| times the change of w in L1:
  // exponentiated gradient converges with the step 1 / that (mirror descent, Beck & Teboulle 2003).
  const std::size_t n = members.size(), cells = targets.values.size();
  std::vector<double> mean(cells, 0.0);
  for (const auto& p : members)
    for (std::size_t c = 0; c < cells; ++c) mean[c] += p.values[c] / static_cast<double>(n);
  std::vector<double> gram(n * n, 0.0), b(n, 0.0);
  double scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < cells; ++c) b[i] += (members[i].values[c] - mean[c]) * (targets.values[c] - mean[c]);
    b[i] /= static_cast<double>(cells);
    for (std::size_t j = i; j < n; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < cells; ++c) dot += (members[i].values[c] - mean[c]) * (members[j].values[c] - mean[c]);
      gram[i * n + j] = gram[j * n + i] = dot / static_cast<double>(cells);
      scale = std::max(scale, std::fabs(dot) / static_cast<double>(cells));
    }
  }
  if (scale == 0) return std::vector<double>(n, 1.0 / static_cast<double>(n));  // all members alike
  return exponentiated_gradient(n, iterations, 1.0 / (2 * scale), [&](const std::vector<double>& w,
                                                                        std::vector<double>& grad) {
    for (std::size_t i = 0; i < n; ++i) {
      double g = -b[i];
      for (std::size_t j = 0; j < n; ++j) g += gram[i * n + j] * w[j];
      grad[i] = 2 * g;
    }
  });
}

std::size_t lowest_loss(const std::vector<double>& losses, const std::vector<double>& tie_break) {
  if (losses.empty()) return 0;
  double low = std::numeric_limits<double>::quiet_NaN();
  for (double l : losses)
    if (!std::isnan(l) && (std::isnan(low) || l < low)) low = l;
  if (std::isnan(low)) return 0;
  const double tolerance = 1e-12 * std::max(1.0, std::abs(low));
  std::size_t best = losses.size();
  for (std::size_t m = 0; m < losses.size(); ++m) {
    if (std::isnan(losses[m]) || losses[m] > low + tolerance) continue;
    if (best == losses.size()) {
      best = m;
      continue;
    }
    const double a = m < tie_break.size() ? tie_break[m] : std::numeric_limits<double>::quiet_NaN();
    const double b = best < tie_break.size() ? tie_break[best] : std::numeric_limits<double>::quiet_NaN();
    if (!std::isnan(a) && (std::isnan(b) || a > b)) best = m;
  }
  return best;
}

std::size_t best_member(const std::vector<Probabilities>& members, const std::vector<int>& labels) {
  std::vector<double> losses;
  for (const Probabilities& m : members) losses.push_back(log_loss(m, labels));
  return lowest_loss(losses);
}

std::size_t best_member(const std::vector<Probabilities>& members, const Probabilities& targets) {
  std::vector<double> losses;
  for (const Probabilities& m : members) losses.push_back(mean_squared_error(m, targets));
  return lowest_loss(losses);
}

}  // namespace hpctune::ensemble
