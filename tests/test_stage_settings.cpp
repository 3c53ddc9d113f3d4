// A stage kind's keys are declared once (workflow/stage_settings.h): `validate` (the config table
// that imports them) and the stage itself (its reader) follow the same bound. Each case reads the
// bound from the declaration, so that changing it in one place moves both.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "common/text.h"
#include "config/config.h"
#include "workflow/ensemble_stage.h"
#include "workflow/pbt_policy.h"
#include "workflow/stage_settings.h"
#include "workflow/transfer_stage.h"

using namespace hpctune;
using json = nlohmann::json;

namespace {

const SettingDecl& declared(const std::string& kind, const std::string& key) {
  const workflow::StageKind* k = workflow::find_stage_kind(kind);
  REQUIRE(k != nullptr);
  for (const auto& d : k->settings)
    if (d.key == key) return d;
  FAIL("no key " << key << " declared for " << kind);
  throw 0;
}

// A workflow whose second stage (line 9) is of `kind` and sets `key` (line 12, or 12-13 for a key
// of a section) to `value`.
std::string workflow_with(const std::string& kind, const std::string& key, int64_t value) {
  // A transfer's freeze is at most the layers before the output layer (validate judges it against
  // the network): 5,000 dense layers, each with its dropout layer, can take the bound, 10,000.
  std::string trainer = "{kind: mlp, epochs: 2}";
  // A pbt member trains with the trainer's step setting up to `steps`: mlp's epochs take at most
  // 1,000, a program's max_step the stage's bound.
  if (kind == "pbt" && (key == "steps" || key == "ready"))
    trainer = "{kind: command, command: [./train], provides: [checkpoints]}";
  if (kind == "transfer" && key == "freeze") {
    trainer = "{kind: mlp, epochs: 2, dropout: 0.5, hidden: [1";
    for (int i = 1; i < 5000; ++i) trainer += ", 1";
    trainer += "]}";
  }
  std::string text =
      "name: wf\n"
      "objective: {metric: val_accuracy, mode: max}\n"
      "trainer: " + trainer + "\n"
      "stages:\n"
      "  - name: tune\n"
      "    kind: search\n"
      "    search: {max_trials: 4}\n"
      "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n"
      "  - name: s\n"
      "    kind: " + kind + "\n" +
      (kind == "pbt" ? "    space: {momentum: {type: float, low: 0, high: 0.99}}\n" : "    from: tune\n");
  // A pbt stage decides only with ready below steps (after the key's line, which stays line 12).
  std::string after;
  if (kind == "pbt" && key == "ready") after = "    steps: 1000000\n";
  if (kind == "pbt" && key == "population") after = "    ready: 1\n";
  const auto dot = key.find('.');
  if (dot == std::string::npos) return text + "    " + key + ": " + std::to_string(value) + "\n" + after;
  return text + "    " + key.substr(0, dot) + ":\n      " + key.substr(dot + 1) + ": " + std::to_string(value) + "\n";
}

// The stage's own reader given `settings`: what the stage would run with, or why it refuses.
Status stage_reads(const config::CampaignConfig& cfg, const json& settings) {
  config::StageConfig stage = cfg.stages.at(1);
  stage.settings = settings;
  const auto status_of = [](const auto& result) -> Status {
    if (result.ok()) return {};
    return result.error();
  };
  if (stage.kind == "ensemble") return status_of(workflow::make_ensemble_stage(stage, cfg));
  if (stage.kind == "transfer") return status_of(workflow::make_transfer_stage(stage, cfg));
  return status_of(workflow::pbt_settings(stage.name, settings, stage.own->trainer));
}

}  // namespace

TEST_CASE("a stage's bound is declared once: validate and the stage both refuse one past it, and both take it") {
  struct Case {
    const char* kind;
    const char* key;
  };
  for (const Case c : {Case{"ensemble", "max_size"}, Case{"ensemble", "bags"}, Case{"ensemble", "k"},
                       Case{"ensemble", "retrain.top"}, Case{"ensemble", "retrain.seeds"},
                       Case{"transfer", "sources"}, Case{"transfer", "seeds"}, Case{"transfer", "freeze"},
                       Case{"pbt", "population"}, Case{"pbt", "ready"}, Case{"pbt", "steps"}}) {
    const std::string where = std::string(c.kind) + " " + c.key;
    CAPTURE(where);
    const SettingDecl& d = declared(c.kind, c.key);
    REQUIRE(std::isfinite(d.max));
    const auto max = static_cast<int64_t>(d.max);
    const std::string key = c.key;
    const bool nested = key.find('.') != std::string::npos;

    // validate takes the bound and refuses one past it, at the key's place, naming its path.
    auto at_max = config::parse_config(workflow_with(c.kind, key, max), "wf.yaml");
    REQUIRE_MESSAGE(at_max.ok(), at_max.error().message());
    auto past = config::parse_config(workflow_with(c.kind, key, max + 1), "wf.yaml");
    REQUIRE_FALSE(past.ok());
    CHECK(past.error().code() == Errc::kConfig);
    const std::string place = nested ? "wf.yaml:13:7: stages[1]." + key + ": " : "wf.yaml:12:5: stages[1]." + key + ": ";
    CHECK_MESSAGE(past.error().message().rfind(place, 0) == 0, past.error().message());
    CHECK_MESSAGE(past.error().message().find(format_number(d.max)) != std::string::npos, past.error().message());

    // The stage runs with what validate handed it, and refuses one past the same bound itself.
    const config::CampaignConfig& cfg = at_max.value();
    json settings = cfg.stages.at(1).settings;
    const Status taken = stage_reads(cfg, settings);
    CHECK_MESSAGE(taken.ok(), taken.error().message());
    if (nested)
      settings[key.substr(0, key.find('.'))][key.substr(key.find('.') + 1)] = max + 1;
    else
      settings[key] = max + 1;
    const Status refused = stage_reads(cfg, settings);
    CHECK_FALSE(refused.ok());
    if (refused.ok()) continue;
    CHECK(refused.error().code() == Errc::kConfig);
    const std::string says = key + ": must be " + setting_bounds_text(d) + ", got " + std::to_string(max + 1);
    CHECK_MESSAGE(refused.error().message().find(says) != std::string::npos, refused.error().message());
  }
}

TEST_CASE("a stage's defaults are its declaration's, in validate's output and in the stage") {
  auto parsed = config::parse_config(workflow_with("ensemble", "k", 3), "wf.yaml");
  REQUIRE(parsed.ok());
  const json& s = parsed.value().stages.at(1).settings;
  CHECK(s.at("max_size") == declared("ensemble", "max_size").default_value);
  CHECK(s.at("bags") == declared("ensemble", "bags").default_value);
  CHECK(s.at("method") == declared("ensemble", "method").default_value);
  CHECK_FALSE(s.contains("retrain"));  // a section not given
  // pbt's steps: no default of its own; the trainer's count of steps (mlp: epochs).
  CHECK(declared("pbt", "steps").default_value.is_null());
  auto pbt = config::parse_config(workflow_with("pbt", "population", 4), "wf.yaml");
  REQUIRE(pbt.ok());
  CHECK(pbt.value().stages.at(1).settings.at("steps") == 2);
  auto read = workflow::pbt_settings("s", json::object(), {{"kind", "mlp"}, {"epochs", 7}});
  REQUIRE(read.ok());
  CHECK(read.value().steps == 7);
  CHECK(read.value().population == declared("pbt", "population").default_value.get<int64_t>());
}

TEST_CASE("every stage kind of the catalog is a choice of stages[].kind, with its keys") {
  for (const auto& k : workflow::stage_kinds()) {
    if (k.settings.empty()) continue;  // search: its keys are the top level's
    CAPTURE(k.kind);
    auto parsed = config::parse_config(workflow_with(k.kind, "bogus_key", 1), "wf.yaml");
    REQUIRE_FALSE(parsed.ok());
    // Refused for the key, not for the kind.
    CHECK_MESSAGE(parsed.error().message().find("stages[1].bogus_key") != std::string::npos, parsed.error().message());
  }
}
