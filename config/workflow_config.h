// The workflow: a config with `stages:` parsed into its stages (config.h, StageConfig), each with
// its own view of the campaign, checked together (names, `from`, cycles, what each stage needs from
// its inputs' trainers). Internal to hpctune_config: not part of the public API (config.h).
#pragma once

#include <string>

#include "common/result.h"
#include "config/config.h"
#include "config/settings_walker.h"
#include "config/yaml_tree.h"

namespace hpctune::config {

// A workflow: `stages:` (config.h, StageConfig). The top level is checked together with the
// stages' items by one walk; then each stage's own view of the campaign is parsed from a tree of
// the top level's keys with the stage's search, space, early_stopping and trainer keys laid over
// them, its errors named by the stage's key paths.
//
// Linear in the size of the config: the top level (less `stages`) is copied once, not with every
// stage's; stages that set none of those keys (a one-line ensemble) share one view; the views
// that are parsed may together hold at most kMaxStageViewNodes nodes (the top level repeated in
// each stage with keys of its own); the config's text is kept by the campaign, not by each view.
Result<CampaignConfig> parse_workflow(const YNode& tree, const std::string& yaml_text, const std::string& source,
                                      const ParseOptions& options = {});

// One campaign (or one stage's view of it) from its tree: walked, checked across keys, seeded
// (config.cpp). `rename` names a stage's keys as written; nullptr for a single search.
Result<CampaignConfig> parse_tree(const YNode& tree, const std::string& yaml_text, const std::string& source_name,
                                  Rename rename, const ParseOptions& options = {});

}  // namespace hpctune::config
