// The dashboard's chart routes (route_helpers.h): overview, history, generations, params,
// importance, curves, pareto, timeline and stages, each from the campaign's snapshot. What they
// compute (best so far, box statistics, downsampling, utilization, the front, the ETA, importance)
// is in report/plots.h; here only the choice of rows and the JSON.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "common/clock.h"
#include "common/text.h"
#include "dashboard/route_helpers.h"
#include "report/plots.h"
#include "report/stages.h"
#include "report/status.h"
#include "report/trial_json.h"

namespace hpctune::dashboard::detail {

namespace {

using json = nlohmann::json;

bool has_objective(const store::TrialRow& t) { return t.objective && std::isfinite(*t.objective); }

const char* mode(const Snapshot& s) { return s.objectives.maximize ? "max" : "min"; }

// The campaign's stages with their trials by state and summary (overview and stages).
json stage_json(const Snapshot& s, const store::StageRow& st, bool master_gone) {
  return {{"id", st.id},
          {"name", st.name},
          {"kind", st.kind},
          {"state", report::shown_stage_state(st.state, master_gone)},
          {"started_at", report::time_or_null(st.started_at)},
          {"finished_at", report::time_or_null(st.finished_at)},
          {"trials", counts_by_state(s.stage_trials(st.id))},
          {"summary", report::stage_summary(st)}};
}

// Trials with an objective, in the order they finished (then by id).
std::vector<const store::TrialRow*> finished_in_order(const std::vector<const store::TrialRow*>& trials) {
  std::vector<const store::TrialRow*> out;
  for (const auto* t : trials) {
    if (has_objective(*t) && store::is_final(t->state)) out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto* a, const auto* b) {
    return a->finished_at != b->finished_at ? a->finished_at < b->finished_at : a->id < b->id;
  });
  return out;
}

// A 400 from an error of the parameter helpers.
ApiResponse bad(const Error& e) { return api_error(400, e.message()); }

}  // namespace

ApiResponse overview(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {})) return *b;
  const double now = unix_now();
  const auto& c = s.campaign;
  const auto all = s.all_trials();
  const auto main = s.main_trials();
  // A campaign recorded running whose master is gone shows as interrupted, and so do its running
  // stages (report/status.h, report/stages.h).
  const report::MasterLiveness master = report::master_liveness(c, s.db_path, now);
  json out = {{"name", c.name},
              {"state", master.gone ? std::string("interrupted") : c.state},
              {"state_text", master.text},
              {"master", report::master_json(c, master)},
              {"algorithm", nullptr},
              {"objectives", objectives_json(s)},
              {"created_at", report::time_or_null(c.created_at)},
              {"finished_at", report::time_or_null(c.finished_at)},
              {"elapsed_s", opt_num(report::campaign_elapsed(c, now))},
              {"simulated", s.simulated.is_null() ? json() : json(report::simulated_mark(s.simulated))},
              {"warnings", s.warnings},
              {"version", s.version}};
  const auto& cj = c.config_json;
  std::optional<int64_t> max_trials;
  if (cj.is_object() && cj.contains("search") && cj["search"].is_object()) {
    const auto& search = cj["search"];
    if (search.contains("algorithm")) out["algorithm"] = search["algorithm"];
    if (search.contains("max_trials") && search["max_trials"].is_number_integer() && search["max_trials"].get<int64_t>() > 0) {
      max_trials = search["max_trials"].get<int64_t>();
    }
  }
  int64_t finished = 0;
  for (const auto* t : main) finished += store::is_final(t->state);
  out["budget"] = {{"max_trials", max_trials ? json(*max_trials) : json()},
                   {"finished", finished},
                   {"fraction", max_trials ? json(std::min(1.0, static_cast<double>(finished) / static_cast<double>(*max_trials)))
                                           : json()}};
  // ETA: the trials left × the median duration of the last 50 finished / the groups busy lately.
  json eta = nullptr;
  if (c.state == "running" && max_trials) {
    auto done = finished_in_order(main);
    std::vector<const store::TrialRow*> by_end;
    for (const auto* t : main) {
      if (store::is_final(t->state) && t->finished_at > 0 && t->started_at > 0) by_end.push_back(t);
    }
    std::sort(by_end.begin(), by_end.end(), [](const auto* a, const auto* b) { return a->finished_at > b->finished_at; });
    std::vector<double> durations;
    for (size_t i = 0; i < by_end.size() && i < 50; ++i) durations.push_back(report::trial_seconds(*by_end[i]));
    std::set<int64_t> busy;
    for (const auto& a : s.attempts) {
      if (a.started_at > 0 && a.group_id >= 0 && (a.finished_at == 0 || a.finished_at > now - 300)) busy.insert(a.group_id);
    }
    eta = opt_num(report::eta_seconds(*max_trials - finished, durations, static_cast<int64_t>(busy.size())));
  }
  out["eta_s"] = eta;
  out["trials"] = {{"total", all.size()}, {"by_state", counts_by_state(all)}};
  const auto* best = best_of(main, s.objectives.maximize);
  if (best) {
    report::ShownParams shown = report::shown_params(best->params);  // the searched values apart
    out["best"] = {{"trial", best->id},         {"objective", num(*best->objective)},
                   {"params", shown.params},    {"lineage", shown.lineage},
                   {"run_settings", shown.run_settings}, {"metrics", best->metrics}};
  } else {
    out["best"] = json();
  }
  json stages = json::array();
  for (const auto& st : s.stages) stages.push_back(stage_json(s, st, master.gone));
  out["stages"] = std::move(stages);
  return {200, std::move(out)};
}

ApiResponse history(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {"stage", "max_points"})) return *b;
  auto max_points = int_param(params, "max_points", 5000, 1, 20000);
  if (!max_points.ok()) return bad(max_points.error());
  auto sel = select_trials(s, params, false);
  if (!sel.ok()) return bad(sel.error());
  const auto rows = finished_in_order(sel->trials);
  std::vector<double> values;
  for (const auto* t : rows) values.push_back(*t->objective);
  const auto best = report::best_so_far(values, s.objectives.maximize);
  const auto keep = report::history_keep(values, s.objectives.maximize, static_cast<size_t>(*max_points));
  json trial = json::array(), number = json::array(), finished_at = json::array(), value = json::array(),
       state = json::array(), best_col = json::array();
  for (size_t i : keep) {
    const auto* t = rows[i];
    trial.push_back(t->id);
    number.push_back(i + 1);
    finished_at.push_back(report::time_or_null(t->finished_at));
    value.push_back(num(values[i]));
    state.push_back(store::to_string(t->state));
    best_col.push_back(num(best[i]));
  }
  return {200,
          {{"objective", s.objectives.metric},
           {"mode", mode(s)},
           {"total", rows.size()},
           {"shown", keep.size()},
           {"points",
            {{"trial", std::move(trial)},
             {"number", std::move(number)},
             {"finished_at", std::move(finished_at)},
             {"value", std::move(value)},
             {"state", std::move(state)},
             {"best", std::move(best_col)}}}}};
}

ApiResponse generations(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {"stage"})) return *b;
  auto sel = select_trials(s, params, false);
  if (!sel.ok()) return bad(sel.error());
  std::map<int64_t, std::vector<const store::TrialRow*>> by_gen;
  for (const auto* t : sel->trials) {
    if (has_objective(*t) && store::is_final(t->state)) by_gen[t->generation].push_back(t);
  }
  // Only searches that breed generations (or a pbt stage) have them; elsewhere every trial is in
  // generation 0 and one box would say nothing.
  const store::StageRow* stage = sel->stage.empty() ? nullptr : s.stage(sel->stage);
  const bool breeds = report::search_breeds(s.campaign.config_json) || (stage && stage->kind == "pbt");
  json list = json::array();
  const bool only_zero = by_gen.empty() || (by_gen.size() == 1 && by_gen.begin()->first == 0);
  if (!(only_zero && !breeds)) {
    for (const auto& [gen, trials] : by_gen) {
      std::vector<double> values;
      for (const auto* t : trials) values.push_back(*t->objective);
      const auto box = report::box_stats(values);
      const auto* best = best_of(trials, s.objectives.maximize);
      list.push_back({{"generation", gen},
                      {"n", box.n},
                      {"min", num(box.min)},
                      {"q1", num(box.q1)},
                      {"median", num(box.median)},
                      {"q3", num(box.q3)},
                      {"max", num(box.max)},
                      {"mean", num(box.mean)},
                      {"best_trial", best ? json(best->id) : json()}});
    }
  }
  return {200, {{"objective", s.objectives.metric}, {"mode", mode(s)}, {"generations", std::move(list)}}};
}

ApiResponse params_view(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {"stage", "max_points"})) return *b;
  auto max_points = int_param(params, "max_points", 1000, 1, 5000);
  if (!max_points.ok()) return bad(max_points.error());
  auto sel = select_trials(s, params, false);
  if (!sel.ok()) return bad(sel.error());
  const auto space = report::space_params(s.campaign.config_json, sel->stage);
  std::vector<const store::TrialRow*> rows;
  std::vector<double> losses;
  for (const auto* t : sel->trials) {
    if (!has_objective(*t) || !store::is_final(t->state)) continue;
    rows.push_back(t);
    losses.push_back(s.objectives.maximize ? -*t->objective : *t->objective);
  }
  const auto keep = report::keep_best_and_stride(losses, static_cast<size_t>(*max_points));
  json specs = json::array();
  for (const auto& p : space) {
    specs.push_back({{"name", p.name},
                     {"type", p.type},
                     {"log", p.log},
                     {"low", opt_num(p.low)},
                     {"high", opt_num(p.high)},
                     {"choices", p.choices}});
  }
  json points = json::array();
  for (size_t i : keep) {
    const auto* t = rows[i];
    json values = json::object();
    for (const auto& p : space) {
      if (t->params.is_object() && t->params.contains(p.name)) values[p.name] = t->params[p.name];
    }
    points.push_back({{"trial", t->id}, {"objective", num(*t->objective)}, {"state", store::to_string(t->state)},
                      {"params", std::move(values)}});
  }
  return {200,
          {{"objective", s.objectives.metric},
           {"mode", mode(s)},
           {"total", rows.size()},
           {"shown", keep.size()},
           {"params", std::move(specs)},
           {"points", std::move(points)}}};
}

ApiResponse importance(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {"stage"})) return *b;
  auto sel = select_trials(s, params, false);
  if (!sel.ok()) return bad(sel.error());
  std::vector<const store::TrialRow*> rows;
  for (const auto* t : sel->trials) {
    if (store::is_final(t->state)) rows.push_back(t);
  }
  const auto space = report::space_params(s.campaign.config_json, sel->stage);
  const auto r = report::parameter_importance(rows, space, s.objectives.maximize);
  json list = json::array();
  for (const auto& [name, v] : r.importances) list.push_back({{"param", name}, {"importance", num(v)}});
  json out = {{"method", r.method}, {"objective", s.objectives.metric}, {"n_trials", r.n_trials},
              {"importances", std::move(list)}};
  if (!r.note.empty()) out["note"] = r.note;
  return {200, std::move(out)};
}

ApiResponse curves(const Snapshot& s, CampaignSource& source, const QueryParams& params) {
  if (auto b = unknown_param(params, {"metric", "trials", "max_trials", "stage"})) return *b;
  auto max_trials = int_param(params, "max_trials", 50, 1, 200);
  if (!max_trials.ok()) return bad(max_trials.error());
  auto metric_param = single_param(params, "metric");
  if (!metric_param.ok()) return bad(metric_param.error());
  auto ids_param = single_param(params, "trials");
  if (!ids_param.ok()) return bad(ids_param.error());
  auto sel = select_trials(s, params, false);
  if (!sel.ok()) return bad(sel.error());
  std::vector<const store::TrialRow*> chosen;
  std::set<int64_t> taken;
  if (*ids_param) {
    const auto parts = split(**ids_param, ',');
    if (parts.size() > 200) return api_error(400, "trials: at most 200 ids");
    for (const auto& p : parts) {
      auto id = parse_int(p, 1, std::numeric_limits<int64_t>::max());
      if (!id) return api_error(400, "trials: '" + p + "' is not a trial id");
      const auto* t = s.find(*id);
      if (t == nullptr) return api_error(400, "trials: no trial " + p);
      if (taken.insert(*id).second) chosen.push_back(t);
    }
  } else {
    // Every running trial, then the best and the most recent finished ones, up to max_trials.
    const size_t limit = static_cast<size_t>(*max_trials);
    for (const auto* t : sel->trials) {
      if ((t->state == store::TrialState::kRunning || t->state == store::TrialState::kAssigned) && taken.insert(t->id).second) {
        chosen.push_back(t);
      }
    }
    std::vector<const store::TrialRow*> ranked;
    for (const auto* t : sel->trials) {
      if (has_objective(*t) && t->state != store::TrialState::kFailed) ranked.push_back(t);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [&](const auto* a, const auto* b) {
      return s.objectives.maximize ? *a->objective > *b->objective : *a->objective < *b->objective;
    });
    const size_t n_best = chosen.size() < limit ? (limit - chosen.size() + 1) / 2 : 0;
    for (size_t i = 0; i < ranked.size() && i < n_best && chosen.size() < limit; ++i) {
      if (taken.insert(ranked[i]->id).second) chosen.push_back(ranked[i]);
    }
    std::vector<const store::TrialRow*> recent;
    for (const auto* t : sel->trials) {
      if (store::is_final(t->state)) recent.push_back(t);
    }
    std::stable_sort(recent.begin(), recent.end(), [](const auto* a, const auto* b) {
      return a->finished_at != b->finished_at ? a->finished_at > b->finished_at : a->id > b->id;
    });
    for (size_t i = 0; i < recent.size() && chosen.size() < limit; ++i) {
      if (taken.insert(recent[i]->id).second) chosen.push_back(recent[i]);
    }
    std::sort(chosen.begin(), chosen.end(), [](const auto* a, const auto* b) { return a->id < b->id; });
  }
  std::vector<int64_t> ids;
  for (const auto* t : chosen) ids.push_back(t->id);
  auto rows = source.with_store([&](store::Store& db) { return db.metrics_of(ids); });
  if (!rows.ok()) return from_error(rows.error());
  std::set<std::string> names;
  for (const auto& r : *rows) names.insert(r.name);
  std::string metric;
  if (*metric_param) {
    metric = **metric_param;
    if (!names.empty() && !names.count(metric)) {
      return api_error(400, "metric: '" + metric + "' is not reported by these trials (reported: " +
                                join(std::vector<std::string>(names.begin(), names.end()), ", ") + ")");
    }
  } else {
    metric = names.count(s.objectives.metric) || names.empty() ? s.objectives.metric : *names.begin();
  }
  // Per trial: step -> value of the metric, the latest attempt's when several reported a step.
  std::map<int64_t, std::map<int64_t, double>> curve;
  for (const auto& r : *rows) {
    if (r.name == metric) curve[r.trial_id][r.step] = r.value;  // ordered by attempt: later ones win
  }
  const auto* best = best_of(sel->trials, s.objectives.maximize);
  json list = json::array();
  for (const auto* t : chosen) {
    std::vector<std::pair<int64_t, double>> pts(curve[t->id].begin(), curve[t->id].end());
    json steps = json::array(), values = json::array();
    for (size_t k : report::even_stride(pts.size(), 200)) {
      steps.push_back(pts[k].first);
      values.push_back(num(pts[k].second));
    }
    list.push_back({{"trial", t->id},
                    {"state", store::to_string(t->state)},
                    {"pruned", t->state == store::TrialState::kPruned},
                    {"best", best != nullptr && best->id == t->id},
                    {"steps", std::move(steps)},
                    {"values", std::move(values)}});
  }
  return {200, {{"metric", metric}, {"metrics", names}, {"trials", std::move(list)}}};
}

ApiResponse pareto(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {"max_points", "stage"})) return *b;
  auto max_points = int_param(params, "max_points", 2000, 1, 20000);
  if (!max_points.ok()) return bad(max_points.error());
  auto sel = select_trials(s, params, false);
  if (!sel.ok()) return bad(sel.error());
  const json objectives = objectives_json(s);
  if (objectives.size() < 2) {
    return {200, {{"objectives", objectives}, {"front", json::array()}, {"points", json::array()},
                  {"note", "a single objective: no Pareto front"}}};
  }
  std::vector<bool> maximize;
  std::vector<std::string> metrics;
  for (const auto& o : objectives) {
    metrics.push_back(o.value("metric", ""));
    maximize.push_back(o.value("mode", "max") == "max");
  }
  std::vector<const store::TrialRow*> rows;
  std::vector<std::vector<double>> values;
  for (const auto* t : sel->trials) {
    if (!store::is_final(t->state) || t->state == store::TrialState::kFailed || !t->metrics.is_object()) continue;
    std::vector<double> v;
    for (const auto& m : metrics) {
      const auto it = t->metrics.find(m);
      if (it == t->metrics.end() || !it->is_number()) break;
      v.push_back(it->get<double>());
    }
    if (v.size() != metrics.size()) continue;
    rows.push_back(t);
    values.push_back(std::move(v));
  }
  const auto on_front = report::pareto_flags(values, maximize);
  // Downsampled: the front first (losses 0), then an even stride of the rest.
  std::vector<double> rank_loss;
  for (size_t i = 0; i < rows.size(); ++i) rank_loss.push_back(on_front[i] ? 0.0 : 1.0);
  std::vector<size_t> keep;
  const size_t limit = static_cast<size_t>(*max_points);
  if (rows.size() <= limit) {
    keep = report::even_stride(rows.size(), rows.size());
  } else {
    std::vector<size_t> front_idx, rest;
    for (size_t i = 0; i < rows.size(); ++i) (on_front[i] ? front_idx : rest).push_back(i);
    keep = front_idx;
    if (limit > front_idx.size()) {
      for (size_t k : report::even_stride(rest.size(), limit - front_idx.size())) keep.push_back(rest[k]);
    }
    std::sort(keep.begin(), keep.end());
  }
  json front = json::array(), points = json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (on_front[i]) front.push_back(rows[i]->id);
  }
  for (size_t i : keep) {
    json v = json::array();
    for (double x : values[i]) v.push_back(num(x));
    points.push_back({{"trial", rows[i]->id}, {"values", std::move(v)}, {"on_front", static_cast<bool>(on_front[i])}});
  }
  return {200, {{"objectives", objectives}, {"front", std::move(front)}, {"total", rows.size()}, {"shown", keep.size()},
                {"points", std::move(points)}}};
}

ApiResponse timeline(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {"max_bars"})) return *b;
  auto max_bars = int_param(params, "max_bars", 5000, 1, 20000);
  if (!max_bars.ok()) return bad(max_bars.error());
  const double now = unix_now();
  double t0 = 0, t1 = 0;
  std::vector<report::BusyInterval> intervals;
  std::vector<const store::AttemptRow*> bars;
  for (const auto& a : s.attempts) {
    if (a.started_at <= 0 || a.group_id < 0) continue;
    const bool open = a.finished_at <= 0 && a.state == "running";
    const double end = a.finished_at > 0 ? a.finished_at : (open ? now : a.started_at);
    t0 = t0 == 0 ? a.started_at : std::min(t0, a.started_at);
    t1 = std::max(t1, end);
    intervals.push_back({a.group_id, a.started_at, end});
    bars.push_back(&a);
  }
  if (s.campaign.state == "running" && !bars.empty()) t1 = std::max(t1, now);
  if (bars.empty()) {  // nothing ran yet: the campaign's own span
    t0 = s.campaign.created_at;
    t1 = s.campaign.finished_at > 0 ? s.campaign.finished_at : std::max(t0, now);
  }
  std::vector<int64_t> group_ids;
  for (const auto& g : s.groups) group_ids.push_back(g.group_id);
  const auto u = report::utilization(intervals, t0, t1, group_ids);
  json groups = json::array();
  for (const auto& [id, busy] : u.busy_s) {
    json g = {{"id", id}, {"backend", nullptr}, {"hosts", json::array()}, {"busy_s", num(busy)},
              {"utilization", t1 > t0 ? num(100.0 * busy / (t1 - t0)) : json(0.0)}};
    for (const auto& row : s.groups) {
      if (row.group_id == id) {
        g["backend"] = row.backend;
        g["hosts"] = row.hosts;
      }
    }
    groups.push_back(std::move(g));
  }
  // The latest bars when there are more than max_bars (by start; ties by trial and attempt).
  bool truncated = false;
  if (bars.size() > static_cast<size_t>(*max_bars)) {
    std::stable_sort(bars.begin(), bars.end(), [](const auto* a, const auto* b) { return a->started_at < b->started_at; });
    bars.erase(bars.begin(), bars.end() - *max_bars);
    truncated = true;
  }
  json list = json::array();
  for (const auto* a : bars) {
    const bool open = a->finished_at <= 0 && a->state == "running";
    list.push_back({{"trial", a->trial_id},
                    {"attempt", a->attempt},
                    {"group", a->group_id},
                    {"start", a->started_at},
                    {"end", open ? json() : json(a->finished_at > 0 ? a->finished_at : a->started_at)},
                    {"state", a->state},
                    {"devices", a->devices}});
  }
  json out = {{"span", json::array({num(t0), num(t1)})},
              {"groups", std::move(groups)},
              {"utilization", num(u.percent)},
              {"bars", std::move(list)},
              {"truncated", truncated}};
  return {200, std::move(out)};
}

ApiResponse stages(const Snapshot& s, const QueryParams& params) {
  if (auto b = unknown_param(params, {})) return *b;
  json list = json::array();
  auto objective_of = [&](int64_t id) -> json {
    const auto* t = s.find(id);
    return t && t->objective ? num(*t->objective) : json();
  };
  const bool gone = report::master_liveness(s.campaign, s.db_path, unix_now()).gone;
  for (const auto& st : s.stages) {
    json j = stage_json(s, st, gone);
    j["result"] = st.result;
    const json& r = st.result;
    json view = json::object();
    if (st.kind == "ensemble" && r.is_object()) {
      json members = json::array();
      if (r.contains("members") && r["members"].is_array()) {
        for (const auto& m : r["members"]) {
          if (!m.is_object() || !m.contains("trial") || !m["trial"].is_number_integer()) continue;
          members.push_back({{"trial", m["trial"]}, {"weight", m.value("weight", json())},
                             {"objective", objective_of(m["trial"].get<int64_t>())}});
        }
      }
      json ensemble = json::object();
      for (const char* k : {"task", "method", "val_accuracy", "val_log_loss", "test_accuracy", "test_log_loss",
                            "val_mse", "test_mse"}) {
        if (r.contains(k)) ensemble[k] = r[k];
      }
      view = {{"members", std::move(members)}, {"ensemble", std::move(ensemble)},
              {"best_single", r.value("best_single", json())}};
    } else if (st.kind == "transfer") {
      // Each target beside its baseline twin (meta role/baseline_of: workflow/transfer_stage.h).
      const auto trials = s.stage_trials(st.id);
      std::map<int64_t, const store::TrialRow*> baseline_of;
      for (const auto* t : trials) {
        if (t->meta.is_object() && t->meta.value("role", "") == "baseline" && t->meta.contains("baseline_of") &&
            t->meta["baseline_of"].is_number_integer()) {
          baseline_of[t->meta["baseline_of"].get<int64_t>()] = t;
        }
      }
      // One figure, named, as `status` shows it: the stage's compare_metric (by default the
      // objective's held-out figure, test_accuracy), not the validation objective.
      const std::string metric = report::transfer_metric(st, s.objectives.metric);
      auto value_of = [&](const store::TrialRow* t) -> std::optional<double> {
        if (!t || !t->metrics.is_object() || !t->metrics.contains(metric) || !t->metrics[metric].is_number()) return {};
        const double v = t->metrics[metric].get<double>();
        return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
      };
      json pairs = json::array();
      double sum_t = 0, sum_b = 0;
      int64_t n_t = 0, n_b = 0;
      for (const auto* t : trials) {
        if (!t->meta.is_object() || t->meta.value("role", "") != "target") continue;
        auto it = baseline_of.find(t->seq);
        const store::TrialRow* b = it == baseline_of.end() ? nullptr : it->second;
        const auto tv = value_of(t), bv = value_of(b);
        json pair = {{"target", t->id}, {"baseline", b ? json(b->id) : json()},
                     {"target_value", tv ? num(*tv) : json()}, {"baseline_value", bv ? num(*bv) : json()}};
        if (tv) sum_t += *tv, ++n_t;
        if (bv) sum_b += *bv, ++n_b;
        pairs.push_back(std::move(pair));
      }
      view = {{"metric", metric},
              {"label", report::metric_label(metric)},
              {"pairs", std::move(pairs)},
              {"mean_target", n_t ? num(sum_t / static_cast<double>(n_t)) : json()},
              {"mean_baseline", n_b ? num(sum_b / static_cast<double>(n_b)) : json()}};
    } else if (st.kind == "pbt") {
      json tree = json::array();
      for (const auto* t : s.stage_trials(st.id)) {
        json parent = nullptr, relation = nullptr;
        auto it = std::lower_bound(s.lineage.begin(), s.lineage.end(), t->id,
                                   [](const store::LineageRow& l, int64_t v) { return l.child_trial_id < v; });
        if (it != s.lineage.end() && it->child_trial_id == t->id) {
          parent = it->parent_trial_id;
          relation = it->relation;
        } else if (t->parent_trial_id) {
          parent = *t->parent_trial_id;
          relation = "parent";
        }
        tree.push_back({{"trial", t->id}, {"parent", parent}, {"relation", relation}, {"generation", t->generation},
                        {"value", t->objective ? num(*t->objective) : json()}});
      }
      view = {{"tree", std::move(tree)}};
    } else {
      view = r.is_object() ? r : json::object();
    }
    j["view"] = std::move(view);
    list.push_back(std::move(j));
  }
  return {200, {{"stages", std::move(list)}}};
}

}  // namespace hpctune::dashboard::detail
