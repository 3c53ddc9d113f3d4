// Early stopping: a hook on each intermediate report of a running trial.
//
// The scheduler calls on_report() for every report that carries the objective metric; when it
// returns kStop the master sends `stop` to the trial's group and records the trial as pruned with
// its last metric. on_finish() tells the stopper a trial ended (completed, pruned or failed).
// Every decision is a function of the reports seen so far (hyperband's bracket of a trial is drawn
// from derive_seed(seed, seq)), so replaying the recorded reports after a restart rebuilds it.
//
// Settings (StopperSpec::settings), per kind:
//   asha       grace_period            int    1    the first rung, in steps (r)
//              reduction_factor        float  3    eta > 1: rung k is at r * eta^(s + k), and a
//                                                   trial continues past a rung while it is in
//                                                   the top max(1, floor(n / eta)) of the n trials
//                                                   that have reached that rung so far
//              max_t                   int    0    the last step a trial can reach; rungs at or
//                                                   past it are not judged (0: no limit)
//              min_early_stopping_rate int    0    s, shifts every rung up by eta^s
//   hyperband  grace_period int 1, reduction_factor float 3, max_t int 81: brackets
//              s = 0..floor(log_eta(max_t / grace_period)) of ASHA with min_early_stopping_rate s;
//              each trial joins one bracket, drawn with Hyperband's weights
//              n_s = ceil((s_max + 1) / (s_max - s + 1) * eta^(s_max - s)).
//   asha and hyperband also take `mode`: stop (a trial below the top of a rung ends, pruned) or pause
//   (it waits at the rung with its checkpoint, and continues from there when promoted: standing()).
//   median     grace_period  int 1   no stop before this step
//              min_samples   int 3   how many finished trials must have reported by this step
//              Stops a trial whose best value so far is worse than the median, over finished
//              trials, of their running means of the values reported up to the same step
//              (Golovin et al. 2017).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

enum class Decision { kContinue, kStop };

struct StopperSpec {
  std::string kind = "none";  // none | asha | hyperband | median
  nlohmann::json settings = nlohmann::json::object();
  bool maximize = true;
  uint64_t seed = 0;
};

class EarlyStopper {
 public:
  virtual ~EarlyStopper() = default;
  virtual std::string name() const = 0;
  // `value` is the raw objective at `step` (1-based epochs or steps).
  virtual Decision on_report(int64_t seq, int64_t step, double value) = 0;
  virtual void on_finish(int64_t seq) { (void)seq; }
  // Pause mode (`mode: pause`): a trial below the top of a rung waits there instead of ending.
  virtual bool pauses() const { return false; }
  // The steps where trial `seq` is judged (its bracket's rungs below max_t), ascending; empty for a
  // stopper without rungs.
  virtual std::vector<int64_t> milestones(int64_t seq) const {
    (void)seq;
    return {};
  }
  // Every trial's rungs together (hyperband: every bracket's), ascending.
  virtual std::vector<int64_t> all_milestones() const { return {}; }
  // The last step it judges (max_t: asha, hyperband); 0 for one without a last step. It ignores a
  // report past it (a trial's result), so a program that counts its steps in another unit (batches
  // against epochs) is never judged.
  virtual int64_t last_step() const { return 0; }
  // Whether it may stop a trial at some step before `last` (a full training's last step): a rung
  // below it (asha, hyperband); median overrides. false: it would stop no trial early.
  virtual bool judges_before(int64_t last) const {
    const auto rungs = all_milestones();
    return !rungs.empty() && rungs.front() < last;
  }
  // Where a trial stands: the last rung it reached, its value there, and whether it is now in the
  // top max(1, floor(n / eta)) of the n trials that reached that rung (ASHA's promotion rule: more
  // arrivals at a rung promote more of it). nullopt before its first rung.
  struct Standing {
    int64_t rung = 0;   // its step
    double value = 0;   // raw
    bool in_top = false;
  };
  virtual std::optional<Standing> standing(int64_t seq) const {
    (void)seq;
    return std::nullopt;
  }
  // What the stopper has recorded (rungs and their values, brackets), for the dashboard.
  virtual nlohmann::json state() const { return nlohmann::json::object(); }
};

std::vector<std::string> stopper_names();
// The settings a stopper reads from StopperSpec::settings; kConfig for an unknown kind.
Result<std::vector<SettingDecl>> stopper_settings(const std::string& kind);
// kind "none" gives a stopper that never stops.
Result<std::unique_ptr<EarlyStopper>> make_stopper(const StopperSpec& spec);

// The fidelity a stopper judges at, for the searcher's model (SearchSpec::fidelity): max_t and
// every bracket's rungs below it (asha, hyperband); for the others `full_step` (a full training's
// last step, the trainer's; 0 when unknown) and no rungs. max_step 0 (none) without early stopping.
Fidelity stopper_fidelity(const StopperSpec& spec, int64_t full_step);

}  // namespace hpctune::search
