// Benchmark functions with known optima, for the `function` trainer, the search-quality tests and
// bench/search. All are minimized. Pure functions of their input.
//
//   branin      d = 2, x1 in [-5, 10], x2 in [0, 15]; minimum 0.397887 at (-pi, 12.275),
//               (pi, 2.275), (9.42478, 2.475)
//   hartmann6   d = 6, [0, 1]^6; minimum -3.32237 at (0.20169, 0.150011, 0.476874, 0.275332,
//               0.311652, 0.6573)
//   rosenbrock  d >= 2, [-5, 10]^d; minimum 0 at (1, ..., 1)
//   levy        d >= 1, [-10, 10]^d; minimum 0 at (1, ..., 1)
//   ackley      d >= 1, [-32.768, 32.768]^d; minimum 0 at 0
//
// Parameters are named x1 .. xd in a Space (test_function_space).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "search/space.h"

namespace hpctune::search {

double branin(const std::vector<double>& x);
double hartmann6(const std::vector<double>& x);
double rosenbrock(const std::vector<double>& x);
double levy(const std::vector<double>& x);
double ackley(const std::vector<double>& x);

struct TestFunction {
  std::string name;
  int dim = 0;
  std::vector<double> low, high;  // per dimension
  double optimum = 0;             // the global minimum value
  std::vector<double> argmin;     // one minimizer
  double (*f)(const std::vector<double>&) = nullptr;

  double operator()(const std::vector<double>& x) const { return f(x); }
  // x1..xd read from params (missing ones at the centre of their range).
  double operator()(const Params& params) const;
};

// The function names: branin, hartmann6, rosenbrock, levy, ackley.
std::vector<std::string> test_function_names();
// dim 0 picks the natural dimension (2 for branin, 6 for hartmann6, 2 for the others).
// kInvalidArgument for an unknown name or a dimension the function does not allow.
Result<TestFunction> make_test_function(const std::string& name, int dim = 0);
// Float parameters x1..xd over the function's box.
Space test_function_space(const TestFunction& fn);

// A simulated learning curve: the metric at step `step` of `total_steps`, starting at `initial`
// (step 0) and reaching `final_value` exactly at total_steps, with an exponential approach
// (rate > 0; larger converges earlier). Curves of configurations that share `initial` keep the
// order of their final values at every step, as an idealized training run would.
double learning_curve(double final_value, double initial, int64_t step, int64_t total_steps, double rate = 3.0);

}  // namespace hpctune::search
