// The transfer stage: fine-tunes the best checkpoints of an earlier stage (or one checkpoint file)
// on other data, each target trial beside an optional baseline twin trained from scratch.
//
// begin() picks the sources: the top `sources` done trials of the stages of `from` by the
// campaign's first objective, each with checkpoint files in its trial directory (its artifacts of
// kind "checkpoint", or checkpoint-stage*.bin in ctx.trial_dir(id), or, where its trainer kind keeps
// its checkpoint as a directory (TrainerOutput::directory: a command trainer's program), that
// directory inside ctx.trial_dir(id) when not empty); or, with `checkpoint:`, that one file (or a
// directory, for such a kind). No usable source fails the stage (Errc::kFailed, naming it and why).
//
// Its trials: without a nested search, `seeds` target trials per source; with one (the stage's own
// `search` and `space`: fine-tuning settings such as lr, freeze, epochs), the nested searcher's
// suggestions, assigned to the sources round-robin. A target's params are its source trial's params
// (the architecture must equal the checkpoint's) overlaid by the nested search's, plus
//   init_from  the source's trial directory (or the checkpoint file): every layer but the head is
//              loaded, the head is new and sized to the target's classes (the parameter is the
//              target kind's init_setting: a command trainer's program gets the source's checkpoint
//              directory as HPCTUNE_SOURCE_CHECKPOINT, and its id, source_trial_setting, as
//              HPCTUNE_SOURCE_TRIAL);
//   freeze     settings.freeze unless the nested search sets it;
//   classes, max_train_samples: for a kind that does not declare them as settings (a program),
//              parameters of every trial of the stage, twins included.
// Its meta: "role": "target", "source": the source's index (0-based, in begin()'s order), "seed":
// derived from (campaign seed, stage name, target index), and "lineage": [{"trial": source id,
// "relation": "transfer_source"}] (none for a checkpoint file); a nested suggestion's own meta
// ("generation", "parents" as the stage's seqs) is kept.
// With `baseline: true` every target has a twin right after it: the same params without init_from
// and with freeze 0 (and head_epochs 0, body_lr_scale 1 where the target's trainer has them: a
// twin trains every layer at one rate throughout), the same "seed", meta "role": "baseline" and
// "baseline_of": the target's seq.
// Only the start differs: same data (the stage's trainer settings, with `classes` and
// `max_train_samples`), same epochs, same seed.
//
// The nested searcher is told only the fine-tuning params (its space's names) of target trials:
// its seq k is the stage's k-th target. restore() rebuilds everything from the recorded
// suggestions, twins included, so a resumed stage never proposes a recorded trial again.
//
// finish() records {"sources": [ids], "target": {trial, val_accuracy, test_accuracy, objective},
// "baseline": (the best target's twin, same keys), "best_baseline": (the best baseline by the
// objective), "targets": n done, "baselines": n done, "gain": target.test_accuracy -
// baseline.test_accuracy}; a missing trial or value is null.
#pragma once

#include <memory>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/stages.h"

namespace hpctune::workflow {

// `stage` is the transfer stage's item of `campaign.stages` (its settings normalized by the parser;
// a missing key takes its default here too).
Result<std::unique_ptr<scheduler::StageRuntime>> make_transfer_stage(const config::StageConfig& stage,
                                                                     const config::CampaignConfig& campaign);

}  // namespace hpctune::workflow
