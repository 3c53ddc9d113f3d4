// The campaign config's entry points (config.h): parse_config and load_config, parse_tree (one
// campaign from its tree, which the workflow's stages share), the CampaignConfig methods and
// model_startup. The parser's parts: yaml_tree.h (YAML -> a tree with marks), settings_walker.h (the
// tree against the settings table), campaign_checks.h (the checks across keys), workflow_config.h
// (stages) and stage_inputs.h (what a stage needs from its inputs' trainers).
#include "config/config.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <sys/stat.h>

#include "config/campaign_checks.h"
#include "config/settings_walker.h"
#include "config/workflow_config.h"
#include "config/yaml_tree.h"
#include "search/algorithms.h"

namespace hpctune::config {

using nlohmann::json;

search::SearchSpec CampaignConfig::search_spec() const {
  search::SearchSpec spec;
  spec.algorithm = algorithm;
  spec.settings = search_settings;
  spec.space = space;
  spec.objectives = objectives;
  spec.seed = seed;
  spec.max_trials = max_trials;
  spec.noisy = noisy;
  // Under early stopping the model knows which values are partial (search/searcher.h: Fidelity).
  spec.fidelity = search::stopper_fidelity(stopper_spec(), full_step);
  return spec;
}

search::StopperSpec CampaignConfig::stopper_spec() const {
  search::StopperSpec spec;
  spec.kind = early_stopping;
  spec.settings = early_stopping_settings;
  spec.maximize = objectives.empty() || objectives.front().maximize;
  spec.seed = seed;
  return spec;
}

std::optional<ModelStartup> model_startup(const CampaignConfig& c) {
  const auto info = search::model_startup_of(c.search_spec());  // auto resolved to what it runs
  if (!info) return std::nullopt;
  ModelStartup out;
  out.random_trials = info->random_trials;
  out.model_used = out.random_trials < c.max_trials;
  const std::string n = std::to_string(out.random_trials), budget = std::to_string(c.max_trials);
  if (out.model_used)
    out.text = info->algorithm + ": the first " + n + " of " + budget +
               " trials are random start-up; the model suggests from trial " + std::to_string(out.random_trials + 1) + " on";
  else
    out.text = info->algorithm + ": " + n + " random start-up trials of " + budget +
               "; the model is never used (lower search.settings." + info->setting + " or raise search.max_trials)";
  return out;
}

// One campaign (or one stage's view of it) from its tree.
Result<CampaignConfig> parse_tree(const YNode& tree, const std::string& yaml_text, const std::string& source_name,
                                  Rename rename, const ParseOptions& options) {
  Walker walker(source_name, std::move(rename));
  walker.set_reads_local_files(options.local_files);
  json root;
  HPCTUNE_TRY(walker.section(&tree, "", "", Mark{}, root, nullptr));

  CampaignConfig c;
  c.source = source_name;
  c.text = yaml_text;
  HPCTUNE_TRY(build_campaign(walker, root, c));
  c.normalized = std::move(root);
  c.set_seed(c.seed);
  return c;
}


Result<CampaignConfig> parse_config(const std::string& yaml_text, const std::string& source_name,
                                    const ParseOptions& options) {
  HPCTUNE_ASSIGN(YNode tree, read_tree(yaml_text, source_name));
  if (find_entry(&tree, "stages") != nullptr) return parse_workflow(tree, yaml_text, source_name, options);
  return parse_tree(tree, yaml_text, source_name, nullptr, options);
}

void CampaignConfig::set_seed(uint64_t campaign_seed) {
  seed = campaign_seed;
  // Every stage's view follows (its trainer's data seed included): copies, as views may be shared
  // (between stages, and with a copy of this campaign); one copy of each, however many stages
  // share it. The old views are held until the end, so that no address is reused while mapped.
  std::map<const CampaignConfig*, std::pair<std::shared_ptr<const CampaignConfig>, std::shared_ptr<const CampaignConfig>>>
      copies;
  for (StageConfig& st : stages) {
    if (!st.own || st.own->seed == campaign_seed) continue;
    auto& [old_view, copy] = copies[st.own.get()];
    if (!copy) {
      auto fresh = std::make_shared<CampaignConfig>(*st.own);
      fresh->set_seed(campaign_seed);
      old_view = st.own;
      copy = std::move(fresh);
    }
    st.own = copy;
  }
  if (data_seed_given || !trainer.contains("data_seed")) return;
  trainer["data_seed"] = campaign_seed;
  if (normalized.contains("trainer") && normalized["trainer"].is_object()) normalized["trainer"]["data_seed"] = campaign_seed;
}

Result<CampaignConfig> load_config(const std::string& path, const ParseOptions& options) {
  // Every way a config file cannot be used is the user's to fix (exit 2, like any config error).
  HPCTUNE_ASSIGN(const std::string text, read_yaml_file(path, "config", kMaxConfigBytes));
  return parse_config(text, path, options);
}

}  // namespace hpctune::config
