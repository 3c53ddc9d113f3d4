#include "simulate/outcomes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "store/store.h"

namespace hpctune::simulate {
namespace {

constexpr std::size_t kMaxMetricNames = 1000;  // per step / per final metrics
constexpr std::size_t kMaxNameBytes = 256;

Error bad(const std::string& path, int64_t trial, const std::string& what) {
  return err(Errc::kInvalidArgument,
             path + ": trial " + std::to_string(trial) + ": " + what + " (not a campaign this simulator can replay)");
}

// A final-metrics object: names to numbers (null is NaN, as the store writes it).
Result<protocol::Metrics> read_metrics(const std::string& path, int64_t trial, const nlohmann::json& j) {
  if (!j.is_object()) return bad(path, trial, "metrics is not an object");
  if (j.size() > kMaxMetricNames) return bad(path, trial, "metrics has more than 1000 names");
  protocol::Metrics m;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key().empty() || it.key().size() > kMaxNameBytes) return bad(path, trial, "a metric name is empty or too long");
    if (it.value().is_null()) {
      m[it.key()] = std::numeric_limits<double>::quiet_NaN();
    } else if (it.value().is_number()) {
      m[it.key()] = it.value().get<double>();
    } else {
      return bad(path, trial, "metrics." + it.key() + " is not a number");
    }
  }
  return m;
}

Status check_params(const std::string& path, int64_t trial, const nlohmann::json& p) {
  if (!p.is_object()) return bad(path, trial, "params is not an object");
  if (p.size() > kMaxMetricNames) return bad(path, trial, "params has more than 1000 names");
  for (auto it = p.begin(); it != p.end(); ++it) {
    const auto& v = it.value();
    if (!(v.is_number() || v.is_string() || v.is_boolean() || v.is_null())) {
      return bad(path, trial, "params." + it.key() + " is not a number, string or boolean");
    }
    if (v.is_number_float() && !std::isfinite(v.get<double>())) return bad(path, trial, "params." + it.key() + " is not finite");
  }
  return {};
}

double weight_of(double d) { return 1.0 / std::max(d, 1e-9); }

// The recorded configurations as numbers, so that a nearest-neighbour search over 20,000 of them
// for each of 20,000 assigns costs seconds, not minutes: per parameter of the space, a numeric
// value's unit coordinate (Space::to_unit) or any other value's number in a dictionary of the
// values seen (equal values, equal numbers); parameters outside the space kept as JSON. The
// distance is config_distance's, term for term.
class PointIndex {
 public:
  PointIndex(const RecordedCampaign& rc, search::Space space) : space_(std::move(space)) {
    points_.reserve(rc.trials.size());
    for (const auto& t : rc.trials) points_.push_back(encode(t.params));
  }

  // The recorded trials nearest to `params`, nearest first (ties: the lower id), the first `k`.
  std::vector<std::pair<double, const RecordedTrial*>> nearest(const RecordedCampaign& rc, const nlohmann::json& params,
                                                               std::size_t k) {
    const Point q = encode(params);
    std::vector<std::pair<double, const RecordedTrial*>> all;
    all.reserve(rc.trials.size());
    for (std::size_t i = 0; i < rc.trials.size(); ++i) all.emplace_back(distance(q, points_[i]), &rc.trials[i]);
    k = std::min(k, all.size());
    auto less = [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second->id < b.second->id; };
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), less);
    all.resize(k);
    return all;
  }

 private:
  struct Point {
    std::vector<double> x;       // per space parameter
    std::vector<uint8_t> kind;   // 0 absent, 1 unit coordinate, 2 a value's number in the dictionary
    nlohmann::json extra;        // parameters outside the space (null when none)
  };

  Point encode(const nlohmann::json& params) {
    const auto& specs = space_.params();
    Point p;
    p.x.assign(specs.size(), 0.0);
    p.kind.assign(specs.size(), 0);
    if (!params.is_object()) return p;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto it = params.find(specs[i].name);
      if (it == params.end()) continue;
      const bool numeric = specs[i].type == search::ParamType::kFloat || specs[i].type == search::ParamType::kInt;
      if (numeric && it->is_number()) {
        p.x[i] = search::Space::to_unit(specs[i], *it);
        p.kind[i] = 1;
      } else {
        auto [v, added] = values_.emplace(it->dump(), static_cast<double>(values_.size()));
        (void)added;
        p.x[i] = v->second;
        p.kind[i] = 2;
      }
    }
    for (auto it = params.begin(); it != params.end(); ++it) {
      if (!space_.find(it.key())) p.extra[it.key()] = it.value();
    }
    return p;
  }

  double distance(const Point& a, const Point& b) const {
    double sum = 0;
    for (std::size_t i = 0; i < a.x.size(); ++i) {
      if (a.kind[i] == 0 && b.kind[i] == 0) continue;
      if (a.kind[i] == 0 || b.kind[i] == 0 || a.kind[i] != b.kind[i]) {
        sum += 1.0;
      } else if (a.kind[i] == 1) {
        const double d = std::fabs(a.x[i] - b.x[i]);
        sum += d * d;
      } else {
        sum += a.x[i] == b.x[i] ? 0.0 : 1.0;
      }
    }
    if (!a.extra.is_null() || !b.extra.is_null()) {
      const search::Space none;
      const double d = config_distance(none, a.extra.is_null() ? nlohmann::json::object() : a.extra,
                                       b.extra.is_null() ? nlohmann::json::object() : b.extra);
      sum += d * d;
    }
    return std::sqrt(sum);
  }

  search::Space space_;
  std::vector<Point> points_;
  std::unordered_map<std::string, double> values_;
};

void mark(SimulatedTrial& t, int64_t from, double distance) {
  t.final_metrics["simulated_from_trial"] = static_cast<double>(from);
  t.final_metrics["simulated_distance"] = distance;
}

}  // namespace

Result<RecordedCampaign> load_recorded_campaign(const std::string& path, const std::string& objective) {
  auto opened = store::Store::open_readonly(path);
  if (!opened.ok()) {
    return err(opened.error().code(), path + ": cannot be read as a recorded campaign: " + opened.error().to_string());
  }
  std::unique_ptr<store::Store> db = std::move(opened).value();
  HPCTUNE_ASSIGN(auto campaign, db->load_campaign());
  if (!campaign) return err(Errc::kInvalidArgument, path + ": has no campaign to replay");
  HPCTUNE_ASSIGN(std::vector<store::TrialRow> rows, db->trials(campaign->id));
  if (static_cast<int64_t>(rows.size()) > kMaxRecordedTrials) {
    return err(Errc::kInvalidArgument, path + ": more than " + std::to_string(kMaxRecordedTrials) + " trials");
  }
  RecordedCampaign rc;
  rc.path = path;
  rc.name = campaign->name;
  int64_t values = 0;
  bool has_objective = false;
  for (const auto& row : rows) {
    if (row.state == store::TrialState::kFailed && row.params.is_object()) {
      HPCTUNE_TRY(check_params(path, row.id, row.params));
      constexpr std::size_t kMaxFailureBytes = 2048;
      rc.failures.emplace(row.params.dump(), row.error.substr(0, kMaxFailureBytes));
      continue;
    }
    if (row.state != store::TrialState::kDone) continue;
    RecordedTrial t;
    t.id = row.id;
    HPCTUNE_TRY(check_params(path, row.id, row.params));
    t.params = row.params;
    HPCTUNE_ASSIGN(t.final_metrics, read_metrics(path, row.id, row.metrics));
    has_objective = has_objective || t.final_metrics.count(objective) > 0;
    HPCTUNE_ASSIGN(std::vector<store::MetricRow> metrics, db->metrics(row.id));
    int64_t last_step = 0;
    for (const auto& m : metrics) {
      if (m.attempt != row.attempt) continue;  // the attempt that finished
      if (m.step < 1 || m.step > kMaxRecordedSteps) return bad(path, row.id, "a report's step is outside 1.." + std::to_string(kMaxRecordedSteps));
      if (m.name.empty() || m.name.size() > kMaxNameBytes) return bad(path, row.id, "a reported metric name is empty or too long");
      if (++values > kMaxRecordedValues) {
        return err(Errc::kInvalidArgument, path + ": more than " + std::to_string(kMaxRecordedValues) + " metric values");
      }
      if (m.step != last_step) {  // rows come ordered by attempt, step, name
        if (m.step < last_step) return bad(path, row.id, "reports out of step order");
        t.reports.emplace_back();
        last_step = m.step;
      }
      if (t.reports.back().size() >= kMaxMetricNames) return bad(path, row.id, "a report has more than 1000 metrics");
      t.reports.back()[m.name] = m.value;
    }
    const double span = row.finished_at - row.started_at;
    if (!std::isfinite(span) || span < 0 || span > 10.0 * 365 * 86400) {
      return bad(path, row.id, "finished_at - started_at is not a duration in [0, 10 years]");
    }
    t.seconds_per_step = t.reports.empty() ? 0.0 : span / static_cast<double>(t.reports.size());
    rc.trials.push_back(std::move(t));
  }
  if (rc.trials.empty()) return err(Errc::kInvalidArgument, path + ": campaign '" + rc.name + "' has no done trial to replay");
  for (const auto& t : rc.trials) rc.failures.erase(t.params.dump());  // one of them finished: replay that
  if (!has_objective) {
    return err(Errc::kInvalidArgument, path + ": no done trial of campaign '" + rc.name + "' records the metric '" +
                                           objective + "' (the config's objective)");
  }
  return rc;
}

double config_distance(const search::Space& space, const nlohmann::json& a, const nlohmann::json& b) {
  double sum = 0;
  auto term = [&](const std::string& name, const nlohmann::json* x, const nlohmann::json* y) {
    if (!x || !y) return 1.0;
    const search::ParamSpec* spec = space.find(name);
    if (spec && (spec->type == search::ParamType::kFloat || spec->type == search::ParamType::kInt) && x->is_number() &&
        y->is_number()) {
      return std::fabs(search::Space::to_unit(*spec, *x) - search::Space::to_unit(*spec, *y));
    }
    return *x == *y ? 0.0 : 1.0;
  };
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      const nlohmann::json* y = b.is_object() && b.contains(it.key()) ? &b[it.key()] : nullptr;
      const double d = term(it.key(), &it.value(), y);
      sum += d * d;
    }
  }
  if (b.is_object()) {
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!a.is_object() || !a.contains(it.key())) sum += 1.0;
    }
  }
  return std::sqrt(sum);
}

TrialModel replay_model(std::shared_ptr<const RecordedCampaign> recorded, search::Space space) {
  // Exact matches first, through a map keyed by the params' JSON text (keys sorted: same text, same config).
  auto exact = std::make_shared<std::unordered_map<std::string, const RecordedTrial*>>();
  for (const auto& t : recorded->trials) exact->emplace(t.params.dump(), &t);
  auto index = std::make_shared<PointIndex>(*recorded, std::move(space));
  return [recorded, index, exact](const protocol::Assign& a) {
    const RecordedTrial* from = nullptr;
    double distance = 0;
    const std::string key = a.params.dump();
    if (auto it = exact->find(key); it != exact->end()) {
      from = it->second;
    } else if (auto f = recorded->failures.find(key); f != recorded->failures.end()) {
      SimulatedTrial failed;
      failed.error = "replayed failure of the recorded trial: " + f->second;
      return failed;
    } else {
      auto n = index->nearest(*recorded, a.params, 1);
      from = n.front().second;
      distance = n.front().first;
    }
    SimulatedTrial t;
    t.reports = from->reports;
    t.final_metrics = from->final_metrics;
    t.seconds_per_step = from->seconds_per_step;
    mark(t, from->id, distance);
    return t;
  };
}

TrialModel surrogate_model(std::shared_ptr<const RecordedCampaign> recorded, search::Space space, int64_t k) {
  const std::size_t kk = static_cast<std::size_t>(std::max<int64_t>(1, k));
  auto index = std::make_shared<PointIndex>(*recorded, std::move(space));
  return [recorded, index, kk](const protocol::Assign& a) {
    const auto n = index->nearest(*recorded, a.params, kk);
    const RecordedTrial& first = *n.front().second;
    SimulatedTrial t;
    // The weighted mean of `name` over the neighbours that have it, each read by `value_of`.
    auto mean = [&](const std::string& name, auto value_of) {
      double sum = 0, weights = 0;
      for (const auto& [d, r] : n) {
        const protocol::Metrics* m = value_of(*r);
        if (!m) continue;
        auto it = m->find(name);
        if (it == m->end() || !std::isfinite(it->second)) continue;
        sum += weight_of(d) * it->second;
        weights += weight_of(d);
      }
      return weights > 0 ? sum / weights : std::numeric_limits<double>::quiet_NaN();
    };
    for (const auto& [name, v] : first.final_metrics) {
      (void)v;
      t.final_metrics[name] = mean(name, [](const RecordedTrial& r) { return &r.final_metrics; });
    }
    const std::size_t steps = first.reports.size();
    for (std::size_t i = 0; i < steps; ++i) {
      const double fraction = static_cast<double>(i + 1) / static_cast<double>(steps);
      auto at = [&](const RecordedTrial& r) -> const protocol::Metrics* {
        if (r.reports.empty()) return nullptr;
        const auto j = static_cast<std::size_t>(std::clamp<double>(
            std::round(fraction * static_cast<double>(r.reports.size())) - 1, 0.0, static_cast<double>(r.reports.size() - 1)));
        return &r.reports[j];
      };
      protocol::Metrics step;
      for (const auto& [name, v] : first.reports[i]) {
        (void)v;
        step[name] = mean(name, at);
      }
      t.reports.push_back(std::move(step));
    }
    double sps = 0, weights = 0;
    for (const auto& [d, r] : n) {
      sps += weight_of(d) * r->seconds_per_step;
      weights += weight_of(d);
    }
    t.seconds_per_step = sps / weights;
    mark(t, first.id, n.front().first);
    t.final_metrics["simulated_neighbours"] = static_cast<double>(n.size());
    return t;
  };
}

Result<OutcomeSource> outcome_source(const std::string& spec, const search::Space& space, const std::string& objective,
                                     TrialModel function_model) {
  OutcomeSource out;
  if (spec.empty() || spec == kComputedOutcomes) {
    out.model = std::move(function_model);
    out.detail = {{"outcomes", kComputedOutcomes}};
    return out;
  }
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (colon == std::string::npos || (kind != "replay" && kind != "surrogate") || colon + 1 == spec.size()) {
    return err(Errc::kUsage, "--outcomes: '" + spec + "' is not one of function, replay:DB, surrogate:DB");
  }
  const std::string path = spec.substr(colon + 1);
  auto loaded = load_recorded_campaign(path, objective);
  if (!loaded.ok()) return err(Errc::kUsage, "--outcomes " + kind + ": " + loaded.error().to_string());
  auto recorded = std::make_shared<const RecordedCampaign>(std::move(loaded).value());
  out.detail = {{"outcomes", kind}, {"from", path}, {"recorded_campaign", recorded->name},
                {"recorded_trials", recorded->trials.size()}};
  if (kind == "replay") {
    out.model = replay_model(recorded, space);
  } else {
    out.detail["neighbours"] = 5;
    out.model = surrogate_model(recorded, space, 5);
  }
  return out;
}

}  // namespace hpctune::simulate
