#include "trainers/function_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "common/rng.h"
#include "search/test_functions.h"

namespace hpctune::trainers {
namespace {

// The index i of a parameter named "x<i>" (i >= 1, no leading zero), or 0 for any other name.
int64_t x_index(const std::string& key) {
  if (key.size() < 2 || key.size() > 8 || key[0] != 'x' || key[1] == '0') return 0;
  int64_t i = 0;
  for (std::size_t k = 1; k < key.size(); ++k) {
    if (key[k] < '0' || key[k] > '9') return 0;
    i = i * 10 + (key[k] - '0');
  }
  return i;
}

std::string x_name(int64_t i) {
  std::string name = "x";  // not "x" + to_string(i): GCC 12 warns falsely (-Wrestrict, PR 105329)
  name += std::to_string(i);
  return name;
}

// The shared starting point of every learning curve of `fn`: the largest value over a fixed set of
// points (the same for every trial and seed), i.e. an "untrained" value.
double initial_value(const search::TestFunction& fn) {
  Rng rng(0x5EEDF00Dull);
  std::vector<double> x(static_cast<std::size_t>(fn.dim));
  double worst = -INFINITY;
  for (int k = 0; k < FunctionTrainer::kInitialProbes; ++k) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = rng.uniform(fn.low[i], fn.high[i]);
    worst = std::max(worst, fn(x));
  }
  return worst;
}

}  // namespace

Result<FunctionSettings> parse_function_settings(const nlohmann::json& json) {
  if (!json.is_object()) return err(Errc::kInvalidArgument, "function trainer: settings must be an object");
  // x1..xd are the function's arguments, not settings: split them off before the unknown-key check.
  nlohmann::json settings = nlohmann::json::object();
  std::vector<std::pair<int64_t, const nlohmann::json*>> xs;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (const int64_t i = x_index(it.key()); i > 0) xs.emplace_back(i, &it.value());
    else settings[it.key()] = it.value();
  }
  SettingsReader r("function", settings, function_setting_specs());
  HPCTUNE_TRY(r.check_known());
  FunctionSettings s;
  HPCTUNE_ASSIGN(s.name, r.string("name"));
  HPCTUNE_ASSIGN(s.dim, r.integer("dim"));
  HPCTUNE_ASSIGN(s.noise, r.number("noise"));
  HPCTUNE_ASSIGN(s.steps, r.integer("steps"));
  HPCTUNE_ASSIGN(s.seconds_per_step, r.number("seconds_per_step"));

  auto fn = search::make_test_function(s.name, static_cast<int>(s.dim));
  if (!fn.ok()) return err(Errc::kInvalidArgument, "function trainer: " + fn.error().message());
  const std::size_t d = static_cast<std::size_t>(fn->dim);
  s.dim = fn->dim;
  const std::string range = "x1..x" + std::to_string(d);
  s.x.assign(d, NAN);
  for (const auto& [i, v] : xs) {
    if (i > static_cast<int64_t>(d))
      return err(Errc::kInvalidArgument, "function trainer: parameter '" + x_name(i) + "' is beyond " + s.name +
                                             "'s " + std::to_string(d) + " dimensions (" + range + ")");
    if (!v->is_number() || !std::isfinite(v->get<double>()))
      return err(Errc::kInvalidArgument, "function trainer: parameter '" + x_name(i) + "' = " + v->dump() + ": must be a number");
    const double x = v->get<double>();
    const double lo = fn->low[static_cast<std::size_t>(i - 1)], hi = fn->high[static_cast<std::size_t>(i - 1)];
    const double slack = 1e-9 * (hi - lo);  // a parameter rounded at its bound
    if (x < lo - slack || x > hi + slack)
      return err(Errc::kInvalidArgument, "function trainer: parameter '" + x_name(i) + "' = " + v->dump() +
                                             " is outside " + s.name + "'s box [" + nlohmann::json(lo).dump() + ", " +
                                             nlohmann::json(hi).dump() + "]");
    s.x[static_cast<std::size_t>(i - 1)] = std::clamp(x, lo, hi);
  }
  for (std::size_t i = 0; i < d; ++i)
    if (std::isnan(s.x[i]))
      return err(Errc::kInvalidArgument, "function trainer: parameter '" + x_name(static_cast<int64_t>(i) + 1) +
                                             "' is missing; " + s.name + " takes " + range + " (from the space)");
  return s;
}

Result<FunctionCurve> function_curve(const nlohmann::json& settings, uint64_t seed) {
  HPCTUNE_ASSIGN(FunctionSettings s, parse_function_settings(settings));
  const search::TestFunction fn = search::make_test_function(s.name, static_cast<int>(s.dim)).value();
  const double final_value = fn(s.x);
  const double initial = s.steps > 1 ? initial_value(fn) : final_value;
  Rng noise_rng(seed);
  FunctionCurve curve;
  curve.seconds_per_step = s.seconds_per_step;
  curve.optimum = fn.optimum;
  curve.reports.reserve(static_cast<std::size_t>(s.steps));
  for (int64_t step = 1; step <= s.steps; ++step) {
    double value = search::learning_curve(final_value, initial, step, s.steps);
    if (s.noise > 0.0) value += noise_rng.normal(0.0, s.noise);
    curve.reports.push_back({{"value", value}});
    curve.final_metrics = {{"value", value}, {"regret", value - fn.optimum}};
  }
  return curve;
}

Result<TrialResult> FunctionTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(FunctionCurve curve, function_curve(ctx.settings(), ctx.seed));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto per_step = std::chrono::duration<double>(curve.seconds_per_step);
  TrialResult result;
  const int64_t steps = static_cast<int64_t>(curve.reports.size());
  for (int64_t step = 1; step <= steps; ++step) {
    // Absolute deadlines, so sleep overshoot does not accumulate over the steps.
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(per_step * static_cast<double>(step));
    if (wait_unless_stopped(ctx, deadline, std::chrono::milliseconds(kSliceMs))) {
      result.stopped = true;
      return result;
    }
    const protocol::Metrics& m = curve.reports[static_cast<std::size_t>(step - 1)];
    ctx.report(step, m);
    result.step = step;
    result.metrics = {{"value", m.at("value")}, {"regret", m.at("value") - curve.optimum}};
  }
  return result;
}

}  // namespace hpctune::trainers
