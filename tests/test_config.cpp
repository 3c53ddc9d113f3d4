// The YAML campaign config: a full config with every field, defaults, the settings table, the
// bad-config fixtures under tests/configs/bad (each with its exact message and location), the
// duration parser, "did you mean", and configs/reference.yaml kept equal to reference_yaml().
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/limits.h"
#include "common/shell_template.h"
#include "config/config.h"
#include "config/settings.h"
#include "search/searcher.h"
#include "tests/temp_dir.h"
#include "trainers/trainer_settings.h"

using hpctune::Errc;
using nlohmann::json;
namespace config = hpctune::config;
namespace search = hpctune::search;

namespace {

std::string source_path(const std::string& relative) { return std::string(HPCTUNE_SOURCE_DIR) + "/" + relative; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

config::CampaignConfig parse_ok(const std::string& text) {
  auto parsed = config::parse_config(text, "test.yaml");
  if (!parsed.ok()) FAIL("unexpected error: " << parsed.error().message());
  return std::move(parsed).value();
}

std::string parse_error(const std::string& text, Errc expected = Errc::kConfig) {
  auto parsed = config::parse_config(text, "test.yaml");
  REQUIRE_MESSAGE(!parsed.ok(), "parsed although it should not:\n" << text);
  CHECK(parsed.error().code() == expected);
  return parsed.error().message();
}

const search::ParamSpec& param(const config::CampaignConfig& c, const std::string& name) {
  const auto* p = c.space.find(name);
  REQUIRE_MESSAGE(p != nullptr, "no parameter " << name);
  return *p;
}

const char* const kFull = R"(# Every section, most keys given.
name: fashion-sweep
storage: runs/fashion.db
seed: 42
objective:
  metric: val_loss
  mode: min
space:
  lr: {type: float, low: 1.0e-4, high: 0.3, log: true}
  batch_size: {type: int, low: 32, high: 512, step: 32}
  activation: {type: choice, values: [relu, tanh], ordered: true}
  nesterov: {type: choice, values: [false, true]}
  momentum:
    type: float
    low: 0.5
    high: 0.99
    when: {nesterov: true}
  dropout: {type: float, low: 0.0, high: 0.5, resolution: 6}
  epochs: 4
  hidden: [128, 64]
  weight_decay: {type: fixed, value: 1.0e-5}
search:
  algorithm: random
  max_trials: 64
  max_time: 1h30m
  max_attempts: 5
  init: sobol
  warm_start: old.db
early_stopping:
  kind: asha
  grace_period: 2
trainer:
  kind: mlp
  lr: 0.01
  batch_size: 128
  activation: tanh
resources:
  backend: local
  groups: 8
  ranks: {data: 2, model: 1}
  threads: 4
  heartbeat_interval: 500ms
  heartbeat_timeout: 30s
  max_group_restarts: 7
  startup_timeout: 2m
)";

const char* const kMinimal = R"(name: demo
objective: {metric: value}
search: {max_trials: 3}
trainer: {kind: sleep}
)";

}  // namespace

TEST_CASE("a full config parses with every field") {
  const auto c = parse_ok(kFull);
  CHECK(c.source == "test.yaml");
  CHECK(c.text == kFull);
  CHECK(c.name == "fashion-sweep");
  CHECK(c.storage == "runs/fashion.db");
  CHECK(c.seed == 42);
  REQUIRE(c.objectives.size() == 1);
  CHECK(c.objectives[0].metric == "val_loss");
  CHECK_FALSE(c.objectives[0].maximize);

  REQUIRE(c.space.size() == 9);
  const auto& lr = param(c, "lr");
  CHECK(lr.type == search::ParamType::kFloat);
  CHECK(lr.low == doctest::Approx(1e-4));
  CHECK(lr.high == doctest::Approx(0.3));
  CHECK(lr.log);
  CHECK(lr.resolution == 0);
  const auto& batch = param(c, "batch_size");
  CHECK(batch.type == search::ParamType::kInt);
  CHECK(batch.low == 32);
  CHECK(batch.high == 512);
  CHECK(batch.step == 32);
  CHECK_FALSE(batch.log);
  const auto& activation = param(c, "activation");
  CHECK(activation.type == search::ParamType::kChoice);
  CHECK(activation.choices == std::vector<json>{"relu", "tanh"});
  CHECK(activation.ordered);
  const auto& momentum = param(c, "momentum");
  REQUIRE(momentum.when.has_value());
  CHECK(momentum.when->parent == "nesterov");
  CHECK(momentum.when->values == std::vector<json>{true});
  CHECK(param(c, "dropout").resolution == 6);
  CHECK(param(c, "epochs").type == search::ParamType::kFixed);
  CHECK(param(c, "epochs").value == 4);
  CHECK(param(c, "hidden").value == json::array({128, 64}));
  CHECK(param(c, "weight_decay").value.get<double>() == doctest::Approx(1e-5));
  // Parents before children: nesterov before momentum.
  CHECK(c.space.index_of("nesterov") < c.space.index_of("momentum"));

  CHECK(c.algorithm == "random");
  CHECK(c.max_trials == 64);
  CHECK(c.max_time_s == doctest::Approx(5400));
  CHECK(c.max_attempts == 5);
  CHECK(c.init == "sobol");
  CHECK(c.search_settings["init"] == "sobol");  // search.init is random's `init` setting
  CHECK(c.warm_start == "old.db");

  CHECK(c.early_stopping == "asha");
  CHECK(c.early_stopping_settings["grace_period"] == 2);
  CHECK(c.early_stopping_settings.contains("reduction_factor"));  // the stopper's defaults, applied
  CHECK_FALSE(c.early_stopping_settings.contains("kind"));

  CHECK(c.trainer["kind"] == "mlp");
  CHECK(c.trainer["lr"].get<double>() == doctest::Approx(0.01));
  CHECK(c.trainer["batch_size"] == 128);
  CHECK(c.trainer["activation"] == "tanh");
  CHECK(c.trainer["epochs"] == 10);  // default
  CHECK(c.trainer["hidden"] == json::array({256}));
  CHECK(c.trainer["data"] == "/usr/share/datasets/fashion-mnist");
  CHECK(c.trainer["val_fraction"].get<double>() == doctest::Approx(0.1));
  CHECK_FALSE(c.trainer.contains("layers"));  // no default: derived by the trainer

  CHECK(c.resources.backend == "local");
  CHECK(c.resources.groups == 8);
  CHECK(c.resources.ranks_data == 2);
  CHECK(c.resources.ranks_model == 1);
  CHECK(c.resources.threads == 4);
  CHECK(c.resources.heartbeat_interval_s == doctest::Approx(0.5));
  CHECK(c.resources.heartbeat_timeout_s == doctest::Approx(30));
  CHECK(c.resources.max_group_restarts == 7);
  CHECK(c.resources.startup_timeout_s == doctest::Approx(120));

  // normalized: the same, as JSON, with objective turned into objectives and durations in seconds.
  const json& n = c.normalized;
  CHECK_FALSE(n.contains("objective"));
  CHECK(n["objectives"] == json::parse(R"([{"metric": "val_loss", "mode": "min", "noisy": false}])"));
  CHECK(n["search"]["max_time"].get<double>() == doctest::Approx(5400));
  CHECK(n["resources"]["heartbeat_interval"].get<double>() == doctest::Approx(0.5));
  CHECK(n["space"]["epochs"] == json::parse(R"({"type": "fixed", "value": 4})"));
  CHECK(n["space"]["batch_size"]["low"].is_number_integer());
  CHECK(n["space"]["momentum"]["when"] == json::parse(R"({"nesterov": [true]})"));
  CHECK(n["early_stopping"]["kind"] == "asha");
}

TEST_CASE("a minimal config gets every default") {
  const auto c = parse_ok(kMinimal);
  CHECK(c.name == "demo");
  CHECK(c.storage == "demo.db");
  CHECK(c.normalized["storage"] == "demo.db");
  CHECK(c.seed == 0);
  REQUIRE(c.objectives.size() == 1);
  CHECK(c.objectives[0].maximize);
  CHECK(c.space.size() == 0);
  CHECK(c.algorithm == "auto");  // issue 12: it picks from the space and the budget
  CHECK(c.max_trials == 3);
  CHECK(c.max_time_s == 0);
  CHECK(c.max_attempts == 3);
  CHECK(c.warm_start.empty());
  CHECK(c.early_stopping == "none");
  CHECK(c.early_stopping_settings == json::object());
  CHECK(c.trainer == json::parse(R"({"kind": "sleep", "seconds": 0.0, "steps": 1, "metric": "value", "value": 0.0})"));
  const config::Resources defaults;
  CHECK(c.resources.backend == defaults.backend);
  CHECK(c.resources.groups == defaults.groups);
  CHECK(c.resources.ranks_data == defaults.ranks_data);
  CHECK(c.resources.ranks_model == defaults.ranks_model);
  CHECK(c.resources.threads == defaults.threads);
  CHECK(c.resources.heartbeat_interval_s == defaults.heartbeat_interval_s);
  CHECK(c.resources.heartbeat_timeout_s == defaults.heartbeat_timeout_s);
  CHECK(c.resources.max_group_restarts == defaults.max_group_restarts);
  CHECK(c.resources.startup_timeout_s == defaults.startup_timeout_s);
  // Same text, same result: resume re-parses the stored text.
  CHECK(parse_ok(c.text).normalized == c.normalized);
}

TEST_CASE("search_spec and stopper_spec build a working searcher and stopper") {
  const auto c = parse_ok(kFull);
  const search::SearchSpec spec = c.search_spec();
  CHECK(spec.algorithm == "random");
  CHECK(spec.seed == 42);
  CHECK(spec.max_trials == 64);
  CHECK(spec.space.size() == 9);
  REQUIRE(spec.objectives.size() == 1);
  CHECK(spec.objectives[0].metric == "val_loss");
  auto searcher = search::make_searcher(spec);
  REQUIRE_MESSAGE(searcher.ok(), searcher.error().message());
  const auto suggestions = searcher.value()->ask(5).value();
  REQUIRE(suggestions.size() == 5);
  for (const auto& s : suggestions) CHECK_MESSAGE(spec.space.contains(s.params).ok(), s.params.dump());

  const search::StopperSpec stopper = c.stopper_spec();
  CHECK(stopper.kind == "asha");
  CHECK_FALSE(stopper.maximize);
  CHECK(stopper.seed == 42);
  auto made = search::make_stopper(stopper);
  CHECK_MESSAGE(made.ok(), made.error().message());
}

TEST_CASE("objectives, fixed values, anchors and merge keys") {
  const auto c = parse_ok(R"(name: multi
objectives:
  - {metric: val_accuracy}
  - {metric: train_seconds, mode: min}
space:
  lr: &range {type: float, low: 0.01, high: 0.1}
  momentum: {<<: *range, low: 0.5, high: 0.99}
  dropout: {<<: *range, high: 0.3}
  epochs: 2
search: {max_trials: 5}
trainer: {kind: mlp, epochs: 1}
)");
  REQUIRE(c.objectives.size() == 2);
  CHECK(c.objectives[0].metric == "val_accuracy");
  CHECK(c.objectives[0].maximize);
  CHECK(c.objectives[1].metric == "train_seconds");
  CHECK_FALSE(c.objectives[1].maximize);
  CHECK(param(c, "momentum").low == doctest::Approx(0.5));   // its own keys win over the merged ones
  CHECK(param(c, "momentum").high == doctest::Approx(0.99));
  CHECK(param(c, "dropout").low == doctest::Approx(0.01));   // merged
  CHECK(param(c, "dropout").high == doctest::Approx(0.3));
  CHECK(param(c, "epochs").value == 2);  // a searched (here: fixed) value overrides trainer.epochs
}

TEST_CASE("space values are checked and normalized against the trainer's settings") {
  // A duration string in a fixed value becomes seconds, as the trainer reads it.
  const auto sleep = parse_ok(R"(name: s
objective: {metric: value}
space:
  seconds: 2s
  value: {type: choice, values: [1, 2.5]}
search: {max_trials: 2}
trainer: {kind: sleep}
)");
  CHECK(param(sleep, "seconds").value.get<double>() == doctest::Approx(2.0));
  // Values of a number setting are numbers.
  CHECK(param(sleep, "value").choices[0].is_number());

  // An int parameter for hidden (int or list of ints) is fine; a string choice is not.
  parse_ok(R"(name: h
objective: {metric: val_accuracy}
space:
  hidden: {type: int, low: 16, high: 512, log: true}
search: {max_trials: 2}
trainer: {kind: mlp}
)");
  const std::string message = parse_error(R"(name: h
objective: {metric: val_accuracy}
space:
  activation: {type: choice, values: [relu, swish]}
search: {max_trials: 2}
trainer: {kind: mlp}
)");
  CHECK(message ==
        "test.yaml:4:45: space.activation.values[1]: unknown value 'swish'; expected one of relu, tanh, sigmoid "
        "(trainer.activation)");
}

TEST_CASE("function and command trainers take free parameter names") {
  const auto f = parse_ok(R"(name: f
objective: {metric: value, mode: min}
space:
  x1: {type: float, low: -5, high: 10}
  x2: {type: float, low: 0, high: 15}
  noise: 0.1
search: {max_trials: 2}
trainer: {kind: function, name: branin}
)");
  CHECK(f.space.size() == 3);
  CHECK(f.trainer["name"] == "branin");
  const auto cmd = parse_ok(R"(name: c
objective: {metric: loss, mode: min}
space:
  anything_goes: {type: int, low: 1, high: 4}
search: {max_trials: 2}
trainer:
  kind: command
  command: python3 train.py
  timeout: 10m
  env: {OMP_NUM_THREADS: 1, MODE: fast}
)");
  CHECK(cmd.trainer["command"] == "python3 train.py");
  CHECK(cmd.trainer["timeout"].get<double>() == doctest::Approx(600));
  CHECK(cmd.trainer["env"] == json::parse(R"({"OMP_NUM_THREADS": "1", "MODE": "fast"})"));
  CHECK(cmd.trainer["grace"].get<double>() == doctest::Approx(5));
  CHECK(cmd.trainer["workdir"] == "");
  // Every value the command trainer provides may stand in the template (the list is shared with
  // the trainer: common/shell_template.h).
  for (const char* builtin : hpctune::kTemplateBuiltins) {
    CAPTURE(builtin);
    parse_ok(std::string("name: c\nobjective: {metric: loss}\nsearch: {max_trials: 2}\n"
                         "trainer: {kind: command, command: 'echo {") + builtin + "}'}\n");
  }
  // The command trainer needs its command.
  CHECK(parse_error(R"(name: c
objective: {metric: loss}
search: {max_trials: 2}
trainer:
  kind: command
)") == "test.yaml:4:1: trainer.command: missing required key (the command line run for each trial; as a list "
            "[program, arg, \"{name}\"] it runs without a shell, each item one argument)");
}

// Each fixture, the location and the exact message after "<path>:". One line each.
TEST_CASE("bad configs: one located, one-line message each") {
  struct Case {
    const char* file;
    const char* expected;  // "line:column: key.path: what"
  };
  const Case cases[] = {
      {"unknown_key_top.yaml", "3:1: serach: unknown key; did you mean 'search'?"},
      {"unknown_key_nested.yaml", "5:3: search.max_trails: unknown key; did you mean 'max_trials'?"},
      {"unknown_key_trainer.yaml", "7:3: trainer.lerning_rate: unknown key; did you mean 'lr'?"},
      {"trainer_key_for_other_kind.yaml",
       "7:3: trainer.hidden: unknown key for trainer kind 'sleep' (it is for trainer kind 'mlp')"},
      {"misplaced_key.yaml", "3:1: max_trials: unknown key; did you mean 'search.max_trials'?"},
      {"algorithm_setting_at_wrong_level.yaml", "6:5: search.settings.init: unknown key; did you mean 'search.init'?"},
      {"stopper_setting_of_other_kind.yaml",
       "6:3: early_stopping.max_t: unknown key for early_stopping kind 'median' (it is for early_stopping kind "
       "'asha', 'hyperband')"},
      {"wrong_type.yaml", "4:3: search.max_trials: expected an integer, got 'ten'"},
      {"quoted_number.yaml",
       "6:3: resources.groups: expected an integer, got '4' (it is quoted, so it is a string; remove the quotes)"},
      {"yes_is_not_a_boolean.yaml", "6:3: trainer.nesterov: expected true or false, got 'yes'"},
      {"missing_value.yaml", "4:3: search.max_trials: no value given; expected integer >= 1"},
      {"below_minimum.yaml", "7:3: search.max_trials: -3 is below the minimum 1"},
      {"above_maximum.yaml", "7:3: resources.groups: 5000 is above the maximum 4096"},
      {"not_above_exclusive_minimum.yaml", "6:3: trainer.lr: 0 must be greater than 0"},
      {"list_item_out_of_range.yaml", "6:17: trainer.hidden[1]: 0 is below the minimum 1"},
      {"missing_name.yaml",
       "1:1: name: missing required key (name of the campaign: it names the default store file and appears in "
       "every report)"},
      {"missing_max_trials.yaml",
       "3:1: search.max_trials: missing required key (number of trials to run: the campaign's budget)"},
      {"missing_metric.yaml",
       "2:1: objective.metric: missing required key (name of a metric the trainer reports, e.g. val_accuracy)"},
      {"missing_trainer_kind.yaml", "4:1: trainer.kind: missing required key (one of sleep, mlp, cnn, function, command)"},
      {"duplicate_key_top.yaml", "5:1: name: duplicate key (first given at line 1)"},
      {"duplicate_key_nested.yaml", "6:3: search.max_trials: duplicate key (first given at line 4)"},
      {"syntax_error.yaml",
       "5:14: search: YAML syntax error: illegal map value (a ':' where a value was expected; check the "
       "indentation, or quote a value that contains ': ')"},
      {"tab_indentation.yaml", "4:1: YAML syntax error: a tab in the indentation (YAML indents with spaces)"},
      {"unterminated_quote.yaml", "1:7: name: YAML syntax error: the quoted string is never closed (a \" is missing)"},
      {"two_documents.yaml", "5:1: only one YAML document is allowed (remove the '---' or '...')"},
      {"empty.yaml",
       "1:1: the config is empty; it needs at least name, objective, search.max_trials and trainer.kind (see "
       "configs/reference.yaml)"},
      {"top_level_list.yaml", "1:1: the top level must be a map of settings (name: ..., search: ...), got a list"},
      {"low_not_below_high.yaml", "4:21: space.lr.low: 0.5 must be less than high (0.1)"},
      {"log_range_with_zero.yaml", "6:5: space.lr.low: a log scale needs low > 0, got 0"},
      {"int_bound_not_whole.yaml", "4:27: space.batch_size.low: 16.5 is not a whole number (the parameter is an int)"},
      {"step_below_one.yaml", "4:47: space.batch_size.step: 0 is below the minimum 1"},
      {"step_on_float.yaml", "4:43: space.lr.step: unknown key for space type 'float' (it is for space type 'int')"},
      {"empty_choice.yaml", "4:30: space.activation.values: the list is empty; give at least one value"},
      {"duplicate_choice_value.yaml", "4:51: space.activation.values[2]: 'relu' is listed twice"},
      {"parameter_spec_without_type.yaml",
       "4:3: space.lr: a parameter spec needs a type: float, int, choice or fixed (to fix a map value, write "
       "{type: fixed, value: {...}})"},
      {"condition_on_unknown_parameter.yaml",
       "9:12: space.momentum.when: condition on unknown parameter 'nesterv'; did you mean 'nesterov'?"},
      {"condition_value_never_taken.yaml",
       "5:3: space.dropout: the condition value \"sigmoid\" is never taken by 'activation'"},
      {"conditions_form_a_cycle.yaml", "4:3: space.a: conditions form a cycle (a -> b -> a)"},
      {"grid_without_resolution.yaml",
       "5:3: space.lr: the grid search needs 'resolution' (the number of grid points) on a float parameter"},
      {"space_name_not_a_trainer_setting.yaml",
       "4:3: space.lerning_rate: not a setting of trainer 'mlp'; did you mean 'lr'?"},
      {"function_parameter_not_x.yaml",
       "5:3: space.y2: not a setting of trainer 'function' (its settings: name, dim, noise, steps, "
       "seconds_per_step, parameters, layers, batches_per_step, x1, x2, ...)"},
      {"function_dimension_not_allowed.yaml", "8:41: trainer.dim: branin is defined in 2 dimensions only"},
      {"function_parameter_missing.yaml",
       "3:1: space: 'x3' is missing: levy takes x1..x3 (search or fix each of them)"},
      {"function_parameter_beyond_dim.yaml", "6:3: space.x3: not a parameter of branin, which takes x1..x2 (trainer.dim)"},
      {"space_type_against_trainer.yaml",
       "4:12: space.epochs.type: trainer.epochs takes integer 1..1000; use type: int"},
      {"space_range_against_trainer.yaml", "4:36: space.dropout.high: 1.5 is above the maximum 0.95 (trainer.dropout)"},
      {"unknown_enum_value.yaml",
       "4:3: search.algorithm: unknown value 'bayes'; expected one of auto, random, grid, genetic, evolution, bayesian, "
       "tpe, cmaes, rl (did you mean 'bayesian'?)"},
      {"heartbeat_timeout_not_above_interval.yaml",
       "7:3: resources.heartbeat_timeout: 2 s must be greater than heartbeat_interval (5 s)"},
      {"bad_duration.yaml",
       "5:3: search.max_time: bad duration '10 minutes' (expected seconds or a number with a unit: 90s, 10m, 2h, "
       "1h30m, 500ms, 1d)"},
      {"objective_and_objectives.yaml", "3:1: objectives: give either objective or objectives, not both"},
      {"early_stopping_with_two_objectives.yaml",
       "7:3: early_stopping.kind: asha judges one objective, but 2 are given"},
      {"cmaes_with_two_objectives.yaml", "6:3: search.algorithm: cmaes optimizes one objective, but 2 are given"},
      {"rl_with_two_objectives.yaml", "7:3: search.algorithm: rl optimizes one objective, but 2 are given"},
      // issue 9, item 14: 7 levels of 9 aliases, 2.8 GB expanded; refused at the alias that passes the bound.
      {"alias_bomb.yaml",
       "10:10: a5[0]: the config has more than 100000 YAML nodes, aliases counted at every use (an alias repeated "
       "at several levels?)"},
      // issue 9, item 18.
      {"int_bound_too_large.yaml",
       "6:26: space.p.high: 9223372036854775807 is too large for an int parameter (at most 9007199254740992 in "
       "magnitude)"},
      {"seed_too_large.yaml", "5:1: seed: 18446744073709551615 is above the maximum 9223372036854775807"},
      {"nul_in_choice.yaml", "6:30: space.p.values[0]: a value may not contain a NUL character"},
      {"non_utf8_choice.yaml",
       "6:30: space.p.values[0]: the text is not valid UTF-8 (byte 2 of the value); save the file as UTF-8"},
      {"nested_too_deep.yaml", "6:92: nested more than 64 levels deep"},
      {"non_utf8_comment.yaml", "1:14: the file is not valid UTF-8 here; save it as UTF-8"},
      {"merge_key_not_a_map.yaml", "4:24: trainer: '<<' merges maps only, got a value"},
      {"ranks_product_too_large.yaml",
       "6:24: resources.ranks: 65536 data x 1024 model = 67108864 ranks per group, more than "
       "65536"},
      {"command_unknown_placeholder.yaml",
       "4:26: trainer.command: '{nope}' names no parameter of the space (nor trial_id, "
       "trial_dir, attempt, attempt_dir, seed, ranks)"},
      {"command_misspelled_placeholder.yaml",
       "4:26: trainer.command: '{lrr}' names no parameter of the space; did you mean '{lr}'?"},
      {"evolution_sample_size_above_population.yaml",
       "6:29: search.settings.sample_size: sample_size (5) must be at most population (3)"},
      // Before, validate took it and run launched its groups to end with "no trial succeeded (0 failed)".
      {"genetic_elitism_not_below_population.yaml",
       "6:29: search.settings.elitism: elitism (4) must be below population (4): the elite would fill every "
       "generation"},
      {"grid_int_too_many_values.yaml",
       "6:3: space.p: 9000000000000001 grid values on their own, more than max_trials (4); raise "
       "step or give a resolution"},
      {"grid_float_resolution_huge.yaml",
       "6:3: space.p: 9200000000000000000 grid values on their own, more than 10000000, the most "
       "a grid may have; lower the resolution"},
      {"grid_larger_than_max_trials.yaml",
       "3:10: search.max_trials: the grid has 6 points, more than max_trials (5); raise "
       "max_trials or lower the resolutions"},
      {"heartbeat_timeout_too_large.yaml",
       "6:3: resources.heartbeat_timeout: 1e+300 is above the maximum 604800 s (the range is "
       "0.1..604800 s)"},
      {"heartbeat_too_short.yaml",
       "6:3: resources.heartbeat_interval: 1e-05 is below the minimum 0.01 s (the range is "
       "0.01..3600 s)"},
      {"duration_below_1ms.yaml",
       "4:43: trainer.timeout: 1e-04 s is less than 1 ms, the shortest duration (0 or at least "
       "0.001)"},
      {"sleep_seconds_too_large.yaml",
       "4:24: trainer.seconds: 1e+300 is above the maximum 604800 s (the range is 0..604800 s)"},
      {"steps_too_large.yaml",
       "4:24: trainer.steps: 9223372036854775807 is above the maximum 1000000"},
  };

  std::set<std::string> tested;
  for (const auto& c : cases) {
    const std::string path = source_path(std::string("tests/configs/bad/") + c.file);
    CAPTURE(path);
    tested.insert(c.file);
    auto loaded = config::load_config(path);
    REQUIRE_MESSAGE(!loaded.ok(), c.file << " parsed although it should not");
    CHECK(loaded.error().code() == Errc::kConfig);
    const std::string& message = loaded.error().message();
    CHECK(message == path + ":" + c.expected);
    CHECK(message.find('\n') == std::string::npos);
  }
  // Every fixture is in the table above.
  for (const auto& entry : std::filesystem::directory_iterator(source_path("tests/configs/bad")))
    CHECK_MESSAGE(tested.count(entry.path().filename().string()) == 1, entry.path() << " is not tested");
  CHECK(tested.size() >= 20);
}

TEST_CASE("more errors: flow-map duplicates, names, empty lists, defaults of the interval") {
  CHECK(parse_error("name: d\nobjective: {metric: a, metric: b}\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n") ==
        "test.yaml:2:24: objective.metric: duplicate key (first given at line 2)");
  CHECK(parse_error("name: my campaign\nobjective: {metric: a}\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n") ==
        "test.yaml:1:1: name: 'my campaign' may contain only letters, digits, '.', '_' and '-' (it names files)");
  // Before: a name of 300 characters passed, and `simulate` (its <name>.sim.db) ended in "internal error:
  // filesystem error: status: File name too long".
  const std::string rest = "\nobjective: {metric: a}\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n";
  CHECK(parse_error("name: " + std::string(300, 'n') + rest) ==
        "test.yaml:1:1: name: 300 characters is too long: at most 200 (it names files)");
  CHECK(parse_ok("name: " + std::string(200, 'n') + rest).name == std::string(200, 'n'));
  CHECK(parse_error("name: d\nobjectives: []\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n") ==
        "test.yaml:2:1: objectives: the list is empty; give at least one item");
  CHECK(parse_error("name: d\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n") ==
        "test.yaml:1:1: objective: missing required key (give objective: {metric: ..., mode: max} or objectives: a "
        "list of them)");
  CHECK(parse_error("name: d\nobjectives:\n  - {metric: a}\n  - {metric: a}\nsearch: {max_trials: 1}\n"
                    "trainer: {kind: sleep}\n") ==
        "test.yaml:4:6: objectives[1].metric: 'a' is listed twice");
  // heartbeat_interval above the default timeout: reported at the interval, the key that was given.
  CHECK(parse_error("name: d\nobjective: {metric: a}\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n"
                    "resources: {heartbeat_interval: 20}\n") ==
        "test.yaml:5:13: resources.heartbeat_interval: 20 s must be less than heartbeat_timeout (10 s, the default)");
  CHECK(parse_error("name: d\nobjective: {metric: a}\nsearch: {max_trials: 1}\ntrainer: {kind: mlp, hidden: [64, 32], "
                    "layers: 3}\n") ==
        "test.yaml:4:40: trainer.layers: 3 does not match hidden, which lists 2 layers (give layers with a "
        "single-integer hidden)");
  CHECK(parse_error("name: d\nobjective: {metric: a}\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\nspace:\n"
                    "  seconds: {type: float, low: 0, high: 1, when: {seconds: 1}}\n") ==
        "test.yaml:6:50: space.seconds.when: a parameter cannot depend on itself");
  CHECK(parse_error("name: d\nobjective: {metric: a}\nsearch: {max_trials: 1}\ntrainer: {kind: sleep}\n"
                    "early_stopping: {grace_period: 2}\n") ==
        "test.yaml:5:18: early_stopping.grace_period: unknown key for early_stopping kind 'none' (it is for "
        "early_stopping kind 'asha', 'hyperband', 'median')");
  // A section that is not a map.
  CHECK(parse_error("name: d\nobjective: {metric: a}\nsearch: 5\ntrainer: {kind: sleep}\n") ==
        "test.yaml:3:1: search: expected a map of settings, got '5'");
}

TEST_CASE("load_config: a file that cannot be read names its path") {
  auto missing = config::load_config("/nonexistent/dir/campaign.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(missing.error().message().find("/nonexistent/dir/campaign.yaml") != std::string::npos);
  // issue 9, item 18: a directory, a device or an unreadable file is the user's to fix: kConfig (exit 2).
  auto directory = config::load_config(source_path("tests"));
  REQUIRE_FALSE(directory.ok());
  CHECK(directory.error().code() == Errc::kConfig);
  CHECK(directory.error().message() == "cannot read config '" + source_path("tests") + "': it is a directory");
  auto device = config::load_config("/dev/zero");  // endless: read in full, it exhausted memory
  REQUIRE_FALSE(device.ok());
  CHECK(device.error().code() == Errc::kConfig);
  CHECK(device.error().message() == "cannot read config '/dev/zero': not a regular file");
}

TEST_CASE("load_config: a file larger than kMaxConfigBytes is refused before it is parsed") {
  const std::string path = (std::filesystem::temp_directory_path() / "hpctune_test_config_huge.yaml").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "name: huge\n";
    out.seekp(static_cast<std::streamoff>(config::kMaxConfigBytes) + 10);
    out << "\n";
  }
  auto huge = config::load_config(path);
  std::filesystem::remove(path);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().code() == Errc::kConfig);
  CHECK(huge.error().message().find("a config may have at most 16777216") != std::string::npos);
}

TEST_CASE("bare names: a scalar where a section with a kind is expected is {kind: name}") {
  auto c = parse_ok("name: d\nobjective: {metric: v}\nsearch: {max_trials: 4}\nspace: {steps: 4}\ntrainer: sleep\n"
                    "early_stopping: asha\n");
  CHECK(c.early_stopping == "asha");
  CHECK(c.trainer["kind"] == "sleep");
  CHECK(c.normalized["early_stopping"]["kind"] == "asha");
  // An unknown bare name is the usual unknown-value error, at the name.
  CHECK(parse_error("name: d\nobjective: {metric: v}\nsearch: {max_trials: 4}\ntrainer: sleep\nearly_stopping: ash\n") ==
        "test.yaml:5:17: early_stopping.kind: unknown value 'ash'; expected one of none, asha, hyperband, median (did "
        "you mean 'asha'?)");
  // A section without a kind still wants a map.
  CHECK(parse_error("name: d\nobjective: {metric: v}\nsearch: tpe\ntrainer: sleep\n") ==
        "test.yaml:3:1: search: expected a map of settings, got 'tpe'");
}

TEST_CASE("durations") {
  struct Good {
    const char* text;
    double seconds;
  };
  for (const auto& g : {Good{"90", 90}, Good{"90s", 90}, Good{"10m", 600}, Good{"2h", 7200}, Good{"1h30m", 5400},
                        Good{"1.5h", 5400}, Good{"500ms", 0.5}, Good{"1d", 86400}, Good{" 2h ", 7200},
                        Good{"1h 30m 15s", 5415}, Good{"2.5", 2.5}, Good{"0s", 0}, Good{"3min", 180}}) {
    CAPTURE(g.text);
    auto d = config::parse_duration(g.text);
    REQUIRE_MESSAGE(d.ok(), d.error().message());
    CHECK(d.value() == doctest::Approx(g.seconds));
  }
  for (const char* bad : {"", " ", "10 minutes", "h", "1h30", "-5s", "1e3s", "5x", "s10", "1..5s", "abc"}) {
    CAPTURE(bad);
    auto d = config::parse_duration(bad);
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().code() == Errc::kConfig);
    CHECK(d.error().message().find("bad duration") != std::string::npos);
  }
  // A number in YAML is seconds, a duration string is parsed, anything else is an error.
  const auto c = parse_ok("name: d\nobjective: {metric: a}\nsearch: {max_trials: 1, max_time: 45}\n"
                          "trainer: {kind: sleep, seconds: 0.25}\n");
  CHECK(c.max_time_s == 45);
  CHECK(c.trainer["seconds"].get<double>() == doctest::Approx(0.25));
}

TEST_CASE("did you mean: edit distance and suggestions") {
  CHECK(config::edit_distance("kitten", "sitting") == 3);
  CHECK(config::edit_distance("", "abc") == 3);
  CHECK(config::edit_distance("abc", "abc") == 0);
  CHECK(config::edit_distance("ab", "ba") == 1);  // an adjacent swap is one edit
  CHECK(config::edit_distance("mutaton_rate", "mutation_rate") == 1);

  const std::vector<config::Candidate> names = {{"population", "population"}, {"mutation_rate", "mutation_rate"},
                                                {"crossover_rate", "crossover_rate"}};
  CHECK(config::did_you_mean("mutaton_rate", names) == "mutation_rate");
  CHECK(config::did_you_mean("Mutation-Rate", names) == "mutation_rate");  // case and '-' do not count
  CHECK(config::did_you_mean("popul", names) == "population");            // a prefix
  CHECK_FALSE(config::did_you_mean("elitism", names).has_value());
  CHECK_FALSE(config::did_you_mean("", names).has_value());
  // Short names need a close match: one edit at most.
  const std::vector<config::Candidate> short_names = {{"lr", "lr"}, {"seed", "seed"}};
  CHECK(config::did_you_mean("l2", short_names) == "lr");
  CHECK_FALSE(config::did_you_mean("xyz", short_names).has_value());

  // Aliases lead to the declared name: "learning_rate" is an alias of the mlp trainer's lr.
  std::vector<const config::Setting*> mlp;
  for (const auto* s : config::children("trainer"))
    if (s->scope.contains("mlp")) mlp.push_back(s);
  CHECK(config::did_you_mean("lerning_rate", config::candidates_of(mlp)) == "lr");
  CHECK(config::did_you_mean("num_epochs", config::candidates_of(mlp)) == "epochs");
}

TEST_CASE("YAML scalars follow the 1.2 core schema") {
  CHECK(config::resolve_plain_scalar("10") == 10);
  CHECK(config::resolve_plain_scalar("-7") == -7);
  CHECK(config::resolve_plain_scalar("+3") == 3);
  CHECK(config::resolve_plain_scalar("0x1F") == 31);
  CHECK(config::resolve_plain_scalar("0o17") == 15);
  CHECK(config::resolve_plain_scalar("1e-3").get<double>() == doctest::Approx(1e-3));
  CHECK(config::resolve_plain_scalar(".5").get<double>() == doctest::Approx(0.5));
  CHECK(config::resolve_plain_scalar("2.").get<double>() == doctest::Approx(2.0));
  CHECK(config::resolve_plain_scalar("9223372036854775808").is_number_float());  // beyond int64
  CHECK(config::resolve_plain_scalar("-.inf").get<double>() == -std::numeric_limits<double>::infinity());
  CHECK(config::resolve_plain_scalar("true") == true);
  CHECK(config::resolve_plain_scalar("False") == false);
  CHECK(config::resolve_plain_scalar("~").is_null());
  CHECK(config::resolve_plain_scalar("null").is_null());
  for (const char* s : {"yes", "no", "on", "1_000", "1e", "e5", "0x", "12abc", "1.2.3", "relu"}) {
    CAPTURE(s);
    CHECK(config::resolve_plain_scalar(s) == s);
  }
  // to_yaml_flow quotes exactly what would not read back as the same string.
  CHECK(config::to_yaml_flow("relu") == "relu");
  CHECK(config::to_yaml_flow("/usr/share/data") == "/usr/share/data");
  CHECK(config::to_yaml_flow("true") == "\"true\"");
  CHECK(config::to_yaml_flow("10") == "\"10\"");
  CHECK(config::to_yaml_flow("") == "\"\"");
  CHECK(config::to_yaml_flow("a: b") == "\"a: b\"");
  CHECK(config::to_yaml_flow(json::parse(R"({"a": [1, 2.5, "x"]})")) == "{a: [1, 2.5, x]}");
  CHECK(config::format_number(0.05) == "0.05");
  CHECK(config::format_number(1e-6) == "1e-06");
  CHECK(config::format_number(100000) == "100000");
}

TEST_CASE("YAML tags: a core-schema tag that fits its value is read, any other is refused at its place") {
  // Fits: read as the tag says.
  const auto c = parse_ok(R"(name: !!str 10
objective: {metric: !!str val_accuracy}
search: !!map
  max_trials: !!int 4
space:
  activation: {type: choice, values: !!seq [relu, tanh]}
trainer: {kind: mlp, lr: !!float 1, nesterov: !!bool true, epochs: !<tag:yaml.org,2002:int> 2}
)");
  CHECK(c.name == "10");
  CHECK(c.max_trials == 4);
  CHECK(c.trainer.at("lr").is_number_float());
  CHECK(c.trainer.at("lr") == 1.0);
  CHECK(c.trainer.at("nesterov") == true);
  CHECK(c.trainer.at("epochs") == 2);
  // Refused: a tag that is not the core schema's, or one that does not fit the value.
  const std::string head = "name: t\nobjective: {metric: v}\n";
  struct Case {
    std::string text;
    const char* expected;
  };
  const Case cases[] = {
      {"search: {max_trials: !custom 4}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:22: search.max_trials: the YAML tag '!custom' is not read by hpctune; remove it (a tag may only "
       "restate the value's type: !!str, !!int, !!float, !!bool, !!null, !!seq or !!map)"},
      {"search: {max_trials: !!binary 4}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:22: search.max_trials: the YAML tag '!!binary' is not read by hpctune"},
      {"search: {max_trials: !!timestamp 2001-12-14}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:22: search.max_trials: the YAML tag '!!timestamp' is not read by hpctune"},
      {"search: {max_trials: ! 4}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:22: search.max_trials: the YAML tag '!' is not read by hpctune"},
      {"search: {max_trials: !!int 4.5}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:22: search.max_trials: the YAML tag '!!int' does not fit the value '4.5'; remove the tag or fix "
       "the value"},
      {"search: {max_trials: !!int \"four\"}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:22: search.max_trials: the YAML tag '!!int' does not fit the value 'four'"},
      {"search: {max_trials: 4}\ntrainer: {kind: sleep, seconds: !!bool 1}\n",
       "test.yaml:4:33: trainer.seconds: the YAML tag '!!bool' does not fit the value '1'"},
      {"search: {max_trials: 4}\ntrainer: {kind: sleep, seconds: !!float 0x10}\n",
       "test.yaml:4:33: trainer.seconds: the YAML tag '!!float' does not fit the value '0x10'"},
      {"search: {max_trials: 4}\ntrainer: {kind: !!null sleep}\n",
       "test.yaml:4:17: trainer.kind: the YAML tag '!!null' does not fit the value 'sleep'"},
      {"search: !custom\n  max_trials: 4\ntrainer: {kind: sleep}\n",
       "test.yaml:3:9: search: the YAML tag '!custom' is not read by hpctune"},
      {"search: !!seq {max_trials: 4}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:9: search: the YAML tag '!!seq' does not fit a map; remove the tag"},
      {"search: {max_trials: 4}\ntrainer: {kind: sleep}\nspace:\n  a: {type: choice, values: !!set [1, 2]}\n",
       "test.yaml:6:29: space.a.values: the YAML tag '!!set' is not read by hpctune"},
      {"search: {max_trials: 4}\ntrainer: {kind: sleep}\nspace:\n  a: {type: choice, values: !!map [1, 2]}\n",
       "test.yaml:6:29: space.a.values: the YAML tag '!!map' does not fit a list; remove the tag"},
      {"search: {!custom max_trials: 4}\ntrainer: {kind: sleep}\n",
       "test.yaml:3:10: search.max_trials: the YAML tag '!custom' is not read by hpctune"},
      {"search: {max_trials: 4}\ntrainer: {kind: sleep, seconds: &s !custom 1}\n",
       "test.yaml:4:33: trainer.seconds: the YAML tag '!custom' is not read by hpctune"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.text);
    const std::string message = parse_error(head + k.text);
    CHECK(message.find(k.expected) == 0);
    if (message.find(k.expected) != 0) MESSAGE(message);
  }
  // A number tagged !!str is a string, and the message says why (not "it is quoted").
  const std::string tagged = parse_error(head + "search: {max_trials: !!str 4}\ntrainer: {kind: sleep}\n");
  CHECK_MESSAGE(tagged.find("test.yaml:3:10: search.max_trials: expected an integer") == 0, tagged);
  CHECK_MESSAGE(tagged.find("(it is tagged !!str, so it is a string; remove the tag)") != std::string::npos, tagged);
  CHECK_MESSAGE(parse_error(head + "search: {max_trials: \"4\"}\ntrainer: {kind: sleep}\n")
                        .find("(it is quoted, so it is a string; remove the quotes)") != std::string::npos,
                parse_error(head + "search: {max_trials: \"4\"}\ntrainer: {kind: sleep}\n"));
  // A tagged quoted string that is never closed is caught like an untagged one.
  CHECK(parse_error(head + "search: {max_trials: 4}\ntrainer: {kind: sleep}\nstorage: !!str \"x.db\n") ==
        "test.yaml:5:10: storage: YAML syntax error: the quoted string is never closed (a \" is missing)");
}

TEST_CASE("the settings table is consistent") {
  std::set<std::string> paths;
  for (const auto& s : config::settings()) {
    CAPTURE(s.path);
    CHECK_FALSE(s.help.empty());
    paths.insert(s.path);
    // Every key's section is declared before it (wildcard sections: their map or list).
    const auto dot = s.path.rfind('.');
    if (dot != std::string::npos) {
      std::string parent = s.path.substr(0, dot);
      if (parent.size() > 2 && parent.compare(parent.size() - 2, 2, ".*") == 0) parent.resize(parent.size() - 2);
      if (parent.size() > 2 && parent.compare(parent.size() - 2, 2, "[]") == 0) parent.resize(parent.size() - 2);
      CHECK_MESSAGE(paths.count(parent) == 1, "section " << parent << " is not declared before");
    }
    // Defaults are valid values of their own setting.
    const bool leaf = s.type != config::Type::kSection && s.type != config::Type::kList &&
                      s.type != config::Type::kSpace;
    if (leaf && !s.default_value.is_null()) {
      auto checked = config::check_value(s, s.default_value);
      CHECK_MESSAGE(checked.ok(), checked.error().message());
    }
    if (s.type == config::Type::kEnum) CHECK_FALSE(s.choices.empty());
    CHECK_FALSE((s.required && !s.default_value.is_null()));
    // A scope's selector is an enum that has every value the scope names.
    for (const auto* scope : {&s.scope, &s.closed_when}) {
      if (scope->always()) continue;
      const auto selectors = config::find_settings(scope->key);
      REQUIRE_MESSAGE(selectors.size() == 1, "selector " << scope->key);
      CHECK(selectors[0]->type == config::Type::kEnum);
      for (const auto& v : scope->values)
        CHECK_MESSAGE(std::count(selectors[0]->choices.begin(), selectors[0]->choices.end(), v) == 1, v);
    }
  }
  // Every algorithm and stopper this build knows has its settings imported.
  for (const auto& name : search::searcher_names()) {
    auto decls = search::searcher_settings(name);
    REQUIRE(decls.ok());
    for (const auto& d : decls.value()) {
      if (d.key == "init") continue;  // set as search.init
      bool found = false;
      for (const auto* s : config::find_settings("search.settings." + d.key)) found = found || s->scope.contains(name);
      CHECK_MESSAGE(found, name << " setting " << d.key << " is not in the table");
    }
  }
  for (const auto& kind : search::stopper_names()) {
    auto decls = search::stopper_settings(kind);
    REQUIRE(decls.ok());
    for (const auto& d : decls.value()) {
      bool found = false;
      for (const auto* s : config::find_settings("early_stopping." + d.key)) found = found || s->scope.contains(kind);
      CHECK_MESSAGE(found, kind << " setting " << d.key << " is not in the table");
    }
  }
}

TEST_CASE("trainer.data_seed is the campaign's seed unless given, and follows set_seed (--seed, resume)") {
  const std::string base = "name: d\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\nseed: 41\n";
  auto c = parse_ok(base + "trainer: {kind: mlp}\n");
  CHECK(c.trainer["data_seed"] == 41);
  CHECK(c.normalized["trainer"]["data_seed"] == 41);
  c.set_seed(18446744073709551615ULL);  // `run --seed`, up to 2^64 - 1
  CHECK(c.seed == 18446744073709551615ULL);
  CHECK(c.trainer["data_seed"].get<uint64_t>() == 18446744073709551615ULL);
  CHECK(c.normalized["trainer"]["data_seed"].get<uint64_t>() == 18446744073709551615ULL);
  // Given in the file: kept whatever the campaign's seed.
  auto given = parse_ok(base + "trainer: {kind: cnn, data_seed: 5}\n");
  CHECK(given.trainer["data_seed"] == 5);
  given.set_seed(9);
  CHECK(given.seed == 9);
  CHECK(given.trainer["data_seed"] == 5);
  // Kinds without a data split have no such setting.
  auto sleep = parse_ok(base + "trainer: {kind: sleep}\n");
  sleep.set_seed(3);
  CHECK_FALSE(sleep.trainer.contains("data_seed"));
  CHECK(parse_error(base + "trainer: {kind: mlp, data_seed: -1}\n") ==
        "test.yaml:5:22: trainer.data_seed: -1 is below the minimum 0");
}

TEST_CASE("configs/reference.yaml is reference_yaml() and a valid config") {
  const std::string reference = config::reference_yaml();
  const std::string path = source_path("configs/reference.yaml");
  if (const char* update = std::getenv("HPCTUNE_UPDATE_REFERENCE"); update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << reference;
  }
  const std::string checked_in = read_file(path);
  // The first line that differs, rather than two whole files.
  std::size_t line = 1, i = 0;
  while (i < checked_in.size() && i < reference.size() && checked_in[i] == reference[i])
    line += checked_in[i++] == '\n';
  const bool in_sync = checked_in == reference;
  CHECK_MESSAGE(in_sync, "configs/reference.yaml is out of date with the settings table (from line "
                             << line << "); regenerate it with\n"
                             << "  hpctune validate --print-reference > configs/reference.yaml\n"
                             << "or HPCTUNE_UPDATE_REFERENCE=1 test_config");

  auto parsed = config::parse_config(reference, "reference.yaml");
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
  const auto& c = parsed.value();
  CHECK(c.name == "fashion-mlp");
  CHECK(c.trainer["kind"] == "mlp");
  CHECK(c.space.size() == 7);
  // Every key the reference shows uncommented is at its default, so the reference config equals
  // the minimal one with the same required keys and space.
  const auto minimal = parse_ok(R"(name: fashion-mlp
objective: {metric: val_accuracy}
space:
  lr: {type: float, low: 0.001, high: 0.3, log: true}
  batch_size: {type: int, low: 32, high: 256, log: true}
  hidden: {type: choice, values: [[128], [256], [256, 128]]}
  activation: {type: choice, values: [relu, tanh]}
  nesterov: {type: choice, values: [false, true]}
  momentum: {type: float, low: 0.5, high: 0.99, when: {nesterov: true}}
  epochs: 5
search: {max_trials: 20}
trainer: {kind: mlp}
)");
  CHECK(c.normalized == minimal.normalized);

  // Every declared key appears in the reference, commented out or not.
  for (const auto& s : config::settings()) {
    const std::string key(config::leaf_name(s.path));
    CHECK_MESSAGE(reference.find(key + ":") != std::string::npos, s.path << " is missing from the reference");
  }
}

TEST_CASE("early stopping: max_t defaults to the trainer's last step or epoch (issue 9, item 23)") {
  const std::string head = "name: d\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 4}\n";
  auto c = parse_ok(head + "trainer: {kind: mlp, epochs: 7}\nearly_stopping: asha\n");
  CHECK(c.early_stopping_settings["max_t"] == 7);
  CHECK(c.normalized["early_stopping"]["max_t"] == 7);
  CHECK(c.stopper_spec().settings["max_t"] == 7);
  // The default epochs of the classifier trainers, the steps of the test trainers.
  CHECK(parse_ok(head + "trainer: {kind: cnn}\nearly_stopping: {kind: hyperband}\n").early_stopping_settings["max_t"] == 10);
  CHECK(parse_ok(head + "trainer: {kind: sleep, steps: 5}\nearly_stopping: asha\n").early_stopping_settings["max_t"] == 5);
  // A searched epochs: its largest value.
  CHECK(parse_ok(head + "trainer: mlp\nspace:\n  epochs: {type: int, low: 2, high: 12}\nearly_stopping: asha\n")
            .early_stopping_settings["max_t"] == 12);
  CHECK(parse_ok(head + "trainer: mlp\nspace:\n  epochs: {type: choice, values: [3, 9, 6]}\nearly_stopping: asha\n")
            .early_stopping_settings["max_t"] == 9);
  // Given: kept. A command's steps are its own: the stopper's default.
  CHECK(parse_ok(head + "trainer: {kind: mlp, epochs: 7}\nearly_stopping: {kind: asha, max_t: 3}\n")
            .early_stopping_settings["max_t"] == 3);
  CHECK(parse_ok(head + "trainer: {kind: command, command: 'true'}\nearly_stopping: asha\n")
            .early_stopping_settings["max_t"] == 0);
  // Hyperband's grace period beyond the trainer's last step would fail every run.
  CHECK(parse_error(head + "trainer: {kind: sleep, steps: 2}\nearly_stopping: {kind: hyperband, grace_period: 3}\n") ==
        "test.yaml:5:35: early_stopping.grace_period: grace_period (3) must be at most max_t (2, the trainer's last "
        "step)");
}

TEST_CASE("model_startup: the random start-up of tpe and bayesian against max_trials (issue 9, item 24)") {
  const std::string head = "name: d\nobjective: {metric: v}\ntrainer: {kind: command, command: 'true'}\n"
                           "space:\n  a: {type: float, low: 0, high: 1}\n  b: 3\n";
  auto tpe = config::model_startup(parse_ok(head + "search: {algorithm: tpe, max_trials: 8}\n"));
  REQUIRE(tpe);
  CHECK(tpe->random_trials == 2);  // search::startup_trials(8, 1): a quarter of the budget (issue 12)
  CHECK(tpe->model_used);
  CHECK(config::model_startup(parse_ok(head + "search: {algorithm: tpe, max_trials: 8, settings: {n_startup: 10}}\n"))
            ->model_used == false);
  // bayesian: n_initial defaults to clamp(2 * d, 5, 20) over the searched parameters (b is fixed),
  // at most half the budget (issue 12).
  auto bo = config::model_startup(parse_ok(head + "search: {algorithm: bayesian, max_trials: 8}\n"));
  REQUIRE(bo);
  CHECK(bo->random_trials == 4);
  CHECK(bo->model_used);
  CHECK(bo->text == "bayesian: the first 4 of 8 trials are random start-up; the model suggests from trial 5 on");
  CHECK(config::model_startup(parse_ok(head + "search: {algorithm: bayesian, max_trials: 30}\n"))->random_trials == 5);
  // auto: what the algorithm it picks does (bayesian here).
  auto picked = config::model_startup(parse_ok(head + "search: {max_trials: 8}\n"));
  REQUIRE(picked);
  CHECK(picked->text == bo->text);
  CHECK_FALSE(config::model_startup(parse_ok(head + "search: {algorithm: random, max_trials: 8}\n")));
}

TEST_CASE("a trial's assign must fit in a message: the largest value is named (issue 9, item 17)") {
  // 65 environment variables of 65,000 bytes, written once and aliased (a 4 MB scalar takes a
  // second to parse): 4.2 MB in every assign.
  std::string env = "{v0: &blob " + std::string(65000, 'x');
  for (int i = 1; i < 65; ++i) env += ", v" + std::to_string(i) + ": *blob";
  const std::string head = "name: d\nobjective: {metric: v}\nsearch: {max_trials: 4}\n"
                           "trainer: {kind: command, command: 'true', env: ";
  // The total depends on every default trainer setting, so only its shape is checked.
  const std::string e = parse_error(head + env + "}}\n");
  CHECK(e.rfind("test.yaml:4:43: trainer.env: 4225451 bytes encoded, and a trial's assign would be about 42", 0) == 0);
  CHECK(e.find(" bytes, more than the 4194304 a message may have (pass large data through a file)") != std::string::npos);
  // Well under the limit: fine.
  parse_ok(head + "{v0: " + std::string(100000, 'x') + "}}\n");
}

TEST_CASE("resources.bind: the master's address, loopback by default; a bad one is located (issue 10)") {
  const std::string head = "name: b\nobjective: {metric: loss}\nsearch: {max_trials: 2}\ntrainer: {kind: sleep}\n";
  const auto d = parse_ok(head);
  CHECK(d.resources.bind == "ipc://*");
  CHECK(d.resources.bind == config::Resources{}.bind);
  CHECK(d.normalized["resources"]["bind"] == "ipc://*");
  for (const std::string good : {"tcp://*:5555", "tcp://0.0.0.0:*", "tcp://[::1]:7000", "ipc:///tmp/hpctune-b.sock",
                                 "tcp://eth0:*"}) {
    const auto c = parse_ok(head + "resources:\n  bind: \"" + good + "\"\n");
    CHECK(c.resources.bind == good);
    CHECK(c.normalized["resources"]["bind"] == good);
  }
  CHECK(parse_error(head + "resources:\n  groups: 2\n  bind: tcp://127.0.0.1:0\n") ==
        "test.yaml:7:3: resources.bind: port '0' is not 1..65535 or *");
  CHECK(parse_error(head + "resources:\n  bind: \"inproc://master\"\n") ==
        "test.yaml:6:3: resources.bind: transport 'inproc' cannot reach the workers; expected tcp://HOST:PORT "
        "(PORT 1..65535 or * for a free one) or ipc://PATH");
  CHECK(parse_error(head + "resources: {bind: \"127.0.0.1:5555\"}\n").find(
            "test.yaml:5:13: resources.bind: '127.0.0.1:5555' has no transport") == 0);
  CHECK(parse_error(head + "resources:\n  bind: 5555\n").find("test.yaml:6:3: resources.bind: '5555' has no transport") == 0);
  // The aliases people type lead to it.
  CHECK(parse_error(head + "resources:\n  listen: tcp://*:1\n").find("did you mean 'bind'?") != std::string::npos);
}

TEST_CASE("resources.slurm: defaults (no setup lines), values, and bad values located (issue 13)") {
  const std::string head = "name: b\nobjective: {metric: loss}\nsearch: {max_trials: 2}\ntrainer: {kind: sleep}\n";
  // Every config gets the defaults, an empty list of setup lines included (it once failed every
  // config with "the default of resources.slurm.setup is invalid").
  const auto d = parse_ok(head);
  CHECK(d.resources.slurm.setup.empty());
  CHECK(d.resources.slurm.ranks_per_node == 1);
  CHECK(d.resources.slurm.signal_before_s == 120);
  CHECK(d.resources.slurm.requeue);
  CHECK(parse_ok(head + "resources:\n  slurm:\n    setup: []\n").resources.slurm.setup.empty());
  const auto c = parse_ok(head + "resources:\n  slurm:\n    partition: gpu\n    mpi: cray_shasta\n    setup:\n"
                                 "      - module load PrgEnv-gnu\n      - export A='1 2'\n    master: {partition: svc}\n"
                                 "    signal_before: 5m\n");
  CHECK(c.resources.slurm.partition == "gpu");
  CHECK(c.resources.slurm.mpi == "cray_shasta");
  CHECK(c.resources.slurm.setup == std::vector<std::string>{"module load PrgEnv-gnu", "export A='1 2'"});
  CHECK(c.resources.slurm.master_partition == "svc");
  CHECK(c.resources.slurm.signal_before_s == 300);
  CHECK(parse_error(head + "resources:\n  slurm:\n    partition: \"a b\"\n") ==
        "test.yaml:7:5: resources.slurm.partition: 'a b' holds ' ': only letters, digits and _-.:,&|[]*=+/ go into "
        "an sbatch option");
  CHECK(parse_error(head + "resources:\n  slurm:\n    setup: [3]\n") ==
        "test.yaml:7:13: resources.slurm.setup[0]: a shell line (a string), not number");
  CHECK(parse_error(head + "resources:\n  slurm:\n    setup:\n      - module load x\n      - \"a\\nb\"\n") ==
        "test.yaml:9:9: resources.slurm.setup[1]: one line per item (it holds a line break)");
  CHECK(parse_error(head + "resources:\n  slurm: {master: {constraint: \"x;y\"}}\n").find(
            "resources.slurm.master.constraint: 'x;y' holds ';'") != std::string::npos);
}

TEST_CASE("resources.security: auto by default, curve or none; anything else is located (issue 13)") {
  const std::string head = "name: s\nobjective: {metric: loss}\nsearch: {max_trials: 2}\ntrainer: {kind: sleep}\n";
  const auto d = parse_ok(head);
  CHECK(d.resources.security == "auto");
  CHECK(d.resources.security == config::Resources{}.security);
  CHECK(d.normalized["resources"]["security"] == "auto");
  for (const std::string good : {"auto", "curve", "none"}) {
    const auto c = parse_ok(head + "resources:\n  bind: \"tcp://*:*\"\n  security: " + good + "\n");
    CHECK(c.resources.security == good);
  }
  const std::string e = parse_error(head + "resources:\n  security: tls\n");
  CHECK_MESSAGE(e.find("test.yaml:6:") == 0, e);
  CHECK_MESSAGE(e.find("resources.security") != std::string::npos, e);
  for (const char* choice : {"auto", "curve", "none"}) CHECK_MESSAGE(e.find(choice) != std::string::npos, e);
  CHECK(parse_error(head + "resources:\n  encryption: curve\n").find("did you mean 'security'?") != std::string::npos);
}

// --- stages (issue 11) ---

namespace {

// A workflow with the stages given, the top level of a classifier campaign.
std::string workflow(const std::string& stages, const std::string& trainer = "{kind: mlp, epochs: 2}") {
  return "name: wf\nobjective: {metric: val_accuracy, mode: max}\ntrainer: " + trainer + "\nstages:\n" + stages;
}

}  // namespace

TEST_CASE("stages: each stage's own view of the campaign, its kind's keys with defaults, from") {
  const auto c = parse_ok(workflow(
      "  - name: tune\n"
      "    kind: search\n"
      "    search: {algorithm: genetic, max_trials: 16, stop_when: {metric: val_accuracy, reaches: 0.9}}\n"
      "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n"
      "    trainer: {classes: [0, 1, 2, 3, 4]}\n"
      "  - {name: blend, kind: ensemble, from: tune, max_size: 30}\n"
      "  - {name: move, kind: transfer, from: [tune], classes: [5, 6, 7, 8, 9], max_train_samples: 500, freeze: 1,"
      " baseline: true, trainer: {epochs: 5}}\n"
      "  - {name: pop, kind: pbt, population: 4, ready: 1, space: {momentum: {type: float, low: 0, high: 0.99}}}\n"));
  REQUIRE(c.stages.size() == 4);
  CHECK(c.main_stage == 0);
  // The campaign's fields are the first searching stage's.
  CHECK(c.algorithm == "genetic");
  CHECK(c.max_trials == 16);
  REQUIRE(c.stop_when.has_value());
  CHECK(c.stop_when->metric == "val_accuracy");
  CHECK(c.stop_when->reaches == 0.9);
  CHECK(c.stop_when->maximize);  // the objective's mode
  const auto& tune = c.stages[0];
  CHECK(tune.kind == "search");
  CHECK(tune.own_search);
  CHECK(tune.own->trainer["classes"] == json::array({0, 1, 2, 3, 4}));
  CHECK(tune.own->trainer["epochs"] == 2);
  const auto& blend = c.stages[1];
  CHECK(blend.from == std::vector<std::string>{"tune"});
  CHECK(blend.settings["method"] == "greedy");
  CHECK(blend.settings["max_size"] == 30);
  CHECK(blend.settings["bags"] == 0);
  CHECK_FALSE(blend.own_search);
  const auto& move = c.stages[2];
  CHECK(move.settings["classes"] == json::array({5, 6, 7, 8, 9}));
  CHECK(move.settings["baseline"] == true);
  CHECK(move.settings["sources"] == 1);
  CHECK(move.own->trainer["epochs"] == 5);  // the stage's trainer key over the top level's
  CHECK(move.trainer_keys == std::set<std::string>{"epochs"});  // what it sets itself (a transfer's pins)
  CHECK(tune.trainer_keys == std::set<std::string>{"classes"});
  CHECK(blend.trainer_keys.empty());
  CHECK(move.own->trainer["classes"] == json::array());  // the stage sets classes through its own key
  const auto& pop = c.stages[3];
  CHECK(pop.settings["steps"] == 2);  // trainer.epochs by default
  CHECK(pop.settings["population"] == 4);
  CHECK(pop.own->max_trials == 4);
  CHECK(pop.own->space.find("momentum") != nullptr);
  // The seed reaches every view (trainer.data_seed too: the predictions of all stages line up).
  auto seeded = c;
  seeded.set_seed(77);
  for (const auto& st : seeded.stages) {
    CHECK(st.own->seed == 77);
    CHECK(st.own->trainer["data_seed"] == 77);
  }
  CHECK(c.normalized["stages"].size() == 4);
  CHECK(c.normalized["stages"][1]["from"] == json::array({"tune"}));
}

TEST_CASE("a transfer stage's trainer: takes a program's own keys (issue 36, item 7); its settings stay settings") {
  const std::string command = "{kind: command, command: \"python3 train.py\", provides: [checkpoints]}";
  const std::string tune = "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.1, high: 0.5}}}\n";
  const auto c = parse_ok(workflow(tune + "  - name: move\n    kind: transfer\n    from: tune\n"
                                          "    trainer: {lr: 0.01, epochs: 2, layers: [64, 32], timeout: 5m, max_step: 7}\n",
                                   command));
  const auto& move = c.stages[1];
  CHECK(move.trainer_params == json{{"lr", 0.01}, {"epochs", 2}, {"layers", json::array({64, 32})}});
  // Its settings are the trainer's; every key it gives is pinned over the source's.
  CHECK(move.own->trainer["timeout"] == 300.0);
  CHECK(move.own->trainer["max_step"] == 7);
  CHECK(!move.own->trainer.contains("lr"));
  CHECK(move.trainer_keys == std::set<std::string>{"lr", "epochs", "layers", "timeout", "max_step"});
  CHECK(c.stages[0].trainer_params.empty());
  // validate --json shows them in the stage's trainer.
  CHECK(c.normalized["stages"][1]["trainer"]["lr"] == 0.01);
  CHECK(c.normalized["stages"][1]["trainer"]["epochs"] == 2);
  // Only a transfer's: a search stage's trainer keys are the kind's settings, as at the top level.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {x: {type: float, low: 0, "
                             "high: 1}}, trainer: {lr: 0.01}}\n",
                             command))
            .find("test.yaml:5:") == 0);
  // An alias of a setting is no program key: the walker says which setting was meant.
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, from: tune, trainer: {max_steps: 7}}\n", command))
            .find("stages[1].trainer.max_steps: unknown key; did you mean 'max_step'?") != std::string::npos);
  // A kind that takes only its settings (mlp) still refuses an unknown key.
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, from: tune, trainer: {lrr: 0.01}}\n"))
            .find("stages[1].trainer.lrr") != std::string::npos);
  // The names by which hpctune gives a target its source are not the program's to set.
  const hpctune::trainers::TrainerCapabilities can = hpctune::trainers::command_capabilities();
  const std::string e = parse_error(workflow(tune + "  - name: move\n    kind: transfer\n    from: tune\n    trainer: {" +
                                                 std::string(can.init_setting) + ": /tmp/x}\n",
                                             command));
  CHECK_MESSAGE(e.find("test.yaml:9:15: stages[1].trainer." + std::string(can.init_setting) + ": hpctune's own") == 0, e);
}

TEST_CASE("objective_direction_warnings: a loss whose mode was left out is maximised, said with its place") {
  // mode defaults to max: `objective: {metric: val_loss}` maximised the loss and nothing said so.
  const std::string rest = "search: {max_trials: 2}\ntrainer: {kind: sleep}\n";
  auto warned = [&](const std::string& objective) {
    std::string out;
    for (const auto& w : config::objective_direction_warnings(parse_ok("name: d\n" + objective + rest))) out += w + "\n";
    return out;
  };
  CHECK(warned("objective: {metric: val_loss}\n") ==
        "test.yaml:2:21: objective.metric: 'val_loss' is maximised (mode: max, the default), and a loss or an error is "
        "minimised: set mode: min\n");
  CHECK(warned("objective: {metric: val_loss, mode: max}\n").empty());  // said: kept
  CHECK(warned("objective: {metric: val_loss, mode: min}\n").empty());
  CHECK(warned("objective: {metric: val_accuracy}\n").empty());
  for (const char* loss : {"loss", "valloss", "test/error", "top1_err", "RMSE", "val-nll", "perplexity"})
    CHECK_MESSAGE(!warned(std::string("objective: {metric: \"") + loss + "\"}\n").empty(), loss);
  for (const char* other : {"accuracy", "glossary", "errors_fixed", "f1", "reward"})
    CHECK_MESSAGE(warned(std::string("objective: {metric: \"") + other + "\"}\n").empty(), other);
  CHECK(warned("objectives:\n  - {metric: acc}\n  - {metric: test_error}\n") ==
        "test.yaml:4:14: objectives[1].metric: 'test_error' is maximised (mode: max, the default), and a loss or an "
        "error is minimised: set mode: min\n");
}

TEST_CASE("idle_group_warnings: a generation-based search that keeps few groups busy, with its place (issue 36, item 10)") {
  // One line per warning, so that a failure prints them.
  auto warnings = [](const config::CampaignConfig& c, int64_t groups) {
    std::string out;
    for (const auto& w : config::idle_group_warnings(c, groups)) out += w + "\n";
    return out;
  };
  auto lines = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& w : v) out += w + "\n";
    return out;
  };
  const std::string head = "name: g\nobjective: {metric: value, mode: min}\ntrainer: {kind: function, name: branin}\n"
                           "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}}\n";
  // The issue's campaign: genetic's population of 10 on 2048 groups. Its elite is carried over unrun,
  // so a generation after the first runs 9 trials.
  const auto genetic = parse_ok(head + "search:\n  algorithm: genetic\n  max_trials: 20000\n  settings: {population: 10}\n");
  CHECK(warnings(genetic, 2048) ==
        lines({"test.yaml:8:14: search.settings.population: population 10 keeps 9 of 2048 groups "
               "busy (0.4%; 1 elite carried over unrun); population: 2049 would fill them"}));
  CHECK(config::idle_group_warnings(genetic, 10).empty());  // 9 of 10: 90% busy
  CHECK(config::idle_group_warnings(genetic, 9).empty());   // filled
  CHECK(config::idle_group_warnings(genetic, 1).empty());
  // Islands: each adds a population (and its elite); the default population (10), placed at search.settings.
  const auto islands = parse_ok(head + "search: {algorithm: genetic, max_trials: 200, settings: {islands: 4}}\n");
  CHECK(warnings(islands, 100) ==
        lines({"test.yaml:5:47: search.settings.population: population 10 on 4 islands keeps 36 of 100 "
               "groups busy (36%; 4 elites carried over unrun); population: 26 would fill them"}));
  // Algorithms that keep every free group busy say nothing: random, and evolution's asynchronous
  // tournaments.
  for (const char* algorithm : {"random", "evolution", "tpe"}) {
    CAPTURE(algorithm);
    const auto c = parse_ok(head + "search: {algorithm: " + algorithm + ", max_trials: 200}\n");
    CHECK(config::idle_group_warnings(c, 2048).empty());
  }
  // A workflow: the pbt stage's population, and a genetic search stage's, each at its place.
  const auto w = parse_ok(workflow(
      "  - {name: tune, kind: search, search: {algorithm: genetic, max_trials: 64, settings: {population: 8}},"
      " space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}}\n"
      "  - {name: pop, kind: pbt, population: 4, ready: 1, space: {momentum: {type: float, low: 0, high: 0.99}}}\n"));
  CHECK(warnings(w, 16) ==
        lines({"test.yaml:5:88: stages[0].search.settings.population: population 8 keeps 7 of 16 "
               "groups busy (44%; 1 elite carried over unrun); population: 17 would fill them",
               "test.yaml:6:28: stages[1].population: population 4 keeps 4 of 16 groups busy (25%); "
               "population: 16 would fill them"}));
  // 4 pbt members fill 4 groups; the genetic stage's 7 trials run 4 and 3 there (88% busy).
  const auto on4 = config::idle_group_warnings(w, 4);
  REQUIRE(on4.size() == 1);
  CHECK(on4[0].find("stages[0].search.settings.population: population 8: each generation's 7 trials") != std::string::npos);
}

TEST_CASE("idle_group_warnings: a generation whose last wave leaves groups waiting for it, and the populations that fill them") {
  auto warnings = [](const config::CampaignConfig& c, int64_t groups) {
    std::string out;
    for (const auto& w : config::idle_group_warnings(c, groups)) out += w + "\n";
    return out;
  };
  const std::string head = "name: g\ntrainer: {kind: function, name: branin}\n"
                           "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}}\n";
  const std::string one = head + "objective: {metric: value, mode: min}\n";
  // 9 trials a generation on 8 groups: 8, then 1 while 7 groups wait (hpctune simulate: 56.8% utilization).
  const auto ten = parse_ok(one + "search: {algorithm: genetic, max_trials: 100, settings: {population: 10}}\n");
  CHECK(warnings(ten, 8) ==
        "test.yaml:5:58: search.settings.population: population 10: each generation's 9 trials (1 elite carried over "
        "unrun) run in 2 waves on 8 groups, 56% of their time busy, the rest waiting for its last trials; population: "
        "9 or 17 would fill them\n");
  // On 4 groups: 4, 4, 1 (simulate: 75.7%).
  CHECK(warnings(ten, 4).find("run in 3 waves on 4 groups, 75% of their time busy") != std::string::npos);
  CHECK(warnings(ten, 4).find("population: 9 or 13 would fill them") != std::string::npos);
  // Filled waves, or a last wave nearly full (at least 90% busy), say nothing.
  for (int64_t groups : {3, 9}) CHECK(config::idle_group_warnings(ten, groups).empty());
  const auto many = parse_ok(one + "search: {algorithm: genetic, max_trials: 1000, settings: {population: 101}}\n");
  CHECK(config::idle_group_warnings(many, 8).empty());  // 100 trials: 13 waves, 96% busy
  // A next generation bred before the last one's stragglers end: groups do not wait for them.
  const auto early = parse_ok(one + "search: {algorithm: genetic, max_trials: 100, settings: {population: 10, "
                                    "min_complete_fraction: 0.75}}\n");
  CHECK(config::idle_group_warnings(early, 8).empty());
  // No elite: every member runs; with several objectives (NSGA-II) none is carried either.
  const auto no_elite = parse_ok(one + "search: {algorithm: genetic, max_trials: 100, settings: {population: 10, elitism: 0}}\n");
  CHECK(warnings(no_elite, 8).find("each generation's 10 trials run in 2 waves on 8 groups, 62% of their time busy, "
                                   "the rest waiting for its last trials; population: 8 or 16 would fill them") !=
        std::string::npos);
  const auto pareto = parse_ok(head + "objectives: [{metric: value, mode: min}, {metric: regret, mode: min}]\n"
                                      "search: {algorithm: genetic, max_trials: 100, settings: {population: 10}}\n");
  CHECK(warnings(pareto, 8).find("each generation's 10 trials run in 2 waves") != std::string::npos);
  // Islands: a population step of groups / gcd(groups, islands).
  const auto islands = parse_ok(one + "search: {algorithm: genetic, max_trials: 100, settings: {population: 5, islands: 2}}\n");
  CHECK(warnings(islands, 6).find("population 5 on 2 islands: each generation's 8 trials (2 elites carried over unrun) "
                                  "run in 2 waves on 6 groups, 67% of their time busy, the rest waiting for its last "
                                  "trials; population: 4 or 7 would fill them") != std::string::npos);
  // PBT keeps its members in step: 5 members on 2 groups run 2, 2, 1 each interval.
  const auto pbt = parse_ok(workflow(
      "  - {name: pop, kind: pbt, population: 5, ready: 1, space: {momentum: {type: float, low: 0, high: 0.99}}}\n"));
  CHECK(warnings(pbt, 2).find("stages[0].population: population 5: each generation's 5 trials run in 3 waves on 2 "
                              "groups, 83% of their time busy, the rest waiting for its last trials; population: 4 or 6 "
                              "would fill them") != std::string::npos);
  CHECK(config::idle_group_warnings(parse_ok(workflow("  - {name: pop, kind: pbt, population: 6, ready: 1, space: "
                                                      "{momentum: {type: float, low: 0, high: 0.99}}}\n")),
                                    2)
            .empty());
}

TEST_CASE("resources.ranks.model: more stages than the trainer's network has layers is refused (issue 36, item 10)") {
  const std::string fn = "name: m\nobjective: {metric: value, mode: min}\nsearch: {max_trials: 2}\n"
                         "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}}\n";
  const std::string e = parse_error(fn + "trainer: {kind: function, name: branin}\nresources: {ranks: {data: 2, model: 8}}\n");
  CHECK_MESSAGE(e.find("test.yaml:6:") == 0, e);
  CHECK_MESSAGE(e.find(": resources.ranks.model: 8 model-parallel stages, but a trial of trainer kind 'function' can be "
                       "split into at most 1: each stage needs one of the layers of the network it imitates "
                       "(trainer.layers); every trial would fail (give at most 1, or a larger network)") != std::string::npos,
                e);
  CHECK(parse_ok(fn + "trainer: {kind: function, name: branin, layers: 8}\nresources: {ranks: {data: 2, model: 8}}\n")
            .resources.ranks_model == 8);
  // A fixed value in the space counts; a searched one is left to the trainer, trial by trial.
  CHECK(parse_error(fn.substr(0, fn.size() - 2) + ", layers: 3}\ntrainer: {kind: function}\n"
                    "resources: {ranks: {model: 4}}\n")
            .find("at most 3") != std::string::npos);
  parse_ok(fn.substr(0, fn.size() - 2) + ", layers: {type: int, low: 1, high: 2}}\ntrainer: {kind: function}\n"
           "resources: {ranks: {model: 4}}\n");
  // mlp: a dense layer per hidden width (two with dropout) and the output layer.
  const std::string mlp = "name: m\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                          "space: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error(mlp + "trainer: {kind: mlp, hidden: [64, 32]}\nresources: {ranks: {model: 4}}\n")
            .find("'mlp' can be split into at most 3") != std::string::npos);
  parse_ok(mlp + "trainer: {kind: mlp, hidden: [64, 32]}\nresources: {ranks: {model: 3}}\n");
  parse_ok(mlp + "trainer: {kind: mlp, hidden: [64, 32], dropout: 0.1}\nresources: {ranks: {model: 5}}\n");
  // A program splits itself: no limit known.
  parse_ok("name: m\nobjective: {metric: loss}\nsearch: {max_trials: 2}\nspace: {lr: {type: float, low: 0.1, high: 1}}\n"
           "trainer: {kind: command, command: \"python3 train.py\"}\nresources: {ranks: {model: 64}}\n");
}

TEST_CASE("pbt over a command trainer: accepted with provides: [checkpoints]; its steps are trainer.max_step") {
  const auto c = parse_ok(workflow(
      "  - {name: pop, kind: pbt, population: 2, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n",
      "{kind: command, command: ./train, provides: [checkpoints], max_step: 8}"));
  REQUIRE(c.stages.size() == 1);
  CHECK(c.stages[0].settings["steps"] == 8);
  CHECK(c.stages[0].own->trainer["max_step"] == 8);
  // Without trainer.max_step the stage's steps must be given.
  CHECK(parse_error(workflow("  - {name: pop, kind: pbt, population: 2, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n",
                             "{kind: command, command: ./train, provides: [checkpoints]}")) ==
        "test.yaml:5:5: stages[0].steps: the total steps of every member: give it, or trainer.max_step (at least 1)");
  // max_step 0 (its default) is no limit: no last step to check early stopping's max_t against.
  CHECK(parse_ok("name: c\nobjective: {metric: loss}\nsearch: {max_trials: 2}\n"
                 "space: {lr: {type: float, low: 0.1, high: 1}}\n"
                 "trainer: {kind: command, command: \"./train {lr} {max_step}\", max_step: 0}\n"
                 "early_stopping: {kind: asha, max_t: 9}\n")
            .trainer["max_step"] == 0);
}

TEST_CASE("trainer.provides: a command trainer's declaration is read, and a search needs none") {
  const std::string head = "name: c\nobjective: {metric: loss}\nsearch: {max_trials: 2}\nspace: {lr: {type: float, low: 0.1, high: 1}}\n";
  auto c = parse_ok(head + "trainer: {kind: command, command: \"./train {lr}\", provides: [checkpoints, predictions]}\n");
  CHECK(c.trainer["provides"] == json::array({"checkpoints", "predictions"}));
  CHECK(parse_ok(head + "trainer: {kind: command, command: \"./train {lr}\"}\n").trainer["provides"] == json::array());
  CHECK(parse_ok(head + "trainer: {kind: command, command: \"./train {lr}\", provides: []}\n").trainer["provides"] ==
        json::array());
  // Only the command kind declares it: the others' capabilities are the catalog's.
  CHECK(parse_error(head + "trainer: {kind: mlp, provides: [predictions]}\n").find("trainer.provides") !=
        std::string::npos);
}

TEST_CASE("stages: bad graphs and stages are config errors with their place") {
  const std::string search =
      "  - {name: tune, kind: search, search: {max_trials: 4}, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n";
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      // An unknown stage name, with the stages there are.
      {workflow(search + "  - {name: blend, kind: ensemble, from: tuen}\n"),
       "test.yaml:6:35: stages[1].from: unknown stage 'tuen' (the stages are tune, blend); did you mean 'tune'?"},
      // A cycle.
      {workflow(search + "  - {name: a, kind: transfer, from: [tune, b]}\n  - {name: b, kind: transfer, from: a}\n"),
       "test.yaml:7:31: stages[2].from: the stages form a cycle: a -> b -> a (each would wait for the other)"},
      {workflow(search + "  - {name: a, kind: ensemble, from: a}\n"),
       "test.yaml:6:31: stages[1].from: a stage cannot consume itself"},
      // A source named twice in a list, at the repeat (it would be consumed once: a slip).
      {workflow(search + "  - {name: blend, kind: ensemble, from: [tune, tune]}\n"),
       "test.yaml:6:48: stages[1].from[1]: 'tune' is listed twice"},
      {workflow(search + "  - {name: t2, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.1, high: 0.2}}}\n"
                         "  - {name: move, kind: transfer,\n     from: [tune, t2,\n            tune]}\n"),
       "test.yaml:9:13: stages[2].from[2]: 'tune' is listed twice"},
      {workflow(search + "  - {name: pop, kind: pbt, from: [tune, tune], space: {lr: {type: float, low: 0.01, high: 0.3}}}\n"),
       "test.yaml:6:41: stages[1].from[1]: 'tune' is listed twice"},
      // In a list, an unknown name or the stage itself is named at its item.
      {workflow(search + "  - {name: blend, kind: ensemble, from: [tune, tuen]}\n"),
       "test.yaml:6:48: stages[1].from[1]: unknown stage 'tuen' (the stages are tune, blend); did you mean 'tune'?"},
      {workflow(search + "  - {name: blend, kind: ensemble, from: [tune, blend]}\n"),
       "test.yaml:6:48: stages[1].from[1]: a stage cannot consume itself"},
      // An ensemble over a stage whose trainer saves no predictions.
      {workflow(search + "  - {name: blend, kind: ensemble, from: tune}\n", "{kind: mlp, save_predictions: false}"),
       "test.yaml:6:35: stages[1].from: the ensemble needs predictions, and stage 'tune' turns them off (its "
       "trainer.save_predictions is false)"},
      {"name: wf\nobjective: {metric: loss, mode: min}\ntrainer: {kind: sleep}\nstages:\n"
       "  - {name: tune, kind: search, search: {max_trials: 4}, space: {steps: {type: int, low: 1, high: 3}}}\n"
       "  - {name: blend, kind: ensemble, from: tune}\n",
       "test.yaml:6:35: stages[1].from: the ensemble needs predictions, and trainer kind 'sleep' of stage 'tune' "
       "writes none (mlp and cnn do)"},
      // A transfer from a stage with no checkpoints.
      {workflow(search + "  - {name: move, kind: transfer, from: tune}\n", "{kind: mlp, checkpoint: false}"),
       "test.yaml:6:34: stages[1].from: the transfer needs checkpoints, and stage 'tune' turns them off (its "
       "trainer.checkpoint is false)"},
      // A command trainer declares what its program writes (trainer.provides, the catalog's
      // capabilities): nothing declared is refused naming that key (what it declares an ensemble
      // and a transfer read: "stages: a command trainer's declared outputs ..." below).
      {workflow(search + "  - {name: blend, kind: ensemble, from: tune}\n", "{kind: command, command: ./train}"),
       "test.yaml:6:35: stages[1].from: the ensemble needs predictions, and trainer kind 'command' of stage 'tune' "
       "provides none (trainer.provides)"},
      {workflow(search + "  - {name: move, kind: transfer, from: tune}\n",
                "{kind: command, command: ./train, provides: [predictions]}"),
       "test.yaml:6:34: stages[1].from: the transfer needs checkpoints, and trainer kind 'command' of stage 'tune' "
       "provides none (trainer.provides)"},
      // A pbt stage over a command trainer needs its checkpoints declared (it snapshots them).
      {workflow("  - {name: pop, kind: pbt, population: 2, steps: 4, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n",
                "{kind: command, command: ./train}"),
       "test.yaml:5:17: stages[0]: the pbt needs checkpoints, and trainer kind 'command' of stage 'pop' provides none "
       "(trainer.provides)"},
      {workflow("  - {name: pop, kind: pbt, population: 2, steps: 4, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n",
                "{kind: command, command: ./train, provides: [predictions]}"),
       "test.yaml:5:17: stages[0]: the pbt needs checkpoints, and trainer kind 'command' of stage 'pop' provides none "
       "(trainer.provides)"},
      {workflow("  - {name: pop, kind: pbt, population: 2, space: {max_step: {type: int, low: 1, high: 3}}}\n",
                "{kind: command, command: ./train, provides: [checkpoints]}"),
       "test.yaml:5:43: stages[0].space.max_step: pbt sets each interval's max_step itself; give the total as the "
       "stage's steps"},
      {workflow("  - {name: pop, kind: pbt, population: 2, space: {seconds: {type: float, low: 0.1, high: 1}}}\n",
                "{kind: sleep}"),
       "test.yaml:5:17: stages[0]: the pbt needs checkpoints, and trainer kind 'sleep' of stage 'pop' writes none "
       "(mlp and cnn do)"},
      {workflow(search, "{kind: command, command: ./train, provides: [predictions, weights]}"),
       "test.yaml:3:68: trainer.provides[1]: unknown value \"weights\"; expected predictions or checkpoints"},
      {workflow(search, "{kind: command, command: ./train, provides: [checkpoints, checkpoints]}"),
       "test.yaml:3:68: trainer.provides[1]: checkpoints is listed twice"},
      // Names and kinds.
      {workflow(search + "  - {name: tune, kind: ensemble, from: tune}\n"),
       "test.yaml:6:6: stages[1].name: 'tune' is already the name of stages[0]"},
      {workflow(search + "  - {name: blend, kind: blend, from: tune}\n"),
       "test.yaml:6:19: stages[1].kind: unknown value 'blend'; expected one of search, ensemble, transfer, pbt"},
      {workflow(search + "  - {name: blend, kind: ensemble}\n"),
       "test.yaml:6:5: stages[1]: an ensemble stage needs `from`: the stage whose trials it blends"},
      {workflow(search + "  - {name: blend, kind: ensemble, from: tune, population: 3}\n"),
       "test.yaml:6:47: stages[1].population: unknown key for stages kind 'ensemble' (it is for stages kind 'pbt')"},
      // A stage's own keys are named by their path in the stage.
      {workflow("  - {name: tune, kind: search, search: {max_trials: 0}}\n"),
       "test.yaml:5:41: stages[0].search.max_trials: 0 is below the minimum 1"},
      {workflow("  - {name: tune, kind: search, search: {max_trials: 3}, space: {lr: {type: float, low: 1, high: 0}}}\n"),
       "test.yaml:5:83: stages[0].space.lr.low: 1 must be less than high (0)"},
      {workflow("  - {name: blend, kind: ensemble, from: blend2}\n  - {name: blend2, kind: ensemble, from: blend}\n"),
       "test.yaml:6:36: stages[1].from: the stages form a cycle: blend -> blend2 -> blend (each would wait for the "
       "other)"},
      {"name: wf\nobjective: {metric: val_accuracy}\ntrainer: {kind: mlp}\nsearch: {max_trials: 3}\nstages:\n" + search,
       "test.yaml:4:1: search: with stages, each stage has its own search (move it into the stages that use it)"},
      // pbt's perturb: two positive finite factors (NaN and infinity were refused only by the stage,
      // without a place).
      {workflow("  - {name: pop, kind: pbt, perturb: [.nan, 1.2], space: {lr: {type: float, low: 0.01, high: 0.3}}}\n"),
       "test.yaml:5:28: stages[0].perturb: expected two positive finite factors, such as [0.8, 1.2]"},
      {workflow("  - {name: pop, kind: pbt, perturb: [0.8, .inf], space: {lr: {type: float, low: 0.01, high: 0.3}}}\n"),
       "test.yaml:5:28: stages[0].perturb: expected two positive finite factors, such as [0.8, 1.2]"},
      {workflow("  - {name: pop, kind: pbt, perturb: [0.8], space: {lr: {type: float, low: 0.01, high: 0.3}}}\n"),
       "test.yaml:5:28: stages[0].perturb: expected two positive finite factors, such as [0.8, 1.2]"},
      // pbt resumes a member from another's checkpoint: a setting that shapes the network it holds
      // cannot be explored (before, each member whose explore changed it failed: "checkpoint of
      // another model: layer 0 'dense 32 relu': expected [784x32, 32], found 'dense 8 relu'").
      {workflow("  - {name: pop, kind: pbt, space: {hidden: {type: choice, values: [8, 32]}}}\n"),
       "test.yaml:5:36: stages[0].space.hidden: a pbt stage resumes its members from each other's checkpoints, and "
       "hidden shapes the network a checkpoint of trainer kind 'mlp' holds: fix it in trainer: instead"},
      {workflow("  - {name: pop, kind: pbt, space: {lr: {type: float, low: 0.01, high: 0.3}, dropout: {type: float, "
                "low: 0.0, high: 0.5}}}\n"),
       "test.yaml:5:77: stages[0].space.dropout: a pbt stage resumes its members from each other's checkpoints, and "
       "dropout shapes the network a checkpoint of trainer kind 'mlp' holds: fix it in trainer: instead"},
      {workflow("  - {name: pop, kind: pbt, space: {dropout: {type: choice, values: [0.2, 0, 0.3]}}}\n"),
       "test.yaml:5:36: stages[0].space.dropout: a pbt stage resumes its members from each other's checkpoints, and "
       "dropout shapes the network a checkpoint of trainer kind 'mlp' holds: fix it in trainer: instead"},
      {workflow("  - {name: pop, kind: pbt, space: {activation: {type: choice, values: [relu, tanh]}}}\n",
                "{kind: mlp, epochs: 2, hidden: 16}"),
       "test.yaml:5:36: stages[0].space.activation: a pbt stage resumes its members from each other's checkpoints, and "
       "activation shapes the network a checkpoint of trainer kind 'mlp' holds: fix it in trainer: instead"},
      {workflow("  - {name: pop, kind: pbt, space: {epochs: {type: int, low: 1, high: 3}}}\n"),
       "test.yaml:5:28: stages[0].space.epochs: pbt sets each interval's epochs itself; give the total as the stage's "
       "steps"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(parse_error(c.text) == c.expected);
  }
}

TEST_CASE("classes: trainer.classes and a transfer's classes are [] or two distinct labels, a lone label included") {
  const std::string head = "name: t\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\n";
  // A lone label (not a list) is a list of one: before, validate took it and every trial failed
  // with "setting 'classes' = 3: must be [] for every class, or at least 2 classes".
  CHECK(parse_error(head + "trainer: {kind: mlp, classes: 3}\n") ==
        "test.yaml:4:22: trainer.classes: must be [] for every class, or at least 2 classes");
  CHECK(parse_error(head + "trainer: {kind: cnn, classes: [3]}\n") ==
        "test.yaml:4:32: trainer.classes[0]: must be [] for every class, or at least 2 classes");
  CHECK(parse_error(head + "trainer: {kind: mlp, classes: [3, 4, 3]}\n") ==
        "test.yaml:4:38: trainer.classes[2]: must be distinct classes (3 is listed twice)");
  CHECK(parse_ok(head + "trainer: {kind: mlp, classes: [3, 4]}\n").trainer["classes"] == json::array({3, 4}));
  CHECK(parse_ok(head + "trainer: {kind: mlp, classes: []}\n").trainer["classes"] == json::array());
  const std::string search =
      "  - {name: tune, kind: search, search: {max_trials: 4}, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n";
  CHECK(parse_error(workflow(search + "  - {name: move, kind: transfer, from: tune, classes: 3}\n")) ==
        "test.yaml:6:46: stages[1].classes: must be [] for every class, or at least 2 classes");
  CHECK(parse_error(workflow(search + "  - {name: move, kind: transfer, from: tune, classes: [5, 5]}\n")) ==
        "test.yaml:6:59: stages[1].classes[1]: must be distinct classes (5 is listed twice)");
}

TEST_CASE("trainer settings the trainer refuses together are refused by validate, unless the space searches one") {
  // Each passes its declaration; before, validate took them and every trial of run failed with the
  // trainer's "setting 'precision' = "bf16": must be fp32 with device: cpu ...".
  const std::string head = "name: t\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\n";
  CHECK(parse_error(head + "trainer: {kind: mlp, precision: bf16}\n") ==
        "test.yaml:4:22: trainer.precision: \"bf16\" must be fp32 with device: cpu (tf32 and bf16 are GPU arithmetic); "
        "every trial would fail");
  CHECK(parse_error(head + "trainer: {kind: cnn, device: cpu, precision: tf32}\n") ==
        "test.yaml:4:35: trainer.precision: \"tf32\" must be fp32 with device: cpu (tf32 and bf16 are GPU arithmetic); "
        "every trial would fail");
  CHECK(parse_error(head + "trainer: {kind: mlp, epochs: 2, head_epochs: 5}\n") ==
        "test.yaml:4:33: trainer.head_epochs: 5 must be at most 'epochs' (2); every trial would fail");
  CHECK(parse_error(head + "trainer: {kind: mlp, data: ''}\n") ==
        "test.yaml:4:22: trainer.data: \"\" must be a directory; every trial would fail");
  CHECK(parse_error("name: t\nobjective: {metric: value}\nsearch: {max_trials: 2}\ntrainer: {kind: sleep, metric: ''}\n") ==
        "test.yaml:4:24: trainer.metric: \"\" must be a non-empty name; every trial would fail");
  // A command line that runs nothing: before, "cannot execute ' ': not found" for every trial.
  const std::string command = "name: t\nobjective: {metric: v}\nsearch: {max_trials: 2}\ntrainer: {kind: command, command: ";
  CHECK(parse_error(command + "'   '}\n") ==
        "test.yaml:4:26: trainer.command: \"   \" must be a non-empty command line; every trial would fail");
  CHECK(parse_error(command + "['', a]}\n") ==
        "test.yaml:4:26: trainer.command: [\"\",\"a\"] must be a list whose first item names the program to run; "
        "every trial would fail");
  CHECK(parse_error(command + "[' ']}\n").find("trainer.command: [\" \"] must be a list whose first") != std::string::npos);
  CHECK(parse_ok(command + "[./train, '']}\n").trainer["command"] == json::array({"./train", ""}));
  // A fixed value in the space counts as given.
  CHECK(parse_error(head + "space: {head_epochs: 4}\ntrainer: {kind: mlp, epochs: 2}\n").find(
            "trainer.head_epochs: 4 must be at most 'epochs' (2)") != std::string::npos);
  // Fine together, or left to each trial when the space searches one of them.
  CHECK(parse_ok(head + "trainer: {kind: mlp, device: gpu, precision: bf16}\n").trainer["precision"] == "bf16");
  CHECK(parse_ok(head + "trainer: {kind: mlp, epochs: 2, head_epochs: 2}\n").trainer["head_epochs"] == 2);
  parse_ok(head + "space: {epochs: {type: int, low: 1, high: 8}}\ntrainer: {kind: mlp, head_epochs: 5}\n");
  // In a stage, named by the stage's path.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 4}, space: {lr: {type: float, "
                             "low: 0.01, high: 0.3}}}\n  - {name: move, kind: transfer, from: tune, classes: [5, 6], "
                             "trainer: {head_epochs: 3}}\n")) ==
        "test.yaml:6:73: stages[1].trainer.head_epochs: 3 must be at most 'epochs' (2); every trial would fail");
  // A transfer's trials carry over what their source searched: epochs searched by `tune` is each
  // target's own, so head_epochs is left to the trainer, unless the stage sets epochs itself.
  const std::string searched_epochs =
      "  - {name: tune, kind: search, search: {max_trials: 4}, space: {epochs: {type: int, low: 4, high: 8}}}\n";
  parse_ok(workflow(searched_epochs + "  - {name: move, kind: transfer, from: tune, classes: [5, 6], "
                                      "trainer: {head_epochs: 3}}\n"));
  CHECK(parse_error(workflow(searched_epochs + "  - {name: move, kind: transfer, from: tune, classes: [5, 6], "
                                               "trainer: {head_epochs: 3, epochs: 1}}\n")) ==
        "test.yaml:6:73: stages[1].trainer.head_epochs: 3 must be at most 'epochs' (1); every trial would fail");
  // The top level's trainer, named as written.
  CHECK(parse_error(workflow(searched_epochs, "{kind: mlp, precision: bf16}")) ==
        "test.yaml:3:22: trainer.precision: \"bf16\" must be fp32 with device: cpu (tf32 and bf16 are GPU arithmetic); "
        "every trial would fail");
}

TEST_CASE("an ensemble's view is not judged by a trainer it never runs: its retrained members run under its input's") {
  // The top level's trainer holds bf16 and the search stage runs it on a GPU; the ensemble's retrained
  // members run under that stage's trainer (ensemble_stage.cpp). Before, the ensemble's own view (the
  // top level's trainer, on the CPU) was judged and the config refused at trainer.precision.
  const std::string tune = "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                           "0.01, high: 0.1}}, trainer: {device: gpu}}\n";
  const std::string blend = "  - {name: blend, kind: ensemble, from: tune, retrain: {top: 1, seeds: 1}}\n";
  const std::string bf16 = "{kind: mlp, epochs: 2, precision: bf16}";
  const auto c = parse_ok(workflow(tune + blend, bf16));
  CHECK(c.stages.at(0).own->trainer["device"] == "gpu");
  // A stage that does run the top level's trainer on the CPU is refused, at the top level's key.
  CHECK(parse_error(workflow(tune + blend + "  - {name: cpu, kind: search, search: {max_trials: 2}, space: {lr: {type: "
                                            "float, low: 0.01, high: 0.1}}}\n",
                             bf16))
            .find("test.yaml:3:33: trainer.precision: \"bf16\" must be fp32 with device: cpu") == 0);

  // The same for the model-parallel split: 3 stages fit the search stage's network (3 hidden layers and
  // the output layer), not the top level's, which only the ensemble's view had. Before, refused at
  // resources.ranks.model.
  const std::string split = "name: wf\nobjective: {metric: val_accuracy, mode: max}\n"
                            "trainer: {kind: mlp, epochs: 2, hidden: [16]}\nresources: {ranks: {data: 1, model: 3}}\n"
                            "stages:\n";
  const std::string deep = "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, "
                           "high: 0.1}}, trainer: {hidden: [16, 16, 16]}}\n";
  parse_ok(split + deep + "  - {name: blend, kind: ensemble, from: tune}\n");
  // A search stage that runs the top level's network is refused, at resources.ranks.model.
  CHECK(parse_error(split + deep + "  - {name: flat, kind: search, search: {max_trials: 2}, space: {lr: {type: float, "
                                   "low: 0.01, high: 0.1}}}\n")
            .find("test.yaml:4:30: resources.ranks.model: 3 model-parallel stages, but a trial of trainer kind 'mlp' can "
                  "be split into at most 2") == 0);
}

TEST_CASE("an objective metric the trainer never reports is refused at its place, with what it reports") {
  // Before, validate took it and every trial failed at its end with "the trial reported no
  // 'val_acuracy' metric (it reported: ...)".
  const std::string search = "search: {max_trials: 2}\nspace: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error("name: t\nobjective: {metric: val_acuracy, mode: max}\n" + search + "trainer: {kind: mlp}\n") ==
        "test.yaml:2:13: objective.metric: 'val_acuracy' is not a metric that trainer kind 'mlp' reports; did you mean "
        "'val_accuracy'? (it reports val_loss, val_accuracy, train_loss, train_accuracy, test_loss, test_accuracy, train_seconds, "
        "images_per_second, resumed_epoch, sync_*; every trial would fail)");
  CHECK(parse_error("name: t\nobjectives:\n  - {metric: val_accuracy, mode: max}\n  - {metric: seconds, mode: min}\n" +
                    search + "trainer: {kind: cnn}\n")
            .find(": objectives[1].metric: 'seconds' is not a metric that trainer kind 'cnn' reports") != std::string::npos);
  const std::string fn = "search: {max_trials: 2}\nspace: {x1: {type: float, low: -5, high: 10}, x2: 1}\n"
                         "trainer: {kind: function, name: branin}\n";
  CHECK(parse_error("name: t\nobjective: {metric: loss, mode: min}\n" + fn)
            .find("objective.metric: 'loss' is not a metric that trainer kind 'function' reports") != std::string::npos);
  // What the kind reports, always or under some settings (sync_* with data-parallel replicas), and
  // any metric of a program.
  parse_ok("name: t\nobjective: {metric: regret, mode: min}\n" + fn);
  parse_ok("name: t\nobjective: {metric: test_accuracy, mode: max}\n" + search + "trainer: {kind: mlp}\n");
  parse_ok("name: t\nobjective: {metric: sync_staleness_max, mode: min}\n" + search + "trainer: {kind: mlp}\n");
  parse_ok("name: t\nobjective: {metric: anything, mode: min}\n" + search + "trainer: {kind: command, command: 'true'}\n");
  // In a workflow, each stage's trainer, named.
  CHECK(parse_error("name: t\nobjective: {metric: value, mode: min}\ntrainer: {kind: command, command: 'true'}\n"
                    "stages:\n  - {name: tune, kind: search, " + std::string("search: {max_trials: 2}, space: {lr: {type: "
                    "float, low: 0.01, high: 0.1}}, trainer: {kind: mlp}}\n"))
            .find("test.yaml:2:13: objective.metric: 'value' is not a metric that trainer kind 'mlp' of stage 'tune' "
                  "reports") == 0);
}

TEST_CASE("early stopping or pbt over an objective reported only at a trial's end is refused at objective.metric") {
  // Before, validate took it: the judge never saw the metric in a step's report, so asha pruned no
  // trial (20 of 20 ran every epoch) and pbt made no decision (4 members, 0 exploits), silently.
  const std::string search = "search: {max_trials: 2}\nspace: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  const std::string asha = "early_stopping: {kind: asha, max_t: 3}\n";
  CHECK(parse_error("name: t\nobjective: {metric: test_accuracy, mode: max}\n" + search + asha +
                    "trainer: {kind: mlp, epochs: 3}\n") ==
        "test.yaml:2:13: objective.metric: trainer kind 'mlp' reports 'test_accuracy' only when a trial ends, but the "
        "objective is judged in the report of every step by early stopping (asha), which would then judge no trial "
        "(every step it reports val_loss, val_accuracy, train_loss, train_accuracy, epoch_seconds)");
  CHECK(parse_error("name: t\nobjective: {metric: train_seconds, mode: min}\n" + search +
                    "early_stopping: median\ntrainer: {kind: cnn}\n")
            .find("test.yaml:2:13: objective.metric: trainer kind 'cnn' reports 'train_seconds' only when a trial "
                  "ends, but the objective is judged in the report of every step by early stopping (median)") == 0);
  const std::string fn = "search: {max_trials: 2}\nspace: {x1: {type: float, low: -5, high: 10}, x2: 1}\n"
                         "trainer: {kind: function, name: branin, steps: 5}\n";
  CHECK(parse_error("name: t\nobjective: {metric: regret, mode: min}\n" + fn + asha)
            .find("by early stopping (asha)") != std::string::npos);
  // A pbt stage judges its members' reports itself, early_stopping or not.
  CHECK(parse_error("name: wf\nobjective: {metric: test_accuracy, mode: max}\ntrainer: {kind: mlp, epochs: 2}\nstages:\n"
                    "  - {name: pop, kind: pbt, population: 2, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n")
            .find("objective.metric: trainer kind 'mlp' of stage 'pop' reports 'test_accuracy' only when a trial ends, "
                  "but the objective is judged in the report of every step by pbt's exploit and explore") != std::string::npos);
  // What it reports every step; a final metric without a judge; a program's metrics (not known).
  parse_ok("name: t\nobjective: {metric: val_loss, mode: min}\n" + search + asha + "trainer: {kind: mlp, epochs: 3}\n");
  parse_ok("name: t\nobjective: {metric: train_accuracy, mode: max}\n" + search + asha + "trainer: {kind: mlp, epochs: 3}\n");
  parse_ok("name: t\nobjective: {metric: test_accuracy, mode: max}\n" + search + "trainer: {kind: mlp}\n");
  parse_ok("name: t\nobjective: {metric: value, mode: min}\n" + fn + asha);
  parse_ok("name: t\nobjective: {metric: score, mode: max}\n" + search + asha +
           "trainer: {kind: command, command: 'true'}\n");
}

TEST_CASE("a stop_when metric the trainer never reports is refused at its place") {
  // Before, validate took it and the search never stopped on it: every trial ran, silently.
  const std::string head = "name: t\nobjective: {metric: val_accuracy, mode: max}\ntrainer: {kind: mlp, epochs: 2}\n";
  const std::string space = "space: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error(head + "search: {max_trials: 4, stop_when: {metric: val_acuracy, reaches: 0.9}}\n" + space) ==
        "test.yaml:4:37: search.stop_when.metric: 'val_acuracy' is not a metric that trainer kind 'mlp' reports; did "
        "you mean 'val_accuracy'? (it reports val_loss, val_accuracy, train_loss, train_accuracy, test_loss, "
        "test_accuracy, train_seconds, images_per_second, resumed_epoch, sync_*; the search would never stop on it)");
  CHECK(parse_error(head + "stages:\n  - {name: tune, kind: search, search: {max_trials: 4, stop_when: {metric: acc, "
                           "reaches: 0.9}}, " + space.substr(0, space.size() - 1) + "}\n")
            .find("stages[0].search.stop_when.metric: 'acc' is not a metric that trainer kind 'mlp' of stage 'tune' "
                  "reports") != std::string::npos);
  // A final metric, and a program's (not known).
  parse_ok(head + "search: {max_trials: 4, stop_when: {metric: test_accuracy, reaches: 0.9}}\n" + space);
  parse_ok("name: t\nobjective: {metric: score, mode: max}\ntrainer: {kind: command, command: 'true'}\n"
           "search: {max_trials: 4, stop_when: {metric: anything, reaches: 0.9}}\n" + space);
}

TEST_CASE("early stopping whose first judged step is not below the trainer's last is refused") {
  // Before, validate took it and the stopper judged no trial: 9 epochs under grace_period 12 ran every
  // trial to its end, as if early_stopping were off.
  const std::string head = "name: t\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                           "space: {lr: {type: float, low: 0.01, high: 0.1}}\ntrainer: {kind: mlp, epochs: 9}\n";
  CHECK(parse_error(head + "early_stopping: {kind: asha, grace_period: 12, max_t: 27}\n") ==
        "test.yaml:6:30: early_stopping.grace_period: grace_period 12, the first step judged, is not below the trainer's "
        "last step (epochs: 9): asha would stop no trial early (give a grace_period below 9)");
  CHECK(parse_error(head + "early_stopping: {kind: median, grace_period: 9}\n")
            .find("early_stopping.grace_period: grace_period 9, the first step judged") != std::string::npos);
  CHECK(parse_error(head + "early_stopping: {kind: hyperband, grace_period: 9}\n")
            .find("hyperband would stop no trial early") != std::string::npos);
  CHECK(parse_error(head + "early_stopping: {kind: asha, grace_period: 4, max_t: 3}\n")
            .find("early_stopping.max_t: max_t 3 leaves no rung below the trainer's last step (epochs: 9): asha would "
                  "stop no trial early (give a max_t above 4)") != std::string::npos);
  // The largest value of a searched step setting is the last step.
  CHECK(parse_error("name: t\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                    "space: {epochs: {type: choice, values: [2, 4]}}\ntrainer: {kind: mlp}\n"
                    "early_stopping: {kind: median, grace_period: 4}\n")
            .find("(epochs: 4)") != std::string::npos);
  parse_ok(head + "early_stopping: {kind: median, grace_period: 8}\n");
  parse_ok(head + "early_stopping: {kind: asha, grace_period: 3}\n");
  parse_ok(head + "early_stopping: {kind: asha, grace_period: 3, max_t: 4}\n");
}

TEST_CASE("pbt: a ready that leaves no interval boundary before the last step is refused") {
  // Before, validate took it: every member trained to its end in one attempt and the stage recorded
  // 0 exploits, as a plain parallel training would.
  const std::string space = "space: {lr: {type: float, low: 0.01, high: 0.3}}";
  CHECK(parse_error(workflow("  - {name: pop, kind: pbt, population: 4, steps: 6, ready: 6, " + space + "}\n")) ==
        "test.yaml:5:53: stages[0].ready: ready 6 is not below steps (6): every member would train to its end without "
        "a decision (pbt's exploit and explore would never run); give a ready below 6");
  // The total from the trainer's epochs (2) under the default ready (2).
  CHECK(parse_error(workflow("  - {name: pop, kind: pbt, population: 4, " + space + "}\n"))
            .find("stages[0].ready: ready 2 is not below steps (2)") != std::string::npos);
  parse_ok(workflow("  - {name: pop, kind: pbt, population: 4, steps: 6, ready: 5, " + space + "}\n"));
  parse_ok(workflow("  - {name: pop, kind: pbt, population: 4, ready: 1, " + space + "}\n"));
}

TEST_CASE("a transfer's checkpoint that does not exist is refused at stages[i].checkpoint") {
  // Before, validate took it, the stages before the transfer ran, and the transfer failed when it
  // started: "no source: the checkpoint file '...' does not exist or is not a regular file".
  const std::string tune =
      "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.1}}}\n";
  const std::string missing = source_path("no-such-checkpoint.bin");
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, checkpoint: " + missing + "}\n")) ==
        "test.yaml:6:34: stages[1].checkpoint: '" + missing + "' does not exist (a relative path is taken from the config "
        "file's directory); the stage would fail when it starts");
  const auto c = parse_ok(workflow(tune + "  - {name: move, kind: transfer, checkpoint: " + source_path("README.md") + "}\n"));
  CHECK(c.stages.at(1).settings["checkpoint"] == source_path("README.md"));
}

TEST_CASE("pbt: a space over what does not shape the network passes; dropout only where it may be 0") {
  // A dropout above 0 is a layer of its own whatever its rate: exploring 0.1..0.5 resumes fine.
  const auto c = parse_ok(workflow("  - {name: pop, kind: pbt, ready: 1, space: {lr: {type: float, low: 0.01, high: 0.3}, "
                                   "dropout: {type: float, low: 0.1, high: 0.5}, momentum: {type: float, low: 0.5, "
                                   "high: 0.95}}}\n"));
  REQUIRE(c.stages.size() == 1);
  CHECK(c.stages[0].own->space.find("dropout") != nullptr);
  // Fixed in the space: one value for every member.
  parse_ok(workflow("  - {name: pop, kind: pbt, ready: 1, space: {lr: {type: float, low: 0.01, high: 0.3}, hidden: [32]}}\n"));
  // A search stage varies the network freely (no trial resumes another's).
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 3}, space: {hidden: {type: choice, "
                    "values: [8, 32]}, dropout: {type: float, low: 0, high: 0.5}}}\n"));
}

TEST_CASE("stages: a command trainer's declared outputs: an ensemble reads its predictions, a transfer its checkpoints") {
  const std::string search =
      "  - {name: tune, kind: search, search: {max_trials: 4}, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n";
  const std::string trainer = "{kind: command, command: ./train, provides: [predictions, checkpoints]}";
  const auto c = parse_ok(workflow(search + "  - {name: blend, kind: ensemble, from: tune}\n" +
                                       "  - {name: move, kind: transfer, from: tune, classes: [5, 6], freeze: 1}\n",
                                   trainer));
  REQUIRE(c.stages.size() == 3);
  CHECK(c.stages[1].kind == "ensemble");
  CHECK(c.stages[2].kind == "transfer");
  // The data seed a program draws its validation split with: the campaign's seed unless given.
  CHECK(parse_ok("seed: 41\n" + workflow(search, trainer)).trainer.at("data_seed") == 41);
  CHECK(parse_ok("seed: 41\n" + workflow(search, "{kind: command, command: ./train, data_seed: 5}"))
            .trainer.at("data_seed") == 5);
  // Each needs only its own: predictions alone do not make a transfer's source.
  CHECK(parse_error(workflow(search + "  - {name: move, kind: transfer, from: tune}\n",
                             "{kind: command, command: ./train, provides: [predictions]}")) ==
        "test.yaml:6:34: stages[1].from: the transfer needs checkpoints, and trainer kind 'command' of stage 'tune' "
        "provides none (trainer.provides)");
}

TEST_CASE("objective.noisy: off by default, true reaches the search spec, a bad value is located") {
  const std::string rest = "search: {max_trials: 2}\ntrainer: {kind: sleep}\n";
  CHECK_FALSE(parse_ok("name: c\nobjective: {metric: loss}\n" + rest).search_spec().noisy);
  CHECK(parse_ok("name: c\nobjective: {metric: loss, noisy: true}\n" + rest).search_spec().noisy);
  CHECK(parse_ok("name: c\nobjectives:\n  - {metric: a}\n  - {metric: b, noisy: true}\n" + rest).search_spec().noisy);
  CHECK(parse_error("name: c\nobjective:\n  metric: loss\n  noisy: maybe\n" + rest) ==
        "test.yaml:4:3: objective.noisy: expected true or false, got 'maybe'");
}

TEST_CASE("cnn layers: a malformed layer or block entry is refused at its place, in the trainer and in a space") {
  // Each passes the declaration (a list of values); before, validate took them and every trial of
  // run failed with the trainer's "layers: 'foo' is neither a layer map nor a block".
  const std::string head = "name: t\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\n";
  const std::string forms = "{kind: conv, filters, kernel, stride, padding, activation} | {kind: maxpool, size, stride} | "
                            "{kind: dense, units, activation} | {kind: dropout, rate}";
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [foo]}\n") ==
        "test.yaml:4:31: trainer.layers[0]: 'foo' is neither a layer map nor a block; a layer is " + forms +
            ", a block one of block1, block2, block3, block4, head (a setting that holds a list of layers)");
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [{kind: conv, filters: 4}]}\n") ==
        "test.yaml:4:31: trainer.layers[0].kernel: missing (required for kind conv); a layer is {kind: conv, filters, "
        "kernel, stride, padding, activation}");
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [block1, {kind: dense, units: 8}, block1]}\n") ==
        "test.yaml:4:64: trainer.layers[2]: the block 'block1' is placed twice");
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [block1], block1: [{kind: maxpool, size: 2}, block2]}\n") ==
        "test.yaml:4:75: trainer.block1[1]: must be a mapping with a kind, got \"block2\"; a layer is " + forms);
  // Every value a space can give: each choice, and a fixed value.
  CHECK(parse_error(head +
                    "space: {layers: {type: choice, values: [[{kind: dense, units: 8}], [{kind: dense, units: 8, act: "
                    "relu}]]}}\ntrainer: {kind: cnn}\n") ==
        "test.yaml:4:68: space.layers.values[1][0].act: unknown field for kind dense (known: activation, kind, units); "
        "a layer is {kind: dense, units, activation} (trainer.layers)");
  CHECK(parse_error(head + "space: {head: {type: choice, values: [[{kind: dense, units: 8}], [{kind: dropout}]]}}\n"
                           "trainer: {kind: cnn, layers: [head]}\n") ==
        "test.yaml:4:66: space.head.values[1][0].rate: missing (required for kind dropout); a layer is {kind: dropout, "
        "rate} (trainer.head)");
  CHECK(parse_error(head + "space: {layers: {type: fixed, value: [3]}}\ntrainer: {kind: cnn}\n").find(
            "test.yaml:4:39: space.layers.value[0]: must be a mapping with a kind, got 3; a layer is") == 0);
  // A stage's own trainer, named under the stage.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, trainer: {layers: [{kind: dense, "
                             "units: 0}]}}\n",
                             "{kind: cnn, epochs: 1}")) ==
        "test.yaml:5:76: stages[0].trainer.layers[0].units: must be >= 1, got 0; a layer is {kind: dense, units, "
        "activation}");
  // Layer maps and placed blocks, blocks absent or searched: fine.
  parse_ok(head + "trainer: {kind: cnn, layers: [block1, {kind: conv, filters: 4, kernel: 3}, {kind: maxpool, size: 2}, "
                  "{kind: dense, units: 8, activation: tanh}, {kind: dropout, rate: 0.5}, head]}\n");
  parse_ok(head + "space: {layers: {type: choice, values: [[{kind: dense, units: 8}], [block1]]}}\ntrainer: {kind: cnn}\n");
  parse_ok(read_file(source_path("configs/fashion_nas.yaml")));
}

TEST_CASE("transfer: a stage whose trials cannot load their source's checkpoint is refused at its place") {
  // Each passed validate; before, every transfer trial failed with "checkpoint of another model"
  // (or "setting 'freeze' = 2: the network has only 1 layers before its output layer") and the stage
  // ended failed.
  const std::string tune =
      "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n";
  auto move = [](const std::string& keys) { return "  - {name: move, kind: transfer, from: tune, " + keys + "}\n"; };
  // Another trainer kind.
  CHECK(parse_error(workflow(tune + move("trainer: {kind: cnn}"))) ==
        "test.yaml:6:56: stages[1].trainer.kind: stage 'tune' trains trainer kind 'mlp', whose checkpoints the trials "
        "of a transfer start from: trainer kind 'cnn' cannot load them; every trial would fail (leave trainer.kind out)");
  // Another value of a setting that shapes the network, given by the stage.
  CHECK(parse_error(workflow(tune + move("trainer: {hidden: [64]}"))) ==
        "test.yaml:6:56: stages[1].trainer.hidden: [64] builds another network than the [256] of stage 'tune' "
        "(trainer.hidden), whose checkpoints the trials of a transfer start from; every trial would fail (leave hidden "
        "out of the stage: its trials take their source's)");
  CHECK(parse_error(workflow(tune + move("trainer: {activation: tanh}"))).find(
            "test.yaml:6:56: stages[1].trainer.activation: 'tanh' builds another network than the 'relu' of stage "
            "'tune'") == 0);
  CHECK(parse_error(workflow(tune + move("trainer: {dropout: 0.3}"))).find(
            "stages[1].trainer.dropout: 0.3 builds another network than the 0 of stage 'tune'") != std::string::npos);
  // The source's own value, which the stage does not repeat: its trials would build the top level's.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                             "0.01, high: 0.3}}, trainer: {hidden: [24]}}\n" +
                             move("freeze: 1"))) ==
        "test.yaml:6:34: stages[1].from: stage 'tune' trains hidden [24] (its trainer.hidden), and this stage's trials "
        "would build [256] (trainer.hidden): another network than the checkpoints they start from; every trial would "
        "fail (give the stage trainer: {hidden: [24]})");
  // A value none of the source's searched networks has; one it has, and leaving it to the source, are fine.
  const std::string searched =
      "  - {name: tune, kind: search, search: {max_trials: 2}, space: {hidden: {type: choice, values: [[32], [32, "
      "32]]}, dropout: {type: float, low: 0.1, high: 0.5}}}\n";
  CHECK(parse_error(workflow(searched + move("trainer: {hidden: [16]}"))).find(
            "test.yaml:6:56: stages[1].trainer.hidden: [16] builds none of the networks stage 'tune' searches (its "
            "space.hidden)") == 0);
  parse_ok(workflow(searched + move("trainer: {hidden: [32, 32], dropout: 0.3}")));
  parse_ok(workflow(searched + move("trainer: {lr: 0.01}")));
  // freeze: at most the layers before the output layer of the largest network the trials can have.
  CHECK(parse_error(workflow(tune + move("freeze: 2"))) ==
        "test.yaml:6:46: stages[1].freeze: 2 layers frozen, but the network of the stage's trials has 1 before its "
        "output layer (the layers of its network: a dense layer per hidden width (and its dropout layer when dropout "
        "> 0), and the output layer); every trial would fail (give at most 1)");
  parse_ok(workflow(tune + move("freeze: 1")));
  CHECK(parse_error(workflow(searched + move("freeze: 5"))).find(
            "stages[1].freeze: 5 layers frozen, but the network of the stage's trials has at most 4 before its output "
            "layer") != std::string::npos);  // [32, 32] with dropout: 2 dense and 2 dropout layers
  parse_ok(workflow(searched + move("freeze: 4")));
  // From a checkpoint file (one that exists: validate refuses a missing one), the stage's own network counts.
  const std::string file = source_path("README.md");
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, checkpoint: " + file + ", freeze: 2}\n"))
            .find("stages[1].freeze: 2 layers frozen") != std::string::npos);
  parse_ok(workflow(tune + "  - {name: move, kind: transfer, checkpoint: " + file + ", trainer: {hidden: [8, 8]}, "
                           "freeze: 2}\n"));
  parse_ok(read_file(source_path("configs/fashion_workflow.yaml")));
}

TEST_CASE("resources.ranks.model: a cnn split into more stages than its layers is refused, blocks counted") {
  // Before, the cnn declared no count: validate took it and every trial failed with "a pipeline of 4
  // model ranks cannot split a network of 2 layers".
  const std::string head = "name: m\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                           "space: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [{kind: dense, units: 8}]}\nresources: {ranks: {model: 4}}\n") ==
        "test.yaml:6:21: resources.ranks.model: 4 model-parallel stages, but a trial of trainer kind 'cnn' can be split "
        "into at most 2: each stage needs one of the layers of its network: each entry of layers (the layers of a "
        "block where it is placed), and the output layer; every trial would fail (give at most 2, or a larger network)");
  // The default network: 5 layers and the output layer.
  CHECK(parse_error(head + "trainer: {kind: cnn}\nresources: {ranks: {model: 7}}\n").find("at most 6") != std::string::npos);
  CHECK(parse_ok(head + "trainer: {kind: cnn}\nresources: {ranks: {model: 6}}\n").resources.ranks_model == 6);
  // A block's layers count where it is placed, up to `blocks`; a searched block is left to each trial.
  const std::string blocks = "trainer: {kind: cnn, layers: [block1, block2], blocks: 1, block1: [{kind: dense, units: 8}, "
                             "{kind: dense, units: 8}], block2: [{kind: dense, units: 8}]}\n";
  CHECK(parse_error(head + blocks + "resources: {ranks: {model: 4}}\n").find("at most 3") != std::string::npos);
  parse_ok(head + blocks + "resources: {ranks: {model: 3}}\n");
  parse_ok("name: m\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
           "space: {block1: {type: choice, values: [[{kind: dense, units: 8}]]}}\n"
           "trainer: {kind: cnn, layers: [block1]}\nresources: {ranks: {model: 2}}\n");
}

TEST_CASE("trainer.freeze beyond the layers before the output layer is refused, unless the space searches the network") {
  // Before, validate took it and every trial failed with "setting 'freeze' = 3: the network has only 1
  // layers before its output layer".
  const std::string head = "name: f\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                           "space: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error(head + "trainer: {kind: mlp, hidden: [16], freeze: 3}\n") ==
        "test.yaml:5:36: trainer.freeze: 3 layers frozen, but the network has 1 before its output layer (the layers of "
        "its network: a dense layer per hidden width (and its dropout layer when dropout > 0), and the output layer); "
        "every trial would fail (give at most 1)");
  parse_ok(head + "trainer: {kind: mlp, hidden: [16], freeze: 1}\n");
  parse_ok(head + "trainer: {kind: mlp, hidden: [16], dropout: 0.5, freeze: 2}\n");  // dense, dropout
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [{kind: dense, units: 8}], freeze: 2}\n")
            .find("trainer.freeze: 2 layers frozen, but the network has 1 before its output layer") != std::string::npos);
  // A fixed value in the space counts; a searched network is left to each trial.
  CHECK(parse_error("name: f\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                    "space: {freeze: 2, lr: {type: float, low: 0.01, high: 0.1}}\ntrainer: {kind: mlp, hidden: [16]}\n")
            .find("space.freeze: 2 layers frozen") != std::string::npos);
  parse_ok("name: f\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
           "space: {hidden: {type: choice, values: [[16], [16, 16, 16]]}}\ntrainer: {kind: mlp, freeze: 2}\n");
}

TEST_CASE("a workflow stage's trainer.freeze beyond the layers before the output layer is refused at its key") {
  // Before, validate took each (a stage's view skipped the freeze check) and every trial of the stage failed
  // with "setting 'freeze' = 3: the network has only 1 layers before its output layer".
  const std::string lr = "space: {lr: {type: float, low: 0.01, high: 0.3}}";
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, " + lr +
                             ", trainer: {hidden: [16], freeze: 3}}\n")) ==
        "test.yaml:5:131: stages[0].trainer.freeze: 3 layers frozen, but the network has 1 before its output layer "
        "(the layers of its network: a dense layer per hidden width (and its dropout layer when dropout > 0), and the "
        "output layer); every trial would fail (give at most 1)");
  // The top level's trainer, which the stage's trials train with.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, " + lr + "}\n",
                             "{kind: mlp, hidden: [16], freeze: 2}"))
            .find("test.yaml:3:36: trainer.freeze: 2 layers frozen, but the network has 1") == 0);
  // The stage's space, fixed; and a pbt stage's trainer.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {freeze: 4, lr: {type: float, "
                             "low: 0.01, high: 0.3}}}\n"))
            .find("stages[0].space.freeze: 4 layers frozen, but the network has 1") != std::string::npos);
  CHECK(parse_error(workflow("  - {name: evolve, kind: pbt, population: 2, space: {lr: {type: float, low: 0.01, high: "
                             "0.3}}, trainer: {freeze: 2}}\n"))
            .find("stages[0].trainer.freeze: 2 layers frozen") != std::string::npos);
  // A transfer's nested search fixing the freeze its trials take.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, " + lr + "}\n"
                             "  - {name: move, kind: transfer, from: tune, search: {max_trials: 2}, space: {freeze: 3, "
                             "lr: {type: float, low: 0.01, high: 0.1}}}\n"))
            .find("stages[1].space.freeze: 3 layers frozen, but the network of the stage's trials has 1 before its "
                  "output layer") != std::string::npos);
  // What trains: within the network, a network the space searches, and a transfer's trainer.freeze (its
  // trials take the stage's freeze instead).
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, " + lr + ", trainer: {freeze: 1}}\n"));
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {hidden: {type: choice, values: "
                    "[[16], [16, 16, 16]]}}, trainer: {freeze: 2}}\n"));
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, " + lr + "}\n"
                    "  - {name: move, kind: transfer, from: tune, freeze: 1, trainer: {freeze: 3}}\n"));
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, " + lr + "}\n"
                    "  - {name: move, kind: transfer, from: tune, search: {max_trials: 2}, space: {freeze: 1, "
                    "lr: {type: float, low: 0.01, high: 0.1}}}\n"));
}

TEST_CASE("a stage's trainer or space key written as an alias is refused, so no network check misses it") {
  // The settings' aliases serve "did you mean" only: a stage's key is a declared name or refused, and the
  // transfer-against-source checks compare declared names (st.trainer_keys, the space's names).
  const std::string tune =
      "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n";
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, from: tune, trainer: {hidden_size: [64]}}\n")) ==
        "test.yaml:6:56: stages[1].trainer.hidden_size: unknown key; did you mean 'hidden'?");
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, from: tune, search: {max_trials: 2}, space: "
                                    "{hidden_size: {type: choice, values: [[64]]}}}\n"))
            .find("stages[1].space.hidden_size: not a setting of trainer 'mlp'; did you mean 'hidden'?") !=
        std::string::npos);
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                             "0.01, high: 0.3}}, trainer: {width: [16]}}\n"))
            .find("stages[0].trainer.width: unknown key; did you mean 'hidden'?") != std::string::npos);
}

TEST_CASE("cnn layers: a conv or maxpool after a dense layer, which no data can build, is refused at its entry") {
  // Before, validate took them and every trial failed building the network ("layers[1].kind: conv after
  // a dense layer (dense outputs have no spatial extent)").
  const std::string head = "name: t\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\n";
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [{kind: dense, units: 8}, {kind: conv, filters: 4, kernel: 3}]}\n") ==
        "test.yaml:4:56: trainer.layers[1].kind: a conv right after a dense layer (a dense layer before it leaves 1x1 "
        "images; put conv and maxpool layers first)");
  CHECK(parse_error(head + "trainer: {kind: cnn, layers: [{kind: dense, units: 8}, {kind: dropout, rate: 0.5}, "
                           "{kind: maxpool, size: 2}]}\n")
            .find("trainer.layers[2].size: window 2 is larger than the 1x1 input") != std::string::npos);
  CHECK(parse_error(head + "space: {head: {type: choice, values: [[{kind: dense, units: 8}, {kind: dropout, rate: 0.5}, "
                           "{kind: conv, filters: 4, kernel: 3}]]}}\ntrainer: {kind: cnn, layers: [head]}\n")
            .find("space.head.values[0][2].kernel: kernel 3 is larger than the 1x1 input") != std::string::npos);
  // A 1x1 conv there builds; a block placed after a dense layer is the block's own.
  parse_ok(head + "trainer: {kind: cnn, layers: [{kind: dense, units: 8}, {kind: dropout, rate: 0.5}, {kind: conv, "
                  "filters: 4, kernel: 1}]}\n");
  parse_ok(head + "trainer: {kind: cnn, layers: [{kind: conv, filters: 4, kernel: 3}, {kind: maxpool, size: 2}, "
                  "{kind: dense, units: 8}, block1, {kind: dense, units: 4}]}\n");
}

TEST_CASE("classifier sync against device: gpu and against the group's ranks is refused, unless the space searches it") {
  // Before, validate took each and every trial failed with the trainer's "setting 'sync' = ...".
  const std::string head = "name: s\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                           "space: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error(head + "trainer: {kind: mlp, device: gpu, sync: ssp}\n") ==
        "test.yaml:5:35: trainer.sync: \"ssp\" must be allreduce with device: gpu (the GPU trains by a plain allreduce "
        "only); every trial would fail");
  CHECK(parse_error(head + "trainer: {kind: cnn, device: gpu, gradient_compression: 1bit}\n")
            .find("trainer.gradient_compression: \"1bit\" must be none with device: gpu") != std::string::npos);
  CHECK(parse_error(head + "trainer: {kind: mlp, device: gpu, min_replica_fraction: 0.5}\n")
            .find("trainer.min_replica_fraction: 0.5 must be 1 with device: gpu") != std::string::npos);
  // hogwild on one rank; downpour and the exchanges with one model stage.
  CHECK(parse_error(head + "trainer: {kind: mlp, sync: hogwild}\nresources: {ranks: {data: 2}}\n") ==
        "test.yaml:5:22: trainer.sync: \"hogwild\" must be allreduce or ssp in a group of 2 ranks (resources.ranks): "
        "hogwild trains with the threads of one rank; every trial would fail");
  const std::string pipeline = "resources: {ranks: {data: 2, model: 2}}\n";
  CHECK(parse_error(head + "trainer: {kind: mlp, hidden: [8, 8], sync: downpour}\n" + pipeline)
            .find("trainer.sync: \"downpour\" must be allreduce with 2 model stages (resources.ranks.model)") !=
        std::string::npos);
  CHECK(parse_error(head + "trainer: {kind: mlp, hidden: [8, 8], sync: ssp}\n" + pipeline).find("trainer.sync: \"ssp\"") !=
        std::string::npos);
  CHECK(parse_error(head + "trainer: {kind: mlp, hidden: [8, 8], gradient_compression: 1bit}\n" + pipeline)
            .find("trainer.gradient_compression: \"1bit\" must be none with 2 model stages") != std::string::npos);
  // In a workflow stage too.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, "
                             "high: 0.3}}, trainer: {sync: hogwild}}\n") +
                    "resources: {ranks: {data: 2}}\n")
            .find("stages[0].trainer.sync: \"hogwild\" must be allreduce or ssp in a group of 2 ranks") != std::string::npos);
  // What trains: each on its own, or a searched sync (left to each trial).
  parse_ok(head + "trainer: {kind: mlp, sync: hogwild}\n");
  parse_ok(head + "trainer: {kind: mlp, sync: downpour}\nresources: {ranks: {data: 2}}\n");
  parse_ok(head + "trainer: {kind: mlp, hidden: [8, 8]}\n" + pipeline);
  parse_ok(head + "trainer: {kind: mlp, device: gpu}\n");
  parse_ok("name: s\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
           "space: {sync: {type: choice, values: [allreduce, hogwild]}}\ntrainer: {kind: mlp}\n"
           "resources: {ranks: {data: 2}}\n");
}

TEST_CASE("trainer.max_train_samples: 1 leaves nothing to train on and is refused") {
  // Before, validate took it and every trial failed with "setting 'val_fraction' = 0.100000 leaves no
  // training images out of 1".
  const std::string head = "name: s\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
                           "space: {lr: {type: float, low: 0.01, high: 0.1}}\n";
  CHECK(parse_error(head + "trainer: {kind: mlp, max_train_samples: 1}\n") ==
        "test.yaml:5:22: trainer.max_train_samples: 1 must be 0 (every image) or at least 2 (one is held out for "
        "validation); every trial would fail");
  CHECK(parse_error(head + "trainer: {kind: cnn, val_fraction: 0.5, max_train_samples: 1}\n")
            .find("trainer.max_train_samples: 1 must be 0") != std::string::npos);
  parse_ok(head + "trainer: {kind: mlp, max_train_samples: 2, val_fraction: 0.5}\n");
  parse_ok(head + "trainer: {kind: mlp, max_train_samples: 0}\n");
}

TEST_CASE("a transfer's own max_train_samples, not the top level's, is what its trials train on") {
  // The stage's own value reaches its trials: the top level's 1 (refused where a stage trains with it)
  // is not judged for the transfer.
  CHECK(parse_error(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                             "0.01, high: 0.3}}}\n",
                             "{kind: mlp, epochs: 2, max_train_samples: 1}"))
            .find("trainer.max_train_samples: 1 must be 0") != std::string::npos);
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: "
                    "0.3}}, trainer: {max_train_samples: 500}}\n"
                    "  - {name: move, kind: transfer, from: tune, max_train_samples: 300}\n",
                    "{kind: mlp, epochs: 2, max_train_samples: 1}"));
}

TEST_CASE("a transfer stage's own max_train_samples: 1 is refused at the stage's key") {
  // Before, validate took it (the stage's keys were left out of the trainer's rules) and every transfer
  // trial failed with "setting 'val_fraction' = 0.100000 leaves no training images out of 1".
  const std::string tune =
      "  - {name: tune, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.3}}}\n";
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, from: tune, max_train_samples: 1}\n")) ==
        "test.yaml:6:46: stages[1].max_train_samples: 1 must be 0 (every image) or at least 2 (one is held out for "
        "validation); every trial would fail");
  // From a checkpoint file too.
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, checkpoint: " + source_path("README.md") +
                             ", max_train_samples: 1}\n"))
            .find("stages[1].max_train_samples: 1 must be 0") != std::string::npos);
  parse_ok(workflow(tune + "  - {name: move, kind: transfer, from: tune, max_train_samples: 2}\n"));
  // The nested search's value wins over the stage's: fixed there, it is what the trials get; searched, or
  // searched by the source (whose trials carry it over), it is left to each trial.
  parse_ok(workflow(tune + "  - {name: move, kind: transfer, from: tune, max_train_samples: 1, search: {max_trials: 2}, "
                           "space: {max_train_samples: 100, lr: {type: float, low: 0.01, high: 0.1}}}\n"));
  CHECK(parse_error(workflow(tune + "  - {name: move, kind: transfer, from: tune, search: {max_trials: 2}, space: "
                                    "{max_train_samples: 1, lr: {type: float, low: 0.01, high: 0.1}}}\n"))
            .find("stages[1].space.max_train_samples: 1 must be 0") != std::string::npos);
  parse_ok(workflow("  - {name: tune, kind: search, search: {max_trials: 2}, space: {max_train_samples: {type: int, low: "
                    "100, high: 200}}}\n"
                    "  - {name: move, kind: transfer, from: tune, max_train_samples: 1}\n"));
}

TEST_CASE("trainer_file_warnings: a command's program or script that is not where the trials look, with its place") {
  hpctune::testing::TempDir dir;
  dir.write("train.py", "print('hpctune-report {\\\"value\\\": 1}')\n");
  dir.write("run.sh", "#!/bin/sh\n");
  std::filesystem::permissions(dir.file("run.sh"), std::filesystem::perms::owner_all);
  dir.write("data.txt", "not a program\n");
  const std::string head = "name: f\nobjective: {metric: value, mode: min}\nsearch: {max_trials: 4}\n"
                           "space: {x: {type: float, low: 0, high: 1}}\n";
  auto warned = [&](const std::string& trainer) {
    std::string out;
    for (const auto& w : config::trainer_file_warnings(parse_ok(head + "trainer: " + trainer + "\n"))) out += w + "\n";
    return out;
  };
  const std::string in = "workdir: \"" + dir.path + "\"";
  // Found: the interpreter on PATH and its script in workdir; a program by its path; options before the script.
  CHECK(warned("{kind: command, command: [python3, train.py, --x, \"{x}\"], " + in + "}").empty());
  CHECK(warned("{kind: command, command: [python3, -u, -W, ignore, train.py], " + in + "}").empty());
  CHECK(warned("{kind: command, command: \"python3 -u train.py --x {x}\", " + in + "}").empty());
  CHECK(warned("{kind: command, command: [./run.sh], " + in + "}").empty());
  CHECK(warned("{kind: command, command: [\"" + dir.file("train.py") + "\"], workdir: /}").size() > 0);  // not executable
  // Missing: the script (list and string form), the program by its path, the program on PATH.
  CHECK(warned("{kind: command, command: [python3, trian.py, --x, \"{x}\"], " + in + "}") ==
        "test.yaml:5:45: trainer.command[1]: the script 'trian.py' that python3 runs is not a file in " + dir.path +
            ", where the command runs (trainer.workdir); every trial would fail\n");
  CHECK(warned("{kind: command, command: \"python3 trian.py --x={x}\", " + in + "}")
            .find("trainer.command: the script 'trian.py' that python3 runs is not a file") != std::string::npos);
  CHECK(warned("{kind: command, command: \"python3 -u trian.py --x {x}\", " + in + "}")
            .find("trainer.command: the script 'trian.py' that python3 runs is not a file") != std::string::npos);
  CHECK(warned("{kind: command, command: [./data.txt], " + in + "}")
            .find("trainer.command[0]: the program './data.txt' is not an executable file in " + dir.path) != std::string::npos);
  CHECK(warned("{kind: command, command: [pythonn3, train.py], " + in + "}")
            .find("trainer.command[0]: the program 'pythonn3' is in none of the directories of this shell's PATH, which "
                  "the trials get: give its absolute path") != std::string::npos);
  CHECK(warned("{kind: command, command: [run.sh], env: {PATH: \"" + dir.path + "\"}, " + in + "}").empty());
  CHECK(warned("{kind: command, command: [python3, train.py], env: {PATH: \"" + dir.path + "\"}, " + in + "}")
            .find("is in none of the directories of trainer.env's PATH") != std::string::npos);
  CHECK(warned("{kind: command, command: [python3, train.py], workdir: \"" + dir.file("nowhere") + "\"}")
            .find("trainer.workdir: '" + dir.file("nowhere") + "' is not a directory") != std::string::npos);
  // Left alone: code given by an option, a placeholder in the script's place, what the shell reads
  // (quotes, expansions), a program named by a placeholder.
  for (const char* command : {"[python3, -m, trainer.main]", "[python3, -c, \"print(1)\"]", "[python3, \"{trial_dir}/t.py\"]",
                              "\"python3 \\\"$HOME/t.py\\\"\"", "[\"{x}\"]", "[bash, -c, \"echo hi\"]",
                              "\"exec python3 t.py\"", "\"OMP_NUM_THREADS=1 python3 t.py\""}) {
    CAPTURE(command);
    CHECK(warned(std::string("{kind: command, command: ") + command + ", " + in + "}").empty());
  }
  // A searched workdir is each trial's own; other kinds have no such files; SLURM's nodes are elsewhere.
  CHECK(config::trainer_file_warnings(parse_ok("name: f\nobjective: {metric: value, mode: min}\nsearch: {max_trials: 4}\n"
                                               "space:\n  x: {type: float, low: 0, high: 1}\n"
                                               "  workdir: {type: choice, values: [/a, /b]}\n"
                                               "trainer: {kind: command, command: [python3, train.py]}\n"))
            .empty());
  CHECK(config::trainer_file_warnings(parse_ok("name: f\nobjective: {metric: value, mode: min}\nsearch: {max_trials: 4}\n"
                                               "trainer: {kind: function, name: branin}\n"
                                               "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}}\n"))
            .empty());
  CHECK(config::trainer_file_warnings(parse_ok(head + "trainer: {kind: command, command: [python3, trian.py]}\n"
                                                      "resources: {backend: slurm}\n"))
            .empty());
}
