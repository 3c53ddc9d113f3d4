#include "search/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace hpctune::search {

bool dominates(const std::vector<double>& a, const std::vector<double>& b) noexcept {
  bool better = false;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] > b[i]) return false;
    if (a[i] < b[i]) better = true;
  }
  return better;
}

std::vector<std::size_t> pareto_front(const std::vector<std::vector<double>>& losses) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < losses.size() && !dominated; ++j) dominated = j != i && dominates(losses[j], losses[i]);
    if (!dominated) out.push_back(i);
  }
  return out;
}

std::vector<std::vector<std::size_t>> nondominated_sort(const std::vector<std::vector<double>>& losses) {
  const std::size_t n = losses.size();
  std::vector<std::vector<std::size_t>> dominated_by_me(n);
  std::vector<std::size_t> count(n, 0);
  std::vector<std::vector<std::size_t>> fronts;
  std::vector<std::size_t> current;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      if (dominates(losses[i], losses[j])) dominated_by_me[i].push_back(j);
      else if (dominates(losses[j], losses[i])) ++count[i];
    }
    if (count[i] == 0) current.push_back(i);
  }
  while (!current.empty()) {
    fronts.push_back(current);
    std::vector<std::size_t> next;
    for (std::size_t i : current)
      for (std::size_t j : dominated_by_me[i])
        if (--count[j] == 0) next.push_back(j);
    std::sort(next.begin(), next.end());
    current = std::move(next);
  }
  return fronts;
}

std::vector<double> crowding_distance(const std::vector<std::vector<double>>& losses,
                                      const std::vector<std::size_t>& front) {
  const std::size_t n = front.size();
  std::vector<double> dist(n, 0.0);
  if (n == 0) return dist;
  const std::size_t m = losses[front[0]].size();
  std::vector<std::size_t> order(n);
  for (std::size_t k = 0; k < m; ++k) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return losses[front[a]][k] < losses[front[b]][k]; });
    const double lo = losses[front[order.front()]][k], hi = losses[front[order.back()]][k];
    dist[order.front()] = dist[order.back()] = std::numeric_limits<double>::infinity();
    if (hi - lo <= 0) continue;
    for (std::size_t r = 1; r + 1 < n; ++r)
      dist[order[r]] += (losses[front[order[r + 1]]][k] - losses[front[order[r - 1]]][k]) / (hi - lo);
  }
  return dist;
}

std::vector<double> observation_losses(const Observation& obs, const std::vector<Objective>& objectives) {
  const std::size_t m = std::max<std::size_t>(1, objectives.size());
  if (obs.outcome == Outcome::kFailed || obs.values.size() < m) return {};
  std::vector<double> out(m);
  for (std::size_t i = 0; i < m; ++i) {
    const double v = obs.values[i];
    if (!std::isfinite(v)) return {};
    const bool maximize = objectives.empty() ? true : objectives[i].maximize;
    out[i] = maximize ? -v : v;
  }
  return out;
}

nlohmann::json pareto_front_json(const std::vector<Observation>& observations,
                                 const std::vector<Objective>& objectives) {
  std::vector<const Observation*> usable;
  std::vector<std::vector<double>> losses;
  for (const auto& o : observations) {
    if (o.outcome != Outcome::kCompleted) continue;
    auto l = observation_losses(o, objectives);
    if (l.empty()) continue;
    usable.push_back(&o);
    losses.push_back(std::move(l));
  }
  std::vector<std::size_t> front = pareto_front(losses);
  std::sort(front.begin(), front.end(), [&](std::size_t a, std::size_t b) { return usable[a]->seq < usable[b]->seq; });
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i : front)
    out.push_back({{"seq", usable[i]->seq}, {"params", usable[i]->params}, {"values", usable[i]->values}});
  return out;
}

}  // namespace hpctune::search
