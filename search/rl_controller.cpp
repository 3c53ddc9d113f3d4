// rl: the REINFORCE controller (rl_controller.h): a softmax per parameter, batched updates in seq order.
#include "search/rl_controller.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "search/pareto.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

std::vector<SettingDecl> rl_settings() {
  return {
      {"lr", SettingType::kFloat, 0.2, 0.0, 100.0, {}, "step size on the policy's logits; 0 disables learning"},
      {"optimizer", SettingType::kString, "adam", -kInf, kInf, {"adam", "sgd"}, "how the logits are updated"},
      {"baseline_decay", SettingType::kFloat, 0.9, 0.0, 0.999999, {}, "decay of the moving-average reward baseline"},
      {"entropy", SettingType::kFloat, 0.03, 0.0, 100.0, {}, "weight of the entropy bonus (exploration)"},
      {"batch", SettingType::kInt, 2, 1, 1000000, {}, "finished trials per policy update (taken in seq order)"},
      {"bins", SettingType::kInt, 10, 2, 10000, {}, "levels of a float parameter, and of an int with more values than this"},
      {"reward", SettingType::kString, "rank", -kInf, kInf, {"rank", "standardize"},
       "reward normalization: mid-rank among the rewards so far scaled to [0, 1], or (r - mean) / std"},
  };
}

namespace {

struct Options {
  double lr = 0.2;
  bool adam = true;
  double decay = 0.9;
  double entropy = 0.03;
  int64_t batch = 2;
  int64_t bins = 10;
  bool rank = true;
};

// One parameter's softmax: logits and the optimizer's moments.
struct Head {
  enum class Kind { kFixed, kLevels, kBins };
  Kind kind = Kind::kFixed;
  std::vector<double> logits, m, v;
  std::size_t size() const noexcept { return logits.size(); }
};

// A finished trial waiting for its batch.
struct Finished {
  Params params;
  bool failed = false;
  double reward = 0.0;  // raw, maximize form; unset when failed
};

std::vector<double> softmax(const std::vector<double>& z) {
  std::vector<double> p(z.size());
  if (z.empty()) return p;
  const double mx = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (std::size_t j = 0; j < z.size(); ++j) sum += (p[j] = std::exp(z[j] - mx));
  for (double& x : p) x /= sum;
  return p;
}

class RlController final : public SearcherBase {
 public:
  RlController(const SearchSpec& spec, Options opt) : SearcherBase(spec), opt_(opt) {
    for (const auto& p : space().params()) {
      Head h;
      std::size_t levels = 0;
      if (p.type == ParamType::kChoice) {
        h.kind = Head::Kind::kLevels;
        levels = p.choices.size();
      } else if (p.type == ParamType::kInt && Space::int_levels(p) <= opt_.bins) {
        h.kind = Head::Kind::kLevels;
        levels = static_cast<std::size_t>(Space::int_levels(p));
      } else if (p.type == ParamType::kInt || p.type == ParamType::kFloat) {
        h.kind = Head::Kind::kBins;
        levels = static_cast<std::size_t>(opt_.bins);
      }
      h.logits.assign(levels, 0.0);
      h.m.assign(levels, 0.0);
      h.v.assign(levels, 0.0);
      heads_.push_back(std::move(h));
    }
    // Warm-start trials train the policy first, in the order given.
    std::vector<Finished> warm;
    for (const auto& o : this->spec().warm_start) {
      warm.push_back(finished_of(o));
      known_.emplace(space().config_key(o.params), std::make_pair(int64_t{-1}, warm.back()));
      if (static_cast<int64_t>(warm.size()) == opt_.batch) {
        update(warm);
        warm.clear();
      }
    }
    if (!warm.empty()) update(warm);
  }

  std::string name() const override { return "rl"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      Rng rng = rng_for(next_seq(), 0x51);
      Params sampled = sample(rng);
      Suggestion s = issue(sampled, {{"source", "policy"}, {"updates", updates_}});
      if (s.meta.value("deduplicated", false)) {
        // The policy sampled a configuration already evaluated (or running): SearcherBase ran another
        // in its place. The update credits the policy's own sample with that configuration's
        // recorded reward (on_tell); "sampled" keeps it for restore().
        s.meta["sampled"] = sampled;
        sampled_[s.seq] = std::move(sampled);
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  void add_notes(std::vector<std::string>& out) const override {
    out.push_back("rl: the policy starts uniform and is updated every " + std::to_string(opt_.batch) +
                  " finished trials (in seq order)");
  }

 private:
  // --- the policy ------------------------------------------------------------------------------
  Params sample(Rng& rng) const {
    Params params = Params::object();
    const auto& specs = space().params();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& p = specs[i];
      if (!Space::active(p, params)) continue;
      const Head& h = heads_[i];
      if (h.kind == Head::Kind::kFixed) {
        params[p.name] = p.value;
        continue;
      }
      const auto prob = softmax(h.logits);
      double u = rng.uniform();
      std::size_t level = prob.size() - 1;
      for (std::size_t j = 0; j < prob.size(); ++j) {
        if (u < prob[j]) {
          level = j;
          break;
        }
        u -= prob[j];
      }
      params[p.name] = value_of(p, h, level, rng.uniform());
    }
    return params;
  }

  // The value of `level`; `within` places a binned value inside its bin (0.5: the centre).
  nlohmann::json value_of(const ParamSpec& p, const Head& h, std::size_t level, double within) const {
    if (p.type == ParamType::kChoice) return p.choices[level];
    if (h.kind == Head::Kind::kLevels) return static_cast<int64_t>(p.low) + static_cast<int64_t>(level) * p.step;
    return Space::from_unit(p, (static_cast<double>(level) + within) / static_cast<double>(h.size()));
  }

  // The level of parameter i's value in `params`, or -1 (inactive, absent, not in the space).
  int64_t level_of(std::size_t i, const Params& params) const {
    const ParamSpec& p = space().params()[i];
    const Head& h = heads_[i];
    if (h.kind == Head::Kind::kFixed || !Space::active(p, params) || !params.is_object() || !params.contains(p.name))
      return -1;
    const auto& v = params[p.name];
    if (p.type == ParamType::kChoice) return Space::choice_index(p, v);
    if (!v.is_number()) return -1;
    if (h.kind == Head::Kind::kLevels) {
      const auto idx = std::llround((v.get<double>() - p.low) / static_cast<double>(p.step));
      return idx >= 0 && idx < static_cast<int64_t>(h.size()) ? idx : -1;
    }
    const double u = Space::to_unit(p, v);
    if (!std::isfinite(u)) return -1;
    const auto b = static_cast<int64_t>(std::floor(u * static_cast<double>(h.size())));
    return std::clamp<int64_t>(b, 0, static_cast<int64_t>(h.size()) - 1);
  }

  // --- rewards and updates ---------------------------------------------------------------------
  Finished finished_of(const Observation& o) const {
    Finished f;
    f.params = o.params;
    const auto losses = o.outcome == Outcome::kFailed ? std::vector<double>{} : observation_losses(o, objectives());
    f.failed = losses.empty() || !std::isfinite(losses[0]);
    if (!f.failed) f.reward = -losses[0];
    return f;
  }

  void on_restore_suggestion(const Suggestion& s) override {
    if (s.meta.is_object() && s.meta.contains("sampled") && s.meta["sampled"].is_object())
      sampled_[s.seq] = s.meta["sampled"];
  }

  void on_tell(const Observation& obs) override {
    waiting_[obs.seq] = finished_of(obs);
    // The first (lowest seq) result of each configuration, whatever order the results came in.
    const std::string key = space().config_key(obs.params);
    auto known = known_.find(key);
    if (known == known_.end() || obs.seq < known->second.first) known_[key] = {obs.seq, waiting_[obs.seq]};
    // The next batch in seq order, once all of it finished.
    for (;;) {
      std::vector<Finished> batch;
      for (int64_t s = applied_; s < applied_ + opt_.batch; ++s) {
        auto it = waiting_.find(s);
        if (it == waiting_.end()) return;
        batch.push_back(credited(s, it->second));
      }
      for (int64_t s = applied_; s < applied_ + opt_.batch; ++s) waiting_.erase(s);
      applied_ += opt_.batch;
      update(batch);
    }
  }

  // What trial `seq` teaches the policy: its own result, or, when SearcherBase replaced a repeat
  // of the policy's sample, the sample with its recorded result (REINFORCE's gradient is that of
  // the sample's log-probability; the repeat cost no training run). The sample has a lower seq,
  // so it is in this batch or an earlier one: told whenever this batch is applied.
  Finished credited(int64_t seq, const Finished& own) const {
    auto moved = sampled_.find(seq);
    if (moved == sampled_.end()) return own;
    auto known = known_.find(space().config_key(moved->second));
    if (known == known_.end()) return own;  // a warm-start configuration or one never told
    Finished f = known->second.second;
    f.params = moved->second;
    return f;
  }

  // One policy step on `batch`, then the baseline.
  void update(const std::vector<Finished>& batch) {
    for (const auto& f : batch)
      if (!f.failed) insert_reward(f.reward);
    if (rewards_.empty()) return;  // only failures so far: nothing to compare with
    std::vector<double> norm;
    for (const auto& f : batch) {
      const double r = f.failed ? rewards_.front() : f.reward;  // failed: the worst reward seen
      if (f.failed) insert_reward(r);
      norm.push_back(r);
    }
    for (double& r : norm) r = normalize(r);
    if (!has_baseline_) {
      double mean = 0;
      for (double r : norm) mean += r / static_cast<double>(norm.size());
      baseline_ = mean;
      has_baseline_ = true;
    }
    std::vector<std::vector<double>> grad(heads_.size());
    for (std::size_t i = 0; i < heads_.size(); ++i) grad[i].assign(heads_[i].size(), 0.0);
    const double scale = 1.0 / static_cast<double>(batch.size());
    for (std::size_t k = 0; k < batch.size(); ++k) {
      const double advantage = norm[k] - baseline_;
      for (std::size_t i = 0; i < heads_.size(); ++i) {
        const int64_t level = level_of(i, batch[k].params);
        if (level < 0) continue;
        const auto prob = softmax(heads_[i].logits);
        for (std::size_t j = 0; j < prob.size(); ++j)
          grad[i][j] += scale * advantage * ((static_cast<int64_t>(j) == level ? 1.0 : 0.0) - prob[j]);
      }
    }
    if (opt_.entropy > 0) {
      // dH/dz_j = -p_j (log p_j + H)
      for (std::size_t i = 0; i < heads_.size(); ++i) {
        const auto prob = softmax(heads_[i].logits);
        double h = 0;
        for (double p : prob) h -= p > 0 ? p * std::log(p) : 0.0;
        for (std::size_t j = 0; j < prob.size(); ++j)
          grad[i][j] += opt_.entropy * (-prob[j] * ((prob[j] > 0 ? std::log(prob[j]) : 0.0) + h));
      }
    }
    step(grad);
    for (double r : norm) baseline_ = opt_.decay * baseline_ + (1.0 - opt_.decay) * r;
    ++updates_;
  }

  // Gradient ascent on the logits.
  void step(const std::vector<std::vector<double>>& grad) {
    constexpr double kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;
    ++t_;
    const double c1 = 1.0 - std::pow(kB1, static_cast<double>(t_)), c2 = 1.0 - std::pow(kB2, static_cast<double>(t_));
    for (std::size_t i = 0; i < heads_.size(); ++i) {
      Head& h = heads_[i];
      for (std::size_t j = 0; j < h.size(); ++j) {
        const double g = grad[i][j];
        if (!opt_.adam) {
          h.logits[j] += opt_.lr * g;
          continue;
        }
        h.m[j] = kB1 * h.m[j] + (1 - kB1) * g;
        h.v[j] = kB2 * h.v[j] + (1 - kB2) * g * g;
        h.logits[j] += opt_.lr * (h.m[j] / c1) / (std::sqrt(h.v[j] / c2) + kEps);
      }
    }
  }

  void insert_reward(double r) { rewards_.insert(std::upper_bound(rewards_.begin(), rewards_.end(), r), r); }

  // A raw reward (already in rewards_) normalized over all rewards so far.
  double normalize(double r) const {
    const auto n = static_cast<double>(rewards_.size());
    if (opt_.rank) {
      if (rewards_.size() < 2) return 0.5;
      const auto lo = std::lower_bound(rewards_.begin(), rewards_.end(), r);
      const auto hi = std::upper_bound(rewards_.begin(), rewards_.end(), r);
      const double less = static_cast<double>(lo - rewards_.begin());
      const double equal = static_cast<double>(hi - lo);
      return (less + 0.5 * (equal - 1.0)) / (n - 1.0);
    }
    double mean = 0, var = 0;
    for (double x : rewards_) mean += x / n;
    for (double x : rewards_) var += (x - mean) * (x - mean) / n;
    return var > 0 ? (r - mean) / std::sqrt(var) : 0.0;
  }

  // --- state -----------------------------------------------------------------------------------
  void add_state(nlohmann::json& s) const override {
    Params best = Params::object();
    nlohmann::json prob = nlohmann::json::object();
    const auto& specs = space().params();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& p = specs[i];
      if (!Space::active(p, best)) continue;
      const Head& h = heads_[i];
      if (h.kind == Head::Kind::kFixed) {
        best[p.name] = p.value;
        continue;
      }
      const auto pr = softmax(h.logits);
      const auto level = static_cast<std::size_t>(std::max_element(pr.begin(), pr.end()) - pr.begin());
      best[p.name] = value_of(p, h, level, 0.5);
      prob[p.name] = pr[level];
    }
    s["most_likely"] = best;
    s["probability"] = prob;
    s["updates"] = updates_;
  }

  Options opt_;
  std::vector<Head> heads_;              // one per parameter of the space, in its order
  std::map<int64_t, Finished> waiting_;  // finished trials whose batch is not complete
  std::map<int64_t, Params> sampled_;     // seq -> the policy's sample, where a repeat was replaced
  std::map<std::string, std::pair<int64_t, Finished>> known_;  // config key -> (seq, its result)
  int64_t applied_ = 0;                  // every seq below this is in an applied batch
  std::vector<double> rewards_;          // every reward so far, sorted
  double baseline_ = 0.0;
  bool has_baseline_ = false;
  int64_t t_ = 0, updates_ = 0;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_rl(const SearchSpec& spec) {
  if (spec.objectives.size() > 1) {
    return err(Errc::kConfig, "objectives: the rl controller optimizes one objective (got " +
                                  std::to_string(spec.objectives.size()) +
                                  "); use genetic, evolution, tpe or bayesian for several");
  }
  HPCTUNE_ASSIGN(auto s, resolve_settings("rl", rl_settings(), spec.settings));
  Options o;
  o.lr = s["lr"].get<double>();
  o.adam = s["optimizer"].get<std::string>() == "adam";
  o.decay = s["baseline_decay"].get<double>();
  o.entropy = s["entropy"].get<double>();
  o.batch = s["batch"].get<int64_t>();
  o.bins = s["bins"].get<int64_t>();
  o.rank = s["reward"].get<std::string>() == "rank";
  return std::unique_ptr<Searcher>(std::make_unique<RlController>(spec, o));
}

}  // namespace hpctune::search
