// What a classifier trial leaves (classifier_training.h, step 4): the final metrics, the test
// evaluation, and on the leader the predictions (.npy) and the artifacts.
#include <filesystem>

#include "common/npy.h"
#include "nn/checkpoint.h"
#include "trainers/classifier_run.h"

namespace hpctune::trainers {

namespace {

// val_probs, test_probs, val_indices, val_labels and test_labels in the trial directory.
Status write_predictions(ClassifierRun& run, const std::vector<float>& val_probs, const std::vector<float>& test_probs) {
  const std::filesystem::path dir(run.ctx.trial_dir);
  const ClassifierSplit& sp = run.split;
  const int64_t n_val = static_cast<int64_t>(sp.val.size()), n_test = static_cast<int64_t>(sp.test.size());
  const std::string val_path = (dir / "val_probs.npy").string(), test_path = (dir / "test_probs.npy").string();
  HPCTUNE_TRY(write_npy_f32(val_path, val_probs.data(), n_val, sp.classes));
  HPCTUNE_TRY(write_npy_f32(test_path, test_probs.data(), n_test, sp.classes));
  const std::string indices_path = (dir / "val_indices.npy").string();
  HPCTUNE_TRY(write_npy_i64(indices_path, sp.val.data(), n_val));
  // The labels of those rows as trained (after the classes remapping), for scoring blends.
  const std::string val_labels_path = (dir / "val_labels.npy").string();
  const std::string test_labels_path = (dir / "test_labels.npy").string();
  const std::vector<int64_t> val_labels = trained_labels(run.data.train, sp, sp.val);
  const std::vector<int64_t> test_labels = trained_labels(run.data.test, sp, sp.test);
  HPCTUNE_TRY(write_npy_i64(val_labels_path, val_labels.data(), n_val));
  HPCTUNE_TRY(write_npy_i64(test_labels_path, test_labels.data(), n_test));
  for (const auto& [kind, path] : {std::pair<const char*, std::string>{"val_probs", val_path},
                                   {"test_probs", test_path},
                                   {"val_indices", indices_path},
                                   {"val_labels", val_labels_path},
                                   {"test_labels", test_labels_path}}) {
    run.result.artifacts.push_back({kind, path});
  }
  return Status::Ok();
}

}  // namespace

Result<TrialResult> finish_outputs(ClassifierRun& run, EpochRunner& runner) {
  const ClassifierSplit& sp = run.split;
  const int64_t n_val = static_cast<int64_t>(sp.val.size()), n_test = static_cast<int64_t>(sp.test.size());
  const bool leader = run.lay.leader();
  const bool predictions = run.s.save_predictions && !run.ctx.trial_dir.empty();
  std::vector<float> val_probs, test_probs;
  if (predictions && leader) {
    val_probs.resize(static_cast<size_t>(n_val * sp.classes));
    test_probs.resize(static_cast<size_t>(n_test * sp.classes));
  }
  if (predictions) {
    HPCTUNE_TRY(runner.evaluate(run, run.data.train, sp.val.data(), n_val, leader ? val_probs.data() : nullptr));
  }
  HPCTUNE_ASSIGN(nn::BatchStats test, runner.evaluate(run, run.data.test, sp.test.data(), n_test,
                                                      leader && predictions ? test_probs.data() : nullptr));
  TrialResult& result = run.result;
  result.metrics = {{"val_loss", run.last["val_loss"]},
                    {"val_accuracy", run.last["val_accuracy"]},
                    {"train_loss", run.last["train_loss"]},
                    {"train_accuracy", run.last["train_accuracy"]},
                    {"test_loss", test.mean_loss()},
                    {"test_accuracy", test.accuracy()},
                    {"train_seconds", run.train_seconds},
                    {"images_per_second",
                     run.train_seconds > 0 ? static_cast<double>(run.images_trained) / run.train_seconds : 0.0}};
  if (run.start_epoch > 0) result.metrics["resumed_epoch"] = static_cast<double>(run.start_epoch);
  if (run.lay.data_size > 1) result.sync_mode = sync_mode_name(run.s.parallel.sync);
  runner.add_metrics(run, result);
  result.step = run.s.epochs;
  if (!leader) return result;
  if (predictions) HPCTUNE_TRY(write_predictions(run, val_probs, test_probs));
  if (run.checkpointing) {
    for (int stage = 0; stage < run.lay.model_size; ++stage) {
      result.artifacts.push_back({"checkpoint", nn::checkpoint_path(run.ctx.trial_dir, stage)});
    }
  }
  return result;
}

}  // namespace hpctune::trainers
