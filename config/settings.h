// The settings table: every key of a campaign config, declared once.
//
// Each key is one Setting: its path, type, default, bounds or allowed values, whether it is
// required, its help text and the scope in which it exists. Everything user-facing about a config
// is derived from this one list:
//   - the parser (settings_walker.cpp) walks the YAML against it: unknown keys ("did you mean ...?"), types,
//     bounds, enums, required keys and defaults all come from here;
//   - `hpctune validate` prints the normalized config the parser builds from it;
//   - configs/reference.yaml is reference_yaml(), rendered from it (a test keeps the checked-in
//     file equal to it).
// Adding a key means adding one entry to the table in settings.cpp, and reading it in campaign_checks.cpp;
// a key of an algorithm or a trainer kind is declared beside its code instead (below).
//
// Paths. Dotted, e.g. "search.max_trials". Two wildcard segments:
//   "*"   a name the user picks in a map:      "space.*.low" is `low` of every space parameter;
//   "[]"  an item of a list of sections:       "objectives[].metric".
// A section (Type::kSection) is declared before its keys, and the table is in reference order.
//
// Scopes. A key may exist only while another key (its selector) has one of some values:
//   {path "trainer.lr",        scope {"trainer.kind", {"mlp"}}}      a setting of the mlp trainer;
//   {path "space.*.step",      scope {"space.*.type", {"int"}}}      `step` of int parameters;
//   {path "search.settings.x", scope {"search.algorithm", {"genetic"}}}.
// The selector is a key of the same section or of an enclosing one; wildcards in it stand for the
// same names as in the key's own path. Several entries may share a path with different scopes
// (`steps` of the sleep and of the function trainer). A key given outside its scope is an error
// that says where it belongs ("unknown key for trainer kind 'sleep' (a setting of kind 'mlp')").
//
// Imported keys. The search algorithms, early stoppers and trainer kinds declare their own
// settings (search::searcher_settings, search::stopper_settings, trainers::trainer_catalog, all
// in the shape of common/settings.h); settings() imports them as keys of `search.settings` scoped
// by search.algorithm, of `early_stopping` scoped by its kind and of `trainer` scoped by
// trainer.kind, so they are validated, suggested and documented like every other key but declared
// only once, next to the code that reads them (which checks what it receives against the same
// declaration).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/text.h"

namespace hpctune::config {

enum class Type {
  kSection,     // a map of declared keys
  kList,        // a list of sections; its items' keys are declared under "<path>[]"
  kSpace,       // map parameter name -> spec (a section "space.*") or a plain value (fixed)
  kString,
  kBool,        // true | false (YAML 1.2: yes/no/on/off are strings, and rejected here)
  kInt,         // a 64-bit integer; a whole float such as 1e6 is accepted
  kNumber,      // a finite number; normalized to a double
  kDuration,    // seconds: a number or a string such as "90s", "10m", "2h", "1h30m"
  kEnum,        // one of `choices`
  kIntList,     // an integer or a list of integers (possibly empty), each within the bounds
  kStringMap,   // map string -> string (scalars are taken as their text)
  kValue,       // any YAML value, converted to JSON
  kValueList,   // a non-empty list of any values
  kCommandLine, // a command line: a string, or a non-empty list of strings (each item's text)
  kCondition,   // {parent: value} or {parent: [values]}
};
const char* type_name(Type type) noexcept;

struct Scope {
  std::string key;                  // path of the selector; "" = the key always exists
  std::vector<std::string> values;  // the key exists while the selector is one of these
  bool always() const noexcept { return key.empty(); }
  bool contains(std::string_view value) const;
};

struct Setting {
  std::string path;
  Type type = Type::kString;
  std::string help;  // sentences; the first one is quoted in "missing required key" messages
  // The value used when the key is absent; null = no default. For a section: {} materializes an
  // absent section with its keys' defaults (and reports its required keys), null leaves an absent
  // section out (objective, which has the alternative objectives).
  nlohmann::json default_value = nullptr;
  std::optional<double> min;  // numeric bounds (for kIntList: of every item)
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> choices;  // kEnum
  bool required = false;             // within its scope
  Scope scope;
  std::vector<std::string> aliases;  // other names users type for it, only for "did you mean"
  // The value shown in the reference when it is not the default (YAML text; required keys and
  // the examples of space and objectives). The reference config parses, so examples are valid.
  std::string example;
  std::string default_note;  // a default computed from other keys, shown in the reference
  // The reference shows the key commented out (an alternative, or a computed default).
  bool reference_commented = false;
  // kSection: keys that are not declared pass through unchanged, except while `closed_when`
  // holds (search.settings: open for an algorithm this build does not know, whose settings
  // cannot be checked here; make_searcher checks them).
  bool open = false;
  Scope closed_when;
};

// The table, in reference order: the declarations of settings.cpp plus the imported algorithm,
// stopper and trainer settings. Built once, on first use; thread-safe.
const std::vector<Setting>& settings();
// For tests only: builds the table again from the declarations, after a test changed one
// (trainers::mutable_setting_specs_for_testing). No other thread may use the table meanwhile, and
// pointers into the old table (children(), find_settings()) are invalid afterwards.
void reload_settings_for_testing();

// The declarations directly under the section `section` ("" for the top level, "space.*",
// "objectives[]"), in table order, every scope.
std::vector<const Setting*> children(std::string_view section);

// The declarations with exactly this path (several when scopes differ), in table order.
std::vector<const Setting*> find_settings(std::string_view path);

// The last path segment: "max_trials" for "search.max_trials".
std::string_view leaf_name(std::string_view path) noexcept;

// What a key accepts, for the reference and messages: "integer 1..4096", "max | min",
// "seconds or a duration such as 90s, 10m, 2h, > 0".
std::string describe_type(const Setting& setting);
// describe_type plus ", required" or ", default: <value>".
std::string describe(const Setting& setting);

// Checks a value, already converted from YAML to JSON, against a leaf setting (not kSection,
// kList, kSpace): type, bounds, choices. Returns the normalized value (kInt as int64, kNumber and
// kDuration as double seconds, a condition as {parent: [values]}) or kConfig with the problem
// alone, no path:
// "-3 is below the minimum 1", "expected an integer, got \"ten\"", "unknown value 'bayes';
// expected one of random, grid, ... (did you mean 'bayesian'?)".
Result<nlohmann::json> check_value(const Setting& setting, const nlohmann::json& value);

// Seconds from "90", "90s", "1.5m", "2h", "1h30m", "500ms", "1d" (units ms, s, m, h, d; parts in
// any order, summed). kConfig for anything else, with the accepted forms in the message.
Result<double> parse_duration(std::string_view text);

// The "did you mean" of every unknown name, shared with the trainers: common/text.h.
using hpctune::Candidate;
using hpctune::did_you_mean;
using hpctune::edit_distance;

// Candidates for the declarations `decls`: their names and aliases.
std::vector<Candidate> candidates_of(const std::vector<const Setting*>& decls);

// The value of a plain (unquoted) YAML scalar under the YAML 1.2 core schema: null ("", ~, null),
// true/false, integers (decimal, 0x, 0o; too large for 64 bits: a double), floats (1.5, 1e-3,
// .5, .inf, .nan); anything else is the string itself.
nlohmann::json resolve_plain_scalar(std::string_view text);

// A JSON value as YAML flow text: strings plain when that reads back as the same string, numbers
// in their shortest round-trip form; [a, b], {k: v}.
std::string to_yaml_flow(const nlohmann::json& value);
// The shortest text that reads back as the same double ("0.05", "1e-06", "3"): common/text.h.
using hpctune::format_number;

// Space parameter names that need not be settings of the trainer kind: any name for `command`
// (the command gets every parameter), x1, x2, ... for `function`.
bool free_space_name(std::string_view trainer_kind, std::string_view name);

}  // namespace hpctune::config
