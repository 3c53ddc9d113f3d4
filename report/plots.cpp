// The computations behind the dashboard's charts (plots.h).
#include "report/plots.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "search/algorithms.h"
#include "search/pareto.h"

namespace hpctune::report {

std::vector<double> best_so_far(const std::vector<double>& values, bool maximize) {
  std::vector<double> out;
  out.reserve(values.size());
  double best = std::nan("");
  for (double v : values) {
    if (std::isfinite(v) && (std::isnan(best) || (maximize ? v > best : v < best))) best = v;
    out.push_back(best);
  }
  return out;
}

BoxStats box_stats(std::vector<double> values) {
  BoxStats b;
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  if (values.empty()) return b;
  std::sort(values.begin(), values.end());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
  };
  b.n = static_cast<int64_t>(values.size());
  b.min = values.front();
  b.max = values.back();
  b.q1 = quantile(0.25);
  b.median = quantile(0.5);
  b.q3 = quantile(0.75);
  b.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  return b;
}

std::vector<size_t> even_stride(size_t n, size_t k) {
  std::vector<size_t> out;
  if (k == 0 || n == 0) return out;
  if (k >= n) {
    out.resize(n);
    std::iota(out.begin(), out.end(), size_t{0});
    return out;
  }
  if (k == 1) return {n - 1};
  for (size_t i = 0; i < k; ++i) {
    const size_t at = static_cast<size_t>(std::llround(static_cast<double>(i) * static_cast<double>(n - 1) / static_cast<double>(k - 1)));
    if (out.empty() || out.back() != at) out.push_back(at);
  }
  return out;
}

std::vector<size_t> history_keep(const std::vector<double>& values, bool maximize, size_t max_points) {
  const size_t n = values.size();
  if (n <= max_points) return even_stride(n, n);
  std::vector<bool> keep(n, false);
  std::vector<size_t> rest;
  double best = std::nan("");
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (std::isfinite(v) && (std::isnan(best) || (maximize ? v > best : v < best))) {
      best = v;
      keep[i] = true;
      ++kept;
    } else {
      rest.push_back(i);
    }
  }
  const size_t room = max_points > kept ? max_points - kept : 0;
  for (size_t k : even_stride(rest.size(), room)) keep[rest[k]] = true;
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (keep[i]) out.push_back(i);
  }
  return out;
}

std::vector<size_t> keep_best_and_stride(const std::vector<double>& losses, size_t max_points) {
  const size_t n = losses.size();
  if (n <= max_points) return even_stride(n, n);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  auto loss = [&](size_t i) { return std::isfinite(losses[i]) ? losses[i] : HUGE_VAL; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return loss(a) < loss(b); });
  const size_t n_best = std::min(n, (max_points + 4) / 5);
  std::vector<bool> keep(n, false);
  for (size_t k = 0; k < n_best; ++k) keep[order[k]] = true;
  std::vector<size_t> rest;
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) rest.push_back(i);
  }
  for (size_t k : even_stride(rest.size(), max_points - n_best)) keep[rest[k]] = true;
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (keep[i]) out.push_back(i);
  }
  return out;
}

std::optional<double> eta_seconds(int64_t remaining, std::vector<double> durations, int64_t busy_groups) {
  durations.erase(std::remove_if(durations.begin(), durations.end(), [](double d) { return !(d >= 0) || !std::isfinite(d); }),
                  durations.end());
  if (remaining <= 0 || durations.empty()) return std::nullopt;
  std::sort(durations.begin(), durations.end());
  const size_t m = durations.size();
  const double median = m % 2 ? durations[m / 2] : 0.5 * (durations[m / 2 - 1] + durations[m / 2]);
  return static_cast<double>(remaining) * median / static_cast<double>(std::max<int64_t>(1, busy_groups));
}

Utilization utilization(const std::vector<BusyInterval>& intervals, double t0, double t1,
                        const std::vector<int64_t>& groups) {
  Utilization u;
  for (int64_t g : groups) u.busy_s[g] = 0;
  std::map<int64_t, std::vector<std::pair<double, double>>> by_group;
  for (const auto& iv : intervals) {
    const double a = std::max(iv.start, t0), b = std::min(iv.end, t1);
    if (b > a) by_group[iv.group].emplace_back(a, b);
    u.busy_s.emplace(iv.group, 0.0);
  }
  for (auto& [g, spans] : by_group) {
    std::sort(spans.begin(), spans.end());
    double busy = 0, cur_a = spans[0].first, cur_b = spans[0].second;
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first > cur_b) {
        busy += cur_b - cur_a;
        cur_a = spans[i].first;
      }
      cur_b = std::max(cur_b, spans[i].second);
    }
    busy += cur_b - cur_a;
    u.busy_s[g] = busy;
  }
  const double span = t1 - t0;
  if (span > 0 && !u.busy_s.empty()) {
    double total = 0;
    for (const auto& [g, b] : u.busy_s) total += b;
    u.percent = 100.0 * total / (span * static_cast<double>(u.busy_s.size()));
  }
  return u;
}

std::vector<bool> pareto_flags(const std::vector<std::vector<double>>& values, const std::vector<bool>& maximize) {
  std::vector<bool> out(values.size(), false);
  std::vector<std::vector<double>> losses;
  std::vector<size_t> where;
  for (size_t i = 0; i < values.size(); ++i) {
    const auto& v = values[i];
    if (v.size() != maximize.size()) continue;
    bool finite = true;
    std::vector<double> l(v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      finite = finite && std::isfinite(v[k]);
      l[k] = maximize[k] ? -v[k] : v[k];
    }
    if (!finite) continue;
    losses.push_back(std::move(l));
    where.push_back(i);
  }
  for (size_t k : search::pareto_front(losses)) out[where[k]] = true;
  return out;
}

namespace {

std::optional<PlotParam> plot_param(const std::string& name, const nlohmann::json& p) {
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) return std::nullopt;
  PlotParam out;
  out.name = name;
  out.spec.name = name;
  const std::string type = p["type"].get<std::string>();
  auto number = [&](const char* key) -> std::optional<double> {
    if (p.contains(key) && p[key].is_number()) return p[key].get<double>();
    return std::nullopt;
  };
  if (type == "float" || type == "int") {
    out.type = type;
    out.low = number("low");
    out.high = number("high");
    if (!out.low || !out.high || !(*out.low < *out.high)) return std::nullopt;
    out.log = p.value("log", false);
    out.spec.type = type == "int" ? search::ParamType::kInt : search::ParamType::kFloat;
    out.spec.low = *out.low;
    out.spec.high = *out.high;
    out.spec.log = out.log;
    if (p.contains("step") && p["step"].is_number_integer()) out.spec.step = std::max<int64_t>(1, p["step"].get<int64_t>());
    return out;
  }
  if (type == "choice") {
    const auto& values = p.contains("values") ? p["values"] : p.value("choices", nlohmann::json());
    if (!values.is_array() || values.empty()) return std::nullopt;
    const bool all_bool = std::all_of(values.begin(), values.end(), [](const auto& v) { return v.is_boolean(); });
    out.type = all_bool ? "bool" : "categorical";
    out.choices = values;
    out.spec.type = search::ParamType::kChoice;
    out.spec.choices.assign(values.begin(), values.end());
    return out;
  }
  if (type == "fixed") {
    out.type = "fixed";
    out.spec.type = search::ParamType::kFixed;
    out.spec.value = p.value("value", nlohmann::json());
    return out;
  }
  return std::nullopt;
}

}  // namespace

bool search_breeds(const nlohmann::json& config_json) {
  const auto& cj = config_json;
  if (!cj.is_object() || !cj.contains("search") || !cj["search"].is_object() || !cj["search"].contains("algorithm") ||
      !cj["search"]["algorithm"].is_string())
    return false;
  const auto* traits = search::algorithm_traits(cj["search"]["algorithm"].get<std::string>());
  return traits != nullptr && traits->breeds;
}

std::vector<PlotParam> space_params(const nlohmann::json& config_json, const std::string& stage) {
  const nlohmann::json* space = nullptr;
  if (config_json.is_object() && config_json.contains("space")) space = &config_json["space"];
  if (!stage.empty() && config_json.is_object() && config_json.contains("stages") && config_json["stages"].is_array()) {
    for (const auto& st : config_json["stages"]) {
      if (st.is_object() && st.value("name", "") == stage && st.contains("space") && st["space"].is_object()) {
        space = &st["space"];
      }
    }
  }
  std::vector<PlotParam> out;
  if (space == nullptr || !space->is_object()) return out;
  for (auto it = space->begin(); it != space->end(); ++it) {
    if (auto p = plot_param(it.key(), it.value())) out.push_back(std::move(*p));
  }
  return out;
}

search::ImportanceResult parameter_importance(const std::vector<const store::TrialRow*>& trials,
                                              const std::vector<PlotParam>& params, bool maximize) {
  search::ImportanceInput in;
  std::vector<size_t> used;  // the parameters that can vary (a fixed one has no importance to show)
  for (size_t j = 0; j < params.size(); ++j) {
    const auto& p = params[j];
    if (p.type == "fixed") continue;
    used.push_back(j);
    search::ImportanceParam ip;
    ip.name = p.name;
    ip.categorical = p.spec.type == search::ParamType::kChoice;
    ip.categories = static_cast<int64_t>(p.spec.choices.size());
    in.params.push_back(std::move(ip));
  }
  for (const auto* t : trials) {
    if (!t->objective || !std::isfinite(*t->objective)) continue;
    in.losses.push_back(maximize ? -*t->objective : *t->objective);
    std::vector<std::optional<double>> row;
    for (size_t j : used) {
      const auto& p = params[j];
      const auto it = t->params.is_object() ? t->params.find(p.name) : t->params.end();
      if (!t->params.is_object() || it == t->params.end()) {
        row.emplace_back();
      } else if (p.spec.type == search::ParamType::kChoice) {
        const int64_t idx = search::Space::choice_index(p.spec, *it);
        row.emplace_back(idx >= 0 ? std::optional<double>(static_cast<double>(idx)) : std::nullopt);
      } else {
        row.emplace_back(search::Space::to_unit(p.spec, *it));
      }
    }
    in.values.push_back(std::move(row));
  }
  return search::ped_anova(in);
}

}  // namespace hpctune::report
