// The transfer stage (transfer_stage.h): its settings, its sources, its trials and its result.
#include "workflow/transfer_stage.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <dirent.h>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "common/rng.h"
#include "common/text.h"
#include "config/trainer_kinds.h"
#include "search/searcher.h"
#include "store/store.h"
#include "transfer/transfer_plan.h"
#include "workflow/checkpoint_snapshot.h"
#include "workflow/stage_settings.h"
#include "workflow/trial_files.h"

namespace hpctune::workflow {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kRelation = "transfer_source";
// The meta keys this stage adds to a suggestion (a nested suggestion's own meta is the rest).
constexpr const char* kOwnMeta[] = {"role", "source", "seed", "lineage", "baseline_of"};

// The kind's settings (config.h: StageConfig::settings), with the parser's defaults.
struct TransferSettings {
  std::vector<int64_t> classes;  // empty = all
  int64_t max_train_samples = 0;  // 0 = all
  int64_t freeze = 0;
  bool baseline = false;
  int64_t sources = 1;
  int64_t seeds = 1;
  std::string checkpoint;  // "" = the sources come from `from`
  std::string compare_metric;  // "" = held_out_metric(the objective's metric)
};

// The stage's keys, read by the one reader with their declarations (workflow/stage_settings.h):
// what `validate` accepts is what the stage runs with.
Result<TransferSettings> read_settings(const std::string& stage, const json& given) {
  auto read = read_stage_settings("transfer", given);
  if (!read.ok()) return err(Errc::kConfig, "stage '" + stage + "': " + read.error().message());
  const json& s = read.value();
  TransferSettings out;
  const json& classes = s.at("classes");
  if (classes.is_array()) {
    for (const json& c : classes) out.classes.push_back(c.get<int64_t>());
  } else {
    out.classes.push_back(classes.get<int64_t>());
  }
  out.max_train_samples = s.at("max_train_samples").get<int64_t>();
  out.freeze = s.at("freeze").get<int64_t>();
  out.baseline = s.at("baseline").get<bool>();
  out.sources = s.at("sources").get<int64_t>();
  out.seeds = s.at("seeds").get<int64_t>();
  out.checkpoint = s.at("checkpoint").get<std::string>();
  out.compare_metric = s.at("compare_metric").get<std::string>();
  return out;
}

// FNV-1a: a stable number for the stage's name, so that its seeds do not depend on the order in
// which stage rows were created.
uint64_t name_key(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// A trial's value of the objective: its final metric, else the objective the store recorded.
std::optional<double> objective_of(const store::TrialRow& row, const std::string& metric) {
  if (row.metrics.is_object()) {
    auto it = row.metrics.find(metric);
    if (it != row.metrics.end() && it->is_number() && std::isfinite(it->get<double>())) return it->get<double>();
  }
  if (row.objective && std::isfinite(*row.objective)) return row.objective;
  return std::nullopt;
}

json metric_or_null(const json& metrics, const std::string& name) {
  if (!metrics.is_object()) return nullptr;
  auto it = metrics.find(name);
  return it != metrics.end() && it->is_number() ? *it : json(nullptr);
}


// Whether trial `trial`'s directory under `run_dir` holds a checkpoint-stage*.bin (nn/checkpoint.h's
// names: one file per model stage). The directory and every such file are opened without following
// a link, as the user's own regular files (trial_files.h): one that is not (a link planted there, a
// FIFO, another user's file) is an error naming it, not a source a trainer would then read.
Result<bool> has_checkpoint_files(const std::string& run_dir, int64_t trial) {
  auto dir = open_trial_dir(run_dir, trial);
  if (!dir.ok()) {
    if (dir.error().code() == Errc::kNotFound) return false;
    return err(dir.error().code(), "its trial directory is refused: " + dir.error().message());
  }
  const int listed = ::dup(dir->get());
  if (listed < 0) return err(Errc::kIo, std::string("cannot list its trial directory: ") + std::strerror(errno));
  DIR* d = ::fdopendir(listed);
  if (d == nullptr) {
    ::close(listed);
    return err(Errc::kIo, std::string("cannot list its trial directory: ") + std::strerror(errno));
  }
  bool found = false;
  std::string refused;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!is_checkpoint_file(name)) continue;
    auto fd = open_own_at(dir->get(), name, /*directory=*/false);
    if (!fd.ok()) {
      refused = "its checkpoint " + name + " is refused: " + fd.error().message();
      break;
    }
    found = true;
  }
  ::closedir(d);
  if (!refused.empty()) return err(Errc::kInvalidArgument, refused);
  return found;
}

// Whether trial `trial`'s directory under `run_dir` holds the checkpoint directory `name` (a
// program's HPCTUNE_CHECKPOINT_DIR) with something in it. It is opened without following a link, as
// the user's own directory (trial_files.h): one that is not is an error naming it.
Result<bool> has_checkpoint_directory(const std::string& run_dir, int64_t trial, const std::string& name) {
  auto dir = open_trial_dir(run_dir, trial);
  if (!dir.ok()) {
    if (dir.error().code() == Errc::kNotFound) return false;
    return err(dir.error().code(), "its trial directory is refused: " + dir.error().message());
  }
  auto sub = open_own_at(dir->get(), name, /*directory=*/true);
  if (!sub.ok()) {
    if (sub.error().code() == Errc::kNotFound) return false;
    return err(sub.error().code(), "its checkpoint directory is refused: " + sub.error().message());
  }
  return directory_has_entries(sub->get(), "its checkpoint directory");
}

// Whether the stage's `checkpoint` can be a source: reached without a link planted by someone else
// (resolve_without_planted_links) and a regular file (opened without waiting), or a directory where
// the target's trainer takes a checkpoint directory (`directory`).
Status checkpoint_key_usable(const std::string& path, bool directory) {
  const char* what = directory ? "does not exist or is not a regular file or a directory"
                               : "does not exist or is not a regular file";
  if (directory) {
    // A directory: each of its components resolved as the file's are, up to an entry inside it.
    auto inside = resolve_without_planted_links(path + "/checkpoint-probe");
    struct stat st {};
    if (inside.ok() && ::fstat(inside->dir.get(), &st) == 0 && S_ISDIR(st.st_mode)) return {};
  }
  auto at = resolve_without_planted_links(path);
  if (!at.ok()) return err(at.error().code(), "is refused: " + at.error().message());
  UniqueFd fd(::openat(at->dir.get(), at->name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return err(Errc::kNotFound, what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !(S_ISREG(st.st_mode) || (directory && S_ISDIR(st.st_mode))))
    return err(Errc::kInvalidArgument, what);
  return {};
}

// An absolute path, so that a trainer finds the files whatever its working directory.
std::string absolute(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

struct Source {
  int64_t trial_id = 0;  // 0: a checkpoint file
  std::string init_from;  // the trial's directory, its checkpoint directory, or the file
  json params = json::object();
  double objective = 0;
};

// What the stage's trainer kinds take (config/trainer_kinds.h: their capabilities, never their names).
struct TrainerUse {
  std::string init_setting;          // the target's parameter naming the source's checkpoint
  std::string source_trial_setting;  // the target's parameter naming the source trial; "" = none
  json twin_resets = json::object();  // what a baseline twin resets (transfer/transfer_plan.h)
  json extra_params = json::object();  // classes, max_train_samples: parameters where not settings
  // The program's own keys of the stage's `trainer:` (config::StageConfig::trainer_params: a command's
  // lr, epochs): over the source's params, under the nested search's values.
  json program_params = json::object();
  std::map<std::string, std::string> checkpoint_directory;  // input stage -> its kind's checkpoint directory
  bool checkpoint_may_be_directory = false;  // `checkpoint:` may name a directory (the target kind's checkpoint)
};

// One recorded or proposed trial of the stage.
struct Entry {
  bool baseline = false;
  int64_t target = 0;  // the target's index (the nested searcher's seq), its twin's too
};

class TransferStage final : public scheduler::StageRuntime, public scheduler::TrialSource {
 public:
  TransferStage(std::string name, TransferSettings settings, search::Objective objective, uint64_t seed,
                json trainer, TrainerUse use, std::set<std::string> pinned, std::unique_ptr<search::Searcher> nested,
                std::set<std::string> nested_names, int64_t nested_max)
      : name_(std::move(name)), s_(std::move(settings)), objective_(std::move(objective)),
        seed_(derive_seed(seed, name_key("transfer:" + name_))), trainer_(std::move(trainer)), use_(std::move(use)),
        pinned_(std::move(pinned)), nested_(std::move(nested)), nested_names_(std::move(nested_names)), nested_max_(nested_max) {}

  // --- StageRuntime ---------------------------------------------------------------------------
  scheduler::TrialSource* source() override { return this; }
  int64_t max_trials() const override { return target_budget() * (s_.baseline ? 2 : 1); }
  json trainer() const override { return trainer_; }
  Status begin(const scheduler::StageContext& ctx) override;
  Result<json> finish(const scheduler::StageContext& ctx) override;

  // --- TrialSource ----------------------------------------------------------------------------
  std::string kind() const override { return "transfer"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override;
  bool exhausted() const override {
    if (!begun_ || !twins_due_.empty()) return false;
    return targets_made() >= target_budget() || (nested_ && nested_->exhausted());
  }
  void prepare_dispatch(int64_t seq, json& params) const override;
  scheduler::Verdict on_report(const scheduler::TrialView&, int64_t, double) override {
    return scheduler::Verdict::carry_on();
  }
  void on_attempt_end(int64_t) override {}
  void tell(const search::Observation& observation) override;
  void restore(const std::vector<search::Record>& history) override;
  json state() const override;

 private:
  // Targets in all: the nested search's budget, or `seeds` per source (before begin(), the
  // number asked for: max_trials() is read when the stage is built).
  int64_t target_budget() const {
    if (nested_) return nested_max_;
    const int64_t sources = !s_.checkpoint.empty() ? 1 : begun_ ? static_cast<int64_t>(sources_.size()) : s_.sources;
    return sources * s_.seeds;
  }
  int64_t targets_made() const { return static_cast<int64_t>(targets_.size()); }
  uint64_t target_seed(int64_t target) const { return derive_seed(seed_, static_cast<uint64_t>(target)); }
  json fine_tuning(const json& params) const;  // only the nested space's params
  // How the stage's trainer kind starts a target from a checkpoint, and what its twin resets.
  transfer::StartSettings start_settings() const {
    return {.init_setting = use_.init_setting, .source_trial_setting = use_.source_trial_setting,
            .freeze_setting = "freeze", .twin_resets = use_.twin_resets};
  }
  // The keys of a target's `params` that the stage set from its own settings, not searched: freeze,
  // the program's keys of its `trainer:` and the target data's, unless the nested search chose them.
  json stage_set_keys(const json& params, const json& nested_params) const {
    json keys = json::array();
    auto add = [&](const std::string& key) {
      const bool searched = nested_params.is_object() && nested_params.contains(key);
      if (!searched && params.contains(key) && std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    };
    add(start_settings().freeze_setting);
    for (const json* from : {&use_.program_params, &use_.extra_params})
      if (from->is_object())
        for (const auto& [key, value] : from->items()) add(key);
    return keys;
  }
  search::Suggestion make_target(const json& nested_params, json nested_meta);
  search::Suggestion make_twin(int64_t target_seq);

  std::string name_;
  TransferSettings s_;
  search::Objective objective_;
  uint64_t seed_;  // the stage's stream of seeds
  json trainer_;
  TrainerUse use_;
  std::set<std::string> pinned_;  // the stage's own trainer keys: a source's params do not override them
  std::unique_ptr<search::Searcher> nested_;
  std::set<std::string> nested_names_;
  int64_t nested_max_ = 0;

  bool begun_ = false;
  std::vector<Source> sources_;
  std::string run_dir_;  // begin()'s StageContext::run_dir
  std::map<int64_t, Entry> entries_;     // by the stage's seq
  std::vector<int64_t> targets_;         // target index -> its seq
  std::map<int64_t, json> params_;       // seq -> params (twins copy their target's)
  std::deque<int64_t> twins_due_;        // targets whose twin is not proposed yet (seqs)
  std::set<int64_t> told_;
  int64_t next_seq_ = 0;
};

// A target recorded before the campaign moved (`mv camp/ /project/camp/`) names its source's
// checkpoint where it was: sent where it is now, which is one of this stage's sources as begin()
// found them. Only a path that maps onto a present source is changed (a checkpoint of another
// campaign in a directory of the same name is left alone).
void TransferStage::prepare_dispatch(int64_t, json& params) const {
  if (run_dir_.empty() || use_.init_setting.empty() || !params.is_object()) return;
  const auto it = params.find(use_.init_setting);
  if (it == params.end() || !it->is_string()) return;
  const std::string recorded = it->get<std::string>();
  const std::string now = store::recorded_path_at(run_dir_, recorded);
  if (now == recorded) return;
  for (const Source& src : sources_) {
    if (src.init_from != recorded && src.init_from == now) {
      *it = now;
      return;
    }
  }
}

Status TransferStage::begin(const scheduler::StageContext& ctx) {
  if (ctx.store == nullptr) return err(Errc::kInvalidArgument, "stage '" + name_ + "': begun without a store");
  sources_.clear();
  run_dir_ = ctx.run_dir;
  if (!s_.checkpoint.empty()) {
    // The config's own file (the user's choice, perhaps a colleague's model): a link is followed
    // only where nobody else can have made it, and a FIFO is never waited on.
    if (auto st = checkpoint_key_usable(s_.checkpoint, use_.checkpoint_may_be_directory); !st.ok()) {
      return err(Errc::kFailed, "stage '" + name_ + "': no source: the checkpoint file '" + s_.checkpoint +
                                    "' " + st.error().message());
    }
    sources_.push_back({0, absolute(s_.checkpoint), json::object(), 0});
    begun_ = true;
    return {};
  }
  HPCTUNE_ASSIGN(auto stage_rows, ctx.store->stages(ctx.campaign_id));
  std::vector<std::string> from;
  std::map<int64_t, std::string> checkpoint_directory;  // input stage id -> its trainer's, where it has one
  for (int64_t id : ctx.inputs) {
    std::string label("#");
    label += std::to_string(id);
    for (const auto& row : stage_rows) {
      if (row.id != id) continue;
      label = "'" + row.name + "'";
      if (auto it = use_.checkpoint_directory.find(row.name); it != use_.checkpoint_directory.end())
        checkpoint_directory[id] = it->second;
    }
    from.push_back(label);
  }
  if (from.empty()) return err(Errc::kFailed, "stage '" + name_ + "': no source: it has no `from` stage and no checkpoint");
  std::string inputs = from.size() > 1 ? "stages " : "stage ";
  inputs += join(from, ", ");

  HPCTUNE_ASSIGN(auto rows, ctx.store->trials(ctx.campaign_id));
  std::map<int64_t, const store::TrialRow*> row_of;
  std::vector<transfer::Candidate> candidates;
  for (const auto& row : rows) {
    if (row.state != store::TrialState::kDone) continue;
    if (std::find(ctx.inputs.begin(), ctx.inputs.end(), row.stage_id) == ctx.inputs.end()) continue;
    if (auto v = objective_of(row, objective_.metric)) {
      candidates.push_back({row.id, *v});
      row_of[row.id] = &row;
    }
  }
  if (candidates.empty()) {
    return err(Errc::kFailed, "stage '" + name_ + "': no source: " + inputs + " finished no trial with a '" +
                                  objective_.metric + "' value");
  }
  std::vector<std::pair<double, const store::TrialRow*>> done;
  for (const transfer::Candidate& c : transfer::rank_candidates(std::move(candidates), objective_.maximize))
    done.push_back({c.objective, row_of.at(c.trial)});
  std::vector<std::string> skipped;
  for (const auto& [value, row] : done) {
    if (static_cast<int64_t>(sources_.size()) >= s_.sources) break;
    // Its checkpoints: where the trainer said it wrote them, else where trials keep their files;
    // either opened inside the trial's directory without following a link (trial_files.h).
    const std::string trial_label = "stage '" + name_ + "': trial " + std::to_string(row->id);
    std::string dir;
    HPCTUNE_ASSIGN(auto artifacts, ctx.store->artifacts(row->id));
    for (const auto& a : artifacts) {
      if (a.kind != "checkpoint") continue;
      auto fd = open_trial_file(ctx.run_dir, row->id, a.path, /*outside_allowed=*/true);
      if (!fd.ok()) {
        if (fd.error().code() == Errc::kNotFound) continue;  // removed since: not a source
        return err(Errc::kFailed, trial_label + "'s checkpoint artifact " + a.path + " is refused: " +
                                      fd.error().message());
      }
      const std::string inside = ctx.run_dir.empty() ? "" : relative_to_trial(ctx.trial_dir(row->id), a.path);
      if (inside.empty()) {
        dir = fs::path(a.path).parent_path().string();
      } else {
        const fs::path sub = fs::path(inside).parent_path();
        dir = sub.empty() ? ctx.trial_dir(row->id) : (fs::path(ctx.trial_dir(row->id)) / sub).string();
      }
      break;
    }
    const auto own_directory = checkpoint_directory.find(row->stage_id);
    if (dir.empty() && !ctx.run_dir.empty() && own_directory != checkpoint_directory.end()) {
      // A program's checkpoint: the directory it was given (HPCTUNE_CHECKPOINT_DIR), not empty.
      auto has = has_checkpoint_directory(ctx.run_dir, row->id, own_directory->second);
      if (!has.ok()) return err(Errc::kFailed, trial_label + ": " + has.error().message());
      if (*has) dir = (fs::path(ctx.trial_dir(row->id)) / own_directory->second).string();
    } else if (dir.empty() && !ctx.run_dir.empty()) {
      auto has = has_checkpoint_files(ctx.run_dir, row->id);
      if (!has.ok()) return err(Errc::kFailed, trial_label + ": " + has.error().message());
      if (*has) dir = ctx.trial_dir(row->id);
    }
    if (dir.empty()) {
      skipped.push_back(std::to_string(row->id));
      continue;
    }
    json params = row->params.is_object() ? row->params : json::object();
    sources_.push_back({row->id, absolute(dir), std::move(params), value});
  }
  if (sources_.empty()) {
    return err(Errc::kFailed, "stage '" + name_ + "': no source: none of the " + std::to_string(done.size()) +
                                  " done trials of " + inputs +
                                  " has a checkpoint (no checkpoint artifact, no checkpoint-stage*.bin in its "
                                  "trial directory, nor a non-empty checkpoint directory where its trainer keeps "
                                  "one; does its trainer save checkpoints?)");
  }
  if (!skipped.empty() && ctx.log) {
    ctx.log("stage '" + name_ + "': trials " + join(skipped, ", ") + " have no checkpoint and are not sources");
  }
  if (ctx.log) {
    std::vector<std::string> ids;
    for (const auto& src : sources_) ids.push_back(std::to_string(src.trial_id));
    ctx.log("stage '" + name_ + "': transfer from trial(s) " + join(ids, ", "));
  }
  begun_ = true;
  return {};
}

json TransferStage::fine_tuning(const json& params) const {
  json out = json::object();
  if (!params.is_object()) return out;
  for (const auto& [key, value] : params.items()) {
    if (nested_names_.count(key)) out[key] = value;
  }
  return out;
}

search::Suggestion TransferStage::make_target(const json& nested_params, json nested_meta) {
  const int64_t index = targets_made();
  const std::size_t which = static_cast<std::size_t>(index) % sources_.size();
  const Source& src = sources_[which];
  search::Suggestion s;
  s.seq = next_seq_++;
  // The source's params under the stage's own keys, the nested search's and the target data's,
  // with the start (transfer/transfer_plan.h).
  json fine = use_.program_params;
  if (nested_params.is_object())
    for (const auto& [key, value] : nested_params.items()) fine[key] = value;
  s.params = transfer::target_params(src.params, pinned_, fine, use_.extra_params,
                                     {src.init_from, src.trial_id, s_.freeze}, start_settings());
  s.meta = nested_meta.is_object() ? std::move(nested_meta) : json::object();
  if (s.meta.contains("parents") && s.meta["parents"].is_array()) {
    // The nested searcher names parents by its seq (a target index); the scheduler by the stage's.
    json parents = json::array();
    for (const json& p : s.meta["parents"]) {
      if (p.is_number_integer() && p.get<int64_t>() >= 0 && p.get<int64_t>() < index) {
        parents.push_back(targets_[static_cast<std::size_t>(p.get<int64_t>())]);
      }
    }
    s.meta["parents"] = parents;
  }
  s.meta[trainers::kStageSettingsMeta] = stage_set_keys(s.params, nested_params);  // shown as run settings
  s.meta["role"] = "target";
  s.meta["source"] = which;
  s.meta["seed"] = target_seed(index);
  if (src.trial_id > 0) s.meta["lineage"] = json::array({{{"trial", src.trial_id}, {"relation", kRelation}}});
  entries_[s.seq] = {false, index};
  targets_.push_back(s.seq);
  params_[s.seq] = s.params;
  return s;
}

search::Suggestion TransferStage::make_twin(int64_t target_seq) {
  const Entry target = entries_.at(target_seq);
  search::Suggestion s;
  s.seq = next_seq_++;
  s.params = transfer::twin_params(params_.at(target_seq), trainer_, start_settings());
  s.meta = {{"role", "baseline"}, {"baseline_of", target_seq}, {"seed", target_seed(target.target)}};
  // Its target's stage settings, and what the twin resets (transfer/transfer_plan.h: twin_params).
  json set = stage_set_keys(s.params, fine_tuning(params_.at(target_seq)));
  if (use_.twin_resets.is_object())
    for (const auto& [key, value] : use_.twin_resets.items())
      if (s.params.contains(key) && std::find(set.begin(), set.end(), key) == set.end()) set.push_back(key);
  s.meta[trainers::kStageSettingsMeta] = std::move(set);
  entries_[s.seq] = {true, target.target};
  params_[s.seq] = s.params;
  return s;
}

Result<std::vector<search::Suggestion>> TransferStage::ask(std::size_t n) {
  std::vector<search::Suggestion> out;
  if (!begun_) return out;  // its inputs are not complete yet
  while (out.size() < n) {
    if (!twins_due_.empty()) {
      out.push_back(make_twin(twins_due_.front()));
      twins_due_.pop_front();
      continue;
    }
    const int64_t left = target_budget() - targets_made();
    if (left <= 0) break;
    const std::size_t room = n - out.size();
    // Each target takes two places with its twin: ask for as many as fit (at least one).
    const int64_t want = std::min<int64_t>(left, static_cast<int64_t>(s_.baseline ? (room + 1) / 2 : room));
    std::vector<search::Suggestion> nested;
    if (nested_) {
      HPCTUNE_ASSIGN(nested, nested_->ask(static_cast<std::size_t>(want)));
      if (nested.empty()) break;  // it waits for results, or has nothing left
      if (static_cast<int64_t>(nested.size()) > want) nested.resize(static_cast<std::size_t>(want));
    } else {
      nested.resize(static_cast<std::size_t>(want));
    }
    for (auto& sug : nested) {
      search::Suggestion target = nested_ ? make_target(sug.params, std::move(sug.meta)) : make_target(nullptr, {});
      const int64_t seq = target.seq;
      out.push_back(std::move(target));
      if (s_.baseline) twins_due_.push_back(seq);
      if (s_.baseline && out.size() < n) {
        out.push_back(make_twin(twins_due_.front()));
        twins_due_.pop_front();
      }
    }
  }
  return out;
}

void TransferStage::tell(const search::Observation& observation) {
  auto it = entries_.find(observation.seq);
  if (it == entries_.end() || it->second.baseline || !nested_) return;
  if (!told_.insert(observation.seq).second) return;
  search::Observation o = observation;
  o.seq = it->second.target;
  o.params = fine_tuning(observation.params);
  nested_->tell(o);
}

void TransferStage::restore(const std::vector<search::Record>& history) {
  std::vector<search::Record> nested;
  std::set<int64_t> twinned;
  for (const search::Record& rec : history) {
    const search::Suggestion& s = rec.suggestion;
    const json& meta = s.meta.is_object() ? s.meta : json::object();
    next_seq_ = std::max(next_seq_, s.seq + 1);
    params_[s.seq] = s.params;
    if (meta.value("role", std::string("target")) == "baseline") {
      const json of = meta.value("baseline_of", json());
      auto target = of.is_number_integer() ? entries_.find(of.get<int64_t>()) : entries_.end();
      if (target == entries_.end() || target->second.baseline) continue;  // not a twin of this stage's
      entries_[s.seq] = {true, target->second.target};
      twinned.insert(target->first);
      continue;
    }
    const int64_t index = targets_made();
    entries_[s.seq] = {false, index};
    targets_.push_back(s.seq);
    search::Record r;
    r.suggestion.seq = index;
    r.suggestion.params = fine_tuning(s.params);
    r.suggestion.meta = meta;
    for (const char* key : kOwnMeta) r.suggestion.meta.erase(key);
    if (r.suggestion.meta.contains("parents") && r.suggestion.meta["parents"].is_array()) {
      json parents = json::array();
      for (const json& p : r.suggestion.meta["parents"]) {
        if (!p.is_number_integer()) continue;
        auto parent = entries_.find(p.get<int64_t>());
        if (parent != entries_.end() && !parent->second.baseline) parents.push_back(parent->second.target);
      }
      r.suggestion.meta["parents"] = parents;
    }
    if (rec.observation) {
      told_.insert(s.seq);
      r.observation = *rec.observation;
      r.observation->seq = index;
      r.observation->params = r.suggestion.params;
    }
    nested.push_back(std::move(r));
  }
  twins_due_.clear();
  if (s_.baseline) {
    for (int64_t seq : targets_) {
      if (!twinned.count(seq)) twins_due_.push_back(seq);
    }
  }
  if (nested_) nested_->restore(nested);
}

json TransferStage::state() const {
  json ids = json::array();
  for (const auto& src : sources_) ids.push_back(src.trial_id);
  json out = {{"sources", ids}, {"targets", targets_made()},
              {"baselines", static_cast<int64_t>(entries_.size()) - targets_made()}};
  if (nested_) out["search"] = nested_->state();
  return out;
}

Result<json> TransferStage::finish(const scheduler::StageContext& ctx) {
  if (ctx.store == nullptr) return err(Errc::kInvalidArgument, "stage '" + name_ + "': finished without a store");
  HPCTUNE_ASSIGN(auto rows, ctx.store->trials(ctx.campaign_id));
  struct Done {
    const store::TrialRow* row;
    double value;
  };
  std::vector<Done> targets, baselines;
  std::map<int64_t, const store::TrialRow*> twin_of;  // target seq -> its done twin
  json source_ids = json::array();
  std::set<int64_t> seen_sources;
  for (const auto& row : rows) {
    if (row.stage_id != ctx.stage_id) continue;
    const json& meta = row.meta.is_object() ? row.meta : json::object();
    const bool baseline = meta.value("role", std::string("target")) == "baseline";
    if (!baseline && meta.contains("lineage") && meta["lineage"].is_array()) {
      for (const json& l : meta["lineage"]) {
        if (l.is_object() && l.value("relation", std::string()) == kRelation && l.contains("trial") &&
            l["trial"].is_number_integer() && seen_sources.insert(l["trial"].get<int64_t>()).second) {
          source_ids.push_back(l["trial"]);
        }
      }
    }
    if (row.state != store::TrialState::kDone) continue;
    auto value = objective_of(row, objective_.metric);
    if (!value) continue;
    if (!baseline) {
      targets.push_back({&row, *value});
    } else {
      baselines.push_back({&row, *value});
      const json of = meta.value("baseline_of", json());
      if (of.is_number_integer()) twin_of[of.get<int64_t>()] = &row;
    }
  }
  // The sources begin() chose (their order), else those the trials name (a stage begun by an
  // earlier master).
  if (!sources_.empty()) {
    source_ids = json::array();
    for (const auto& src : sources_) source_ids.push_back(src.trial_id);
  }
  const bool maximize = objective_.maximize;
  const auto best = [maximize](const std::vector<Done>& list) -> const Done* {
    const Done* b = nullptr;
    for (const Done& d : list) {
      if (!b || (maximize ? d.value > b->value : d.value < b->value)) b = &d;
    }
    return b;
  };
  // The figure a target is compared with its twin by: the stage's compare_metric, by default the
  // held-out figure of the objective (val_accuracy: test_accuracy), better in the objective's direction.
  const std::string compare = s_.compare_metric.empty() ? held_out_metric(objective_.metric) : s_.compare_metric;
  const auto describe = [this, &compare](const store::TrialRow* row) -> json {
    if (row == nullptr) return nullptr;
    const auto value = objective_of(*row, objective_.metric);
    json d = {{"trial", row->id}, {"objective", value ? json(*value) : json(nullptr)}};
    d[objective_.metric] = metric_or_null(row->metrics, objective_.metric);
    d[compare] = metric_or_null(row->metrics, compare);
    return d;
  };
  const Done* best_target = best(targets);
  const Done* best_baseline = best(baselines);
  const store::TrialRow* twin = nullptr;
  if (best_target) {
    auto it = twin_of.find(best_target->row->seq);
    if (it != twin_of.end()) twin = it->second;
  }
  json result = {{"sources", source_ids},
                 {"target", describe(best_target ? best_target->row : nullptr)},
                 {"baseline", describe(twin)},
                 {"best_baseline", describe(best_baseline ? best_baseline->row : nullptr)},
                 {"targets", targets.size()},
                 {"baselines", baselines.size()},
                 {"compare_metric", compare},
                 {"gain", nullptr}};
  if (result["target"].is_object() && result["baseline"].is_object() && result["target"][compare].is_number() &&
      result["baseline"][compare].is_number()) {
    result["gain"] = transfer::gain_of(result["target"][compare].get<double>(),
                                       result["baseline"][compare].get<double>(), maximize);
  }
  // The stage as a whole: every target against its twin (same data, epochs and seed), averaged.
  // Choosing one pair by a small validation split (500 labels leave 50-100 images) is noisy; the
  // mean over the pairs is what says whether starting from the source helped.
  std::vector<transfer::Pair> pairs;
  for (const Done& t : targets) {
    auto it = twin_of.find(t.row->seq);
    if (it == twin_of.end()) continue;
    const json a = metric_or_null(t.row->metrics, compare), b = metric_or_null(it->second->metrics, compare);
    if (a.is_number() && b.is_number()) pairs.push_back({a.get<double>(), b.get<double>()});
  }
  if (auto paired = transfer::summarize_pairs(pairs, maximize)) {
    result["paired"] = {{"pairs", paired->pairs},
                        {"wins", paired->wins},
                        {"target_" + compare, paired->target_mean},
                        {"baseline_" + compare, paired->baseline_mean},
                        {"gain", paired->gain}};
  }
  return result;
}

}  // namespace

Result<std::unique_ptr<scheduler::StageRuntime>> make_transfer_stage(const config::StageConfig& stage,
                                                                     const config::CampaignConfig& campaign) {
  HPCTUNE_ASSIGN(TransferSettings settings, read_settings(stage.name, stage.settings));
  const config::CampaignConfig& own = stage.own ? *stage.own : campaign;
  if (own.objectives.empty()) return err(Errc::kConfig, "stage '" + stage.name + "': the campaign has no objective");
  // The trials' trainer: the stage's, with the target data's classes and labels; for a kind that
  // does not declare those settings (a program's), they are parameters of every trial.
  nlohmann::json trainer = own.trainer.is_object() ? own.trainer : nlohmann::json::object();
  const std::string kind = trainer.value("kind", "");
  TrainerUse use;
  use.init_setting = config::trainer_init_setting(kind);
  if (use.init_setting.empty())
    return err(Errc::kConfig, "stage '" + stage.name + "': trainer kind '" + kind +
                                  "' cannot start a trial from a checkpoint (a transfer needs one that can)");
  use.source_trial_setting = config::trainer_source_trial_setting(kind);
  use.twin_resets = config::trainer_twin_resets(kind);
  use.program_params = stage.trainer_params;
  const bool as_settings = config::trainer_declares(kind, "classes");
  nlohmann::json& data = as_settings ? trainer : use.extra_params;
  if (!settings.classes.empty() || trainer.contains("classes")) data["classes"] = settings.classes;
  if (settings.max_train_samples > 0 || trainer.contains("max_train_samples")) {
    data["max_train_samples"] = settings.max_train_samples;
  }
  // Where each input stage's trials keep a checkpoint directory (their trainer kind's, else the
  // campaign's); with `checkpoint:`, whether that may be a directory (the target kind's).
  for (const std::string& from : stage.from) {
    std::string from_kind = campaign.trainer.is_object() ? campaign.trainer.value("kind", "") : "";
    for (const auto& st : campaign.stages)
      if (st.name == from && st.own && st.own->trainer.is_object()) from_kind = st.own->trainer.value("kind", "");
    if (auto d = config::trainer_checkpoint_directory(from_kind); !d.empty()) use.checkpoint_directory[from] = d;
  }
  use.checkpoint_may_be_directory = !config::trainer_checkpoint_directory(kind).empty();
  std::unique_ptr<search::Searcher> nested;
  std::set<std::string> names;
  int64_t nested_max = 0;
  if (stage.own_search && stage.own) {
    search::SearchSpec spec = own.search_spec();
    // Its own stream: the same seed as the first stage's search would repeat its draws.
    spec.seed = derive_seed(campaign.seed, name_key("transfer-search:" + stage.name));
    for (const auto& p : spec.space.params()) names.insert(p.name);
    nested_max = spec.max_trials;
    HPCTUNE_ASSIGN(nested, search::make_searcher(spec));
  }
  return std::unique_ptr<scheduler::StageRuntime>(new TransferStage(stage.name, std::move(settings),
                                                                    own.objectives.front(), campaign.seed,
                                                                    std::move(trainer), std::move(use),
                                                                    stage.trainer_keys,
                                                                    std::move(nested),
                                                                    std::move(names), nested_max));
}

}  // namespace hpctune::workflow
