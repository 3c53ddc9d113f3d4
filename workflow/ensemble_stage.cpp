// The ensemble stage (ensemble_stage.h): the stage's inputs and members read from the store, the
// retrain source, and the blend with its scores.
#include "workflow/ensemble_stage.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/npy.h"
#include "common/rng.h"
#include "common/safe_open.h"
#include "common/text.h"
#include "config/trainer_kinds.h"
#include "ensemble/ensemble.h"
#include "workflow/stage_settings.h"
#include "workflow/trial_files.h"

namespace hpctune::workflow {
namespace {

namespace fs = std::filesystem;

// The artifacts a member needs, as the classifier trainers record them (classification), or as a
// program writes them for `task: regression` (predictions and targets, rows x outputs). The first
// two are the validation and test predictions. A trial that recorded none of them (a `command`
// trainer's program) has them as <kind>.npy in its trial directory.
const std::vector<std::string> kClassificationKinds = {"val_probs", "test_probs", "val_indices", "val_labels",
                                                       "test_labels"};
const std::vector<std::string> kRegressionKinds = {"val_pred", "test_pred", "val_targets", "test_targets"};
// The one a member may lack (a program need not say which examples its validation rows are): the
// rows are then compared by their labels alone, and by the images when every member lists them.
constexpr const char* kOptionalKind = "val_indices";

// A stable 64-bit hash of the stage's name (FNV-1a): the retrained seeds of two ensemble stages
// of one campaign draw apart, and do not depend on the order the stage rows were created in.
uint64_t name_hash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

struct Settings {
  bool regression = false;  // task: regression
  std::string method = "greedy";
  int max_size = 20;
  int bags = 0;
  int k = 5;
  int retrain_top = 0;    // 0: no retrain
  int retrain_seeds = 0;
};

// The stage's keys, read by the one reader with their declarations (workflow/stage_settings.h):
// what `validate` accepts is what the stage runs with.
Result<Settings> read_settings(const config::StageConfig& stage) {
  auto read = read_stage_settings("ensemble", stage.settings);
  if (!read.ok()) return err(Errc::kConfig, "stage '" + stage.name + "': " + read.error().message());
  const nlohmann::json& s = read.value();
  Settings out;
  out.regression = s.at("task").get<std::string>() == "regression";
  out.method = s.at("method").get<std::string>();
  out.max_size = static_cast<int>(s.at("max_size").get<int64_t>());
  out.bags = static_cast<int>(s.at("bags").get<int64_t>());
  out.k = static_cast<int>(s.at("k").get<int64_t>());
  if (s.contains("retrain")) {
    const nlohmann::json& r = s.at("retrain");
    out.retrain_top = static_cast<int>(r.at("top").get<int64_t>());
    out.retrain_seeds = static_cast<int>(r.at("seeds").get<int64_t>());
  }
  return out;
}

// A trial that can be a member: where its predictions are and what it scored.
struct Candidate {
  int64_t trial = 0;
  int64_t retrain_of = 0;  // the input trial it retrains (a trial of this stage), else 0
  double objective = std::numeric_limits<double>::quiet_NaN();  // the first objective as reported
  std::vector<std::string> paths;  // one per kind of the task (kinds())
};

// One member's predictions, loaded and checked (regression: the targets instead of the lists).
struct Loaded {
  ensemble::Probabilities val, test;
  std::vector<int64_t> val_indices, val_labels, test_labels;  // val_indices: empty when not saved
  ensemble::Probabilities val_targets, test_targets;
};

// The retrained trials: plan_ (set by begin) handed out in seq order, never one recorded before.
class RetrainSource final : public scheduler::TrialSource {
 public:
  std::string kind() const override { return "ensemble"; }
  void set_plan(std::vector<search::Suggestion> plan) {
    plan_ = std::move(plan);
    next_ = 0;
    ready_ = true;
  }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override {
    if (!ready_) return err(Errc::kInternal, "the ensemble stage's retrain source was asked before the stage began");
    std::vector<search::Suggestion> out;
    for (; next_ < plan_.size() && out.size() < n; ++next_) {
      if (!handed_.insert(plan_[next_].seq).second) continue;  // recorded before a restart, or already asked
      out.push_back(plan_[next_]);
    }
    return out;
  }
  bool exhausted() const override {
    if (!ready_) return false;
    for (std::size_t i = next_; i < plan_.size(); ++i)
      if (!handed_.count(plan_[i].seq)) return false;
    return true;
  }
  scheduler::Verdict on_report(const scheduler::TrialView&, int64_t, double) override {
    return scheduler::Verdict::carry_on();
  }
  void on_attempt_end(int64_t) override {}
  void tell(const search::Observation&) override {}
  void restore(const std::vector<search::Record>& history) override {
    for (const auto& r : history) handed_.insert(r.suggestion.seq);
  }
  nlohmann::json state() const override {
    return {{"planned", plan_.size()}, {"proposed", handed_.size()}};
  }

 private:
  std::vector<search::Suggestion> plan_;
  std::size_t next_ = 0;
  bool ready_ = false;
  std::set<int64_t> handed_;  // seqs asked or recorded: never proposed again
};

class EnsembleStage final : public scheduler::StageRuntime {
 public:
  EnsembleStage(std::string name, Settings settings, search::Objective objective, uint64_t seed,
                nlohmann::json trainer)
      : name_(std::move(name)), s_(std::move(settings)), objective_(std::move(objective)), seed_(seed),
        trainer_(std::move(trainer)) {}

  scheduler::TrialSource* source() override { return s_.retrain_top > 0 ? &retrain_ : nullptr; }
  int64_t max_trials() const override { return int64_t{s_.retrain_top} * s_.retrain_seeds; }
  nlohmann::json trainer() const override { return s_.retrain_top > 0 ? trainer_ : nlohmann::json(); }

  Status begin(const scheduler::StageContext& ctx) override {
    HPCTUNE_ASSIGN(Inputs in, read_inputs(ctx, false));
    if (in.usable.empty()) return no_members(in);
    if (!in.skipped_note.empty() && ctx.log) ctx.log(in.skipped_note);
    if (s_.retrain_top > 0) retrain_.set_plan(retrain_plan(in.done));
    return {};
  }

  Result<nlohmann::json> finish(const scheduler::StageContext& ctx) override {
    HPCTUNE_ASSIGN(Inputs in, read_inputs(ctx, true));
    if (in.usable.empty()) return no_members(in);
    HPCTUNE_ASSIGN(std::vector<Loaded> loaded, load_members(ctx, in));
    if (s_.regression) return finish_regression(ctx, in, loaded);
    std::vector<ensemble::Probabilities> val, test;
    for (Loaded& l : loaded) val.push_back(std::move(l.val)), test.push_back(std::move(l.test));
    std::vector<int> val_labels, test_labels;
    for (int64_t y : loaded.front().val_labels) val_labels.push_back(static_cast<int>(y));
    for (int64_t y : loaded.front().test_labels) test_labels.push_back(static_cast<int>(y));
    if (auto st = ensemble::check_members(val, val_labels); !st.ok())
      return failed("the validation predictions: " + st.error().message());
    if (auto st = ensemble::check_members(test, test_labels); !st.ok())
      return failed("the test predictions: " + st.error().message());

    auto weights = choose_weights(val, val_labels);
    if (!weights.ok()) return failed(weights.error().message());
    auto val_blend = ensemble::blend(val, *weights);
    if (!val_blend.ok()) return failed(val_blend.error().message());
    auto test_blend = ensemble::blend(test, *weights);
    if (!test_blend.ok()) return failed(test_blend.error().message());

    nlohmann::json result = {{"method", s_.method},
                             {"candidates", in.usable.size()},
                             {"skipped", in.skipped},
                             {"retrained", in.retrained}};
    if (!in.left_out.empty()) result["left_out"] = in.left_out;
    result["members"] = members_json(in.usable, *weights);
    result.update(scores(*val_blend, val_labels, *test_blend, test_labels));
    std::vector<double> losses;
    for (const auto& v : val) losses.push_back(ensemble::log_loss(v, val_labels));
    const std::size_t best = best_single(in.usable, losses);
    nlohmann::json single = {{"trial", in.usable[best].trial}, {"chosen_by", "val_log_loss"}};
    single.update(scores(val[best], val_labels, test[best], test_labels));
    single["objective"] = objective_json(in.usable[best].objective);
    result["best_single"] = std::move(single);
    result["objective"] = objective_json(blend_objective(result));
    if (!ctx.run_dir.empty()) {
      HPCTUNE_ASSIGN(nlohmann::json files, write_blend(ctx, *val_blend, *test_blend));
      result["files"] = std::move(files);
    }
    return result;
  }

 private:
  struct Inputs;

  // task: regression: the weights by validation MSE, the blend's and the best member's MSEs.
  Result<nlohmann::json> finish_regression(const scheduler::StageContext& ctx, const Inputs& in,
                                           std::vector<Loaded>& loaded) const {
    std::vector<ensemble::Probabilities> val, test;
    for (Loaded& l : loaded) val.push_back(std::move(l.val)), test.push_back(std::move(l.test));
    const ensemble::Probabilities& val_targets = loaded.front().val_targets;
    const ensemble::Probabilities& test_targets = loaded.front().test_targets;
    if (auto st = ensemble::check_members(val, val_targets); !st.ok())
      return failed("the validation predictions: " + st.error().message());
    if (auto st = ensemble::check_members(test, test_targets); !st.ok())
      return failed("the test predictions: " + st.error().message());
    Result<std::vector<double>> weights = std::vector<double>{};
    if (s_.method == "top_k") weights = ensemble::top_k(val, val_targets, s_.k);
    else if (s_.method == "weighted") weights = ensemble::fit_weights(val, val_targets);
    else weights = ensemble::greedy_selection(val, val_targets, greedy_options());
    if (!weights.ok()) return failed(weights.error().message());
    auto val_blend = ensemble::blend(val, *weights);
    if (!val_blend.ok()) return failed(val_blend.error().message());
    auto test_blend = ensemble::blend(test, *weights);
    if (!test_blend.ok()) return failed(test_blend.error().message());
    nlohmann::json result = {{"task", "regression"},
                             {"method", s_.method},
                             {"candidates", in.usable.size()},
                             {"skipped", in.skipped},
                             {"retrained", in.retrained}};
    if (!in.left_out.empty()) result["left_out"] = in.left_out;
    result["members"] = members_json(in.usable, *weights);
    result["val_mse"] = ensemble::mean_squared_error(*val_blend, val_targets);
    result["test_mse"] = ensemble::mean_squared_error(*test_blend, test_targets);
    // The best member by the loss the blend minimises, validation MSE; ties by its objective.
    std::vector<double> losses;
    for (const auto& v : val) losses.push_back(ensemble::mean_squared_error(v, val_targets));
    const std::size_t best = best_single(in.usable, losses);
    result["best_single"] = {{"trial", in.usable[best].trial},
                             {"chosen_by", "val_mse"},
                             {"val_mse", losses[best]},
                             {"test_mse", ensemble::mean_squared_error(test[best], test_targets)},
                             {"objective", objective_json(in.usable[best].objective)}};
    result["objective"] = objective_json(blend_objective(result));
    if (!ctx.run_dir.empty()) {
      HPCTUNE_ASSIGN(nlohmann::json files, write_blend(ctx, *val_blend, *test_blend));
      result["files"] = std::move(files);
    }
    return result;
  }

  ensemble::GreedyOptions greedy_options() const {
    // The bags' draws are the campaign's, kept apart from other stages' by the stage's name.
    return {.max_size = s_.max_size, .bags = s_.bags, .seed = derive_seed(seed_, name_hash(name_) + 1)};
  }

  struct Inputs {
    std::vector<store::TrialRow> done;  // the done trials of the input stages, by id
    std::vector<Candidate> usable;      // with predictions: inputs first, then retrained, by id
    int64_t skipped = 0, retrained = 0;
    std::string input_names;            // "'tune'" or "'a', 'b'"
    std::string skipped_note;
    nlohmann::json left_out = nlohmann::json::array();  // [{trial, reason}]: predictions not finite
  };

  const std::vector<std::string>& kinds() const { return s_.regression ? kRegressionKinds : kClassificationKinds; }

  Error failed(const std::string& what) const { return err(Errc::kFailed, "ensemble '" + name_ + "': " + what); }

  Error no_members(const Inputs& in) const {
    const std::string stages = (in.input_names.find(',') == std::string::npos ? "stage " : "stages ") + in.input_names;
    if (in.done.empty()) return failed(stages + " finished no trial (no done trials to blend)");
    return failed("none of the " + std::to_string(in.done.size()) + " done trials of " + stages +
                  " saved predictions (trainer.save_predictions; a program writes them into its HPCTUNE_TRIAL_DIR)");
  }

  // The objective value a trial reported (its final metrics; the recorded objective otherwise).
  double objective_of(const store::TrialRow& t) const {
    if (t.metrics.is_object() && t.metrics.contains(objective_.metric) && t.metrics[objective_.metric].is_number())
      return t.metrics[objective_.metric].get<double>();
    return t.objective.value_or(std::numeric_limits<double>::quiet_NaN());
  }

  // Whether a is better than b by the objective (NaN: worst).
  bool better(double a, double b) const {
    if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
    return objective_.maximize ? a > b : a < b;
  }

  // The index of `kind` in kinds(); kinds().size() when it is not one of them.
  std::size_t kind_index(const std::string& kind) const {
    const std::vector<std::string>& kinds = this->kinds();
    return static_cast<std::size_t>(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
  }

  // The trial's predictions, from its latest attempt's artifacts, else (none recorded) the files
  // its program left in its trial directory; false when one (but the optional val_indices) is missing.
  Result<bool> candidate_of(const scheduler::StageContext& ctx, const store::TrialRow& t, Candidate& c) const {
    HPCTUNE_ASSIGN(std::vector<store::ArtifactRow> artifacts, ctx.store->artifacts(t.id));
    c.trial = t.id;
    c.objective = objective_of(t);
    // The files of one attempt, the latest that recorded any: never an earlier attempt's
    // validation rows beside a later one's probabilities.
    const std::vector<std::string>& kinds = this->kinds();
    int64_t latest = 0;
    for (const auto& a : artifacts)
      if (kind_index(a.kind) < kinds.size()) latest = std::max(latest, a.attempt);
    c.paths.assign(kinds.size(), "");
    for (const auto& a : artifacts)
      if (const std::size_t k = kind_index(a.kind); k < kinds.size() && a.attempt == latest) c.paths[k] = a.path;
    if (latest == 0) HPCTUNE_TRY(files_in_trial_dir(ctx, t.id, c));
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      if (c.paths[k].empty()) {
        if (kinds[k] == kOptionalKind) continue;
        return false;
      }
      HPCTUNE_TRY(resolve(ctx, t.id, c.paths[k], kinds[k].c_str()));  // kept as recorded: load() opens it
    }
    return true;
  }

  // The <kind>.npy files in the trial's directory (a program's, HPCTUNE_TRIAL_DIR), each opened as
  // load() will open it: absent ones stay "", and one that cannot be a member's file (a link, a
  // FIFO, another user's file) is an error naming it.
  Status files_in_trial_dir(const scheduler::StageContext& ctx, int64_t trial, Candidate& c) const {
    if (ctx.run_dir.empty()) return {};
    const std::vector<std::string>& kinds = this->kinds();
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      const std::string path = ctx.trial_dir(trial) + "/" + kinds[k] + ".npy";
      auto fd = open_trial_file(ctx.run_dir, trial, path);
      if (fd.ok()) {
        c.paths[k] = path;
      } else if (fd.error().code() != Errc::kNotFound) {
        return failed("trial " + std::to_string(trial) + "'s " + path + " is refused: " + fd.error().message());
      }
    }
    return {};
  }

  // An artifact's path, relative ones against the trial's directory. The path was sent by a trainer
  // group: with trial directories it must lie inside the trial's own (lexically here; load() opens
  // it without following a link, trial_files.h).
  Status resolve(const scheduler::StageContext& ctx, int64_t trial, const std::string& path, const char* kind) const {
    const std::string dir = ctx.trial_dir(trial);
    if (dir.empty() || !relative_to_trial(dir, path).empty()) return {};
    return failed("trial " + std::to_string(trial) + "'s " + kind + " artifact " + path +
                  " is outside its trial directory " + dir);
  }

  // The done trials of the input stages (and, with `own`, this stage's retrained ones) and which
  // of them saved predictions.
  Result<Inputs> read_inputs(const scheduler::StageContext& ctx, bool own) const {
    if (ctx.store == nullptr) return err(Errc::kInternal, "the ensemble stage was begun without a store");
    Inputs in;
    HPCTUNE_ASSIGN(std::vector<store::StageRow> stages, ctx.store->stages(ctx.campaign_id));
    std::vector<std::string> names;
    for (int64_t id : ctx.inputs) {
      std::string name = "#" + std::to_string(id);
      for (const auto& s : stages)
        if (s.id == id) name = s.name;
      names.push_back("'" + name + "'");
    }
    in.input_names = join(names, ", ");
    HPCTUNE_ASSIGN(std::vector<store::TrialRow> trials, ctx.store->trials(ctx.campaign_id));
    std::sort(trials.begin(), trials.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    int64_t own_skipped = 0;
    std::vector<Candidate> retrained;
    for (const auto& t : trials) {
      if (t.state != store::TrialState::kDone) continue;
      const bool input = std::find(ctx.inputs.begin(), ctx.inputs.end(), t.stage_id) != ctx.inputs.end();
      const bool mine = own && t.stage_id == ctx.stage_id;
      if (!input && !mine) continue;
      if (input) in.done.push_back(t);
      Candidate c;
      HPCTUNE_ASSIGN(bool has, candidate_of(ctx, t, c));
      if (!has) {
        ++(input ? in.skipped : own_skipped);
        continue;
      }
      if (input) {
        in.usable.push_back(std::move(c));
      } else {
        c.retrain_of = retrain_source_of(t);
        retrained.push_back(std::move(c));
      }
    }
    in.retrained = static_cast<int64_t>(retrained.size());
    for (auto& c : retrained) in.usable.push_back(std::move(c));
    in.skipped += own_skipped;
    if (in.skipped > 0)
      in.skipped_note = "ensemble '" + name_ + "': " + std::to_string(in.skipped) + " of the done trials saved no " +
                        "predictions (trainer.save_predictions) and are left out";
    return in;
  }

  static int64_t retrain_source_of(const store::TrialRow& t) {
    if (!t.meta.is_object() || !t.meta.contains("lineage") || !t.meta["lineage"].is_array()) return 0;
    for (const auto& l : t.meta["lineage"])
      if (l.is_object() && l.value("relation", "") == "retrain_of" && l.contains("trial") && l["trial"].is_number_integer())
        return l["trial"].get<int64_t>();
    return 0;
  }

  // The k best done input trials (ties: the lower id) each under `seeds` new seeds, as suggestions
  // seq 0.. in that order: source i / seeds, seed index i.
  std::vector<search::Suggestion> retrain_plan(std::vector<store::TrialRow> done) const {
    std::stable_sort(done.begin(), done.end(), [&](const auto& a, const auto& b) {
      return better(objective_of(a), objective_of(b));
    });
    std::erase_if(done, [&](const auto& t) { return std::isnan(objective_of(t)); });
    const std::size_t top = std::min<std::size_t>(done.size(), static_cast<std::size_t>(s_.retrain_top));
    const uint64_t stream = derive_seed(seed_, name_hash(name_));
    std::vector<search::Suggestion> plan;
    for (std::size_t i = 0; i < top * static_cast<std::size_t>(s_.retrain_seeds); ++i) {
      const store::TrialRow& src = done[i / static_cast<std::size_t>(s_.retrain_seeds)];
      search::Suggestion s;
      s.seq = static_cast<int64_t>(i);
      s.params = src.params;
      s.meta = {{"seed", derive_seed(stream, i)},
                {"lineage", nlohmann::json::array({{{"trial", src.id}, {"relation", "retrain_of"}}})}};
      plan.push_back(std::move(s));
    }
    return plan;
  }

  // Reads a member's five files and checks their shapes against each other. Each is opened once,
  // inside the trial's directory without following a link (trial_files.h), and read from that
  // descriptor: a link planted in the trial's directory, a FIFO or another user's file is refused.
  Result<Loaded> load(const scheduler::StageContext& ctx, const Candidate& c) const {
    auto named = [&](const Error& e) { return failed("trial " + std::to_string(c.trial) + ": " + e.message()); };
    auto open = [&](std::size_t k) -> Result<UniqueFd> {
      auto fd = open_trial_file(ctx.run_dir, c.trial, c.paths[k]);
      if (!fd.ok())
        return failed("trial " + std::to_string(c.trial) + "'s " + kinds()[k] + " artifact " + c.paths[k] +
                      " is refused: " + fd.error().message());
      return fd;
    };
    Loaded l;
    if (s_.regression) {
      ensemble::Probabilities* mats[4] = {&l.val, &l.test, &l.val_targets, &l.test_targets};
      for (std::size_t p = 0; p < 4; ++p) {
        HPCTUNE_ASSIGN(UniqueFd fd, open(p));
        int64_t rows = 0, cols = 0;
        auto values = read_npy_real(fd.get(), c.paths[p], rows, cols, /*one_d_as_column=*/true);
        if (!values.ok()) return named(values.error());
        mats[p]->rows = static_cast<std::size_t>(rows);
        mats[p]->classes = static_cast<std::size_t>(cols);
        mats[p]->values.assign(values->begin(), values->end());
      }
      auto shape = [](const ensemble::Probabilities& p) {
        return std::to_string(p.rows) + " x " + std::to_string(p.classes);
      };
      if (shape(l.val) != shape(l.val_targets) || shape(l.test) != shape(l.test_targets) ||
          l.val.classes != l.test.classes)
        return failed("trial " + std::to_string(c.trial) + "'s predictions do not agree with themselves: val_pred " +
                      shape(l.val) + ", val_targets " + shape(l.val_targets) + ", test_pred " + shape(l.test) +
                      ", test_targets " + shape(l.test_targets));
      return l;
    }
    ensemble::Probabilities* probs[2] = {&l.val, &l.test};
    for (std::size_t p = 0; p < 2; ++p) {
      HPCTUNE_ASSIGN(UniqueFd fd, open(p));
      int64_t rows = 0, cols = 0;
      auto values = read_npy_real(fd.get(), c.paths[p], rows, cols);
      if (!values.ok()) return named(values.error());
      probs[p]->rows = static_cast<std::size_t>(rows);
      probs[p]->classes = static_cast<std::size_t>(cols);
      probs[p]->values.assign(values->begin(), values->end());
    }
    std::vector<int64_t>* lists[3] = {&l.val_indices, &l.val_labels, &l.test_labels};
    for (std::size_t k = 0; k < 3; ++k) {
      if (c.paths[2 + k].empty()) continue;  // the optional val_indices
      HPCTUNE_ASSIGN(UniqueFd fd, open(2 + k));
      auto values = read_npy_int(fd.get(), c.paths[2 + k]);
      if (!values.ok()) return named(values.error());
      *lists[k] = std::move(values).value();
    }
    auto rows_of = [](const ensemble::Probabilities& p) { return static_cast<std::size_t>(p.rows); };
    const bool indexed = !c.paths[kind_index(kOptionalKind)].empty();
    if ((indexed && l.val_indices.size() != rows_of(l.val)) || l.val_labels.size() != rows_of(l.val) ||
        l.test_labels.size() != rows_of(l.test) || l.val.classes != l.test.classes)
      return failed("trial " + std::to_string(c.trial) + "'s predictions do not agree with themselves: val_probs " +
                    std::to_string(l.val.rows) + " x " + std::to_string(l.val.classes) + ", test_probs " +
                    std::to_string(l.test.rows) + " x " + std::to_string(l.test.classes) + ", " +
                    std::to_string(l.val_indices.size()) + " val_indices, " + std::to_string(l.val_labels.size()) +
                    " val_labels, " + std::to_string(l.test_labels.size()) + " test_labels");
    return l;
  }

  // Every usable member's files, loaded and checked. A member whose predictions hold NaN or infinity
  // (its training diverged) is left out: dropped from in.usable, named in in.left_out and the log.
  // Rows that are not probabilities (logits), and a member that does not line up with the first,
  // fail the stage: the program writes the wrong thing, which no other member would mend.
  Result<std::vector<Loaded>> load_members(const scheduler::StageContext& ctx, Inputs& in) const {
    const std::size_t optional = kind_index(kOptionalKind);
    const bool all_indexed = std::all_of(in.usable.begin(), in.usable.end(), [&](const Candidate& c) {
      return optional >= c.paths.size() || !c.paths[optional].empty();
    });
    std::vector<Loaded> loaded;
    std::vector<Candidate> kept;
    for (const Candidate& c : in.usable) {
      HPCTUNE_ASSIGN(Loaded l, load(ctx, c));
      if (const std::string why = not_finite(c, l); !why.empty()) {
        in.left_out.push_back({{"trial", c.trial}, {"reason", why}});
        if (ctx.log) ctx.log("ensemble '" + name_ + "': trial " + std::to_string(c.trial) + " is left out: " + why);
        continue;
      }
      if (!s_.regression) HPCTUNE_TRY(check_classes(c, l));
      if (!loaded.empty()) HPCTUNE_TRY(lines_up(kept.front(), loaded.front(), c, l, all_indexed));
      loaded.push_back(std::move(l));
      kept.push_back(c);
    }
    if (kept.empty())
      return failed("every member was left out; the first, trial " + in.left_out[0]["trial"].dump() + ": " +
                    in.left_out[0]["reason"].get<std::string>());
    in.usable = std::move(kept);
    return loaded;
  }

  // "" when every value a member saved is finite; else where the first NaN or infinity is.
  std::string not_finite(const Candidate& c, const Loaded& l) const {
    const ensemble::Probabilities* mats[4] = {&l.val, &l.test, &l.val_targets, &l.test_targets};
    for (std::size_t p = 0; p < (s_.regression ? 4u : 2u); ++p) {
      const auto& v = mats[p]->values;
      const auto bad = std::find_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
      if (bad == v.end()) continue;
      const auto at = static_cast<std::size_t>(bad - v.begin());
      return "its " + c.paths[p] + " holds " + (std::isnan(*bad) ? std::string("NaN") : std::string("infinity")) +
             " in row " + std::to_string(at / std::max<std::size_t>(1, mats[p]->classes)) +
             " (a training that diverged)";
    }
    return "";
  }

  // A member's probabilities and labels as a blend needs them: every row a distribution over the
  // classes (a program that saved logits or scores is told so), every label one of the classes.
  // Named by trial, file and row; before, "member 0 holds a value that is not a probability", and a
  // label beyond an int's range wrapped into one.
  Status check_classes(const Candidate& c, const Loaded& l) const {
    auto shown = [](double v) {  // six digits: a float32 file's 1.7 is not 1.699999988079071
      char text[32];
      std::snprintf(text, sizeof text, "%.6g", v);
      return std::string(text);
    };
    const ensemble::Probabilities* probs[2] = {&l.val, &l.test};
    for (std::size_t p = 0; p < 2; ++p) {
      const std::size_t classes = probs[p]->classes;
      for (std::size_t r = 0; r < probs[p]->rows; ++r) {
        const double* row = probs[p]->values.data() + r * classes;
        double sum = 0;
        std::string bad;
        for (std::size_t k = 0; k < classes && bad.empty(); ++k) {
          if (!std::isfinite(row[k]) || row[k] < 0 || row[k] > 1 + 1e-6)
            bad = "holds " + shown(row[k]) + " in column " + std::to_string(k);
          sum += row[k];
        }
        if (bad.empty() && std::fabs(sum - 1) > 1e-3) bad = "sums to " + shown(sum);
        if (!bad.empty())
          return failed("trial " + std::to_string(c.trial) + "'s " + c.paths[p] + ": row " + std::to_string(r) + " " +
                        bad + "; every row must be the probabilities of the classes (a softmax of the outputs, " +
                        "not logits or scores)");
      }
    }
    const std::vector<int64_t>* lists[2] = {&l.val_labels, &l.test_labels};
    for (std::size_t k = 0; k < 2; ++k) {
      for (std::size_t r = 0; r < lists[k]->size(); ++r) {
        const int64_t y = (*lists[k])[r];
        if (y < 0 || y >= static_cast<int64_t>(l.val.classes))
          return failed("trial " + std::to_string(c.trial) + "'s " + c.paths[3 + k] + ": row " + std::to_string(r) +
                        " is label " + std::to_string(y) + ", not one of the " + std::to_string(l.val.classes) +
                        " classes of its probabilities (0.." + std::to_string(l.val.classes - 1) + ")");
      }
    }
    return {};
  }

  // Members must predict the same rows: the same validation images (when every member lists them:
  // `indexed`), labels and classes. A member that does not is refused, naming it (its trial) and the
  // first row (split and index) that differs.
  Status lines_up(const Candidate& a, const Loaded& la, const Candidate& b, const Loaded& lb, bool indexed) const {
    std::string what;
    if (s_.regression) {
      if (la.val.classes != lb.val.classes)
        what = "its number of outputs is " + std::to_string(lb.val.classes) + ", not " + std::to_string(la.val.classes);
      else what = first_difference("validation row", "target", la.val_targets.values, lb.val_targets.values,
                                   la.val.classes);
      if (what.empty())
        what = first_difference("test row", "target", la.test_targets.values, lb.test_targets.values, la.val.classes);
    } else if (la.val.classes != lb.val.classes) {
      what = "its number of classes is " + std::to_string(lb.val.classes) + ", not " + std::to_string(la.val.classes);
    } else {
      if (indexed) what = first_difference("validation row", "image (val_indices)", la.val_indices, lb.val_indices);
      if (what.empty()) what = first_difference("validation row", "label", la.val_labels, lb.val_labels);
      if (what.empty()) what = first_difference("test row", "label", la.test_labels, lb.test_labels);
    }
    if (what.empty()) return {};
    return failed("member trial " + std::to_string(b.trial) + " is refused: its predictions do not line up with " +
                  "trial " + std::to_string(a.trial) + "'s: " + what + "; every member must hold out the same " +
                  "validation images (one trainer.data_seed; a program draws them from HPCTUNE_DATA_SEED) and " +
                  "predict the same test set");
  }

  // "" when `a` and `b` agree row by row; else the first row that differs, in words ("validation
  // row 2: label 1, not 0"; a missing row: "has no validation row 4").
  template <typename T>
  static std::string first_difference(const std::string& row, const std::string& what, const std::vector<T>& a,
                                      const std::vector<T>& b, std::size_t width = 1) {
    const std::size_t rows_a = a.size() / width, rows_b = b.size() / width;
    for (std::size_t r = 0; r < std::min(rows_a, rows_b); ++r)
      for (std::size_t j = 0; j < width; ++j)
        if (!(a[r * width + j] == b[r * width + j]))
          return row + " " + std::to_string(r) + ": " + what + " " + number(b[r * width + j]) + ", not " +
                 number(a[r * width + j]) + (width > 1 ? " (column " + std::to_string(j) + ")" : "");
    if (rows_a == rows_b) return "";
    return rows_b < rows_a ? "it has no " + row + " " + std::to_string(rows_b)
                           : "it has a " + row + " " + std::to_string(rows_a) + " the first member lacks";
  }
  template <typename T>
  static std::string number(T v) {
    if constexpr (std::is_floating_point_v<T>) return format_number(static_cast<double>(v));
    else return std::to_string(v);
  }

  Result<std::vector<double>> choose_weights(const std::vector<ensemble::Probabilities>& val,
                                             const std::vector<int>& labels) const {
    if (s_.method == "top_k") return ensemble::top_k(val, labels, s_.k);
    if (s_.method == "weighted") return ensemble::fit_weights(val, labels);
    return ensemble::greedy_selection(val, labels, greedy_options());
  }

  // Members with a weight, heaviest first (ties: the lower trial id).
  static nlohmann::json members_json(const std::vector<Candidate>& usable, const std::vector<double>& weights) {
    std::vector<std::size_t> order;
    for (std::size_t m = 0; m < usable.size(); ++m)
      if (weights[m] > 0) order.push_back(m);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weights[a] > weights[b]; });
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t m : order) {
      nlohmann::json member = {{"trial", usable[m].trial}, {"weight", weights[m]}};
      if (usable[m].retrain_of != 0) member["retrain_of"] = usable[m].retrain_of;
      out.push_back(std::move(member));
    }
    return out;
  }

  static nlohmann::json scores(const ensemble::Probabilities& val, const std::vector<int>& val_labels,
                               const ensemble::Probabilities& test, const std::vector<int>& test_labels) {
    return {{"val_accuracy", ensemble::accuracy(val, val_labels)},
            {"val_log_loss", ensemble::log_loss(val, val_labels)},
            {"test_accuracy", ensemble::accuracy(test, test_labels)},
            {"test_log_loss", ensemble::log_loss(test, test_labels)}};
  }

  // The candidate best by the loss the blend minimises on validation (`losses`: log loss, or MSE
  // for regression: ensemble::lowest_loss); ties by the objective its trial reported, then the
  // lower trial id (the order of `usable`). Not by the objective first: validation accuracy
  // saturates and ties, and the member it picks can be one the blend beats only in appearance.
  std::size_t best_single(const std::vector<Candidate>& usable, const std::vector<double>& losses) const {
    std::vector<double> tie_break;
    for (const Candidate& c : usable) tie_break.push_back(objective_.maximize ? c.objective : -c.objective);
    return ensemble::lowest_loss(losses, tie_break);
  }

  // {metric, value}: the first objective's metric and a value of it (null when unknown or not finite).
  nlohmann::json objective_json(double value) const {
    return {{"metric", objective_.metric}, {"value", std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr)}};
  }
  // The blend's value of the objective's metric, when the blend has one (a figure it was scored by:
  // val_accuracy, val_log_loss, val_mse); NaN otherwise.
  double blend_objective(const nlohmann::json& result) const {
    if (result.contains(objective_.metric) && result[objective_.metric].is_number())
      return result[objective_.metric].get<double>();
    return std::numeric_limits<double>::quiet_NaN();
  }

  // The blend's probabilities (regression: predictions) as float64 .npy files (exactly the values scored).
  Result<nlohmann::json> write_blend(const scheduler::StageContext& ctx, const ensemble::Probabilities& val,
                                     const ensemble::Probabilities& test) const {
    const std::string dir = ensemble_output_dir(ctx.run_dir, ctx.stage_id);
    if (Status made = make_directory_like_parent(dir); !made.ok()) return failed("cannot create " + dir + ": " + made.error().message());
    nlohmann::json files = nlohmann::json::object();
    const char* val_name = s_.regression ? "val_pred" : "val_probs";
    const char* test_name = s_.regression ? "test_pred" : "test_probs";
    for (const auto& [name, p] : {std::pair<const char*, const ensemble::Probabilities*>{val_name, &val},
                                  std::pair<const char*, const ensemble::Probabilities*>{test_name, &test}}) {
      const std::string path = dir + "/" + name + ".npy";
      const std::string shape = "(" + std::to_string(p->rows) + ", " + std::to_string(p->classes) + ")";
      auto st = npy_detail::write(path, "<f8", shape, p->values.data(), p->values.size() * sizeof(double));
      if (!st.ok()) return failed(st.error().message());
      files[name] = path;
    }
    return files;
  }

  std::string name_;
  Settings s_;
  search::Objective objective_;
  uint64_t seed_;
  nlohmann::json trainer_;
  RetrainSource retrain_;
};

}  // namespace

std::string ensemble_output_dir(const std::string& run_dir, int64_t stage_id) {
  return run_dir + "/stage-" + std::to_string(stage_id) + "-ensemble";
}

Result<std::unique_ptr<scheduler::StageRuntime>> make_ensemble_stage(const config::StageConfig& stage,
                                                                     const config::CampaignConfig& campaign) {
  HPCTUNE_ASSIGN(Settings settings, read_settings(stage));
  const config::CampaignConfig& own = stage.own ? *stage.own : campaign;
  if (own.objectives.empty()) return err(Errc::kConfig, "stage '" + stage.name + "': the campaign has no objective");
  if (stage.from.empty()) return err(Errc::kConfig, "stage '" + stage.name + "': an ensemble needs `from`");
  // Retrained members run as the trials they retrain did: under the first input stage's trainer,
  // saving their predictions.
  nlohmann::json trainer = own.trainer;
  for (const auto& s : campaign.stages)
    if (s.name == stage.from.front() && s.own) trainer = s.own->trainer;
  if (trainer.is_object()) {
    const std::string key = config::trainer_predictions_switch(trainer.value("kind", ""));
    if (!key.empty() && trainer.contains(key)) trainer[key] = true;
  }
  return std::unique_ptr<scheduler::StageRuntime>(
      new EnsembleStage(stage.name, std::move(settings), own.objectives.front(), campaign.seed, std::move(trainer)));
}

}  // namespace hpctune::workflow
