// The workflow (workflow_config.h): parse_workflow and its parts: the stages' graph (names, `from`,
// cycles), each stage's own view of the campaign, its settings read as the stage reads them
// (workflow/stage_settings.h), finished by what each kind declares there (never by its name), and
// what its inputs must provide.
#include "config/workflow_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/campaign_checks.h"
#include "config/pbt_schedule.h"
#include "config/settings.h"
#include "config/stage_inputs.h"
#include "config/trainer_kinds.h"
#include "trainers/trainer_settings.h"
#include "workflow/stage_settings.h"

namespace hpctune::config {

using nlohmann::json;

namespace {

// The keys a stage may give that stand for the top level's sections.
constexpr const char* kStageSections[] = {"search", "space", "early_stopping"};

// "an ensemble", "a transfer": a stage kind with its article.
std::string an(const std::string& kind) {
  const bool vowel = !kind.empty() && std::string_view("aeiou").find(kind[0]) != std::string_view::npos;
  return (vowel ? "an " : "a ") + kind;
}

// "file:line:col: path: what", the place of every workflow message.
Error place_error(const std::string& source, Mark m, const std::string& path, const std::string& what) {
  return err(Errc::kConfig, source + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": " + path +
                                ": " + what);
}

// What the parts of parse_workflow share: the file's name and the walker's places of the keys.
struct WorkflowPlaces {
  const std::string& source;
  const Walker& walker;
};

// Cycles: a depth-first walk along `from`, with a stack of its own (a chain of thousands of stages
// is no recursion); the first cycle found is named at the `from` that closes it.
Status refuse_cycles(const std::vector<StageConfig>& stages, const std::map<std::string, std::size_t>& index,
                     const WorkflowPlaces& places) {
  std::vector<int> state(stages.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<std::size_t, std::size_t>> path;  // (stage, its next `from` to follow)
  for (std::size_t start = 0; start < stages.size(); ++start) {
    if (state[start] != 0) continue;
    state[start] = 1;
    path.push_back({start, 0});
    while (!path.empty()) {
      const std::size_t i = path.back().first;
      if (path.back().second == stages[i].from.size()) {
        state[i] = 2;
        path.pop_back();
        continue;
      }
      const std::size_t j = index.at(stages[i].from[path.back().second++]);
      if (state[j] == 1) {
        std::string cycle;
        auto first = std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.first == j; });
        for (auto it = first; it != path.end(); ++it) cycle += stages[it->first].name + " -> ";
        cycle += stages[j].name;
        const std::string at = "stages[" + std::to_string(i) + "].from";
        return place_error(places.source, places.walker.mark_of(at), at,
                           "the stages form a cycle: " + cycle + " (each would wait for the other)");
      }
      if (state[j] == 0) {
        state[j] = 1;
        path.push_back({j, 0});
      }
    }
  }
  return Status::Ok();
}

// The stages' graph: names valid and unique (index: each name's stage), each `from` a list of
// other stages (an ensemble, and a transfer without a checkpoint of its own, needs one), no cycle.
Status check_stage_graph(const json& items, const YNode& list, Mark list_mark, const WorkflowPlaces& places,
                         std::vector<StageConfig>& stages, std::map<std::string, std::size_t>& index) {
  const Walker& walker = places.walker;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) {
    return place_error(places.source, m, path, what);
  };
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = "stages[" + std::to_string(i) + "]";
    StageConfig& st = stages[i];
    st.name = items[i]["name"].get<std::string>();
    st.kind = items[i]["kind"].get<std::string>();
    if (st.name.empty() || !std::all_of(st.name.begin(), st.name.end(), [](unsigned char ch) {
          return std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-';
        }))
      return fail(walker.mark_of(at + ".name"), at + ".name",
                  "'" + st.name + "' may contain only letters, digits, '.', '_' and '-'");
    if (auto [it, fresh] = index.emplace(st.name, i); !fresh)
      return fail(walker.mark_of(at + ".name"), at + ".name",
                  "'" + st.name + "' is already the name of stages[" + std::to_string(it->second) + "]");
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = "stages[" + std::to_string(i) + "].from";
    StageConfig& st = stages[i];
    if (items[i].contains("from")) {
      const json& from = items[i]["from"];
      const json list_of = from.is_array() ? from : json::array({from});
      std::set<std::string> listed;
      for (std::size_t k = 0; k < list_of.size(); ++k) {
        const json& f = list_of[k];
        // A name in a list is named at its item.
        const std::string item_at = from.is_array() ? at + "[" + std::to_string(k) + "]" : at;
        const Mark item_mark =
            from.is_array() ? mark_below(list, list_mark, item_at.substr(std::string("stages").size())) : walker.mark_of(at);
        if (!f.is_string())
          return fail(item_mark, item_at, "expected a stage name or a list of them, got " + f.dump());
        const std::string name = f.get<std::string>();
        if (name == st.name) return fail(item_mark, item_at, "a stage cannot consume itself");
        if (!index.count(name)) {
          std::string hint;
          std::vector<Candidate> candidates;
          std::vector<std::string> names;
          for (const auto& other : stages) {
            candidates.push_back({other.name, other.name});
            names.push_back(other.name);
          }
          if (auto near = did_you_mean(name, candidates)) hint = "; did you mean '" + *near + "'?";
          return fail(item_mark, item_at,
                      "unknown stage '" + name + "' (the stages are " + join(names, ", ") + ")" + hint);
        }
        // Twice is a slip (another stage meant?), not a weight: the stage consumes each input once.
        if (!listed.insert(name).second) return fail(item_mark, item_at, "'" + name + "' is listed twice");
        st.from.push_back(name);
      }
    }
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);  // the walker took only these
    const bool unless = kind.needs_from_unless != nullptr && items[i].contains(kind.needs_from_unless) &&
                        items[i][kind.needs_from_unless].is_string() &&
                        !items[i][kind.needs_from_unless].get<std::string>().empty();
    if (kind.needs_from != nullptr && !unless && st.from.empty())
      return fail(walker.mark_of("stages[" + std::to_string(i) + "]"), "stages[" + std::to_string(i) + "]",
                  an(st.kind) + " stage needs `from`: the stage whose trials it " + kind.needs_from);
  }
  return refuse_cycles(stages, index, places);
}

// One interval of a pbt schedule against the trainer's rules (a freeze beyond the network, settings
// that cannot go together, a layout), with its params over the stage's trainer as the member that
// replays it gets them; `fail(key, what)` for a problem at one of the interval's own params.
template <typename Fail>
Status check_interval_rules(const CampaignConfig& own, const json& params, const Fail& fail) {
  CampaignConfig with = own;
  for (auto it = params.begin(); it != params.end(); ++it) with.trainer[it.key()] = it.value();
  auto problem = setting_rules_problem(with, {}, params);
  if (!problem) problem = layout_rules_problem(with, {}, params);
  if (!problem) problem = freeze_problem(with, {});
  if (!problem || problem->in_space || !params.contains(problem->key)) return Status::Ok();
  return fail(problem->key, problem->what);
}

// A member trains with the trainer's step setting at the end of each interval, the last at the
// stage's total: a step beyond the setting's declaration (the classifiers' epochs: at most 1000) fails
// every member when it gets there. What to say; nullopt when the declaration takes `step`.
std::optional<std::string> step_beyond_trainer(const std::string& kind, const std::string& step_key, const json& step) {
  std::string not_found;
  const Setting* setting = step_key.empty() ? nullptr : trainer_setting_of(kind, step_key, &not_found);
  if (setting == nullptr || !step.is_number_integer()) return std::nullopt;
  auto checked = check_value(*setting, step);
  if (checked.ok()) return std::nullopt;
  return checked.error().message() + " (trainer." + step_key +
         ", which a member trains with up to this step); every member would fail there";
}

// The settings of a kind that trains its trials to a step (StageKind::steps_setting: pbt's steps)
// against its trainer (own: the stage's view): the trainer's step setting kept out of the space,
// the total not given the trainer's, the schedule (schedule_setting) read as the stage reads it.
Status finish_step_settings(StageConfig& st, const workflow::StageKind& decl, const CampaignConfig& view,
                            const YNode* item, const std::string& prefix, const WorkflowPlaces& places) {
  const Walker& walker = places.walker;
  const std::string total = decl.steps_setting;
  const CampaignConfig* own = &view;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) {
    return place_error(places.source, m, path, what);
  };
  // The setting that counts the trainer's steps (the catalog's); a kind without one is refused
  // below (trainer_lacks).
  const auto* can = trainers::trainer_capabilities(own->trainer.value("kind", ""));
  const std::string step_key = can != nullptr && can->step_setting != nullptr ? can->step_setting : "";
  if (!step_key.empty() && own->space.find(step_key) != nullptr)
    return fail(walker.mark_of(prefix + "space"), prefix + "space." + step_key,
                st.kind + " sets each interval's " + step_key + " itself; give the total as the stage's " + total);
  // Not given: the trainer's own count of steps; a kind without one is refused below (trainer_lacks).
  if (st.settings[total].is_null() && !step_key.empty() && own->trainer.contains(step_key))
    st.settings[total] = own->trainer[step_key];
  const std::string schedule_key = decl.schedule_setting != nullptr ? decl.schedule_setting : "";
  if (!schedule_key.empty() && st.settings.contains(schedule_key) && !st.settings[schedule_key].is_null()) {
    // Read as the stage reads it (config/pbt_schedule.h), each interval's params checked as a
    // space's parameters are: every trial would fail on what is wrong here.
    const std::string at = prefix + schedule_key;
    const YEntry* given = find_entry(item, schedule_key);
    auto place = [&](const std::string& below) {
      return given != nullptr ? mark_below(given->value, given->key_mark, below) : walker.mark_of(at);
    };
    PbtSchedule schedule = read_pbt_schedule(st.settings[schedule_key], step_key);
    if (!schedule.ok()) return fail(place(schedule.problem_at), at + schedule.problem_at, schedule.problem);
    const std::string kind = own->trainer.value("kind", "");
    json& intervals = st.settings[schedule_key];
    for (std::size_t k = 0; k < intervals.size(); ++k) {
      json& params = intervals[k]["params"];
      for (auto it = params.begin(); it != params.end(); ++it) {
        if (free_space_name(kind, it.key())) continue;
        const std::string below = "[" + std::to_string(k) + "].params." + it.key();
        std::string not_found;
        const Setting* setting = trainer_setting_of(kind, it.key(), &not_found);
        if (setting == nullptr) return fail(place(below), at + below, not_found);
        auto checked = check_value(*setting, it.value());
        if (!checked.ok())
          return fail(place(below), at + below, checked.error().message() + " (trainer." + it.key() + ")");
        it.value() = std::move(checked).value();
      }
      if (auto beyond = step_beyond_trainer(kind, step_key, intervals[k]["to_step"]))
        return fail(place("[" + std::to_string(k) + "].to_step"), at + "[" + std::to_string(k) + "].to_step", *beyond);
      HPCTUNE_TRY(check_interval_rules(*own, params, [&](const std::string& key, const std::string& what) {
        const std::string below = "[" + std::to_string(k) + "].params." + key;
        return fail(place(below), at + below, what + " (in this interval of the replay)");
      }));
    }
    // With a schedule, the stage trains to its end (workflow/pbt_policy.h). A kind without a step
    // setting is refused below (trainer_lacks).
    if (!step_key.empty()) {
      const int64_t end = schedule.replay.back().at(step_key).get<int64_t>();
      if (walker.given(prefix + total) && st.settings[total].get<int64_t>() != end)
        return fail(walker.mark_of(prefix + total), prefix + total,
                    std::to_string(st.settings[total].get<int64_t>()) + " is not the end of the schedule (step " +
                        std::to_string(end) + "), which a replay trains to; leave " + total + " out");
      st.settings[total] = end;
    }
  }
  // Neither given nor the trainer's (a command's max_step, 0 = no limit, by default): the members
  // would have no step to end at, and the stage would refuse to start.
  const json& steps = st.settings[total];
  if (!step_key.empty() && (!steps.is_number_integer() || steps.get<int64_t>() < 1))
    return fail(walker.mark_of(prefix + total), prefix + total,
                "the total steps of every member: give it, or trainer." + step_key + " (at least 1)");
  if (auto beyond = step_beyond_trainer(own->trainer.value("kind", ""), step_key, steps))
    return fail(walker.mark_of(prefix + total), prefix + total, *beyond);
  return Status::Ok();
}

// A kind that decides every interval_setting steps (pbt's ready) with that at or past its total and
// no schedule to replay decides nothing: every member trains to its end in one attempt. Checked
// after the rest, whose complaints say more.
Status check_stage_intervals(const std::vector<StageConfig>& stages, const WorkflowPlaces& places) {
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageConfig& st = stages[i];
    const workflow::StageKind& decl = *workflow::find_stage_kind(st.kind);
    if (decl.interval_setting == nullptr || decl.steps_setting == nullptr) continue;
    const bool replayed = decl.schedule_setting != nullptr && !st.settings.value(decl.schedule_setting, json()).is_null();
    const json& steps = st.settings.value(decl.steps_setting, json());
    if (replayed || !steps.is_number_integer()) continue;
    const std::string prefix = "stages[" + std::to_string(i) + "].", interval = decl.interval_setting,
                      total = decl.steps_setting;
    const int64_t every = st.settings.value(interval, int64_t{0}), end = steps.get<int64_t>();
    if (every < end) continue;
    const std::string at =
        prefix + (places.walker.given(prefix + interval) || !places.walker.given(prefix + total) ? interval : total);
    return place_error(places.source, places.walker.mark_of(at), at,
                       interval + " " + std::to_string(every) + " is not below " + total + " (" + std::to_string(end) +
                           "): every member would train to its end without a decision (" +
                           (decl.judges_reports != nullptr ? decl.judges_reports : "none") +
                           " would never run); give a " + interval + " below " + std::to_string(end));
  }
  return Status::Ok();
}

// The settings a kind declares by what they hold (workflow::StageKind): two positive factors
// (factor_pair_setting), lists of class labels checked as trainer.classes is, paths taken relative
// to the config file's directory, which must be there where the stage runs (judges_local_files: `view`).
Status finish_declared_settings(StageConfig& st, const workflow::StageKind& decl, const std::string& prefix,
                                const WorkflowPlaces& places, const CampaignConfig& view) {
  const Walker& walker = places.walker;
  const std::string& source = places.source;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) { return place_error(source, m, path, what); };
  if (const char* key = decl.factor_pair_setting) {
    const json& pair = st.settings[key];
    auto factor = [](const json& f) { return f.is_number() && std::isfinite(f.get<double>()) && f.get<double>() > 0; };
    if (pair.size() != 2 || !factor(pair[0]) || !factor(pair[1]))
      return fail(walker.mark_of(prefix + key), prefix + key, "expected two positive finite factors, such as [0.8, 1.2]");
  }
  for (const std::string& key : decl.class_list_settings) {
    if (auto problem = classes_problem_at(st.settings.value(key, json()), prefix + key))
      return fail(walker.mark_of(problem->first), problem->first, problem->second);
  }
  for (const std::string& key : decl.path_settings) {
    if (!st.settings.contains(key) || !st.settings[key].is_string() || st.settings[key].get<std::string>().empty())
      continue;
    std::string path = st.settings[key].get<std::string>();
    const auto slash = source.rfind('/');
    if (path[0] != '/' && slash != std::string::npos) path = source.substr(0, slash + 1) + path;
    st.settings[key] = path;
    // The stage opens it when it starts (transfer_stage.cpp: checkpoint_key_usable), after the stages
    // before it ran: a path that is not there fails it then. What is there (a file, or a directory
    // where the trainer's checkpoint is one; no planted link, no FIFO) stays the stage's to judge.
    // Judged only where the stage will run (ParseOptions::local_files, a local backend).
    if (!judges_local_files(walker, view)) continue;
    std::error_code ec;
    if (std::filesystem::symlink_status(path, ec).type() == std::filesystem::file_type::not_found)
      return fail(walker.mark_of(prefix + key), prefix + key,
                  "'" + path + "' does not exist (a relative path is taken from the config file's directory); the "
                  "stage would fail when it starts");
  }
  return Status::Ok();
}

// Whether a searched parameter can be 0 in one trial and not in another.
bool takes_zero_and_more(const search::ParamSpec& p) {
  if (p.type == search::ParamType::kChoice) {
    bool zero = false, other = false;
    for (const auto& v : p.choices) (v.is_number() && v.get<double>() == 0 ? zero : other) = true;
    return zero && other;
  }
  return p.low <= 0 && p.high > 0;
}

// A stage whose trials resume each other's checkpoints (StageKind::trials_resume_each_other) against a
// space that varies what shapes their network (TrainerCapabilities::network_settings).
Status refuse_searched_network(const StageConfig& st, std::size_t i, const YNode& list, Mark list_mark,
                               const WorkflowPlaces& places) {
  const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);
  const auto* can = trainers::trainer_capabilities(st.own->trainer.value("kind", std::string()));
  if (!kind.trials_resume_each_other || can == nullptr) return Status::Ok();
  for (const auto& p : st.own->space.params()) {
    const auto& shapes = can->network_settings;
    const auto shape = std::find_if(shapes.begin(), shapes.end(), [&](const auto& n) { return n.key == p.name; });
    if (p.type == search::ParamType::kFixed || shape == shapes.end()) continue;
    if (shape->zero_or_not && !takes_zero_and_more(p)) continue;
    const std::string at = "stages[" + std::to_string(i) + "].space." + p.name;
    return place_error(places.source, mark_below(list, list_mark, at.substr(std::string("stages").size())), at,
                       an(st.kind) + " stage resumes its members from each other's checkpoints, and " + p.name +
                           " shapes the network a checkpoint of trainer kind '" +
                           st.own->trainer.value("kind", std::string()) + "' holds: fix it in trainer: instead");
  }
  return Status::Ok();
}

// A problem of the trainer of the stage at `i` (setting_rules_problem, freeze_problem) at the key that
// gives the value: the stage's space, its own setting that its trials take (`given`), its trainer:,
// else the top level's trainer.
Error stage_trainer_error(const StageConfig& st, std::size_t i, const SettingRuleProblem& problem, const json& given,
                          const YNode& list, Mark list_mark, const WorkflowPlaces& places) {
  const std::string prefix = "stages[" + std::to_string(i) + "].";
  const std::string at = (problem.in_space                    ? prefix + "space." + problem.key
                          : given.contains(problem.key)       ? prefix + problem.key
                          : st.trainer_keys.count(problem.key) ? prefix + "trainer." + problem.key
                                                               : "trainer." + problem.key) +
                         (problem.in_space ? std::string() : problem.below);
  // A stage's keys below its item (the walker marks its sections, not their keys).
  const Mark mark = at.rfind("stages", 0) == 0 ? mark_below(list, list_mark, at.substr(std::string("stages").size()))
                                               : places.walker.mark_of(at);
  return place_error(places.source, mark, at, problem.what);
}

// The trainer of each stage that runs its own (StageKind::runs_own_trainer: not an ensemble, whose
// retrained members run under their first input's trainer, judged at that stage) against its kind's
// rules between settings (setting_rules_problem), with the layout, and, where its trials train with
// its trainer's freeze (a kind without a freeze of its own: not a transfer, which sets its trials'
// freeze from its own, check_stage_freeze), against the network the freeze is of (freeze_problem);
// against the data its settings name (data_rules_problem) and the model-parallel split
// (model_split_problem); the objectives' metrics against those it reports (objective_metric_problem); first the space of a stage whose trials resume each other against what
// shapes the network. A setting the stage's own space searches, or that the trials of its `from` may
// carry over (their searched keys that the stage's own trainer does not set), is left to the trainer,
// trial by trial; the stage's settings that its trials take as trainer settings
// (StageKind::trial_settings) are judged as theirs.
Status check_stage_setting_rules(const std::vector<StageConfig>& stages, const std::map<std::string, std::size_t>& index,
                                 const YNode& list, Mark list_mark, const WorkflowPlaces& places) {
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageConfig& st = stages[i];
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);
    // An ensemble's view: its retrained members run under its first input's trainer, judged there.
    if (!st.own || !kind.runs_own_trainer) continue;
    HPCTUNE_TRY(refuse_searched_network(st, i, list, list_mark, places));
    std::set<std::string> unknown;
    for (const auto& f : st.from) {
      const StageConfig& source = stages[index.at(f)];
      if (!source.own) continue;
      for (const auto& p : source.own->space.params())
        if (p.type != search::ParamType::kFixed && !st.trainer_keys.count(p.name)) unknown.insert(p.name);
    }
    const std::string trainer_kind = st.own->trainer.value("kind", std::string());
    // A stage whose trials start from its inputs' checkpoints (transfer) gives each its own through
    // the trainer's init setting.
    const auto* can = trainers::trainer_capabilities(trainer_kind);
    if (kind.inputs_provide != nullptr && std::string_view(kind.inputs_provide) == trainers::kProvidesCheckpoints &&
        can != nullptr && can->init_setting != nullptr)
      unknown.insert(can->init_setting);
    json given = json::object();
    for (const auto& [key, value] : st.settings.items()) {
      const auto& takes = kind.trial_settings;
      if (std::find(takes.begin(), takes.end(), key) != takes.end() && trainer_declares(trainer_kind, key))
        given[key] = value;
      else
        unknown.insert(key);  // another stage key of a trainer setting's name is not the trials' value
    }
    auto problem = setting_rules_problem(*st.own, unknown, given);
    if (!problem) problem = layout_rules_problem(*st.own, unknown, given);
    if (!problem && kind.freeze_setting == nullptr) problem = freeze_problem(*st.own, unknown);
    if (!problem && judges_local_files(places.walker, *st.own)) problem = data_rules_problem(*st.own, unknown, given);
    if (problem) return stage_trainer_error(st, i, *problem, given, list, list_mark, places);
    if (auto split = model_split_problem(*st.own, unknown))
      return place_error(places.source, places.walker.mark_of("resources.ranks.model"), "resources.ranks.model", *split);
    const std::string judge = kind.judges_reports != nullptr ? kind.judges_reports : early_stopping_judge(*st.own);
    if (auto metric = objective_metric_problem(*st.own, !places.walker.given("objectives"), st.name, judge))
      return place_error(places.source, places.walker.mark_of(metric->first), metric->first, metric->second);
    if (auto stop = stop_when_metric_problem(*st.own, st.name)) {
      const std::string at = "stages[" + std::to_string(i) + "].search.stop_when.metric";
      return place_error(places.source, mark_below(list, list_mark, at.substr(std::string("stages").size())), at, *stop);
    }
  }
  return Status::Ok();
}

// ---- a transfer's trials against the network of the checkpoints they start from ------------------

// The values a stage's trials may have for one trainer setting: a choice's, a fixed value, or the
// ends of a range (the counts of layers below grow with each); `out` empty when unknown.
void values_of(const search::ParamSpec& p, std::vector<json>& out) {
  switch (p.type) {
    case search::ParamType::kChoice: out.insert(out.end(), p.choices.begin(), p.choices.end()); break;
    case search::ParamType::kFixed: out.push_back(p.value); break;
    case search::ParamType::kInt:
      out.push_back(static_cast<int64_t>(p.low));
      out.push_back(static_cast<int64_t>(p.high));
      break;
    case search::ParamType::kFloat:
      out.push_back(p.low);
      out.push_back(p.high);
      break;
  }
}

// Whether two values of a network setting build the same layers; values of different types (a
// repeated width and a list of widths) are not judged (true).
bool same_shape(const json& a, const json& b, bool zero_or_not) {
  if (a.is_number() && b.is_number()) {
    if (zero_or_not) return (a.get<double>() == 0) == (b.get<double>() == 0);
    return a.get<double>() == b.get<double>();
  }
  if (a.type() != b.type()) return true;
  return a == b;
}

// Whether a searched parameter can give a value of the same shape as `v` (values of another type
// are not judged: true).
bool can_give(const search::ParamSpec& p, const json& v, bool zero_or_not) {
  if (p.type == search::ParamType::kChoice)
    return std::any_of(p.choices.begin(), p.choices.end(), [&](const json& c) { return same_shape(c, v, zero_or_not); });
  if (!v.is_number()) return true;
  const double x = v.get<double>();
  if (zero_or_not) return x == 0 ? p.low <= 0 : p.high > 0;
  return x >= p.low && x <= p.high && (p.type != search::ParamType::kInt || x == std::floor(x));
}

// "[32]", "0.2": a value in a message.
std::string shown(const json& v) { return v.is_string() ? "'" + v.get<std::string>() + "'" : to_yaml_flow(v); }

// Where stage `source` got the value of trainer setting `key` its trials were built with.
std::string origin_of(const StageConfig& source, const std::string& key) {
  if (source.own->space.find(key) != nullptr) return "its space." + key;
  return source.trainer_keys.count(key) ? "its trainer." + key : "trainer." + key;
}

// The stage at `i`, whose trials start from the checkpoints of the trials of `source` (a stage that
// trains its own): the same trainer kind, and each network setting (TrainerCapabilities::
// network_settings) of the same value, where the stage's trials do not take it from their source
// (a setting `source` searches or fixes in its space, that this stage does not set).
Status check_source_network(const StageConfig& st, std::size_t i, const StageConfig& source, const YNode& list,
                            Mark list_mark, const WorkflowPlaces& places) {
  const std::string prefix = "stages[" + std::to_string(i) + "].";
  auto place = [&](const std::string& key) {
    return mark_below(list, list_mark, "[" + std::to_string(i) + "]." + key);
  };
  const std::string kind = st.own->trainer.value("kind", std::string());
  const std::string source_kind = source.own->trainer.value("kind", std::string());
  const std::string starts = ", whose checkpoints the trials of " + an(st.kind) + " start from";
  if (kind != source_kind) {
    const std::string at = st.trainer_keys.count("kind") ? "trainer.kind" : "from";
    return place_error(places.source, place(at), prefix + at,
                       "stage '" + source.name + "' trains trainer kind '" + source_kind + "'" + starts +
                           ": trainer kind '" + kind + "' cannot load them; every trial would fail" +
                           (at == "from" ? " (start from a stage of kind '" + kind + "')" : " (leave trainer.kind out)"));
  }
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr) return Status::Ok();
  for (const auto& n : can->network_settings) {
    const search::ParamSpec* own = st.own->space.find(n.key);
    if (own != nullptr && own->type != search::ParamType::kFixed) continue;  // its own search: trial by trial
    const bool given = own != nullptr || st.trainer_keys.count(n.key);
    const search::ParamSpec* theirs = source.own->space.find(n.key);
    if (theirs != nullptr && !given) continue;  // each trial takes its source trial's value
    const json& none = json();
    const json& value = own != nullptr ? own->value : st.own->trainer.contains(n.key) ? st.own->trainer[n.key] : none;
    const std::string at = own != nullptr ? "space." + n.key : "trainer." + n.key;
    const std::string fix = " (leave " + n.key + " out of the stage: its trials take their source's)";
    if (theirs != nullptr && theirs->type != search::ParamType::kFixed) {
      if (value.is_null() || can_give(*theirs, value, n.zero_or_not)) continue;
      return place_error(places.source, place(at), prefix + at,
                         shown(value) + " builds none of the networks stage '" + source.name + "' searches (" +
                             origin_of(source, n.key) + ")" + starts + "; every trial would fail" + fix);
    }
    const json& theirs_value = theirs != nullptr ? theirs->value
                               : source.own->trainer.contains(n.key) ? source.own->trainer[n.key] : none;
    if (value.is_null() || theirs_value.is_null() || same_shape(value, theirs_value, n.zero_or_not)) continue;
    if (given)
      return place_error(places.source, place(at), prefix + at,
                         shown(value) + " builds another network than the " + shown(theirs_value) + " of stage '" +
                             source.name + "' (" + origin_of(source, n.key) + ")" + starts +
                             "; every trial would fail" + fix);
    return place_error(places.source, place("from"), prefix + "from",
                       "stage '" + source.name + "' trains " + n.key + " " + shown(theirs_value) + " (" +
                           origin_of(source, n.key) + "), and this stage's trials would build " + shown(value) +
                           " (trainer." + n.key + "): another network than the checkpoints they start from; every "
                           "trial would fail (give the stage trainer: {" + n.key + ": " + shown(theirs_value) + "})");
  }
  return Status::Ok();
}

// The stage's freeze (StageKind::freeze_setting) against the layers before the output layer of the
// largest network its trials can build (TrainerCapabilities::model_stages.count less one): the
// settings the count reads are the stage's own (its space's, its trainer's) or, where the stage does
// not set them, its sources' (the values their spaces give, which each trial takes). Sources whose
// networks are not known here (`known` false: a chain of transfers) leave it to each trial.
Status check_stage_freeze(const StageConfig& st, std::size_t i, const workflow::StageKind& kind,
                          const std::vector<const StageConfig*>& sources, bool known, const YNode& list, Mark list_mark,
                          const WorkflowPlaces& places) {
  if (kind.freeze_setting == nullptr || !known) return Status::Ok();
  const auto* can = trainers::trainer_capabilities(st.own->trainer.value("kind", std::string()));
  if (can == nullptr || can->freeze_setting == nullptr || can->model_stages.count == nullptr) return Status::Ok();
  // Its nested search's value wins over the stage's (transfer/transfer_plan.h): searched, it is left to
  // each trial; fixed, it is the one judged.
  const search::ParamSpec* nested = st.own->space.find(can->freeze_setting);
  if (nested != nullptr && nested->type != search::ParamType::kFixed) return Status::Ok();
  const std::string key = nested != nullptr ? "space." + std::string(can->freeze_setting) : kind.freeze_setting;
  const json& given = nested != nullptr ? nested->value : st.settings.value(kind.freeze_setting, json());
  if (!given.is_number_integer() || given.get<int64_t>() <= 0) return Status::Ok();
  const int64_t freeze = given.get<int64_t>();
  std::vector<std::pair<std::string, std::vector<json>>> reads;
  std::size_t combinations = 1;
  for (const auto& key : can->model_stages.reads) {
    std::vector<json> values;
    const json own = st.own->trainer.contains(key) ? st.own->trainer[key] : json();
    if (const search::ParamSpec* p = st.own->space.find(key)) {
      values_of(*p, values);
    } else if (st.trainer_keys.count(key)) {
      values.push_back(own);
    } else {
      for (const StageConfig* s : sources) {
        if (const search::ParamSpec* p = s->own->space.find(key)) values_of(*p, values);
        else values.push_back(own);
      }
      if (sources.empty()) values.push_back(own);
    }
    combinations *= values.size();
    if (combinations == 0 || combinations > 4096) return Status::Ok();
    reads.emplace_back(key, std::move(values));
  }
  // The largest count over every combination of those values.
  int64_t most = 0;
  std::vector<std::size_t> at(reads.size(), 0);
  for (std::size_t n = 0; n < combinations; ++n) {
    json settings = st.own->trainer;
    for (std::size_t r = 0; r < reads.size(); ++r) {
      const json& v = reads[r].second[at[r]];
      if (v.is_null()) settings.erase(reads[r].first);
      else settings[reads[r].first] = v;
    }
    const int64_t count = can->model_stages.count(settings);
    if (count <= 0) return Status::Ok();  // a network the count does not know
    most = std::max(most, count);
    for (std::size_t r = 0; r < reads.size() && ++at[r] == reads[r].second.size(); ++r) at[r] = 0;
  }
  const int64_t before_output = most - 1;
  if (freeze <= before_output) return Status::Ok();
  return place_error(places.source, mark_below(list, list_mark, "[" + std::to_string(i) + "]." + key),
                     "stages[" + std::to_string(i) + "]." + key,
                     std::to_string(freeze) + " layers frozen, but the network of the stage's trials has " +
                         (combinations > 1 ? "at most " : "") + std::to_string(before_output) +
                         " before its output layer (" + can->model_stages.what + "); every trial would fail (give at most " +
                         std::to_string(before_output) + ")");
}

// Each stage whose trials start from its inputs' checkpoints (StageKind::inputs_provide: a transfer)
// against the networks those hold: check_source_network for each input that trains its own trials
// (an input that itself starts from checkpoints: its kind only), then check_stage_freeze. With a
// checkpoint file of its own (needs_from_unless), no input is compared (what the file holds is not
// known here), and the freeze is judged on the stage's own network.
Status check_start_networks(const std::vector<StageConfig>& stages, const std::map<std::string, std::size_t>& index,
                            const YNode& list, Mark list_mark, const WorkflowPlaces& places) {
  auto starts_from_checkpoints = [](const workflow::StageKind& k) {
    return k.inputs_provide != nullptr && std::string_view(k.inputs_provide) == trainers::kProvidesCheckpoints;
  };
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageConfig& st = stages[i];
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);
    if (!st.own || !starts_from_checkpoints(kind)) continue;
    const json& file = kind.needs_from_unless != nullptr ? st.settings.value(kind.needs_from_unless, json()) : json();
    const bool from_file = file.is_string() && !file.get<std::string>().empty();
    std::vector<const StageConfig*> sources;
    bool known = true;  // from a file: the trials' network is the stage's own
    for (const auto& f : from_file ? std::vector<std::string>() : st.from) {
      const StageConfig& source = stages[index.at(f)];
      const workflow::StageKind& source_kind = *workflow::find_stage_kind(source.kind);
      if (!source.own || !source_kind.trains_inputs) {
        known = false;
        continue;
      }
      if (starts_from_checkpoints(source_kind)) {
        known = false;  // its trials' networks are its own sources': only its kind is judged here
        if (source.own->trainer.value("kind", std::string()) != st.own->trainer.value("kind", std::string()))
          HPCTUNE_TRY(check_source_network(st, i, source, list, list_mark, places));
        continue;
      }
      HPCTUNE_TRY(check_source_network(st, i, source, list, list_mark, places));
      sources.push_back(&source);
    }
    HPCTUNE_TRY(check_stage_freeze(st, i, kind, sources, known, list, list_mark, places));
  }
  return Status::Ok();
}

// What the inputs must provide: an ensemble their predictions, a transfer their checkpoints, and a
// pbt stage's own trainer checkpoints, as the catalog declares them (trainers/trainer_settings.h).
Status check_stage_needs(const std::vector<StageConfig>& stages, const std::map<std::string, std::size_t>& index,
                         const WorkflowPlaces& places) {
  const Walker& walker = places.walker;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) {
    return place_error(places.source, m, path, what);
  };
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageConfig& st = stages[i];
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);
    if (const char* needs = kind.own_trainer_provides; needs != nullptr && st.own) {
      const std::string at = "stages[" + std::to_string(i) + "]";
      if (auto lack = trainer_lacks(st.kind, st.name, st.own->trainer, needs, kind.steps_setting != nullptr))
        return fail(walker.mark_of(at + ".kind"), at, *lack);
    }
    const char* needs = kind.inputs_provide;
    if (needs == nullptr) continue;
    const std::string at = "stages[" + std::to_string(i) + "].from";
    for (const auto& f : st.from) {
      const StageConfig& input = stages[index.at(f)];
      if (!workflow::find_stage_kind(input.kind)->trains_inputs)
        return fail(walker.mark_of(at), at, "stage '" + f + "' is " + an(input.kind) + ": it trains no trials of its own");
      if (!input.own) continue;  // its view failed: `deferred` says why
      if (auto lack = trainer_lacks(st.kind, f, input.own->trainer, needs, /*trains_to_step=*/false))
        return fail(walker.mark_of(at), at, *lack);
      if (auto wrong = task_mismatch(st, f, input.own->trainer, needs)) {
        const std::string task_at = "stages[" + std::to_string(i) + "].task";
        return fail(walker.mark_of(task_at), task_at, *wrong);
      }
    }
  }
  return Status::Ok();
}

// With stages, the top level has no search, space or early_stopping: each stage has its own.
Status refuse_top_sections(const YNode& tree, const std::string& source) {
  for (const char* key : kStageSections) {
    if (const YEntry* e = find_entry(&tree, key))
      return place_error(source, e->key_mark, key,
                         std::string("with stages, each stage has its own ") + key +
                             " (move it into the stages that use it)");
  }
  return Status::Ok();
}

// A stand-in search {max_trials: <trials>} at `mark`: the top level's walk, and the view of a stage
// without a search of its own, need one.
YEntry stand_in_search(const std::string& trials, Mark mark) {
  return {"search", mark, map_of({{"max_trials", mark, scalar(trials, mark)}}, mark)};
}

// The top level and the items of `stages`, walked into `root` with a stand-in search (the stages
// have their own).
Status walk_top_level(const YNode& tree, const YEntry& stages_entry, Walker& walker, json& root) {
  YNode checked = tree;
  checked.entries.push_back(stand_in_search("1", stages_entry.key_mark));
  return walker.section(&checked, "", "", Mark{}, root, nullptr);
}

// What a stage's item gives of its own.
struct StageItemKeys {
  bool has_search = false;
  bool has_space = false;
  bool own_keys = false;  // a search, space, early_stopping or trainer: the stage needs a view of its own
};

StageItemKeys item_keys(const YNode* item) {
  StageItemKeys keys;
  if (item != nullptr && item->kind == YNode::Kind::kMap) {
    for (const auto& e : item->entries) {
      if (e.key == "search" || e.key == "space" || e.key == "early_stopping" || e.key == "trainer") keys.own_keys = true;
      keys.has_search = keys.has_search || e.key == "search";
      keys.has_space = keys.has_space || e.key == "space";
    }
  }
  return keys;
}

// The kinds that always search with trials of their own, for a message: "a search or pbt stage".
std::string searching_kinds() {
  std::vector<std::string> names;
  for (const auto& k : workflow::stage_kinds())
    if (k.search == workflow::StageSearch::kRequired || k.search == workflow::StageSearch::kSpace) names.push_back(k.kind);
  std::string out = an(names.empty() ? std::string("search") : names.front());
  for (std::size_t i = 1; i < names.size(); ++i) out += (i + 1 == names.size() ? " or " : ", ") + names[i];
  return out + " stage";
}

// Whether the stage searches (st.own_search), and a search and space given as its kind requires.
Status check_stage_search(StageConfig& st, const workflow::StageKind& kind, const StageItemKeys& keys, Mark item_mark,
                          const std::string& prefix, const std::string& source) {
  using workflow::StageSearch;
  st.own_search = kind.search == StageSearch::kRequired || kind.search == StageSearch::kSpace ||
                  (kind.search == StageSearch::kOptional && keys.has_search);
  if (kind.search == StageSearch::kRequired && !keys.has_search)
    return place_error(source, item_mark, prefix + "search",
                       "missing required key (" + an(st.kind) +
                           " stage needs its own search: {max_trials: ...} and space)");
  if (kind.search == StageSearch::kOptional && keys.has_search != keys.has_space)
    return place_error(source, item_mark, prefix + (keys.has_search ? "space" : "search"),
                       an(st.kind) + " stage's nested search needs both search and space");
  return Status::Ok();
}

// The program's own keys of a stage's `trainer:` (a stage kind with trainer_program_keys over a
// trainer kind that takes any parameter, the stage's or else the top level's): the keys that are
// neither `kind` nor a setting of the kind nor an alias of one, as JSON in `program`, and the item
// without them in `rest` (its view is walked with the kind's settings only). False when the stage
// gives none. The parameters by which hpctune gives a target its source (the kind's init_setting,
// source_trial_setting) are refused.
Result<bool> split_program_keys(const YNode& tree, const YNode* item, const std::string& prefix,
                                const std::string& source, json& program, YNode& rest) {
  const YEntry* own = find_entry(item, "trainer");
  if (own == nullptr || own->value.kind != YNode::Kind::kMap) return false;
  const YEntry* kind_entry = find_entry(&own->value, "kind");
  if (const YEntry* top = find_entry(&tree, "trainer"); kind_entry == nullptr && top != nullptr)
    kind_entry = find_entry(&top->value, "kind");
  if (kind_entry == nullptr || kind_entry->value.kind != YNode::Kind::kScalar) return false;
  const std::string kind = kind_entry->value.text;
  const auto* can = trainers::trainer_capabilities(kind);
  auto specs = trainers::trainer_setting_specs(kind);
  if (can == nullptr || can->params != trainers::TrainerParams::kAny || !specs.ok()) return false;
  // An alias stays with the settings too: the walker then says which setting was meant.
  auto declared = [&](const std::string& key) {
    if (key == "kind") return true;
    for (const auto& d : **specs) {
      if (d.key == key) return true;
      for (const auto& alias : d.aliases)
        if (alias == key) return true;
    }
    return false;
  };
  rest = *item;
  YEntry& trainer = *std::find_if(rest.entries.begin(), rest.entries.end(), [](const YEntry& e) { return e.key == "trainer"; });
  std::vector<YEntry> kept;
  for (auto& e : trainer.value.entries) {
    if (declared(e.key)) {
      kept.push_back(std::move(e));
      continue;
    }
    for (const char* reserved : {can->init_setting, can->source_trial_setting})
      if (reserved != nullptr && e.key == reserved)
        return place_error(source, e.key_mark, prefix + "trainer." + e.key,
                           "hpctune's own: a transfer gives each target its source through it (a variable, not a "
                           "parameter); leave it out");
    program[e.key] = to_json(e.value);
  }
  trainer.value.entries = std::move(kept);
  return !program.empty();
}

// The stage's search, space, early_stopping and trainer keys laid over the top level's in `view`
// (a trainer of the same kind is merged key by key; of another kind, it stands alone); the keys
// of the stage's own trainer in `own_trainer_keys`.
Status lay_stage_keys_over(YNode& view, const YNode* item, const std::string& prefix, const std::string& source,
                           std::set<std::string>& own_trainer_keys) {
  if (item == nullptr || item->kind != YNode::Kind::kMap) return Status::Ok();
  for (const auto& e : item->entries) {
    if (e.key == "search" || e.key == "space" || e.key == "early_stopping") view.entries.push_back(e);
    if (e.key == "trainer") {
      if (e.value.kind != YNode::Kind::kMap)
        return place_error(source, e.key_mark, prefix + "trainer", "expected a map of trainer settings");
      auto top = std::find_if(view.entries.begin(), view.entries.end(), [](const YEntry& t) { return t.key == "trainer"; });
      const YEntry* kind = find_entry(&e.value, "kind");
      if (top == view.entries.end() || top->value.kind != YNode::Kind::kMap ||
          (kind != nullptr && (find_entry(&top->value, "kind") == nullptr ||
                               find_entry(&top->value, "kind")->value.text != kind->value.text))) {
        // Another kind (or no top-level trainer): the stage's trainer stands alone.
        if (top != view.entries.end()) view.entries.erase(top);
        view.entries.push_back(e);
        for (const auto& k : e.value.entries) own_trainer_keys.insert(k.key);
      } else {
        // Looked up by key, not searched: a trainer may have thousands of env entries.
        std::unordered_map<std::string, std::size_t> at;
        for (std::size_t k = 0; k < top->value.entries.size(); ++k) at.emplace(top->value.entries[k].key, k);
        for (const auto& k : e.value.entries) {
          own_trainer_keys.insert(k.key);
          if (auto same = at.find(k.key); same != at.end()) top->value.entries[same->second] = k;
          else top->value.entries.push_back(k);
        }
      }
    }
  }
  return Status::Ok();
}

// A stage view's key path as the user wrote it: the stage's own sections and trainer keys under
// `prefix` ("stages[1].search.max_trials"), the top level's as they are.
Rename stage_rename(const std::string& prefix, const std::set<std::string>& own_trainer_keys) {
  return [prefix, own_trainer_keys](const std::string& path) {
    for (const char* key : kStageSections) {
      const std::string k(key);
      if (path == k || path.rfind(k + ".", 0) == 0) return prefix + path;
    }
    if (path.rfind("trainer.", 0) == 0) {
      const std::string key = path.substr(8, path.find_first_of(".[", 8) - 8);  // trainer.classes[0]: classes
      if (own_trainer_keys.count(key)) return prefix + path;
    }
    return path;
  };
}

// The stages' own views of the campaign, made linear in the size of the config (see
// parse_workflow in workflow_config.h): the top level less `stages`, copied once; the views of
// stages without keys of their own, shared by their stand-in search's max_trials; all views' nodes
// counted against kMaxStageViewNodes.
class StageViews {
 public:
  StageViews(const YNode& tree, const std::string& source) : source_(source) {
    base_.kind = tree.kind;
    base_.mark = tree.mark;
    for (const auto& e : tree.entries) {
      if (e.key == "stages") continue;
      base_.entries.push_back(e);
      base_nodes_ += e.value.size + 1;
    }
  }

  // The view of the stage at `prefix` ("stages[2]."), its own trainer's keys in `own_trainer_keys`.
  // A view that fails to parse is returned as the error unless the stage `defers` it (it reads its
  // inputs' trainers' output, and what they lack says more): then the first such error is kept in
  // `deferred` and the view is nullptr.
  Result<std::shared_ptr<const CampaignConfig>> view_of(const YNode* item, Mark item_mark, const std::string& prefix,
                                                        const StageItemKeys& keys, const std::string& trials, bool defers,
                                                        std::set<std::string>& own_trainer_keys,
                                                        std::optional<Error>& deferred) {
    if (!keys.own_keys && shared_views_.count(trials)) return shared_views_.at(trials);
    HPCTUNE_TRY(budget(base_nodes_ + (item ? item->size : 0), item_mark, prefix));
    YNode view = base_;
    HPCTUNE_TRY(lay_stage_keys_over(view, item, prefix, source_, own_trainer_keys));
    if (!keys.has_search) view.entries.push_back(stand_in_search(trials, item_mark));
    // The text stays with the campaign (workflow_campaign): a copy in each view made the views
    // quadratic in the size of the file.
    auto parsed = parse_tree(view, std::string(), source_, stage_rename(prefix, own_trainer_keys));
    if (!parsed.ok()) {
      if (!defers) return parsed.error();
      if (!deferred) deferred = parsed.error();
      return std::shared_ptr<const CampaignConfig>();
    }
    auto own = std::make_shared<const CampaignConfig>(std::move(parsed).value());
    if (!keys.own_keys) shared_views_.emplace(trials, own);
    return own;
  }

 private:
  Status budget(std::size_t nodes, Mark item_mark, const std::string& prefix) {
    view_nodes_ += nodes;
    if (view_nodes_ <= kMaxStageViewNodes) return Status::Ok();
    return place_error(source_, item_mark, prefix.substr(0, prefix.size() - 1),
                       "the stages' own views of the campaign come to more than " + std::to_string(kMaxStageViewNodes) +
                           " YAML nodes: the top level's " + std::to_string(base_nodes_) +
                           " are repeated for every stage with a search, space, early_stopping or trainer of its own "
                           "(fewer such stages, or a smaller top level)");
  }

  const std::string& source_;
  YNode base_;
  std::size_t base_nodes_ = 1;
  // The views of stages without keys of their own, by their stand-in search's max_trials.
  std::map<std::string, std::shared_ptr<const CampaignConfig>> shared_views_;
  std::size_t view_nodes_ = 0;
};

// The stage's own keys (its item less name, kind, from and the sections of its view) as the stage
// itself reads them (workflow/stage_settings.h: the one reader, with the declarations the table
// imported), defaults filled in.
Status read_stage_keys(StageConfig& st, const json& item, const std::string& prefix, const WorkflowPlaces& places) {
  st.settings = item;
  for (const char* key : {"name", "kind", "from", "trainer", "search", "space", "early_stopping"}) st.settings.erase(key);
  auto read = workflow::read_stage_settings(st.kind, st.settings);
  if (read.ok()) {
    st.settings = std::move(read).value();
    return Status::Ok();
  }
  const std::string& why = read.error().message();
  const std::string key = why.substr(0, why.find(':'));
  return place_error(places.source, places.walker.mark_of(prefix + key), prefix + key,
                     why.substr(std::min(why.size(), key.size() + 2)));
}

// The workflow's campaign: the main stage's view, with the config's text and every stage in its
// normalized config.
CampaignConfig workflow_campaign(std::vector<StageConfig> stages, std::size_t main, const std::string& yaml_text) {
  CampaignConfig c = *stages[main].own;
  c.text = yaml_text;
  c.main_stage = main;
  json normalized = json::array();
  for (const auto& st : stages) {
    json n = {{"name", st.name}, {"kind", st.kind}, {"from", st.from}};
    for (auto it = st.settings.begin(); it != st.settings.end(); ++it) n[it.key()] = it.value();
    const json& own = st.own->normalized;
    if (st.own_search) {
      n["search"] = own["search"];
      n["space"] = own["space"];
      if (workflow::find_stage_kind(st.kind)->search == workflow::StageSearch::kRequired)
        n["early_stopping"] = own["early_stopping"];
    }
    n["trainer"] = own["trainer"];
    for (const auto& [key, value] : st.trainer_params.items()) n["trainer"][key] = value;
    normalized.push_back(std::move(n));
  }
  c.normalized["stages"] = std::move(normalized);
  c.stages = std::move(stages);
  return c;
}

}  // namespace

Result<CampaignConfig> parse_workflow(const YNode& tree, const std::string& yaml_text, const std::string& source,
                                      const ParseOptions& options) {
  auto fail = [&](Mark m, const std::string& path, const std::string& what) { return place_error(source, m, path, what); };
  HPCTUNE_TRY(refuse_top_sections(tree, source));
  const YEntry* stages_entry = find_entry(&tree, "stages");
  Walker walker(source);
  walker.set_reads_local_files(options.local_files);
  const WorkflowPlaces places{source, walker};
  json root;
  HPCTUNE_TRY(walk_top_level(tree, *stages_entry, walker, root));
  const json& items = root["stages"];
  if (!items.is_array() || items.empty())
    return fail(stages_entry->key_mark, "stages", "give at least one stage, or leave stages out for a single search");
  const YNode& list = stages_entry->value;

  std::vector<StageConfig> stages(items.size());
  std::map<std::string, std::size_t> index;
  HPCTUNE_TRY(check_stage_graph(items, list, stages_entry->key_mark, places, stages, index));

  // Each stage's own view of the campaign, then its own keys.
  StageViews views(tree, source);
  // An ensemble's or transfer's view that fails is reported after the check of its inputs below:
  // "stage 'a' saves no predictions" says more than the view's complaint about a trainer it never runs.
  std::optional<Error> deferred;
  std::optional<std::size_t> main;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    StageConfig& st = stages[i];
    const std::string prefix = "stages[" + std::to_string(i) + "].";
    const YNode* item = i < list.items.size() ? &list.items[i] : nullptr;
    const Mark item_mark = item ? item->mark : stages_entry->key_mark;
    const StageItemKeys keys = item_keys(item);
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);  // the walker took only these
    HPCTUNE_TRY(check_stage_search(st, kind, keys, item_mark, prefix, source));
    const std::string trials =
        kind.trials_setting != nullptr ? std::to_string(items[i][kind.trials_setting].get<int64_t>()) : "1";
    // A stage that reads its inputs' trainers' output reports what they lack before its own view's complaint.
    const bool defers = kind.inputs_provide != nullptr;
    std::set<std::string> own_trainer_keys;
    // A transfer's `trainer: {lr: ..., epochs: ...}` over a program: its own keys, apart.
    json program = json::object();
    YNode without_program;
    if (kind.trainer_program_keys) {
      HPCTUNE_ASSIGN(const bool split, split_program_keys(tree, item, prefix, source, program, without_program));
      if (split) item = &without_program;
    }
    HPCTUNE_ASSIGN(std::shared_ptr<const CampaignConfig> own,
                   views.view_of(item, item_mark, prefix, keys, trials, defers, own_trainer_keys, deferred));
    if (own == nullptr) continue;  // deferred: st.own stays empty; nothing below reads a view that failed
    for (const auto& [key, value] : program.items()) own_trainer_keys.insert(key);
    st.trainer_keys = own_trainer_keys;
    st.trainer_params = std::move(program);
    HPCTUNE_TRY(read_stage_keys(st, items[i], prefix, places));
    HPCTUNE_TRY(finish_declared_settings(st, kind, prefix, places, *own));
    if (kind.steps_setting != nullptr) HPCTUNE_TRY(finish_step_settings(st, kind, *own, item, prefix, places));
    if (!main && st.own_search) main = i;
    st.own = std::move(own);
  }
  HPCTUNE_TRY(check_stage_needs(stages, index, places));
  if (deferred) return *deferred;
  HPCTUNE_TRY(check_stage_setting_rules(stages, index, list, stages_entry->key_mark, places));
  HPCTUNE_TRY(check_start_networks(stages, index, list, stages_entry->key_mark, places));
  HPCTUNE_TRY(check_stage_intervals(stages, places));
  if (!main)
    return fail(stages_entry->key_mark, "stages", "a workflow needs a stage that searches: " + searching_kinds());
  return workflow_campaign(std::move(stages), *main, yaml_text);
}

}  // namespace hpctune::config
