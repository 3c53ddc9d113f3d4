// The problems of bench_search: each a search space, an objective to minimize and its known optimum,
// plus a JSON definition that bench/search_optuna.py reads to evaluate exactly the same function.
//
// Kinds (the `kind` of the definition):
//   continuous   search/test_functions.h over its box: branin, hartmann6, levy10, rosenbrock4, ackley4
//   ordinal      a test function on a grid of levels per dimension, evaluated at the level's point:
//                as integer level indices (`hartmann6-int6`: 6 levels each) or as ordered choices of
//                the points (`levy8-ord`: 2 to 10 levels per dimension); optimum by enumeration
//   categorical  a NAS-like cell (`nas-cell`): 6 edges of 5 operations, per-edge effects plus
//                pairwise interactions drawn once from a fixed seed; optimum by enumeration of the
//                5^6 = 15,625 cells; and a grid's levels as unordered choices (`hartmann6-cat6`:
//                the points of hartmann6-int6, each dimension a categorical choice of its 6 points)
//   mixed        conditional spaces of floats, ints and choices (`mixed-optim`: an optimizer choice
//                with its own parameters under it), a sum of quadratic terms with a known minimum
//   table        the tabulated Fashion-MNIST MLP (bench/data/fashion_mlp_table.csv, made by
//                bench/make-fashion-table): the mean validation error of the configuration, a lookup;
//                the MLP and CNN tables of bench/make-search-tables (table-mlp, table-cnn) and slices
//                of all three at one level of one setting (table-mlp-adam: the rows with adam)
//   noisy        a generated grid or cell whose every point's value carries a fixed Gaussian-like
//                noise (noisy-NN); the regret is the noise-free value of the incumbent (the point
//                with the best noisy value) against the noise-free optimum
//   real-table   issue 38's tables of real trainings (bench/data/real-tables/<id>.csv, made by
//                bench/make-search-tables): scikit-learn models on the data sets it ships and on
//                Fashion-MNIST subsets, and cells of hpctune's cnn; each a full grid whose parameters
//                are typed by the table's `# space:` line (ordered choices, unordered ones, conditional
//                ones: empty cells where inactive), every configuration trained with 3 seeds. Noisy as
//                real training: each evaluation is one seed's validation error, the seed drawn
//                uniformly by Problem::draw from the run's Rng; the regret is measured on the
//                noise-free mean over the seeds (truth), of the incumbent (the configuration with the
//                best value seen, noisy) against the best mean of the table
//
// The generated suite (drawn from a seed, not hand-picked): ord-NN (test functions on shifted
// grids of 3-10 levels per dimension, as ints or ordered choices), cat-NN (NAS-like cells of k edges
// x m operations with shared and per-edge effects and pairwise interactions, and grids of unordered
// levels), cond-NN (conditional spaces: a branch choice with its own parameters under each value,
// shared parameters), noisy-NN, each drawn from derive_seed(kSuiteSeed, problem); every problem has
// its budgets (1-2 of 20, 50, 100, 200) and its part: the 15 problems of the first benchmark are
// `tuning` (auto was chosen on them), every other is `held-out` when fnv1a64(id) % 3 == 0. The
// real tables (real-*) have their own rule, fixed with their ids before any search ran on them:
// sorted by fnv1a64(id), every third (rank 0, 3, 6, ...) is held out, a third of them exactly.
//
// The definitions carry every table (the NAS model's effects, the grids' points) and `checks`: a
// few points with their values, which search_optuna.py verifies before it runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/rng.h"
#include "search/space.h"

namespace hpctune::bench {

struct Problem {
  std::string id;
  std::string kind;  // continuous, ordinal, categorical, mixed, table, noisy, real-table
  int dim = 0;       // parameters (the most active at once for a conditional space)
  search::Space space;
  std::function<double(const search::Params&)> eval;   // what the searcher sees, unless draw is set
  std::function<double(const search::Params&)> truth;  // noise-free value (noisy, real-table; else empty = eval)
  // real-table: one evaluation as the searcher sees it, one seed's value drawn with the run's rng
  // (eval is then the mean, = truth). Empty for the others.
  std::function<double(const search::Params&, Rng&)> draw;
  double optimum = 0;                                  // of truth (of eval when no truth)
  std::vector<int> budgets;                            // the trial budgets it is run at
  std::string part;                                    // "tuning" or "held-out"
  nlohmann::json definition;  // for search_optuna.py: kind, space, the tables, checks
};

// Every problem id bench_search knows, in the order of the report.
std::vector<std::string> problem_ids();

// The part a problem belongs to: "tuning" for the first benchmark's 15 problems; a real table is
// "held-out" when its rank among the real tables by fnv1a64(id) is 0 mod 3; any other problem is
// "held-out" when fnv1a64(id) % 3 == 0; "tuning" otherwise.
std::string problem_part(const std::string& id);
// The ids of the real tables (kind real-table), a part of problem_ids().
std::vector<std::string> real_table_ids();

// The problem named by id; `fashion_table` is the path of the tabulated benchmark's CSV.
// kInvalidArgument for an unknown id, or a table that cannot be read.
Result<Problem> make_problem(const std::string& id, const std::string& fashion_table);

// The space as JSON (a list of {name, type, low, high, log, step, choices, ordered, when}).
nlohmann::json space_json(const search::Space& space);

// One parameter of a problem's space.
search::ParamSpec float_param(std::string name, double low, double high, bool log = false);
search::ParamSpec int_param(std::string name, int64_t low, int64_t high, bool log = false);
search::ParamSpec choice_param(std::string name, std::vector<nlohmann::json> values, bool ordered);

}  // namespace hpctune::bench
