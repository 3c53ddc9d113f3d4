// Ensembles from trials' predictions: a pure library (no files, sockets or SQLite), issue 11.
//
// Every member is a matrix of class probabilities over the same rows (the campaign-level
// validation split makes row i the same image in every trial, trainer.data_seed). An ensemble is a
// weight per member, non-negative and summing to 1; its probabilities are the weighted average of
// its members'. Three ways to choose the weights, each from the validation rows only:
//   greedy_selection  Caruana et al. 2004: forward selection with replacement, each step adding the
//                     member that most lowers the ensemble's log loss, up to max_size picks (weights
//                     are pick counts / picks); optional bagging over random halves of the members.
//   top_k             the k members with the lowest log loss, equal weights.
//   fit_weights       the weights on the simplex that minimize log loss (exponentiated gradient).
// The test rows are then scored with the chosen weights (blend, log_loss, accuracy).
//
// Regression (issue 22): members are predictions rows x outputs (a Probabilities whose `classes`
// counts outputs, any finite values) scored against targets of the same shape by mean squared
// error; the same three methods take the targets in place of the labels: greedy and top_k share
// their selection with the classification ones and minimize MSE, fit_weights minimizes MSE on the
// simplex (the same exponentiated gradient, its step set by the members' scale).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/result.h"

namespace hpctune::ensemble {

// Row-major class probabilities: rows x classes.
struct Probabilities {
  std::size_t rows = 0;
  std::size_t classes = 0;
  std::vector<double> values;
  double at(std::size_t row, std::size_t cls) const { return values[row * classes + cls]; }
};

// kInvalidArgument unless every member has the same shape, rows match the labels, labels are
// classes, and every value is a finite probability.
Status check_members(const std::vector<Probabilities>& members, const std::vector<int>& labels);

// The mean negative log likelihood of the labels (probabilities clipped at 1e-15, as scikit-learn).
double log_loss(const Probabilities& p, const std::vector<int>& labels);
// The fraction of rows whose most probable class is the label (ties: the lowest class).
double accuracy(const Probabilities& p, const std::vector<int>& labels);

// The best single member by the loss every method minimises, on the rows given (the validation
// rows): the lowest log loss. Not by accuracy, which saturates and ties, and so can pick a member
// the blend beats only in appearance. Ties as lowest_loss's without a tie-break; 0 for no members.
std::size_t best_member(const std::vector<Probabilities>& members, const std::vector<int>& labels);
// The index of the lowest of `losses` (NaN: worst). Losses within 1e-12 (relative) of it tie; a
// tie goes to the higher `tie_break` (e.g. each member's objective, higher is better; NaN worst;
// empty = none), then to the lower index. 0 for none.
std::size_t lowest_loss(const std::vector<double>& losses, const std::vector<double>& tie_break = {});

// sum_m weights[m] * members[m]. kInvalidArgument on shapes or weights that are not a distribution.
Result<Probabilities> blend(const std::vector<Probabilities>& members, const std::vector<double>& weights);

struct GreedyOptions {
  int max_size = 20;   // picks, with replacement
  int bags = 0;        // 0: no bagging; else this many bags over random halves of the members
  uint64_t seed = 0;   // for the bags
};
Result<std::vector<double>> greedy_selection(const std::vector<Probabilities>& members, const std::vector<int>& labels,
                                             const GreedyOptions& options);
Result<std::vector<double>> top_k(const std::vector<Probabilities>& members, const std::vector<int>& labels, int k);
// Exponentiated-gradient descent on the simplex from equal weights, `iterations` steps.
Result<std::vector<double>> fit_weights(const std::vector<Probabilities>& members, const std::vector<int>& labels,
                                        int iterations = 500);

// Regression: kInvalidArgument unless every member and the targets have the same shape (at least
// one row and one output) and every value is finite.
Status check_members(const std::vector<Probabilities>& members, const Probabilities& targets);
// The mean over rows and outputs of (prediction - target)^2.
double mean_squared_error(const Probabilities& predictions, const Probabilities& targets);
// The best single member by the lowest mean squared error (ties: the lower index); 0 for none.
std::size_t best_member(const std::vector<Probabilities>& members, const Probabilities& targets);
Result<std::vector<double>> greedy_selection(const std::vector<Probabilities>& members, const Probabilities& targets,
                                             const GreedyOptions& options);
Result<std::vector<double>> top_k(const std::vector<Probabilities>& members, const Probabilities& targets, int k);
// Its steps cost members^2 whatever the rows: 5,000 of them by default.
Result<std::vector<double>> fit_weights(const std::vector<Probabilities>& members, const Probabilities& targets,
                                        int iterations = 5000);

}  // namespace hpctune::ensemble
