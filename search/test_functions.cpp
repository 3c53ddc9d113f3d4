#include "search/test_functions.h"

#include <cmath>
#include <numbers>

namespace hpctune::search {

double branin(const std::vector<double>& x) {
  const double pi = std::numbers::pi;
  const double a = 1, b = 5.1 / (4 * pi * pi), c = 5 / pi, r = 6, s = 10, t = 1 / (8 * pi);
  const double q = x[1] - b * x[0] * x[0] + c * x[0] - r;
  return a * q * q + s * (1 - t) * std::cos(x[0]) + s;
}

double hartmann6(const std::vector<double>& x) {
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                 {0.05, 10, 17, 0.1, 8, 14},
                                 {3, 3.5, 1.7, 10, 17, 8},
                                 {17, 8, 0.05, 10, 0.1, 14}};
  static const double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double out = 0;
  for (int i = 0; i < 4; ++i) {
    double e = 0;
    for (int j = 0; j < 6; ++j) e += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
    out -= alpha[i] * std::exp(-e);
  }
  return out;
}

double rosenbrock(const std::vector<double>& x) {
  double out = 0;
  for (std::size_t i = 0; i + 1 < x.size(); ++i) {
    const double a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
    out += 100 * a * a + b * b;
  }
  return out;
}

double levy(const std::vector<double>& x) {
  const double pi = std::numbers::pi;
  const std::size_t d = x.size();
  auto w = [&](std::size_t i) { return 1 + (x[i] - 1) / 4; };
  const double s0 = std::sin(pi * w(0));
  double out = s0 * s0;
  for (std::size_t i = 0; i + 1 < d; ++i) {
    const double wi = w(i), s = std::sin(pi * wi + 1);
    out += (wi - 1) * (wi - 1) * (1 + 10 * s * s);
  }
  const double wd = w(d - 1), sd = std::sin(2 * pi * wd);
  out += (wd - 1) * (wd - 1) * (1 + sd * sd);
  return out;
}

double ackley(const std::vector<double>& x) {
  const double a = 20, b = 0.2, c = 2 * std::numbers::pi;
  const double d = static_cast<double>(x.size());
  double sq = 0, cs = 0;
  for (double v : x) {
    sq += v * v;
    cs += std::cos(c * v);
  }
  return -a * std::exp(-b * std::sqrt(sq / d)) - std::exp(cs / d) + a + std::numbers::e;
}

double TestFunction::operator()(const Params& params) const {
  std::vector<double> x(static_cast<std::size_t>(dim));
  for (int i = 0; i < dim; ++i) {
    std::string key = "x";
    key += std::to_string(i + 1);
    x[static_cast<std::size_t>(i)] = params.is_object() && params.contains(key) && params[key].is_number()
                                         ? params[key].get<double>()
                                         : 0.5 * (low[static_cast<std::size_t>(i)] + high[static_cast<std::size_t>(i)]);
  }
  return f(x);
}

std::vector<std::string> test_function_names() { return {"branin", "hartmann6", "rosenbrock", "levy", "ackley"}; }

Result<TestFunction> make_test_function(const std::string& name, int dim) {
  TestFunction fn;
  fn.name = name;
  auto box = [&](int d, double lo, double hi) {
    fn.dim = d;
    fn.low.assign(static_cast<std::size_t>(d), lo);
    fn.high.assign(static_cast<std::size_t>(d), hi);
  };
  if (name == "branin") {
    if (dim != 0 && dim != 2) return err(Errc::kInvalidArgument, "branin is defined in 2 dimensions only");
    fn.dim = 2;
    fn.low = {-5, 0};
    fn.high = {10, 15};
    fn.optimum = 0.39788735772973816;
    fn.argmin = {std::numbers::pi, 2.275};
    fn.f = &branin;
  } else if (name == "hartmann6") {
    if (dim != 0 && dim != 6) return err(Errc::kInvalidArgument, "hartmann6 is defined in 6 dimensions only");
    box(6, 0, 1);
    fn.optimum = -3.3223680114155147;
    fn.argmin = {0.20168952, 0.15001069, 0.47687398, 0.27533243, 0.31165162, 0.65730054};
    fn.f = &hartmann6;
  } else if (name == "rosenbrock") {
    if (dim == 0) dim = 2;
    if (dim < 2) return err(Errc::kInvalidArgument, "rosenbrock needs at least 2 dimensions");
    box(dim, -5, 10);
    fn.argmin.assign(static_cast<std::size_t>(dim), 1.0);
    fn.f = &rosenbrock;
  } else if (name == "levy" || name == "ackley") {
    if (dim == 0) dim = 2;
    if (dim < 1) return err(Errc::kInvalidArgument, name + " needs at least 1 dimension");
    if (name == "levy") {
      box(dim, -10, 10);
      fn.argmin.assign(static_cast<std::size_t>(dim), 1.0);
      fn.f = &levy;
    } else {
      box(dim, -32.768, 32.768);
      fn.argmin.assign(static_cast<std::size_t>(dim), 0.0);
      fn.f = &ackley;
    }
  } else {
    std::string valid;
    for (const auto& n : test_function_names()) valid += (valid.empty() ? "" : ", ") + n;
    return err(Errc::kInvalidArgument, "unknown test function '" + name + "' (valid: " + valid + ")");
  }
  if (dim > 1000) return err(Errc::kInvalidArgument, name + ": at most 1000 dimensions");
  return fn;
}

Space test_function_space(const TestFunction& fn) {
  std::vector<ParamSpec> specs;
  for (int i = 0; i < fn.dim; ++i) {
    ParamSpec p;
    p.name = "x";
    p.name += std::to_string(i + 1);
    p.type = ParamType::kFloat;
    p.low = fn.low[static_cast<std::size_t>(i)];
    p.high = fn.high[static_cast<std::size_t>(i)];
    specs.push_back(p);
  }
  return Space::create(std::move(specs)).value();
}

double learning_curve(double final_value, double initial, int64_t step, int64_t total_steps, double rate) {
  if (total_steps <= 0 || step >= total_steps) return final_value;
  if (step <= 0) return initial;
  if (!(rate > 0)) rate = 3.0;
  const double s = static_cast<double>(step) / static_cast<double>(total_steps);
  const double g = (std::exp(-rate * s) - std::exp(-rate)) / (1 - std::exp(-rate));  // 1 at s=0, 0 at s=1
  return final_value + (initial - final_value) * g;
}

}  // namespace hpctune::search
