// The stages of a campaign: trials by stage, result summaries, the Stages table and a pbt stage's
// schedule (stages.h).
#include "report/stages.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/text.h"
#include "report/format.h"

namespace hpctune::report {

namespace {

using nlohmann::json;

// result[key] when it is an object member, else null: results are data, read defensively.
const json& member(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// A number to 4 digits, "?" when it is not one.
std::string num(const json& v) { return v.is_number() ? format_number(v.get<double>()) : "?"; }

// A difference with its sign: "+0.0708", "-0.0100".
std::string signed_num(const json& v) {
  if (!v.is_number()) return "?";
  const double d = v.get<double>();
  // Appended rather than `"+" + text`: GCC 12 warns (-Wrestrict) on that form, wrongly.
  std::string out = d >= 0 ? "+" : "";
  out += format_number(d);
  return out;
}

// "#14" for a trial id, "#?" when it is missing.
std::string trial_ref(const json& v) {
  std::string out = "#";  // not "#" + ...: GCC 12's -Wrestrict false positive (PR 105329)
  out += v.is_number_integer() ? std::to_string(v.get<int64_t>()) : "?";
  return out;
}

// An integer count, "?" when missing.
std::string count(const json& v) { return v.is_number_integer() ? std::to_string(v.get<int64_t>()) : "?"; }

// "3 trials", "1 trial", "? trials".
std::string counted(const json& n, const char* what) {
  return count(n) + " " + what + (n.is_number_integer() && n.get<int64_t>() == 1 ? "" : "s");
}

std::string search_summary(const json& r) {
  const json& s = member(r, "stop_when");
  if (!s.is_object()) return r.is_object() && !r.empty() ? r.dump() : "";
  const json& metric = member(s, "metric");
  const json& reaches = member(s, "reaches");
  const bool maximize = !member(s, "mode").is_string() || member(s, "mode").get<std::string>() != "min";
  // The threshold as the config wrote it (every digit), not rounded.
  std::string target = (metric.is_string() ? metric.get<std::string>() : "?") + (maximize ? " >= " : " <= ") +
                       (reaches.is_number() ? hpctune::format_number(reaches.get<double>()) : "?");
  const bool reached = member(s, "reached").is_boolean() && member(s, "reached").get<bool>();
  std::string out = reached ? "reached " + target + " at trial " + trial_ref(member(s, "trial"))
                            : target + " not reached";
  std::string after;
  if (member(s, "finished_trials").is_number_integer()) after += counted(member(s, "finished_trials"), "trial");
  if (member(s, "generations").is_number_integer()) {
    after += (after.empty() ? "" : ", ") + counted(member(s, "generations"), "generation");
  }
  if (member(s, "seconds").is_number()) {
    after += (after.empty() ? "" : ", ") + format_duration(member(s, "seconds").get<double>());
  }
  if (!after.empty()) out += " after " + after;
  return out;
}

// A metric's name as the summaries write it: "test_accuracy" as "test accuracy"; "?" without one.
std::string metric_label(const json& name) {
  if (!name.is_string() || name.get<std::string>().empty()) return "?";
  std::string out = name.get<std::string>();
  std::replace(out.begin(), out.end(), '_', ' ');
  return out;
}

// The blend beside its best single member: the member with the lowest validation loss, the loss
// the blend minimises (chosen_by: val_log_loss or val_mse), with its objective value beside the
// blend's. A result recorded before chosen_by (an older database) chose the member by the objective.
std::string ensemble_summary(const json& r) {
  const json& members = member(r, "members");
  const size_t n = members.is_array() ? members.size() : 0;
  const json& method = member(r, "method");
  const json& single = member(r, "best_single");
  const json& chosen_by = member(single, "chosen_by");
  std::string out = (method.is_string() ? method.get<std::string>() : "?") + ", " + std::to_string(n) +
                    (n == 1 ? " member" : " members") + " vs best single " + trial_ref(member(single, "trial")) + " (" +
                    (chosen_by == "val_mse"       ? std::string("lowest val MSE")
                     : chosen_by.is_string() ? "lowest " + metric_label(chosen_by)
                                             : std::string("best by the objective")) +
                    "): ";
  // "<label> <blend> vs <member>" for each figure, the blend's first.
  auto versus = [&](const char* key, const std::string& label) {
    return label + " " + num(member(r, key)) + " vs " + num(member(single, key));
  };
  const bool regression = member(r, "task") == "regression";
  out += regression ? versus("val_mse", "val MSE") : versus("val_log_loss", "val log loss");
  // The objective's value beside the loss, unless the objective is that loss.
  const json& objective = member(single, "objective");
  const json& metric = member(objective, "metric");
  if (metric.is_string() && metric != chosen_by) {
    const json& blend_value = member(member(r, "objective"), "value");
    out += ", " + metric_label(metric) + " " + (blend_value.is_number() ? num(blend_value) : std::string("-")) + " vs " +
           num(member(objective, "value"));
  }
  out += "; " + (regression ? versus("test_mse", "test MSE")
                            : versus("test_accuracy", "test acc") + ", " + versus("test_log_loss", "test log loss"));
  const json& skipped = member(r, "skipped");
  if (skipped.is_number_integer() && skipped.get<int64_t>() > 0) {
    out += "; " + counted(skipped, "trial") + " without predictions skipped";
  }
  const json& left_out = member(r, "left_out");
  if (left_out.is_array() && !left_out.empty()) {
    out += "; " + counted(json(left_out.size()), "trial") + " left out (predictions not finite:";
    for (const json& t : left_out) out += " " + trial_ref(member(t, "trial"));
    out += ")";
  }
  return out;
}

// A member of an object named by a string member of another ("compare_metric": "test_accuracy").
const json& named(const json& j, const json& name) {
  static const json none;
  return name.is_string() ? member(j, name.get<std::string>().c_str()) : none;
}

// The figure a transfer result compared targets and baselines by: its compare_metric. A result
// recorded before the stage named it (an older database) is read by its keys: the metric M of the
// paired "target_M" and "baseline_M", or the held-out ("test_") figure its target and baseline share.
json compared_metric(const json& r) {
  const json& named_metric = member(r, "compare_metric");
  if (named_metric.is_string()) return named_metric;
  const json& paired = member(r, "paired");
  if (paired.is_object()) {
    for (auto it = paired.begin(); it != paired.end(); ++it) {
      if (it.key().rfind("target_", 0) != 0) continue;
      const std::string m = it.key().substr(7);
      if (paired.contains("baseline_" + m)) return m;
    }
  }
  const json& target = member(r, "target");
  const json& baseline = member(r, "baseline");
  if (target.is_object()) {
    for (auto it = target.begin(); it != target.end(); ++it)
      if (it.key().rfind("test_", 0) == 0 && (!baseline.is_object() || baseline.contains(it.key()))) return it.key();
  }
  return json();
}

std::string transfer_summary(const json& r) {
  std::string out;
  const json metric = compared_metric(r);
  const std::string label = metric_label(metric);
  // The stage as a whole when it has pairs: the mean of its targets against that of their twins.
  const json& paired = member(r, "paired");
  if (paired.is_object()) {
    const json& wins = member(paired, "wins");
    const std::string m = metric.is_string() ? metric.get<std::string>() : "";
    out = "mean " + label + " " + num(member(paired, ("target_" + m).c_str())) + " vs baseline " +
          num(member(paired, ("baseline_" + m).c_str())) + " (" + signed_num(member(paired, "gain")) + ", better in " +
          (wins.is_number_integer() ? std::to_string(wins.get<int64_t>()) : "?") + " of " +
          counted(member(paired, "pairs"), "pair") + ")";
  } else {
    out = label + " " + num(named(member(r, "target"), metric));
    const json& baseline = member(r, "baseline");
    if (baseline.is_object()) {
      out += " vs baseline " + num(named(baseline, metric)) + " (" + signed_num(member(r, "gain")) + ")";
    }
  }
  const json& sources = member(r, "sources");
  if (sources.is_array() && !sources.empty()) {
    std::vector<std::string> refs;
    for (const auto& s : sources) refs.push_back(trial_ref(s));
    out += (sources.size() == 1 ? ", source " : ", sources ") + join(refs, ", ");
  }
  return out;
}

std::string pbt_summary(const json& r) {
  const json& best = member(r, "best");
  std::string out = counted(member(r, "population"), "member") + ", " + counted(member(r, "exploits"), "exploit");
  if (best.is_object()) {
    out += ": best " + trial_ref(member(best, "trial")) + " " + num(member(best, "value"));
    // Beside the objective, the held-out figure the stage named (pbt_stage.cpp: test_metric).
    const json& test = member(best, "test_metric");
    if (named(best, test).is_number()) out += " (" + metric_label(test) + " " + num(named(best, test)) + ")";
  } else {
    out += ": no member finished";
  }
  return out;
}

bool final_state(const std::string& state) { return state == "done" || state == "pruned" || state == "failed"; }

// A key of a YAML flow mapping: plain when it is safe, else a JSON string (JSON is YAML 1.2).
std::string yaml_key(const std::string& key) {
  bool plain = !key.empty() && (std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_');
  for (char c : key) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  static const std::set<std::string> kReserved = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"};
  std::string lower;
  for (char c : key) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return plain && !kReserved.count(lower) ? key : json(key).dump();
}

// A value in YAML flow style: numbers with every digit, strings as JSON strings.
std::string yaml_value(const json& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (out.size() > 1 ? ", " : "") + yaml_key(it.key()) + ": " + yaml_value(*it);
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const auto& e : v) out += (out.size() > 1 ? ", " : "") + yaml_value(e);
    return out + "]";
  }
  if (v.is_number_float()) return hpctune::format_number(v.get<double>());
  return v.dump();
}

// A parameter's value in the table: strings as they are, floats to 4 digits.
std::string table_cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return format_number(v.get<double>());
  return v.dump();
}

// The recorded schedule, checked: a list of {from_step, to_step (integers), params (an object)}.
Result<json> recorded_schedule(const store::StageRow& stage) {
  const std::string where = "pbt stage '" + stage.name + "'";
  const json& schedule = member(stage.result, "schedule");
  if (schedule.is_null()) {
    return err(Errc::kFailed, where + " completed without a schedule: none of its members finished");
  }
  if (!schedule.is_array()) return err(Errc::kFailed, where + ": its recorded schedule is not a list");
  for (size_t i = 0; i < schedule.size(); ++i) {
    const json& e = schedule[i];
    if (!member(e, "from_step").is_number_integer() || !member(e, "to_step").is_number_integer() ||
        !member(e, "params").is_object()) {
      return err(Errc::kFailed, where + ": interval " + std::to_string(i) +
                                    " of its recorded schedule needs integer from_step and to_step and a params object");
    }
  }
  return schedule;
}

// "trial 14, the best member of pbt stage 'evolve' (objective 0.885, test accuracy 0.8801)".
std::string best_member_line(const store::StageRow& stage) {
  const json& best = member(stage.result, "best");
  std::string out = "trial " + std::string(member(best, "trial").is_number_integer() ? std::to_string(member(best, "trial").get<int64_t>()) : "?") +
                    ", the best member of pbt stage '" + stage.name + "' (objective " + num(member(best, "value"));
  const json& test = member(best, "test_metric");
  if (named(best, test).is_number()) out += ", " + metric_label(test) + " " + num(named(best, test));
  return out + ")";
}

}  // namespace

std::vector<std::map<std::string, int64_t>> trials_by_stage(const std::vector<store::StageRow>& stages,
                                                            const std::vector<store::TrialRow>& trials) {
  std::map<std::string, int64_t> zeros;
  for (const auto state : store::kTrialStates) zeros[store::to_string(state)] = 0;
  std::vector<std::map<std::string, int64_t>> out(stages.size(), zeros);
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < stages.size(); ++i) index[stages[i].id] = i;
  for (const auto& t : trials) {
    auto it = index.find(t.stage_id);
    if (it != index.end()) {
      ++out[it->second][store::to_string(t.state)];
    } else if (t.stage_id == 0 && !stages.empty()) {
      ++out[0][store::to_string(t.state)];
    }
  }
  return out;
}

std::string stage_summary(const store::StageRow& stage) {
  const json& r = stage.result;
  if (r.is_null() || (r.is_object() && r.empty())) return "";
  if (!r.is_object()) return r.dump();
  if (stage.kind == "search") return search_summary(r);
  if (stage.kind == "ensemble") return ensemble_summary(r);
  if (stage.kind == "transfer") return transfer_summary(r);
  if (stage.kind == "pbt") return pbt_summary(r);
  return r.dump();
}

std::string transfer_metric(const store::StageRow& stage, const std::string& objective_metric) {
  const json metric = compared_metric(stage.result);
  if (metric.is_string() && !metric.get<std::string>().empty()) return metric.get<std::string>();
  const json& setting = member(stage.config_json, "compare_metric");
  if (setting.is_string() && !setting.get<std::string>().empty()) return setting.get<std::string>();
  const std::string val = "val_";
  if (objective_metric.rfind(val, 0) == 0) return "test_" + objective_metric.substr(val.size());
  return objective_metric;
}

std::string metric_label(const std::string& metric) { return metric_label(json(metric)); }

std::string shown_stage_state(const std::string& recorded, bool master_gone) {
  return master_gone && recorded == "running" ? "interrupted" : recorded;
}

void show_stage_states(std::vector<store::StageRow>& stages, bool master_gone) {
  for (auto& s : stages) s.state = shown_stage_state(s.state, master_gone);
}

bool show_stages(const std::vector<store::StageRow>& stages) {
  if (stages.size() > 1) return true;
  for (const auto& s : stages) {
    if (!stage_summary(s).empty()) return true;
  }
  return false;
}

std::string stages_table(const std::vector<store::StageRow>& stages, const std::vector<store::TrialRow>& trials,
                         size_t width) {
  const auto counts = trials_by_stage(stages, trials);
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < stages.size(); ++i) {
    int64_t total = 0, finished = 0;
    for (const auto& [state, n] : counts[i]) {
      total += n;
      if (final_state(state)) finished += n;
    }
    const std::string summary = stage_summary(stages[i]);
    rows.push_back({stages[i].name, stages[i].kind, stages[i].state,
                    total > 0 ? std::to_string(finished) + "/" + std::to_string(total) : "-",
                    summary.empty() ? "-" : summary});
  }
  const std::string table = format_table({"stage", "kind", "state", "trials", "result"}, rows);
  if (width == 0) return table;
  std::string out;
  size_t start = 0;
  while (start < table.size()) {
    size_t end = table.find('\n', start);
    if (end == std::string::npos) end = table.size();
    std::string line = table.substr(start, end - start);
    // A cut line ends in "…", except the rule under the header, which is only shorter.
    const bool rule = line.find_first_not_of("- ") == std::string::npos;
    if (display_width(line) > width) line = rule ? line.substr(0, width) : truncate_display(line, width - 1) + "…";
    out += line + "\n";
    start = end + 1;
  }
  return out;
}

Result<store::StageRow> find_pbt_stage(const std::vector<store::StageRow>& stages, const std::string& name) {
  std::vector<const store::StageRow*> pbt;
  for (const auto& s : stages) {
    if (s.kind == "pbt") pbt.push_back(&s);
  }
  const store::StageRow* found = nullptr;
  if (!name.empty()) {
    for (const auto& s : stages) {
      if (s.name == name) found = &s;
    }
    if (!found) {
      std::vector<std::string> names;
      for (const auto& s : stages) names.push_back(s.name);
      return err(Errc::kNotFound, "the campaign has no stage '" + name + "' (its stages: " + join(names, ", ") + ")");
    }
    if (found->kind != "pbt") {
      return err(Errc::kInvalidArgument, "stage '" + name + "' is a " + found->kind +
                                             " stage; only a pbt stage has a schedule of hyperparameters");
    }
  } else {
    if (pbt.empty()) return err(Errc::kNotFound, "the campaign has no pbt stage: only a pbt stage has a schedule of hyperparameters");
    if (pbt.size() > 1) {
      std::vector<std::string> names;
      for (const auto* s : pbt) names.push_back(s->name);
      return err(Errc::kInvalidArgument, "the campaign has several pbt stages (" + join(names, ", ") +
                                             "): choose one with --stage NAME");
    }
    found = pbt.front();
  }
  if (found->state != "completed") {
    return err(Errc::kUnavailable, "pbt stage '" + found->name + "' is " + found->state +
                                       ", not completed: its schedule is recorded when it completes");
  }
  return *found;
}

Result<std::string> schedule_text(const store::StageRow& stage, const std::string& format) {
  if (format != "table" && format != "json" && format != "yaml") {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, json, yaml");
  }
  HPCTUNE_ASSIGN(json schedule, recorded_schedule(stage));
  if (format == "json") {
    json best = member(stage.result, "best");
    return json{{"stage", stage.name}, {"best", best}, {"schedule", schedule}}.dump(2) + "\n";
  }
  if (format == "yaml") {
    std::string out = "# The schedule of hyperparameters of " + best_member_line(stage) + ".\n" +
                      "# Each interval trained steps (from_step, to_step] with its params, from the weights the\n"
                      "# interval before ended with; `trial` is the member that trained it.\n";
    for (const auto& e : schedule) {
      out += "- {from_step: " + e["from_step"].dump() + ", to_step: " + e["to_step"].dump() +
             ", params: " + yaml_value(e["params"]);
      if (member(e, "trial").is_number_integer()) out += ", trial: " + e["trial"].dump();
      out += "}\n";
    }
    return out;
  }
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& e : schedule) {
    for (auto it = e["params"].begin(); it != e["params"].end(); ++it) {
      if (seen.insert(it.key()).second) names.push_back(it.key());
    }
  }
  std::vector<std::string> header = {"from_step", "to_step"};
  header.insert(header.end(), names.begin(), names.end());
  header.push_back("trial");
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : schedule) {
    std::vector<std::string> r = {e["from_step"].dump(), e["to_step"].dump()};
    for (const auto& n : names) r.push_back(e["params"].contains(n) ? table_cell(e["params"][n]) : "");
    r.push_back(member(e, "trial").is_number_integer() ? e["trial"].dump() : "");
    rows.push_back(std::move(r));
  }
  return "Schedule of " + best_member_line(stage) + ":\n" + format_table(header, rows);
}

}  // namespace hpctune::report
