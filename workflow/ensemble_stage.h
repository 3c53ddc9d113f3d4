// The ensemble stage: blends the saved predictions of the done trials of the stages of its `from`
// (ensemble/, a pure library) and records the blend against the best single member.
//
// begin() reads the done trials of its inputs and their prediction artifacts (the latest
// attempt's val_probs, test_probs, val_indices, val_labels and test_labels, written by the mlp and
// cnn trainers with trainer.save_predictions), or, for a trial that recorded none (a command
// trainer's program), the <kind>.npy files in its trial directory; val_indices is optional
// (probabilities float32 or float64, labels int32 or int64). Trials without them are skipped and counted; none
// left is an error naming the stage. With `retrain: {top: k, seeds: n}` the stage also runs k * n
// trials of its own: the parameters of the k best input trials (the campaign's first objective)
// each under n new seeds (Suggestion meta "seed", derived from the campaign seed, the stage's name
// and the index; meta "lineage" [{"trial": source, "relation": "retrain_of"}]). Without retrain it
// runs no trials.
//
// finish() loads every member's predictions (the inputs' and the retrained trials'), checks that
// their rows line up (the same labels, and the same val_indices when every member saved them: the
// campaign-level validation split), runs
// the method on the validation rows (greedy: forward selection with replacement, max_size picks,
// `bags` bags seeded from the campaign seed; top_k: the k best, equal weights; weighted: log loss
// fitted on the simplex) and scores the blend on validation and test. Its result:
//   {"method", "candidates": n, "skipped": n, "retrained": n,
//    "members": [{"trial", "weight", "retrain_of"?}, ...]   weight > 0, descending,
//    "val_accuracy", "val_log_loss", "test_accuracy", "test_log_loss",
//    "best_single": {"trial", "chosen_by": "val_log_loss", "val_accuracy", "val_log_loss", "test_accuracy",
//                    "test_log_loss", "objective": {"metric", "value"}},
//    "objective": {"metric", "value"},                        the blend's (value null unless scored by it)
//    "files": {"val_probs", "test_probs"}}                    absent when trials keep no files
// The best single member is the candidate with the lowest validation log loss, the loss the blend
// minimises (ties: the better first objective as its trial reported it, then the lower trial id);
// not the best by the objective, which (validation accuracy) saturates and ties. Its objective
// value is reported beside its losses, and the blend's beside it when the blend has the metric
// (val_accuracy, val_log_loss). The blend's probabilities are written
// as float64 .npy files to <run_dir>/stage-<stage id>-ensemble/{val,test}_probs.npy, rows in the
// members' order (val_indices.npy of any member says which training image a validation row is).
// With `task: regression` the members' files are val_pred, test_pred, val_targets and test_targets
// (float32 or float64, rows x outputs; a 1-D file is one output), every member's targets must equal the first's row by row, the methods
// minimize validation mean squared error (ensemble.h), and the result is
//   {"task": "regression", "method", "candidates", "skipped", "retrained", "members", "val_mse", "test_mse",
//    "best_single": {"trial", "chosen_by": "val_mse", "val_mse", "test_mse", "objective": {"metric", "value"}},
//    "objective": {"metric", "value"}, "files": {"val_pred", "test_pred"}}
// (the best single member by the lowest validation MSE)
// (the blend's predictions, float64, in the same directory). A member whose labels (or targets,
// or validation images) differ from the first member's is refused, naming its trial and the first
// row (split and index) that differs.
// finish() is deterministic and overwrites those files, so a master that died after computing it
// and before committing computes the same result again.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/stages.h"

namespace hpctune::workflow {

// `stage` is the ensemble item of `campaign.stages`; its settings are the parser's normalized ones
// (method, max_size, bags, k, retrain). kConfig naming the stage for settings out of range.
Result<std::unique_ptr<scheduler::StageRuntime>> make_ensemble_stage(const config::StageConfig& stage,
                                                                     const config::CampaignConfig& campaign);

// Where finish() writes the blend's probabilities: <run_dir>/stage-<stage_id>-ensemble.
std::string ensemble_output_dir(const std::string& run_dir, int64_t stage_id);

}  // namespace hpctune::workflow
