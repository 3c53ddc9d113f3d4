// The settings walker: a config's YAML tree (yaml_tree.h) walked against the settings table
// (settings.h) into JSON, one key at a time: unknown keys (with a "did you mean"), keys out of their
// kind's scope, types, bounds, enum values, required keys and defaults, every error at its key's
// file:line:column. It keeps where each key was written (mark_of), for the checks across keys that
// follow (campaign_checks.h) and for the workflow's (workflow_config.h). Internal to hpctune_config:
// not part of the public API (config.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "config/settings.h"
#include "config/yaml_tree.h"

namespace hpctune::config {

// Maps a key path to the one the user sees ("search.max_trials" -> "stages[1].search.max_trials").
using Rename = std::function<std::string(const std::string&)>;

// Integers, numbers and durations: the types whose values are numbers.
bool is_numeric_type(Type t);

class Walker {
 public:
  using json = nlohmann::json;

  explicit Walker(std::string source, std::function<std::string(const std::string&)> rename = nullptr)
      : source_(std::move(source)), rename_(std::move(rename)) {}

  // `rename` maps a key path to the one the user sees: a stage's own keys are walked as the top
  // level's ("search.max_trials") and named as written ("stages[1].search.max_trials").
  Error fail(Mark mark, const std::string& path, const std::string& what) const;

  // The mark of the key at `path`, or of the closest enclosing key that was given.
  Mark mark_of(std::string path) const;
  bool given(const std::string& path) const { return marks_.count(path) != 0; }
  // Whether it walks a stage's view (its paths are renamed), not a whole campaign.
  bool walks_stage_view() const { return static_cast<bool>(rename_); }
  // Whether the checks may judge the files a trial will read (data sets, checkpoints) by what is
  // on this machine (ParseOptions::local_files).
  bool reads_local_files() const { return local_files_; }
  void set_reads_local_files(bool local) { local_files_ = local; }
  // The value at `path` as written in the file (a plain scalar), else `otherwise`.
  std::string text_of(const std::string& path, std::string otherwise) const;

  // Walks a section (a map of declared keys) into `out`. `pattern` is its table path ("" for the
  // top level, "space.*"), `path` its concrete path ("space.lr"), `where` the mark of its key
  // (where a missing key is reported).
  Status section(const YNode* node, const std::string& pattern, const std::string& path, Mark where, json& out,
                 const Setting* decl);

  Status space(const YNode& node, const std::string& path, Mark where, json& out);

  const std::vector<std::string>& space_order() const { return space_order_; }

 private:
  struct Frame {
    std::string pattern;
    json* out;
  };

  // The value of the selector `selector_pattern` ("trainer.kind", "space.*.type") in the walk so far.
  std::optional<std::string> selector_value(const std::string& selector_pattern) const;
  bool active(const Setting& s) const;
  const Setting* active_of(const std::vector<const Setting*>& decls) const;
  Status section_body(const YNode* node, const std::string& pattern, const std::string& path, Mark where, json& out,
                      const Setting* decl);
  Status fill_default(const Setting& s, const std::string& path, Mark where, json& out);
  Status missing(const Setting& s, const std::string& path, Mark where) const;
  bool active_scope(const Scope& scope) const;
  Status unknown_key(const YEntry& e, const std::string& pattern, const std::string& path,
                     const std::vector<const Setting*>& kids) const;
  Status out_of_scope(const YEntry& e, const std::string& path, const std::vector<const Setting*>& decls) const;
  // One value of a declared key.
  Status value(const Setting& s, const YNode& node, const std::string& path, Mark key_mark, json& out);
  Status leaf(const Setting& s, const YNode& node, const std::string& path, Mark mark, json& out);

  std::string source_;
  std::vector<Frame> frames_;
  std::function<std::string(const std::string&)> rename_;
  bool local_files_ = true;
  std::map<std::string, Mark> marks_;
  std::map<std::string, std::string> texts_;
  std::vector<std::string> space_order_;
};

}  // namespace hpctune::config
