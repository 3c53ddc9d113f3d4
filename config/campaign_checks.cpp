// The checks across keys and the CampaignConfig built from a walked tree (campaign_checks.h): class
// Builder, one check_* per section, and the helpers the workflow shares (trainer_setting_of,
// classes_problem_at).
#include "config/campaign_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/endpoint.h"
#include "common/limits.h"
#include "common/shell_template.h"
#include "common/settings.h"
#include "search/algorithms.h"
#include "search/grid_search.h"
#include "search/test_functions.h"
#include "config/trainer_kinds.h"
#include "config/yaml_tree.h"
#include "search/searcher.h"
#include "trainers/trainer_settings.h"
#include "workflow/stage_settings.h"

namespace hpctune::config {

using nlohmann::json;

namespace {

// A value in a message: strings in single quotes, the rest as YAML.
std::string quoted_value(const json& v) {
  return v.is_string() ? "'" + v.get<std::string>() + "'" : to_yaml_flow(v);
}

// 2^53: every integer up to it is exactly a double.
constexpr double kMaxExactInt = 9007199254740992.0;

}  // namespace

// The setting of trainer `kind` that a parameter `name` sets (a space's, a pbt schedule's); nullptr
// when there is none, with what to say in `*what` ("not a setting of trainer 'mlp'; did you mean
// 'lr'?"). Names a command or function trainer takes freely (free_space_name) are the caller's.
const Setting* trainer_setting_of(const std::string& kind, const std::string& name, std::string* what) {
  std::vector<const Setting*> kind_settings;
  for (const auto* s : children("trainer")) {
    if (s->path == "trainer.kind" || !s->scope.contains(kind)) continue;
    kind_settings.push_back(s);
    if (leaf_name(s->path) == name) return s;
  }
  *what = "not a setting of trainer '" + kind + "'";
  if (auto near = did_you_mean(name, candidates_of(kind_settings))) {
    *what += "; did you mean '" + *near + "'?";
  } else {
    std::vector<std::string> names;
    for (const auto* s : kind_settings) names.emplace_back(leaf_name(s->path));
    const auto* can = trainers::trainer_capabilities(kind);
    if (can != nullptr && can->params_hint != nullptr) names.push_back(can->params_hint);
    *what += " (its settings: " + join(names, ", ") + ")";
  }
  return nullptr;
}

// A list of class labels (trainer.classes, a transfer stage's classes): [] or at least two distinct
// ones, as the classifier trainers take them (trainers::classes_problem). `path` names the list.
std::optional<std::pair<std::string, std::string>> classes_problem_at(const json& classes, const std::string& path) {
  // A lone label is a list of one, as the trainers read it: named by the key itself.
  if (classes.is_number_integer()) {
    auto problem = trainers::classes_problem({classes.get<int64_t>()});
    if (!problem) return std::nullopt;
    return std::make_pair(path, "must be " + problem->must_be);
  }
  if (!classes.is_array()) return std::nullopt;  // the table refused it already
  std::vector<int64_t> labels;
  for (const auto& c : classes) {
    if (!c.is_number_integer()) return std::nullopt;  // the table refused it already
    labels.push_back(c.get<int64_t>());
  }
  auto problem = trainers::classes_problem(labels);
  if (!problem) return std::nullopt;
  return std::make_pair(path + "[" + std::to_string(problem->index) + "]", "must be " + problem->must_be);
}

namespace {

// The fixed values of `reads` (the space's fixed value, else `given`'s, else the trainer's), leaving out
// those the space searches and those in `unknown`: what the trainer's rules can judge before any trial.
json fixed_settings(const CampaignConfig& c, const std::vector<std::string>& reads, const std::set<std::string>& unknown,
                    const json& given) {
  json settings = json::object();
  for (const auto& key : reads) {
    const search::ParamSpec* p = c.space.find(key);
    if (unknown.count(key) || (p != nullptr && p->type != search::ParamType::kFixed)) continue;
    if (p != nullptr) settings[key] = p->value;
    else if (given.contains(key)) settings[key] = given[key];
    else if (c.trainer.contains(key)) settings[key] = c.trainer[key];
  }
  return settings;
}

std::optional<SettingRuleProblem> rule_problem(const CampaignConfig& c, const json& settings,
                                               const std::optional<std::pair<std::string, std::string>>& problem) {
  if (!problem) return std::nullopt;
  return SettingRuleProblem{problem->first, c.space.find(problem->first) != nullptr,
                            settings.value(problem->first, json()).dump() + " must be " + problem->second +
                                "; every trial would fail", ""};
}

}  // namespace

std::optional<SettingRuleProblem> setting_rules_problem(const CampaignConfig& c, const std::set<std::string>& unknown,
                                                        const json& given) {
  const auto* can = trainers::trainer_capabilities(c.trainer.value("kind", std::string()));
  if (can == nullptr || can->setting_rules.problem == nullptr) return std::nullopt;
  const json settings = fixed_settings(c, can->setting_rules.reads, unknown, given);
  return rule_problem(c, settings, can->setting_rules.problem(settings));
}

std::optional<SettingRuleProblem> layout_rules_problem(const CampaignConfig& c, const std::set<std::string>& unknown,
                                                       const json& given) {
  const auto* can = trainers::trainer_capabilities(c.trainer.value("kind", std::string()));
  if (can == nullptr || can->layout_rules.problem == nullptr) return std::nullopt;
  const json settings = fixed_settings(c, can->layout_rules.reads, unknown, given);
  return rule_problem(c, settings, can->layout_rules.problem(settings, c.resources.ranks_data, c.resources.ranks_model));
}

std::optional<SettingRuleProblem> data_rules_problem(const CampaignConfig& c, const std::set<std::string>& unknown,
                                                     const json& given) {
  const auto* can = trainers::trainer_capabilities(c.trainer.value("kind", std::string()));
  if (can == nullptr || can->data_rules.problem == nullptr) return std::nullopt;
  const json settings = fixed_settings(c, can->data_rules.reads, unknown, given);
  std::vector<std::string> open;
  for (const auto& key : can->data_rules.reads) {
    const search::ParamSpec* p = c.space.find(key);
    if (unknown.count(key) || (p != nullptr && p->type != search::ParamType::kFixed)) open.push_back(key);
  }
  auto problem = can->data_rules.problem(settings, open);
  if (!problem) return std::nullopt;
  return SettingRuleProblem{problem->key, c.space.find(problem->key) != nullptr,
                            problem->what + "; every trial would fail", problem->below};
}

bool judges_local_files(const Walker& walker, const CampaignConfig& c) {
  return walker.reads_local_files() && c.resources.backend == "local";
}

namespace {

// The model stages a trial of `c` splits into (TrainerCapabilities::model_stages.count) over the
// trainer's settings with the space's fixed values; nullopt when a setting the count reads is
// searched or in `unknown` (left to each trial).
std::optional<int64_t> model_stage_count(const CampaignConfig& c, const trainers::TrainerCapabilities& can,
                                         const std::set<std::string>& unknown) {
  json settings = c.trainer;
  for (const auto& read : can.model_stages.reads) {
    if (unknown.count(read)) return std::nullopt;
    const search::ParamSpec* p = c.space.find(read);
    if (p == nullptr) continue;
    if (p->type != search::ParamType::kFixed) return std::nullopt;
    settings[read] = p->value;
  }
  return can.model_stages.count(settings);
}

}  // namespace

std::optional<std::string> model_split_problem(const CampaignConfig& c, const std::set<std::string>& unknown) {
  const int64_t model = c.resources.ranks_model;
  if (model <= 1) return std::nullopt;
  const auto* can = trainers::trainer_capabilities(c.trainer.value("kind", std::string()));
  if (can == nullptr || can->model_stages.count == nullptr) return std::nullopt;
  const auto most = model_stage_count(c, *can, unknown);
  if (!most) return std::nullopt;
  if (*most <= 0 || model <= *most) return std::nullopt;
  return std::to_string(model) + " model-parallel stages, but a trial of trainer kind '" +
         c.trainer["kind"].get<std::string>() + "' can be split into at most " + std::to_string(*most) +
         ": each stage needs one of " + can->model_stages.what + "; every trial would fail (give at most " +
         std::to_string(*most) + ", or a larger network)";
}

std::string early_stopping_judge(const CampaignConfig& c) {
  return c.early_stopping == "none" ? std::string() : "early stopping (" + c.early_stopping + ")";
}

namespace {

// The first objective against the metrics of every step's report, where `judge` judges them.
std::optional<std::pair<std::string, std::string>> judged_metric_problem(const CampaignConfig& c, bool single,
                                                                         const std::string& stage,
                                                                         const std::string& judge) {
  const std::string kind = c.trainer.value("kind", std::string());
  const auto* can = trainers::trainer_capabilities(kind);
  if (judge.empty() || can == nullptr || can->metrics.every_step.empty() || c.objectives.empty()) return std::nullopt;
  const auto& every = can->metrics.every_step;
  const std::string& metric = c.objectives[0].metric;
  if (std::find(every.begin(), every.end(), metric) != every.end()) return std::nullopt;
  return std::make_pair(single ? std::string("objective.metric") : std::string("objectives[0].metric"),
                        "trainer kind '" + kind + "'" + (stage.empty() ? "" : " of stage '" + stage + "'") +
                            " reports '" + metric + "' only when a trial ends, but the objective is judged in the report of every "
                            "step by " + judge + ", which would then judge no trial (every step it reports " +
                            join(every, ", ") + ")");
}

// `metric` against what a trial of `c`'s trainer kind reports at its end: what to say when it never
// does (ending with `consequence`), nullopt when it does or the kind's metrics are not known.
std::optional<std::string> unreported_metric(const CampaignConfig& c, const std::string& metric, const std::string& stage,
                                             const std::string& consequence) {
  const std::string kind = c.trainer.value("kind", std::string());
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr || can->metrics.always.empty()) return std::nullopt;
  const auto& always = can->metrics.always;
  const auto& sometimes = can->metrics.sometimes;
  if (std::find(always.begin(), always.end(), metric) != always.end()) return std::nullopt;
  if (std::any_of(sometimes.begin(), sometimes.end(), [&](const std::string& s) { return metric.rfind(s, 0) == 0; }))
    return std::nullopt;
  std::vector<Candidate> candidates;
  std::vector<std::string> names = always;
  for (const auto& name : always) candidates.push_back({name, name});
  for (const auto& name : sometimes) names.push_back(name.back() == '_' ? name + "*" : name);
  std::string what = "'" + metric + "' is not a metric that trainer kind '" + kind + "'" +
                     (stage.empty() ? "" : " of stage '" + stage + "'") + " reports";
  if (auto near = did_you_mean(metric, candidates)) what += "; did you mean '" + *near + "'?";
  return what + " (it reports " + join(names, ", ") + "; " + consequence + ")";
}

}  // namespace

std::optional<std::pair<std::string, std::string>> objective_metric_problem(const CampaignConfig& c, bool single,
                                                                            const std::string& stage,
                                                                            const std::string& judge) {
  for (std::size_t i = 0; i < c.objectives.size(); ++i) {
    if (auto what = unreported_metric(c, c.objectives[i].metric, stage, "every trial would fail"))
      return std::make_pair(single ? std::string("objective.metric") : "objectives[" + std::to_string(i) + "].metric",
                            *what);
  }
  return judged_metric_problem(c, single, stage, judge);
}

std::optional<std::string> stop_when_metric_problem(const CampaignConfig& c, const std::string& stage) {
  if (!c.stop_when) return std::nullopt;
  return unreported_metric(c, c.stop_when->metric, stage, "the search would never stop on it");
}

std::optional<SettingRuleProblem> freeze_problem(const CampaignConfig& c, const std::set<std::string>& unknown) {
  const auto* can = trainers::trainer_capabilities(c.trainer.value("kind", std::string()));
  if (can == nullptr || can->freeze_setting == nullptr || can->model_stages.count == nullptr) return std::nullopt;
  const std::string key = can->freeze_setting;
  const search::ParamSpec* given = c.space.find(key);
  if (unknown.count(key) || (given != nullptr && given->type != search::ParamType::kFixed)) return std::nullopt;
  const json freeze = given != nullptr ? given->value : c.trainer.value(key, json());
  if (!freeze.is_number_integer() || freeze.get<int64_t>() <= 0) return std::nullopt;
  const auto stages = model_stage_count(c, *can, unknown);
  if (!stages || *stages <= 0 || freeze.get<int64_t>() < *stages) return std::nullopt;
  const int64_t count = *stages;
  return SettingRuleProblem{key, given != nullptr,
                            std::to_string(freeze.get<int64_t>()) + " layers frozen, but the network has " +
                                std::to_string(count - 1) + " before its output layer (" + can->model_stages.what +
                                "); every trial would fail (give at most " + std::to_string(count - 1) + ")", ""};
}

namespace {

class Builder {
 public:
  Builder(Walker& walker, json& root) : w_(walker), root_(root) {}

  Status check_name() {
    const auto& name = root_["name"].get_ref<const std::string&>();
    // A file name is at most 255 bytes (NAME_MAX); the campaign's files add a suffix to the name
    // (<name>.db, <name>.sim.db, and -wal, -journal, .trials, .keys beside them).
    constexpr size_t kMaxName = 200;
    if (name.size() > kMaxName)
      return w_.fail(w_.mark_of("name"), "name",
                     std::to_string(name.size()) + " characters is too long: at most " + std::to_string(kMaxName) +
                         " (it names files)");
    for (unsigned char c : name)
      if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-'))
        return w_.fail(w_.mark_of("name"), "name",
                       "'" + name + "' may contain only letters, digits, '.', '_' and '-' (it names files)");
    return Status::Ok();
  }

  Status check_objectives(CampaignConfig& c) {
    const bool one = root_.contains("objective"), many = root_.contains("objectives");
    if (one && many) {
      const Mark a = w_.mark_of("objective"), b = w_.mark_of("objectives");
      const bool later_many = b.line > a.line || (b.line == a.line && b.column > a.column);
      return w_.fail(later_many ? b : a, later_many ? "objectives" : "objective",
                     "give either objective or objectives, not both");
    }
    if (!one && !many)
      return w_.fail(Mark{}, "objective",
                     "missing required key (give objective: {metric: ..., mode: max} or objectives: a list of them)");
    json list = one ? json::array({root_["objective"]}) : root_["objectives"];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string metric = list[i]["metric"].get<std::string>();
      for (std::size_t j = 0; j < i; ++j)
        if (list[j]["metric"] == metric) {
          const std::string path = "objectives[" + std::to_string(i) + "].metric";
          return w_.fail(w_.mark_of(path), path, "'" + metric + "' is listed twice");
        }
      c.objectives.push_back({metric, list[i]["mode"] == "max"});
      c.noisy = c.noisy || list[i].value("noisy", false);
    }
    root_.erase("objective");
    root_["objectives"] = list;
    return Status::Ok();
  }

  Status check_space(CampaignConfig& c) {
    json& space = root_["space"];
    const std::string kind = root_["trainer"]["kind"].get<std::string>();
    const search::AlgorithmTraits* traits = search::algorithm_traits(root_["search"]["algorithm"].get<std::string>());
    const bool enumerates = traits != nullptr && traits->enumerates;
    std::vector<search::ParamSpec> specs;
    for (const auto& name : w_.space_order()) {
      json& p = space[name];
      const std::string path = "space." + name;
      HPCTUNE_TRY(check_param(name, p, space));
      if (enumerates && p["type"] == "float" && !p.contains("resolution"))
        return w_.fail(w_.mark_of(path), path,
                       "the grid search needs 'resolution' (the number of grid points) on a float parameter");
      HPCTUNE_TRY(check_against_trainer(name, p, kind));
      specs.push_back(to_spec(name, p));
    }
    auto created = search::Space::create(std::move(specs));
    if (!created.ok()) {
      // Space::create names the parameter first ("lr: ..."): put it at that parameter's key.
      const std::string& message = created.error().message();
      for (const auto& name : w_.space_order())
        if (message.rfind(name + ": ", 0) == 0)
          return w_.fail(w_.mark_of("space." + name), "space." + name, message.substr(name.size() + 2));
      return w_.fail(w_.mark_of("space"), "space", message);
    }
    c.space = std::move(created).value();
    if (enumerates) HPCTUNE_TRY(check_grid_size(c));
    return Status::Ok();
  }

  // The grid is counted before anything is listed; larger than max_trials, `run` would refuse it.
  Status check_grid_size(const CampaignConfig& c) {
    const int64_t limit = std::min(c.max_trials, search::kMaxGridPoints);
    const std::string most = limit == c.max_trials ? "max_trials (" + std::to_string(c.max_trials) + ")"
                                                   : std::to_string(search::kMaxGridPoints) + ", the most a grid may have";
    for (const auto& p : c.space.params()) {
      const int64_t n = search::grid_value_count(p);
      if (n > limit)
        return w_.fail(w_.mark_of("space." + p.name), "space." + p.name,
                       std::to_string(n) + " grid values on their own, more than " + most +
                           (p.type == search::ParamType::kFloat ? "; lower the resolution" : "; raise step or give a resolution"));
    }
    auto size = search::grid_size(c.space, limit);
    if (!size.ok()) {
      const std::string& message = size.error().message();
      for (const auto& name : w_.space_order())
        if (message.rfind(name + ": ", 0) == 0)
          return w_.fail(w_.mark_of("space." + name), "space." + name, message.substr(name.size() + 2));
      return w_.fail(w_.mark_of("space"), "space", message);
    }
    if (*size > limit) {
      const std::string count =
          *size == std::numeric_limits<int64_t>::max() ? "more than 9223372036854775807" : std::to_string(*size);
      if (limit == c.max_trials)
        return w_.fail(w_.mark_of("search.max_trials"), "search.max_trials",
                       "the grid has " + count + " points, more than max_trials (" + std::to_string(c.max_trials) +
                           "); raise max_trials or lower the resolutions");
      return w_.fail(w_.mark_of("space"), "space",
                     "the grid has " + count + " points, more than " + std::to_string(search::kMaxGridPoints) +
                         ", the most a grid may have");
    }
    return Status::Ok();
  }

  Status check_search(CampaignConfig& c) {
    const json& s = root_["search"];
    c.algorithm = s["algorithm"].get<std::string>();
    c.max_trials = s["max_trials"].get<int64_t>();
    c.max_steps = s["max_steps"].get<int64_t>();
    c.max_time_s = s["max_time"].get<double>();
    c.max_attempts = s["max_attempts"].get<int64_t>();
    c.max_failures = s["max_failures"].get<int64_t>();
    c.warm_start = s["warm_start"].get<std::string>();
    c.search_settings = s["settings"];
    const search::AlgorithmTraits* traits = search::algorithm_traits(c.algorithm);
    if (traits != nullptr && !traits->multi_objective && c.objectives.size() > 1)  // what its factory refuses, located
      return w_.fail(w_.mark_of("search.algorithm"), "search.algorithm",
                     c.algorithm + " optimizes one objective, but " +
                         std::to_string(c.objectives.size()) + " are given");
    if (s.contains("stop_when") && s["stop_when"].is_object()) {
      const json& w = s["stop_when"];
      StopWhen stop;
      stop.metric = w["metric"].get<std::string>();
      stop.reaches = w["reaches"].get<double>();
      if (w.contains("mode")) {
        stop.maximize = w["mode"] == "max";
      } else {
        for (const auto& o : c.objectives)
          if (o.metric == stop.metric) stop.maximize = o.maximize;
        root_["search"]["stop_when"]["mode"] = stop.maximize ? "max" : "min";
      }
      c.stop_when = stop;
    }
    // search.init is the algorithm's `init` setting, for the algorithms that have one; its
    // default is the algorithm's.
    const bool given = root_["search"].contains("init");
    if (given) c.init = s["init"].get<std::string>();
    auto decls = search::searcher_settings(c.algorithm);
    if (!decls.ok()) {  // an algorithm this build does not know: passed on as given
      if (given) c.search_settings["init"] = c.init;
      return Status::Ok();
    }
    const search::SettingDecl* init = nullptr;
    for (const auto& d : decls.value())
      if (d.key == "init") init = &d;
    if (init == nullptr) {
      if (given)
        return w_.fail(w_.mark_of("search.init"), "search.init",
                       "the " + c.algorithm + " search has no initial design; remove init");
      return Status::Ok();
    }
    if (!given) c.init = init->default_value.get<std::string>();
    c.search_settings["init"] = c.init;
    root_["search"]["init"] = c.init;
    if (traits != nullptr && traits->check_settings != nullptr) {
      if (auto problem = traits->check_settings(c.search_settings)) {
        std::string at = "search.settings." + problem->keys.back();
        for (const auto& key : problem->keys)
          if (w_.given("search.settings." + key)) {
            at = "search.settings." + key;
            break;
          }
        return w_.fail(w_.mark_of(at), at, problem->message);
      }
    }
    return Status::Ok();
  }

  Status check_early_stopping(CampaignConfig& c) {
    json settings = root_["early_stopping"];
    c.early_stopping = settings["kind"].get<std::string>();
    settings.erase("kind");
    if ((c.early_stopping == "asha" || c.early_stopping == "hyperband") && !w_.given("early_stopping.max_t")) {
      // Without a known last step ASHA judges the trainer's last epoch and records fully trained
      // trials as pruned (issue 9, item 23): default max_t to the trainer's steps or epochs.
      if (auto last = trainer_last_step()) {
        settings["max_t"] = *last;
        root_["early_stopping"]["max_t"] = *last;
      }
    }
    if (c.early_stopping == "hyperband" && settings["max_t"].get<int64_t>() < settings["grace_period"].get<int64_t>()) {
      const std::string at = w_.given("early_stopping.max_t") ? "early_stopping.max_t" : "early_stopping.grace_period";
      return w_.fail(w_.mark_of(at), at,
                     "grace_period (" + std::to_string(settings["grace_period"].get<int64_t>()) +
                         ") must be at most max_t (" + std::to_string(settings["max_t"].get<int64_t>()) +
                         (w_.given("early_stopping.max_t") ? ")" : ", the trainer's last step)"));
    }
    c.early_stopping_settings = settings;
    c.full_step = trainer_last_step().value_or(0);
    HPCTUNE_TRY(check_judges_early(c));
    if (settings.value("mode", std::string()) == "pause") HPCTUNE_TRY(check_pause(settings));
    if (c.early_stopping != "none" && c.objectives.size() > 1)
      return w_.fail(w_.mark_of("early_stopping.kind"), "early_stopping.kind",
                     c.early_stopping + " judges one objective, but " + std::to_string(c.objectives.size()) +
                         " are given");
    return Status::Ok();
  }

  // Early stopping that would judge no step before the trainer's last (its first rung or grace_period
  // at or past it) stops no trial: refused at grace_period, or at max_t where that cut the rungs.
  Status check_judges_early(const CampaignConfig& c) {
    const auto last = trainer_last_step();
    if (c.early_stopping == "none" || !last) return Status::Ok();
    auto stopper = search::make_stopper({c.early_stopping, c.early_stopping_settings, true, 0});
    if (!stopper.ok() || (*stopper)->judges_before(*last)) return Status::Ok();
    const json& s = c.early_stopping_settings;
    const int64_t grace = s.value("grace_period", int64_t{0});
    const std::string key = trainers::trainer_capabilities(root_["trainer"]["kind"].get<std::string>())->step_setting;
    const std::string steps = "the trainer's last step (" + key + ": " + std::to_string(*last) + ")";
    const bool cut = grace < *last && s.contains("max_t");
    const std::string at = cut ? "early_stopping.max_t" : "early_stopping.grace_period";
    const std::string what =
        cut ? "max_t " + std::to_string(s["max_t"].get<int64_t>()) + " leaves no rung below " + steps
            : "grace_period " + std::to_string(grace) + ", the first step judged, is not below " + steps;
    const std::string fix = cut ? "give a max_t above " + std::to_string(grace) : "give a grace_period below " +
                                                                                     std::to_string(*last);
    return w_.fail(w_.mark_of(w_.given(at) ? at : "early_stopping"), at,
                   what + ": " + c.early_stopping + " would stop no trial early (" + fix + ")");
  }

  // early_stopping.mode pause: each attempt trains to the trial's next rung through the trainer's
  // step setting, and a paused trial resumes from its checkpoint (workflow/promotion_source.h).
  Status check_pause(const json& settings) {
    const json& t = root_["trainer"];
    const std::string kind = t.value("kind", "");
    const auto* can = trainers::trainer_capabilities(kind);
    if (can == nullptr) return Status::Ok();  // the walker refused the kind
    const std::string at = "early_stopping.mode";
    if (can->step_setting == nullptr)
      return w_.fail(w_.mark_of(at), at,
                     "pause trains each trial to its next rung through the trainer's step setting, and trainer kind '" +
                         kind + "' has none (use mode: stop)");
    if (root_.contains("space") && root_["space"].is_object() && root_["space"].contains(can->step_setting))
      return w_.fail(w_.mark_of("space." + std::string(can->step_setting)), "space." + std::string(can->step_setting),
                     "under early_stopping.mode pause the stopper sets each attempt's " +
                         std::string(can->step_setting) + " itself (its rungs, up to max_t)");
    if (settings.value("max_t", int64_t{0}) < 1)
      return w_.fail(w_.mark_of(at), at,
                     "pause needs early_stopping.max_t, the steps of a full training (or trainer." +
                         std::string(can->step_setting) + ")");
    bool checkpoints = can->checkpoints.written;
    std::string lacks = "trainer kind '" + kind + "' writes none (" + checkpoint_writers() + " do)";
    if (can->provides_setting != nullptr) {
      checkpoints = false;
      for (const auto& v : t.value(can->provides_setting, json::array())) checkpoints = checkpoints || v == "checkpoints";
      lacks = "its program declares none: add checkpoints to trainer." + std::string(can->provides_setting);
    }
    if (!checkpoints)
      return w_.fail(w_.mark_of(at), at, "pause resumes a paused trial from its checkpoint, and " + lacks);
    return Status::Ok();
  }

  // The last step the trainer reports at: its step setting (the catalog's, trainer_settings.h), the
  // largest value when that setting is searched; nullopt for a kind whose steps are its reports' own.
  std::optional<int64_t> trainer_last_step() const {
    const json& t = root_["trainer"];
    const auto* can = trainers::trainer_capabilities(t["kind"].get<std::string>());
    const char* key = can != nullptr ? can->step_setting : nullptr;
    if (key == nullptr) return std::nullopt;
    std::optional<int64_t> last;
    auto consider = [&](const json& v) {
      if (v.is_number_integer()) last = std::max(last.value_or(v.get<int64_t>()), v.get<int64_t>());
    };
    const json& space = root_["space"];
    if (space.contains(key)) {
      const json& p = space[key];
      const std::string type = p["type"].get<std::string>();
      if (type == "int") consider(p["high"]);
      else if (type == "choice") for (const auto& v : p["values"]) consider(v);
      else if (type == "fixed") consider(p["value"]);
      return last;
    }
    if (t.contains(key)) consider(t[key]);
    if (last && *last <= 0) return std::nullopt;  // a command's max_step: 0 (no limit)
    return last;
  }

  Status check_trainer(CampaignConfig& c) {
    // trainer.data_seed (the classifier kinds): the campaign's seed unless given (set_seed).
    c.data_seed_given = w_.given("trainer.data_seed");
    c.trainer = root_["trainer"];
    const json& t = c.trainer;
    if (t.contains("layers") && t.contains("hidden") && t["hidden"].is_array() &&
        t["hidden"].size() != t["layers"].get<std::size_t>())
      return w_.fail(w_.mark_of("trainer.layers"), "trainer.layers",
                     std::to_string(t["layers"].get<int64_t>()) + " does not match hidden, which lists " +
                         std::to_string(t["hidden"].size()) + " layers (give layers with a single-integer hidden)");
    if (t.contains("classes")) {
      if (auto problem = classes_problem_at(t["classes"], "trainer.classes"))
        return w_.fail(w_.mark_of(problem->first), problem->first, problem->second);
    }
    const auto* can = trainers::trainer_capabilities(t["kind"].get<std::string>());
    if (can == nullptr) return Status::Ok();  // the walker refused the kind
    if (can->value_problem != nullptr) {  // a value's inner form (the cnn's layer lists)
      for (auto it = t.begin(); it != t.end(); ++it) {
        if (auto problem = can->value_problem(it.key(), it.value())) {
          const std::string at = "trainer." + it.key() + problem->first;
          return w_.fail(w_.mark_of(at), at, problem->second);
        }
      }
    }
    if (can->params == trainers::TrainerParams::kTestFunctionArgs) HPCTUNE_TRY(check_function_trainer(c));
    if (const char* key = can->command_setting; key != nullptr && t.contains(key) && t[key].is_string()) {
      if (auto unsafe = unsafe_placeholder(t[key].get<std::string>()))
        return w_.fail(w_.mark_of(std::string("trainer.") + key), std::string("trainer.") + key, *unsafe);
      HPCTUNE_TRY(check_command_placeholders(t[key].get<std::string>(), std::string("trainer.") + key));
      HPCTUNE_TRY(check_persistent_placeholders(*can, t[key].get<std::string>(), std::string("trainer.") + key));
    } else if (key != nullptr && t.contains(key) && t[key].is_array()) {
      // The list form runs without a shell: each item is one argument, whatever a value holds; only
      // the names are checked.
      for (std::size_t i = 0; i < t[key].size(); ++i) {
        const std::string at = std::string("trainer.") + key + "[" + std::to_string(i) + "]";
        HPCTUNE_TRY(check_command_placeholders(t[key][i].get<std::string>(), at));
        HPCTUNE_TRY(check_persistent_placeholders(*can, t[key][i].get<std::string>(), at));
      }
    }
    if (can->provides_setting != nullptr) HPCTUNE_TRY(check_provides(c, can->provides_setting));
    return check_assign_size(c);
  }

  // resources.ranks.model against what a trial of the trainer can be split into (model_split_problem);
  // a stage's view leaves it to parse_workflow, which knows whether the stage runs its view's trainer.
  Status check_model_split(const CampaignConfig& c) {
    if (w_.walks_stage_view()) return Status::Ok();
    auto problem = model_split_problem(c, {});
    if (!problem) return Status::Ok();
    const std::string at = "resources.ranks.model";
    return w_.fail(w_.mark_of(at), at, *problem);
  }

  // The trainer's freeze setting against its network (freeze_problem); a stage's view leaves it to
  // parse_workflow (a transfer sets its trials' freeze from its own).
  Status check_freeze(const CampaignConfig& c) {
    if (w_.walks_stage_view()) return Status::Ok();
    auto problem = freeze_problem(c, {});
    if (!problem) return Status::Ok();
    const std::string at = (problem->in_space ? "space." : "trainer.") + problem->key;
    return w_.fail(w_.mark_of(at), at, problem->what);
  }

  // The trainer's rules between settings (setting_rules_problem), with its layout and against its data,
  // and the objectives' metrics against those it reports; a stage's view leaves them to
  // parse_workflow, which knows what the trials of the stage's `from` carry over.
  Status check_setting_rules(const CampaignConfig& c) {
    if (w_.walks_stage_view()) return Status::Ok();
    auto problem = setting_rules_problem(c, {});
    if (!problem) problem = layout_rules_problem(c, {});
    if (!problem && judges_local_files(w_, c)) problem = data_rules_problem(c, {});
    if (problem) {
      const std::string at = "trainer." + problem->key + problem->below;
      return w_.fail(w_.mark_of(problem->in_space ? "space." + problem->key : at), at, problem->what);
    }
    if (auto metric = objective_metric_problem(c, !w_.given("objectives"), "", early_stopping_judge(c)))
      return w_.fail(w_.mark_of(metric->first), metric->first, metric->second);
    if (auto stop = stop_when_metric_problem(c))
      return w_.fail(w_.mark_of("search.stop_when.metric"), "search.stop_when.metric", *stop);
    return Status::Ok();
  }

  // The kind's provides setting: a list of "predictions" and "checkpoints", each once.
  Status check_provides(const CampaignConfig& c, const char* key) {
    const std::string path = std::string("trainer.") + key;
    const json& list = c.trainer.value(key, json::array());
    std::set<std::string> seen;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      const json& v = list[i];
      const bool known = v.is_string() && (v == trainers::kProvidesPredictions || v == trainers::kProvidesCheckpoints);
      if (!known)
        return w_.fail(w_.mark_of(at), at,
                       "unknown value " + v.dump() + "; expected " + trainers::kProvidesPredictions + " or " +
                           trainers::kProvidesCheckpoints);
      if (!seen.insert(v.get<std::string>()).second)
        return w_.fail(w_.mark_of(at), at, v.get<std::string>() + " is listed twice");
    }
    return Status::Ok();
  }

  // A trial's assign carries its parameters and every fixed trainer setting: one larger than a
  // message may be is dropped by the transport, and every attempt is lost without a word. Add up
  // the encoded sizes (a parameter's largest value), with room for the rest of the message.
  Status check_assign_size(const CampaignConfig& c) {
    constexpr int64_t kRoom = 64 << 10;  // ids, seed, trial directory, framing
    auto encoded = [](const json& v) { return static_cast<int64_t>(json::to_msgpack(v).size()); };
    int64_t total = kRoom;
    std::string largest;
    int64_t largest_size = -1;
    auto add = [&](const std::string& path, int64_t size) {
      total += size;
      if (size > largest_size) largest = path, largest_size = size;
    };
    for (auto it = c.trainer.begin(); it != c.trainer.end(); ++it)
      add("trainer." + it.key(), static_cast<int64_t>(it.key().size()) + encoded(it.value()));
    for (const auto& name : w_.space_order()) {
      const json& p = root_["space"][name];
      int64_t size = 16;  // a number
      const std::string type = p["type"].get<std::string>();
      if (type == "fixed") size = encoded(p["value"]);
      else if (type == "choice") for (const auto& v : p["values"]) size = std::max(size, encoded(v));
      add(type == "fixed" && w_.given("space." + name + ".value") ? "space." + name + ".value" : "space." + name,
          static_cast<int64_t>(name.size()) + size);
    }
    if (total <= kMaxMessageBytes) return Status::Ok();
    return w_.fail(w_.mark_of(largest), largest,
                   std::to_string(largest_size) + " bytes encoded, and a trial's assign would be about " +
                       std::to_string(total) + " bytes, more than the " + std::to_string(kMaxMessageBytes) +
                       " a message may have (pass large data through a file)");
  }

  // Every `{name}` of the command must name a parameter or one of the values the command trainer
  // provides; otherwise every trial fails with the same message. The grammar is that of
  // trainers::render_command (this library does not link the trainers).
  // A persistent program is started once for many trials: its command may hold no per-trial value.
  Status check_persistent_placeholders(const trainers::TrainerCapabilities& can, const std::string& cmd,
                                       const std::string& path) {
    const json& t = root_["trainer"];
    const char* p = can.persistent_setting;
    if (p == nullptr || !t.contains(p) || !t[p].is_boolean() || !t[p].get<bool>()) return Status::Ok();
    if (auto per_trial = per_trial_placeholder(cmd)) return w_.fail(w_.mark_of(path), path, *per_trial);
    return Status::Ok();
  }

  // Every {name} of `cmd` (the command, or one item of its list form at `path`) names a parameter of
  // the space or a built-in name.
  Status check_command_placeholders(const std::string& cmd, const std::string& path) {
    const auto& kBuiltins = kTemplateBuiltins;
    auto name_char = [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_' || ch == '.' || ch == '-';
    };
    for (std::size_t i = 0; i < cmd.size(); ++i) {
      if (cmd[i] != '{') continue;
      if (i + 1 < cmd.size() && cmd[i + 1] == '{') {
        ++i;
        continue;
      }
      std::size_t end = i + 1;
      while (end < cmd.size() && name_char(cmd[end])) ++end;
      if (end == i + 1 || end >= cmd.size() || cmd[end] != '}')
        return w_.fail(w_.mark_of(path), path,
                       "malformed placeholder at character " + std::to_string(i + 1) +
                           " (write {name} for a parameter, {{ and }} for literal braces)");
      const std::string name = cmd.substr(i + 1, end - i - 1);
      bool known = root_["space"].contains(name);
      for (const char* b : kBuiltins) known = known || name == b;
      if (!known) {
        std::vector<Candidate> names;
        for (const auto& p : w_.space_order()) names.push_back({p, p});
        for (const char* b : kBuiltins) names.push_back({b, b});
        std::string what = "'{" + name + "}' names no parameter of the space";
        if (auto near = did_you_mean(name, names)) what += "; did you mean '{" + *near + "}'?";
        else what += " (nor trial_id, trial_dir, attempt, attempt_dir, seed, ranks)";
        return w_.fail(w_.mark_of(path), path, what);
      }
      i = end;
    }
    return Status::Ok();
  }

  // The function trainer takes exactly x1..xd: a dimension the function does not allow, or a space
  // that lacks one of them or has another parameter, would fail every trial; say so before.
  Status check_function_trainer(const CampaignConfig& c) {
    const json& t = c.trainer;
    const std::string name = t["name"].get<std::string>();
    const int64_t dim = t["dim"].get<int64_t>();
    auto fn = search::make_test_function(name, static_cast<int>(dim));
    if (!fn.ok()) {
      const std::string at = w_.given("trainer.dim") ? "trainer.dim" : "trainer.name";
      return w_.fail(w_.mark_of(at), at, fn.error().message());
    }
    // Not "x" + std::to_string(i): GCC 12 warns falsely there (-Wrestrict, PR 105329).
    auto x_name = [](int i) {
      std::string x = "x";
      x += std::to_string(i);
      return x;
    };
    const std::string range = "x1.." + x_name(fn->dim);
    for (const auto& param : w_.space_order()) {
      // A searched setting of the trainer itself (noise, steps) was checked by check_against_trainer.
      bool known = false;
      for (const auto* setting : children("trainer")) known = known || setting->path == "trainer." + param;
      for (int i = 1; i <= fn->dim; ++i) known = known || param == x_name(i);
      if (!known)
        return w_.fail(w_.mark_of("space." + param), "space." + param,
                       "not a parameter of " + name + ", which takes " + range + " (trainer.dim)");
    }
    for (int i = 1; i <= fn->dim; ++i) {
      const std::string x = x_name(i);
      if (!root_["space"].contains(x))
        return w_.fail(w_.mark_of("space"), "space",
                       "'" + x + "' is missing: " + name + " takes " + range + " (search or fix each of them)");
    }
    return Status::Ok();
  }

  // resources.gpus_per_rank (every backend) and resources.slurm.gpus_per_task (srun's option as it
  // is) say the same thing to SLURM: both given, they must agree. With backend slurm, a
  // resources.slurm.gres that names the GPUs of a node (gpu:N, gpu:TYPE:N) must hold what a
  // group's ranks on one node ask for.
  Status check_slurm_gpus(const json& r, const Resources& out, SlurmOptions& so) {
    so.gpus_per_rank = r.contains("gpus_per_rank") ? r["gpus_per_rank"].get<int64_t>() : 0;
    if (so.gpus_per_rank > 0 && so.gpus_per_task > 0 && so.gpus_per_rank != so.gpus_per_task) {
      const std::string at = "resources.slurm.gpus_per_task";
      return w_.fail(w_.mark_of(at), at,
                     std::to_string(so.gpus_per_task) + " differs from resources.gpus_per_rank (" +
                         std::to_string(so.gpus_per_rank) +
                         "): both ask SLURM for each rank's GPUs; give one of them, or the same number");
    }
    const int64_t per_rank = so.gpus_per_rank > 0 ? so.gpus_per_rank : so.gpus_per_task;
    if (out.backend != "slurm" || per_rank <= 0) return Status::Ok();
    const int64_t ranks_on_a_node = std::min(out.ranks_data * out.ranks_model, so.ranks_per_node);
    // The gpu entry of the gres list: gpu (1), gpu:N or gpu:TYPE:N.
    std::istringstream entries(so.gres);
    for (std::string entry; std::getline(entries, entry, ',');) {
      if (entry != "gpu" && entry.rfind("gpu:", 0) != 0) continue;
      const std::string count = entry == "gpu" ? "1" : entry.substr(entry.rfind(':') + 1);
      if (count.empty() || count.size() > 9 || count.find_first_not_of("0123456789") != std::string::npos) break;
      if (std::stoll(count) >= per_rank * ranks_on_a_node) break;
      const std::string at = "resources.slurm.gres";
      return w_.fail(w_.mark_of(at), at,
                     "'" + so.gres + "' gives a node " + count + " GPU(s), fewer than the " +
                         std::to_string(per_rank * ranks_on_a_node) + " that " + std::to_string(ranks_on_a_node) +
                         " rank(s) of a group on one node (resources.slurm.ranks_per_node) ask for at " +
                         std::to_string(per_rank) + " each");
    }
    return Status::Ok();
  }

  Status check_resources(CampaignConfig& c) {
    const json& r = root_["resources"];
    Resources& out = c.resources;
    out.backend = r["backend"].get<std::string>();
    out.groups = r["groups"].get<int64_t>();
    out.ranks_data = r["ranks"]["data"].get<int64_t>();
    out.ranks_model = r["ranks"]["model"].get<int64_t>();
    out.threads = r["threads"].get<int64_t>();
    out.heartbeat_interval_s = r["heartbeat_interval"].get<double>();
    out.heartbeat_timeout_s = r["heartbeat_timeout"].get<double>();
    out.max_group_restarts = r["max_group_restarts"].get<int64_t>();
    out.startup_timeout_s = r["startup_timeout"].get<double>();
    out.bind = r["bind"].get<std::string>();
    if (auto problem = endpoint_problem(out.bind)) return w_.fail(w_.mark_of("resources.bind"), "resources.bind", *problem);
    out.security = r["security"].get<std::string>();
    const json& sl = r["slurm"];
    SlurmOptions& so = out.slurm;
    so.partition = sl["partition"].get<std::string>();
    so.account = sl["account"].get<std::string>();
    so.qos = sl["qos"].get<std::string>();
    so.constraint = sl["constraint"].get<std::string>();
    so.ranks_per_node = sl["ranks_per_node"].get<int64_t>();
    so.launch = sl["launch"].get<std::string>();
    so.mpi = sl["mpi"].get<std::string>();
    so.gres = sl["gres"].get<std::string>();
    so.gpus_per_task = sl["gpus_per_task"].get<int64_t>();
    so.cpus_per_task = sl["cpus_per_task"].get<int64_t>();
    so.master_partition = sl["master"]["partition"].get<std::string>();
    so.master_constraint = sl["master"]["constraint"].get<std::string>();
    so.signal_before_s = sl["signal_before"].get<double>();
    so.requeue = sl["requeue"].get<bool>();
    HPCTUNE_TRY(check_slurm_gpus(r, out, so));
    so.setup.clear();
    for (std::size_t i = 0; i < sl["setup"].size(); ++i) {
      const json& line = sl["setup"][i];
      const std::string at = "resources.slurm.setup[" + std::to_string(i) + "]";
      if (!line.is_string())
        return w_.fail(w_.mark_of(at), at, "a shell line (a string), not " + std::string(line.type_name()));
      if (line.get<std::string>().find('\n') != std::string::npos)
        return w_.fail(w_.mark_of(at), at, "one line per item (it holds a line break)");
      so.setup.push_back(line.get<std::string>());
    }
    // Values that go into the batch script as sbatch or srun options: no spaces, quotes or line
    // breaks that would end the option (and start another command).
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"partition", &so.partition},
                                     {"account", &so.account}, {"qos", &so.qos}, {"constraint", &so.constraint},
                                     {"mpi", &so.mpi}, {"gres", &so.gres}, {"master.partition", &so.master_partition},
                                     {"master.constraint", &so.master_constraint}}) {
      for (char ch : *value) {
        if (std::isalnum(static_cast<unsigned char>(ch)) || std::string_view("_-.:,&|[]*=+/").find(ch) != std::string_view::npos)
          continue;
        const std::string at = std::string("resources.slurm.") + key;
        return w_.fail(w_.mark_of(at), at,
                       "'" + *value + "' holds '" + std::string(1, ch) +
                           "': only letters, digits and _-.:,&|[]*=+/ go into an sbatch option");
      }
    }
    if (out.ranks_data * out.ranks_model > kMaxRanksPerGroup) {
      const std::string at = w_.given("resources.ranks.model") ? "resources.ranks.model" : "resources.ranks.data";
      return w_.fail(w_.mark_of(at), "resources.ranks",
                     std::to_string(out.ranks_data) + " data x " + std::to_string(out.ranks_model) + " model = " +
                         std::to_string(out.ranks_data * out.ranks_model) + " ranks per group, more than " +
                         std::to_string(kMaxRanksPerGroup));
    }
    HPCTUNE_TRY(check_gpus(r, out));
    if (out.heartbeat_timeout_s <= out.heartbeat_interval_s) {
      const std::string interval = format_number(out.heartbeat_interval_s);
      const std::string timeout = format_number(out.heartbeat_timeout_s);
      if (w_.given("resources.heartbeat_timeout"))
        return w_.fail(w_.mark_of("resources.heartbeat_timeout"), "resources.heartbeat_timeout",
                       timeout + " s must be greater than heartbeat_interval (" + interval + " s)");
      return w_.fail(w_.mark_of("resources.heartbeat_interval"), "resources.heartbeat_interval",
                     interval + " s must be less than heartbeat_timeout (" + timeout + " s, the default)");
    }
    return Status::Ok();
  }

  // resources.gpus: auto or distinct ids; a group must fit on the node: gpus_per_rank x ranks GPUs
  // at most as many as an explicit list names (the local backend; auto is checked when it starts).
  Status check_gpus(const json& r, Resources& out) {
    out.gpus_per_rank = r["gpus_per_rank"].get<int64_t>();
    out.trials_per_gpu = r["trials_per_gpu"].get<int64_t>();
    out.mps = r["mps"].get<std::string>();
    out.pack = r["pack"].get<std::string>();
    if (out.mps == "on" && out.backend != "local") {
      return w_.fail(w_.mark_of("resources.mps"), "resources.mps",
                     "on starts the MPS daemon for the local backend only; with backend " + out.backend +
                         " start it on each node yourself (README: MPS)");
    }
    const json& gpus = r["gpus"];
    out.gpus.reset();
    if (gpus.is_string() && gpus.get<std::string>() == "auto") {
      // detected when the campaign starts
    } else if (gpus.is_array()) {
      std::vector<int> ids;
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        const std::string at = "resources.gpus[" + std::to_string(i) + "]";
        const json& id = gpus[i];
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 65535)
          return w_.fail(w_.mark_of(at), at, "a device id is an integer 0..65535, not " + quoted_value(id));
        const int device = static_cast<int>(id.get<int64_t>());
        if (std::find(ids.begin(), ids.end(), device) != ids.end())
          return w_.fail(w_.mark_of(at), at, "device " + std::to_string(device) + " is listed twice");
        if (ids.size() >= 1024) return w_.fail(w_.mark_of(at), "resources.gpus", "more than 1024 devices");
        ids.push_back(device);
      }
      out.gpus = std::move(ids);
    } else {
      return w_.fail(w_.mark_of("resources.gpus"), "resources.gpus",
                     "expected auto or a list of device ids such as [0, 1], got " + quoted_value(gpus));
    }
    const int64_t ranks = out.ranks_data * out.ranks_model;
    const int64_t per_group = out.gpus_per_rank * ranks;
    if (out.backend == "local" && out.gpus && per_group > static_cast<int64_t>(out.gpus->size())) {
      const std::string at = w_.given("resources.gpus_per_rank") ? "resources.gpus_per_rank" : "resources.gpus";
      return w_.fail(w_.mark_of(at), at,
                     std::to_string(out.gpus_per_rank) + " GPU(s) per rank x " + std::to_string(ranks) + " rank(s) = " +
                         std::to_string(per_group) + " GPUs per group, but resources.gpus lists " +
                         std::to_string(out.gpus->size()) + " (a group's devices are distinct)");
    }
    return Status::Ok();
  }

 private:
  Status check_param(const std::string& name, json& p, const json& space) {
    const std::string path = "space." + name;
    const std::string type = p["type"].get<std::string>();
    if (type == "float" || type == "int") {
      const double low = p["low"].get<double>(), high = p["high"].get<double>();
      if (type == "int") {
        for (const char* bound : {"low", "high"}) {
          const double x = p[bound].get<double>();
          const std::string at = path + "." + bound;
          if (std::floor(x) != x)
            return w_.fail(w_.mark_of(at), at, format_number(x) + " is not a whole number (the parameter is an int)");
          // The search works on doubles: past 2^53 neighbouring integers are the same double
          // (and 2^63 - 1 would wrap when converted back).
          if (std::fabs(x) > kMaxExactInt)
            return w_.fail(w_.mark_of(at), at,
                           w_.text_of(at, format_number(x)) + " is too large for an int parameter (at most " +
                               std::to_string(static_cast<int64_t>(kMaxExactInt)) + " in magnitude)");
        }
        p["low"] = static_cast<int64_t>(low);
        p["high"] = static_cast<int64_t>(high);
      } else if (!std::isfinite(high - low)) {
        return w_.fail(w_.mark_of(path + ".high"), path + ".high",
                       "the range " + format_number(low) + ".." + format_number(high) + " is too wide to sample");
      }
      if (low >= high)
        return w_.fail(w_.mark_of(path + ".low"), path + ".low",
                       w_.text_of(path + ".low", format_number(low)) + " must be less than high (" +
                           w_.text_of(path + ".high", format_number(high)) + ")");
      if (p["log"].get<bool>() && low <= 0)
        return w_.fail(w_.mark_of(path + ".low"), path + ".low",
                       "a log scale needs low > 0, got " + format_number(low));
    } else if (type == "choice") {
      const json& values = p["values"];
      // Hashed, not compared pairwise (there may be 100,000 values).
      std::unordered_map<std::string, std::size_t> seen;
      for (std::size_t i = 0; i < values.size(); ++i)
        if (auto key = search::Space::choice_key(values[i]); key && !seen.emplace(*key, i).second) {
          const std::string item = path + ".values[" + std::to_string(i) + "]";
          return w_.fail(w_.mark_of(item), item, quoted_value(values[i]) + " is listed twice");
        }
    }
    if (p.contains("when")) {
      const auto& when = p["when"];
      const std::string parent = when.begin().key();
      const std::string at = path + ".when." + parent;
      if (parent == name) return w_.fail(w_.mark_of(at), path + ".when", "a parameter cannot depend on itself");
      if (!space.contains(parent)) {
        std::vector<Candidate> names;
        for (const auto& other : w_.space_order())
          if (other != name) names.push_back({other, other});
        std::string what = "condition on unknown parameter '" + parent + "'";
        if (auto near = did_you_mean(parent, names)) what += "; did you mean '" + *near + "'?";
        return w_.fail(w_.mark_of(at), path + ".when", what);
      }
    }
    return Status::Ok();
  }

  // A space parameter must be a setting of a built-in trainer, of a type the setting accepts.
  Status check_against_trainer(const std::string& name, json& p, const std::string& kind) {
    const std::string path = "space." + name;
    if (free_space_name(kind, name)) return Status::Ok();
    std::string not_found;
    const Setting* setting = trainer_setting_of(kind, name, &not_found);
    if (setting == nullptr) return w_.fail(w_.mark_of(path), path, not_found);
    const std::string type = p["type"].get<std::string>();
    const std::string of = " (trainer." + name + ")";
    const auto* can = trainers::trainer_capabilities(kind);
    auto check = [&](const json& v, const std::string& at) -> Result<json> {
      auto checked = check_value(*setting, v);
      if (!checked.ok()) return w_.fail(w_.mark_of(at), at, checked.error().message() + of);
      // The value's inner form (the cnn's layer lists), for each value the space can give.
      if (can != nullptr && can->value_problem != nullptr) {
        if (auto problem = can->value_problem(name, *checked))
          return w_.fail(w_.mark_of(at + problem->first), at + problem->first, problem->second + of);
      }
      return checked;
    };
    if (type == "float" || type == "int") {
      const bool numeric = is_numeric_type(setting->type) || (type == "int" && setting->type == Type::kIntList);
      if (!numeric || (type == "float" && setting->type == Type::kInt)) {
        const bool integral = setting->type == Type::kInt || setting->type == Type::kIntList;
        const std::string use = integral ? "int" : "choice";
        return w_.fail(w_.mark_of(path + ".type"), path + ".type",
                       "trainer." + name + " takes " + describe_type(*setting) + "; use type: " + use);
      }
      for (const char* bound : {"low", "high"}) HPCTUNE_TRY(check(p[bound], path + "." + bound));
    } else if (type == "choice") {
      json& values = p["values"];
      for (std::size_t i = 0; i < values.size(); ++i) {
        HPCTUNE_ASSIGN(auto v, check(values[i], path + ".values[" + std::to_string(i) + "]"));
        values[i] = v;  // "10s" -> 10
      }
    } else if (type == "fixed") {
      HPCTUNE_ASSIGN(auto v, check(p["value"], path + ".value"));
      p["value"] = v;
    }
    return Status::Ok();
  }

  static search::ParamSpec to_spec(const std::string& name, const json& p) {
    search::ParamSpec spec;
    spec.name = name;
    const std::string type = p["type"].get<std::string>();
    if (type == "float" || type == "int") {
      spec.type = type == "float" ? search::ParamType::kFloat : search::ParamType::kInt;
      spec.low = p["low"].get<double>();
      spec.high = p["high"].get<double>();
      spec.log = p["log"].get<bool>();
      if (p.contains("step")) spec.step = p["step"].get<int64_t>();
      if (p.contains("resolution")) spec.resolution = p["resolution"].get<int64_t>();
    } else if (type == "choice") {
      spec.type = search::ParamType::kChoice;
      for (const auto& v : p["values"]) spec.choices.push_back(v);
      spec.ordered = p["ordered"].get<bool>();
    } else {
      spec.type = search::ParamType::kFixed;
      spec.value = p["value"];
    }
    if (p.contains("when")) {
      const auto& when = p["when"];
      search::Condition condition;
      condition.parent = when.begin().key();
      for (const auto& v : when.begin().value()) condition.values.push_back(v);
      spec.when = std::move(condition);
    }
    return spec;
  }

  Walker& w_;
  json& root_;
};

}  // namespace

namespace {

// "0.5%", "25%": a share of the groups.
std::string percent(int64_t part, int64_t whole) {
  const double share = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  char text[32];
  std::snprintf(text, sizeof text, share < 10 ? "%.1f%%" : "%.0f%%", share);
  return text;
}

// "file:line:col: " of the value at key path `path` in the config's `tree` (its text read again), or
// "" without one: the place of a warning, as an error's.
std::string place_of(const YNode* tree, const std::string& source, const std::string& path) {
  if (tree == nullptr) return "";
  const Mark m = mark_below(*tree, Mark{}, "." + path);
  return source + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": ";
}

// The population of `g` whose generations after the first run a multiple of `groups` trials: the
// next one above its own (up), or the one below (down; 0 when none).
int64_t filling_population(const search::GenerationSize& g, int64_t groups, bool up) {
  const int64_t unit = std::max<int64_t>(1, g.per_unit);
  const int64_t population = g.trials / unit, elites = g.carried / unit;
  const int64_t step = groups / std::gcd(groups, unit);  // population steps whose trials fill the groups
  const int64_t runs = population - elites;
  const int64_t filled = elites + (up ? (runs + step - 1) / step : runs / step) * step;
  return filled - elites >= 1 && filled >= 2 ? filled : 0;
}

// The warning for one search whose generations run `g.runs()` trials each (its population setting
// at `path`), or "" when they keep `groups` busy: fewer trials than groups, or (in step) a last wave
// that leaves groups waiting, below 90% of their time busy, on trials of equal length.
std::string idle_groups(const search::GenerationSize& g, int64_t groups, const std::string& path, const YNode* tree,
                        const std::string& source) {
  const int64_t runs = g.runs(), waves = runs <= 0 ? 0 : (runs + groups - 1) / groups;
  if (runs <= 0 || 10 * runs >= 9 * waves * groups) return "";
  const bool few = runs < groups;
  if (!few && !g.in_step) return "";  // the next generation starts while the last one's trials run
  const int64_t unit = std::max<int64_t>(1, g.per_unit);
  const std::string head = place_of(tree, source, path) + path + ": " + g.population_setting + " " + std::to_string(g.trials / unit) +
                           (unit > 1 ? " on " + std::to_string(unit) + " islands" : std::string());
  const std::string carried =
      g.carried > 0 ? std::to_string(g.carried) + (g.carried == 1 ? " elite" : " elites") + " carried over unrun"
                    : std::string();
  const int64_t up = filling_population(g, groups, true), down = filling_population(g, groups, false);
  if (few)
    return head + " keeps " + std::to_string(runs) + " of " + std::to_string(groups) + " groups busy (" +
           percent(runs, groups) + (carried.empty() ? "" : "; " + carried) + "); " + g.population_setting + ": " +
           std::to_string(up) + " would fill them";
  return head + ": each generation's " + std::to_string(runs) + " trials" +
         (carried.empty() ? "" : " (" + carried + ")") + " run in " +
         std::to_string(waves) + " waves on " + std::to_string(groups) + " groups, " + percent(runs, waves * groups) +
         " of their time busy, the rest waiting for its last trials; " + g.population_setting + ": " +
         (down > 0 && down != up ? std::to_string(down) + " or " : std::string()) + std::to_string(up) +
         " would fill them";
}

}  // namespace

std::vector<std::string> idle_group_warnings(const CampaignConfig& c, int64_t groups) {
  std::vector<std::string> out;
  if (groups <= 1) return out;
  // The places: the config's text read again (a campaign parsed from text without a file has it too).
  auto tree = read_tree(c.text, c.source);
  const YNode* root = tree.ok() ? &*tree : nullptr;
  auto add = [&](const std::optional<search::GenerationSize>& g, const std::string& prefix) {
    if (!g) return;
    std::string text = idle_groups(*g, groups, prefix + g->population_setting, root, c.source);
    if (!text.empty()) out.push_back(std::move(text));
  };
  if (c.stages.empty()) {
    add(search::generation_size(c.algorithm, c.search_settings, c.objectives.size()), "search.settings.");
    return out;
  }
  for (std::size_t i = 0; i < c.stages.size(); ++i) {
    const StageConfig& st = c.stages[i];
    if (!st.own || !st.own_search) continue;
    const std::string prefix = "stages[" + std::to_string(i) + "].";
    const workflow::StageKind* kind = workflow::find_stage_kind(st.kind);
    if (kind != nullptr && kind->trials_setting != nullptr) {
      // A stage that runs its whole population at once, and waits for it at each interval.
      const json& n = st.settings.contains(kind->trials_setting) ? st.settings[kind->trials_setting] : json();
      if (!n.is_number_integer()) continue;
      add(search::GenerationSize{kind->trials_setting, n.get<int64_t>(), 1}, prefix);
    } else {
      add(search::generation_size(st.own->algorithm, st.own->search_settings, st.own->objectives.size()),
          prefix + "search.settings.");
    }
  }
  return out;
}

namespace {

// Whether a metric's name says it is a loss or an error: one of its words (split at anything but
// letters and digits, lower-cased) is one, or ends in "loss" ("valloss").
bool named_like_a_loss(const std::string& metric) {
  static const std::set<std::string> kWords = {"loss",  "error", "err", "rmse", "mse", "mae", "mape",
                                               "nll",   "perplexity", "ppl", "regret", "wer", "cer"};
  std::string word;
  auto done = [&]() {
    const bool hit = kWords.count(word) > 0 || (word.size() > 4 && word.ends_with("loss"));
    word.clear();
    return hit;
  };
  for (const char ch : metric) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else if (!word.empty() && done()) {
      return true;
    }
  }
  return !word.empty() && done();
}

}  // namespace

std::vector<std::string> objective_direction_warnings(const CampaignConfig& c) {
  std::vector<std::string> out;
  auto tree = read_tree(c.text, c.source);
  if (!tree.ok()) return out;
  // The objectives as written: `objective` (one map) or `objectives` (a list of maps).
  std::vector<std::pair<const YNode*, std::string>> written;
  if (const YEntry* one = find_entry(&*tree, "objective")) written.emplace_back(&one->value, "objective");
  if (const YEntry* many = find_entry(&*tree, "objectives"); many && many->value.kind == YNode::Kind::kSeq) {
    for (std::size_t i = 0; i < many->value.items.size(); ++i)
      written.emplace_back(&many->value.items[i], "objectives[" + std::to_string(i) + "]");
  }
  for (const auto& [node, path] : written) {
    const YEntry* metric = find_entry(node, "metric");
    if (metric == nullptr || metric->value.kind != YNode::Kind::kScalar || find_entry(node, "mode") != nullptr) continue;
    if (!named_like_a_loss(metric->value.text)) continue;
    const Mark m = metric->value.mark;
    out.push_back(c.source + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": " + path + ".metric: '" +
                  metric->value.text + "' is maximised (mode: max, the default), and a loss or an error is minimised: " +
                  "set mode: min");
  }
  return out;
}

std::vector<std::string> trainer_file_warnings(const CampaignConfig& c) {
  std::vector<std::string> out;
  if (c.resources.backend != "local") return out;
  auto tree = read_tree(c.text, c.source);
  const YNode* root = tree.ok() ? &*tree : nullptr;
  // The top level's trainer, and each stage's own where it has one.
  std::vector<std::pair<const CampaignConfig*, std::string>> views = {{&c, ""}};
  for (std::size_t i = 0; i < c.stages.size(); ++i)
    if (c.stages[i].own && c.stages[i].own->trainer != c.trainer)
      views.emplace_back(c.stages[i].own.get(), "stages[" + std::to_string(i) + "].");
  for (const auto& [view, prefix] : views) {
    const auto* can = trainers::trainer_capabilities(view->trainer.value("kind", std::string()));
    if (can == nullptr || can->file_rules.problem == nullptr) continue;
    std::vector<std::string> open;
    for (const auto& key : can->file_rules.reads) {
      const search::ParamSpec* p = view->space.find(key);
      if (p != nullptr && p->type != search::ParamType::kFixed) open.push_back(key);
    }
    const auto problem = can->file_rules.problem(fixed_settings(*view, can->file_rules.reads, {}, json()), open);
    if (!problem) continue;
    const std::string at = prefix + "trainer." + problem->key + problem->below;
    out.push_back(place_of(root, c.source, at) + at + ": " + problem->what + "; every trial would fail");
  }
  return out;
}

Status build_campaign(Walker& walker, json& root, CampaignConfig& c) {
  Builder b(walker, root);
  HPCTUNE_TRY(b.check_name());
  c.name = root["name"].get<std::string>();
  if (!root.contains("storage")) root["storage"] = c.name + ".db";
  c.storage = root["storage"].get<std::string>();
  c.storage_access = root["storage_access"].get<std::string>();
  c.seed = static_cast<uint64_t>(root["seed"].get<int64_t>());
  HPCTUNE_TRY(b.check_objectives(c));
  HPCTUNE_TRY(b.check_search(c));
  HPCTUNE_TRY(b.check_space(c));
  HPCTUNE_TRY(b.check_early_stopping(c));
  HPCTUNE_TRY(b.check_trainer(c));
  HPCTUNE_TRY(b.check_resources(c));
  HPCTUNE_TRY(b.check_model_split(c));
  HPCTUNE_TRY(b.check_freeze(c));
  HPCTUNE_TRY(b.check_setting_rules(c));
  return Status::Ok();
}

}  // namespace hpctune::config
