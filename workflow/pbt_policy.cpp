// The pure part of population-based training (pbt_policy.h).
#include "workflow/pbt_policy.h"

#include <algorithm>
#include <cmath>

#include "config/pbt_schedule.h"
#include "config/trainer_kinds.h"
#include "workflow/stage_settings.h"

namespace hpctune::workflow {
namespace {

Error bad_setting(const std::string& stage, const std::string& key, const std::string& why) {
  return err(Errc::kConfig, "stage '" + stage + "' (pbt): " + key + " " + why);
}

// An int parameter's value nearest to x: on its grid low, low + step, ..., inside its bounds.
nlohmann::json nearest_int(const search::ParamSpec& spec, double x) {
  const int64_t levels = search::Space::int_levels(spec);
  const double k = std::clamp(std::round((x - spec.low) / static_cast<double>(spec.step)), 0.0,
                              static_cast<double>(std::max<int64_t>(levels - 1, 0)));
  return static_cast<int64_t>(spec.low) + static_cast<int64_t>(k) * spec.step;
}

}  // namespace

Result<PbtSettings> pbt_settings(const std::string& stage, const nlohmann::json& settings,
                                 const nlohmann::json& trainer) {
  PbtSettings s;
  // The stage's keys, read by the one reader with their declarations (workflow/stage_settings.h):
  // what `validate` accepts is what the stage runs with.
  auto read = read_stage_settings("pbt", settings);
  if (!read.ok()) return err(Errc::kConfig, "stage '" + stage + "' (pbt): " + read.error().message());
  const nlohmann::json& in = read.value();
  s.population = in.at("population").get<int64_t>();
  s.ready = in.at("ready").get<int64_t>();
  const std::string kind = trainer.is_object() ? trainer.value("kind", "") : "";
  s.step_key = config::trainer_step_setting(kind);
  s.checkpoint_directory = config::trainer_checkpoint_directory(kind);
  if (s.step_key.empty())
    return bad_setting(stage, "trainer.kind", "'" + kind + "' has no setting that counts its steps to train to");
  // steps has no default of its own: the trainer's count of steps, or the schedule's end (below).
  int64_t trained = 0;
  if (trainer.contains(s.step_key) && trainer.at(s.step_key).is_number_integer())
    trained = trainer.at(s.step_key).get<int64_t>();
  s.steps = in.at("steps").is_null() ? trained : in.at("steps").get<int64_t>();
  if (s.steps < 1)
    return bad_setting(stage, "steps", "must be given (the trainer sets no " + s.step_key + ") and at least 1");
  s.quantile = in.at("quantile").get<double>();
  s.resample_probability = in.at("resample_probability").get<double>();
  s.max_lead = in.at("max_lead").get<int64_t>();
  s.older_snapshots = in.at("older_snapshots").get<bool>();
  if (in.contains("schedule") && !in.at("schedule").is_null()) {
    // The reader `hpctune validate` uses too (config/pbt_schedule.h).
    config::PbtSchedule schedule = config::read_pbt_schedule(in.at("schedule"), s.step_key);
    if (!schedule.ok()) return bad_setting(stage, "schedule" + schedule.problem_at + ":", schedule.problem);
    s.replay = std::move(schedule.replay);
    s.steps = s.replay.back().at(s.step_key).get<int64_t>();
  }
  // The declaration says a list; what its items must be is the stage's (validate asks the same).
  const nlohmann::json& p = in.at("perturb");
  if (p.size() != 2 || !p[0].is_number() || !p[1].is_number())
    return bad_setting(stage, "perturb", "must be a list of two numbers, not " + p.dump());
  s.perturb_low = p[0].get<double>();
  s.perturb_high = p[1].get<double>();
  if (!(s.perturb_low > 0 && s.perturb_high > 0 && std::isfinite(s.perturb_low) && std::isfinite(s.perturb_high)))
    return bad_setting(stage, "perturb", "factors must be positive, not " + p.dump());
  return s;
}

bool PbtSettings::boundary(int64_t step) const {
  if (replay.empty()) return step % ready == 0 || step >= steps;
  for (const auto& p : replay) {
    if (p.at(step_key).get<int64_t>() == step) return true;
  }
  return false;
}

Explored explore(const search::Space& space, const search::Params& params, const PbtSettings& settings, Rng& rng) {
  Explored out;
  search::Params hyper = search::Params::object();
  for (const search::ParamSpec& spec : space.params()) {
    if (!search::Space::active(spec, hyper)) continue;
    const bool had = params.is_object() && params.contains(spec.name);
    if (had) out.old_values[spec.name] = params.at(spec.name);
    // Both draws are made for every parameter, so that one parameter's kind never shifts the
    // draws of the next: the same seed explores the same way whatever the values.
    const bool resample = rng.bernoulli(settings.resample_probability);
    const double factor = rng.below(2) == 0 ? settings.perturb_low : settings.perturb_high;
    const bool numeric = spec.type == search::ParamType::kFloat || spec.type == search::ParamType::kInt;
    if (spec.type == search::ParamType::kFixed) {
      hyper[spec.name] = spec.value;
    } else if (!had || resample || (numeric && !params.at(spec.name).is_number())) {
      hyper[spec.name] = search::Space::sample_one(spec, rng);
      out.resampled.push_back(spec.name);
    } else if (spec.type == search::ParamType::kChoice) {
      hyper[spec.name] = params.at(spec.name);
    } else {
      const double x = params.at(spec.name).get<double>() * factor;
      hyper[spec.name] =
          spec.type == search::ParamType::kInt ? nearest_int(spec, x) : nlohmann::json(std::clamp(x, spec.low, spec.high));
    }
    out.new_values[spec.name] = hyper[spec.name];
  }
  out.params = params.is_object() ? params : search::Params::object();
  for (const search::ParamSpec& spec : space.params()) out.params.erase(spec.name);
  for (auto& [k, v] : hyper.items()) out.params[k] = v;
  return out;
}

int64_t quantile_size(int64_t n, double quantile) {
  if (n < 2) return 0;
  const auto k = static_cast<int64_t>(std::ceil(static_cast<double>(n) * quantile - 1e-9));
  return std::clamp<int64_t>(k, 1, n / 2);
}

nlohmann::json schedule_to_json(const std::vector<ScheduleEntry>& schedule) {
  nlohmann::json out = nlohmann::json::array();
  for (const ScheduleEntry& e : schedule)
    out.push_back({{"from_step", e.from_step}, {"to_step", e.to_step}, {"params", e.params}, {"trial", e.trial}});
  return out;
}

Result<std::vector<search::Params>> replay_schedule(const nlohmann::json& schedule, const std::string& step_key) {
  // A stage that recorded no interval yet has nothing to replay, which is not an error here.
  if (schedule.is_array() && schedule.empty()) return std::vector<search::Params>{};
  config::PbtSchedule read = config::read_pbt_schedule(schedule, step_key);
  if (!read.ok()) return err(Errc::kInvalidArgument, "schedule" + read.problem_at + ": " + read.problem);
  return std::move(read.replay);
}

}  // namespace hpctune::workflow
