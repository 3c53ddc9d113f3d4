#include "search/early_stopping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/rng.h"

namespace hpctune::search {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

SettingDecl mode_setting() {
  return {"mode", SettingType::kString, "stop", -kInf, kInf, {"stop", "pause"},
          "stop: a trial below the top of a rung ends (pruned); pause: it waits at the rung with its checkpoint and "
          "continues from it when promoted, so nothing is trained twice (needs a trainer that saves checkpoints)"};
}

std::vector<SettingDecl> asha_settings() {
  return {
      {"grace_period", SettingType::kInt, 1, 1, kInf, {}, "the first rung, in steps (minimum resource r)"},
      {"reduction_factor", SettingType::kFloat, 3.0, 1.01, 1000, {},
       "eta: rungs are eta times apart and the top 1/eta of a rung continues"},
      {"max_t", SettingType::kInt, 0, 0, kInf, {}, "the last step a trial reaches; rungs at or past it are not judged, nor any report at or past it (0: none; the config defaults it to the trainer's steps or epochs)"},
      {"min_early_stopping_rate", SettingType::kInt, 0, 0, 64, {}, "s: the first rung is at r * eta^s"},
      mode_setting(),
  };
}

std::vector<SettingDecl> hyperband_settings() {
  return {
      {"grace_period", SettingType::kInt, 1, 1, kInf, {}, "the smallest first rung, in steps (minimum resource r)"},
      {"reduction_factor", SettingType::kFloat, 3.0, 1.01, 1000, {}, "eta, as in asha"},
      {"max_t", SettingType::kInt, 81, 1, kInf, {}, "the maximum resource R: brackets s = 0..floor(log_eta(R / r)); the config defaults it to the trainer's steps or epochs"},
      mode_setting(),
  };
}

std::vector<SettingDecl> median_settings() {
  return {
      {"grace_period", SettingType::kInt, 1, 0, kInf, {}, "no trial is stopped before this step"},
      {"min_samples", SettingType::kInt, 3, 1, kInf, {}, "finished trials needed at a step before anything is stopped"},
  };
}

// Smaller is better inside the stoppers; NaN is worst.
double loss_of(double value, bool maximize) {
  if (std::isnan(value)) return kInf;
  return maximize ? -value : value;
}

class NoStopper final : public EarlyStopper {
 public:
  std::string name() const override { return "none"; }
  Decision on_report(int64_t, int64_t, double) override { return Decision::kContinue; }
};

// One set of rungs (successive halving with a given early-stopping rate), judged asynchronously.
class Rungs {
 public:
  Rungs(double r, double eta, int64_t max_t, int64_t s) : r_(r), eta_(eta), max_t_(max_t), s_(s) {}

  // The step of rung k, or kNoRung for a rung past 2^63 steps, which no trial reaches: there
  // llround's result is unspecified (INT64_MIN here), which no max_t ever reached either, so a
  // max_t near INT64_MAX made milestones() and report() loop for ever, report() growing its rungs
  // without a bound.
  static constexpr int64_t kNoRung = std::numeric_limits<int64_t>::max();
  int64_t milestone(std::size_t k) const {
    const double m = r_ * std::pow(eta_, static_cast<double>(s_) + static_cast<double>(k));
    if (!(m < 9.2e18)) return kNoRung;
    return static_cast<int64_t>(std::llround(m));
  }

  // Judges the trial at every rung it has newly passed; kStop at the first rung it is not in the top of.
  Decision report(int64_t seq, int64_t step, double loss) {
    // A report at the last step is the trial's result: stopping it there saves nothing and would
    // record a finished trial as pruned (issue 9, item 23), even when it skipped earlier rungs.
    if (max_t_ > 0 && step >= max_t_) return Decision::kContinue;
    std::size_t& next = next_rung_[seq];
    while (true) {
      const int64_t m = milestone(next);
      if (m == kNoRung || step < m || (max_t_ > 0 && m >= max_t_)) return Decision::kContinue;
      if (recorded_.size() <= next) recorded_.resize(next + 1);
      auto& rung = recorded_[next];
      rung.emplace_back(seq, loss);
      ++next;
      std::size_t better = 0;
      for (const auto& [other, l] : rung) better += l < loss ? 1 : 0;
      const auto keep = std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(static_cast<double>(rung.size()) / eta_)));
      if (better + 1 > keep) return Decision::kStop;
    }
  }

  // The rungs below max_t (max_t 0: none is listed).
  std::vector<int64_t> milestones() const {
    std::vector<int64_t> out;
    for (std::size_t k = 0; max_t_ > 0; ++k) {
      const int64_t m = milestone(k);
      if (m >= max_t_) break;
      if (out.empty() || m > out.back()) out.push_back(m);
    }
    return out;
  }

  std::optional<EarlyStopper::Standing> standing(int64_t seq, bool maximize) const {
    auto next = next_rung_.find(seq);
    if (next == next_rung_.end() || next->second == 0) return std::nullopt;
    const std::size_t k = next->second - 1;
    const auto& rung = recorded_[k];
    double loss = kInf;
    for (const auto& [other, l] : rung)
      if (other == seq) loss = l;
    std::size_t better = 0;
    for (const auto& [other, l] : rung) better += l < loss ? 1 : 0;
    const auto keep = std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(static_cast<double>(rung.size()) / eta_)));
    return EarlyStopper::Standing{milestone(k), maximize ? -loss : loss, better + 1 <= keep};
  }

  int64_t max_t() const noexcept { return max_t_; }

  nlohmann::json state(bool maximize) const {
    nlohmann::json rungs = nlohmann::json::array();
    for (std::size_t k = 0; k < recorded_.size(); ++k) {
      nlohmann::json values = nlohmann::json::array();
      for (const auto& [seq, l] : recorded_[k]) values.push_back({{"seq", seq}, {"value", maximize ? -l : l}});
      rungs.push_back({{"milestone", milestone(k)}, {"trials", values}});
    }
    return rungs;
  }

 private:
  double r_, eta_;
  int64_t max_t_, s_;
  std::map<int64_t, std::size_t> next_rung_;
  std::vector<std::vector<std::pair<int64_t, double>>> recorded_;  // [rung] -> (seq, loss) in arrival order
};

class Asha final : public EarlyStopper {
 public:
  Asha(const nlohmann::json& s, bool maximize)
      : maximize_(maximize),
        pauses_(s["mode"] == "pause"),
        rungs_(static_cast<double>(s["grace_period"].get<int64_t>()), s["reduction_factor"].get<double>(),
               s["max_t"].get<int64_t>(), s["min_early_stopping_rate"].get<int64_t>()) {}
  std::string name() const override { return "asha"; }
  Decision on_report(int64_t seq, int64_t step, double value) override {
    return rungs_.report(seq, step, loss_of(value, maximize_));
  }
  nlohmann::json state() const override { return {{"rungs", rungs_.state(maximize_)}}; }
  bool pauses() const override { return pauses_; }
  int64_t last_step() const override { return rungs_.max_t(); }
  std::vector<int64_t> milestones(int64_t) const override { return rungs_.milestones(); }
  std::vector<int64_t> all_milestones() const override { return rungs_.milestones(); }
  std::optional<Standing> standing(int64_t seq) const override { return rungs_.standing(seq, maximize_); }

 private:
  bool maximize_;
  bool pauses_ = false;
  Rungs rungs_;
};

class Hyperband final : public EarlyStopper {
 public:
  Hyperband(const nlohmann::json& s, bool maximize, uint64_t seed)
      : maximize_(maximize), pauses_(s["mode"] == "pause"), seed_(seed) {
    const double r = static_cast<double>(s["grace_period"].get<int64_t>());
    const double eta = s["reduction_factor"].get<double>();
    const auto max_t = s["max_t"].get<int64_t>();
    const int s_max = std::max(0, static_cast<int>(std::floor(std::log(static_cast<double>(max_t) / r) / std::log(eta) + 1e-9)));
    for (int b = 0; b <= s_max; ++b) {
      brackets_.emplace_back(r, eta, max_t, b);
      const int hb_s = s_max - b;  // Hyperband's bracket index: the most aggressive bracket has b = 0
      weights_.push_back(std::ceil(static_cast<double>(s_max + 1) / static_cast<double>(hb_s + 1) * std::pow(eta, hb_s)));
    }
  }
  std::string name() const override { return "hyperband"; }

  // The bracket of a trial: a pure function of (seed, seq).
  std::size_t bracket_of(int64_t seq) const {
    double total = 0;
    for (double w : weights_) total += w;
    Rng rng(derive_seed(seed_, static_cast<uint64_t>(seq)));
    double x = rng.uniform() * total;
    for (std::size_t b = 0; b < weights_.size(); ++b) {
      if (x < weights_[b]) return b;
      x -= weights_[b];
    }
    return weights_.size() - 1;
  }

  Decision on_report(int64_t seq, int64_t step, double value) override {
    return brackets_[bracket_of(seq)].report(seq, step, loss_of(value, maximize_));
  }
  bool pauses() const override { return pauses_; }
  int64_t last_step() const override { return brackets_.empty() ? 0 : brackets_.front().max_t(); }
  std::vector<int64_t> milestones(int64_t seq) const override { return brackets_[bracket_of(seq)].milestones(); }
  std::vector<int64_t> all_milestones() const override {
    std::vector<int64_t> all;
    for (const Rungs& b : brackets_)
      for (int64_t m : b.milestones()) all.push_back(m);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    return all;
  }
  std::optional<Standing> standing(int64_t seq) const override {
    return brackets_[bracket_of(seq)].standing(seq, maximize_);
  }
  nlohmann::json state() const override {
    nlohmann::json b = nlohmann::json::array();
    for (std::size_t i = 0; i < brackets_.size(); ++i)
      b.push_back({{"min_early_stopping_rate", i}, {"weight", weights_[i]}, {"rungs", brackets_[i].state(maximize_)}});
    return {{"brackets", b}};
  }

 private:
  bool maximize_;
  bool pauses_ = false;
  uint64_t seed_;
  std::vector<Rungs> brackets_;
  std::vector<double> weights_;
};

class MedianStopper final : public EarlyStopper {
 public:
  MedianStopper(const nlohmann::json& s, bool maximize)
      : maximize_(maximize), grace_(s["grace_period"].get<int64_t>()), min_samples_(s["min_samples"].get<int64_t>()) {}
  std::string name() const override { return "median"; }
  bool judges_before(int64_t last) const override { return grace_ < last; }

  Decision on_report(int64_t seq, int64_t step, double value) override {
    Curve& c = curves_[seq];
    const double loss = loss_of(value, maximize_);
    c.steps.push_back(step);
    c.prefix.push_back((c.prefix.empty() ? 0.0 : c.prefix.back()) + (std::isfinite(loss) ? loss : 1e300));
    c.best = std::min(c.best, loss);
    if (step < grace_) return Decision::kContinue;
    std::vector<double> means;
    for (const auto& [other, oc] : curves_) {
      if (other == seq || !oc.finished || oc.steps.empty()) continue;
      // Reports arrive in step order, so the ones up to `step` are a prefix.
      const auto n = static_cast<std::size_t>(std::upper_bound(oc.steps.begin(), oc.steps.end(), step) - oc.steps.begin());
      if (n == 0) continue;
      means.push_back(oc.prefix[n - 1] / static_cast<double>(n));
    }
    if (static_cast<int64_t>(means.size()) < min_samples_) return Decision::kContinue;
    std::sort(means.begin(), means.end());
    const std::size_t m = means.size();
    const double median = m % 2 ? means[m / 2] : 0.5 * (means[m / 2 - 1] + means[m / 2]);
    return c.best > median ? Decision::kStop : Decision::kContinue;
  }
  void on_finish(int64_t seq) override { curves_[seq].finished = true; }

 private:
  struct Curve {
    std::vector<int64_t> steps;
    std::vector<double> prefix;  // prefix sums of losses
    double best = kInf;
    bool finished = false;
  };
  bool maximize_;
  int64_t grace_, min_samples_;
  std::map<int64_t, Curve> curves_;
};

struct StopperEntry {
  const char* name;
  std::vector<SettingDecl> (*settings)();
};

const std::vector<StopperEntry>& stopper_registry() {
  static const std::vector<StopperEntry> entries = {
      {"none", [] { return std::vector<SettingDecl>{}; }},
      {"asha", &asha_settings},
      {"hyperband", &hyperband_settings},
      {"median", &median_settings},
  };
  return entries;
}

Error unknown_stopper(const std::string& kind) {
  std::string valid;
  for (const auto& e : stopper_registry()) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  return err(Errc::kConfig, "early_stopping: unknown kind '" + kind + "' (valid: " + valid + ")");
}

}  // namespace

std::vector<std::string> stopper_names() {
  std::vector<std::string> out;
  for (const auto& e : stopper_registry()) out.emplace_back(e.name);
  return out;
}

Result<std::vector<SettingDecl>> stopper_settings(const std::string& kind) {
  for (const auto& e : stopper_registry())
    if (kind == e.name) return e.settings();
  return unknown_stopper(kind);
}

Result<std::unique_ptr<EarlyStopper>> make_stopper(const StopperSpec& spec) {
  HPCTUNE_ASSIGN(auto decls, stopper_settings(spec.kind));
  HPCTUNE_ASSIGN(auto s, resolve_settings(spec.kind, decls, spec.settings));
  std::unique_ptr<EarlyStopper> out;
  if (spec.kind == "none") out = std::make_unique<NoStopper>();
  else if (spec.kind == "asha") out = std::make_unique<Asha>(s, spec.maximize);
  else if (spec.kind == "hyperband") {
    if (s["max_t"].get<int64_t>() < s["grace_period"].get<int64_t>())
      return err(Errc::kConfig, "max_t: must be at least grace_period (" + std::to_string(s["grace_period"].get<int64_t>()) + ")");
    out = std::make_unique<Hyperband>(s, spec.maximize, spec.seed);
  } else if (spec.kind == "median") out = std::make_unique<MedianStopper>(s, spec.maximize);
  else return unknown_stopper(spec.kind);
  return out;
}

Fidelity stopper_fidelity(const StopperSpec& spec, int64_t full_step) {
  Fidelity f;
  if (spec.kind == "none") return f;
  auto made = make_stopper(spec);
  if (!made.ok()) return f;
  const auto& settings = spec.settings;
  const int64_t max_t = settings.is_object() && settings.contains("max_t") && settings["max_t"].is_number_integer()
                            ? settings["max_t"].get<int64_t>()
                            : 0;
  f.max_step = max_t > 0 ? max_t : full_step;
  if (f.max_step <= 0) return Fidelity{};
  for (int64_t m : made.value()->all_milestones())
    if (m < f.max_step) f.rungs.push_back(m);
  return f;
}

}  // namespace hpctune::search
