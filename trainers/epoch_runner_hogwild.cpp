// The epoch runner of sync: hogwild (hogwild.h): the threads of one rank train minibatches of the
// epoch at once on shared weights without locks (Niu et al. 2011), each with its own network and
// buffers; the optimizer steps in place.
#include "trainers/classifier_run.h"
#include "trainers/hogwild.h"

namespace hpctune::trainers {

namespace {

class HogwildRunner final : public EpochRunner {
 public:
  Status start(ClassifierRun& run) override {
    auto make_network = [&run]() -> Result<nn::Network> {
      HPCTUNE_ASSIGN(nn::Network copy, nn::Network::create(nn::Shape{1, run.data.train.rows, run.data.train.cols},
                                                           run.s.layers, run.split.classes));
      if (run.s.freeze > 0) HPCTUNE_TRY(copy.freeze(static_cast<size_t>(run.s.freeze)));
      return copy;
    };
    HPCTUNE_ASSIGN(hog_, HogwildWorkers::create(std::max(1, run.ctx.threads), run.engine->params().size(),
                                                run.s.optimizer, make_network));
    const size_t features = static_cast<size_t>(run.data.train.features());
    x_.assign(static_cast<size_t>(hog_->threads()), std::vector<float>(static_cast<size_t>(run.batch) * features));
    y_.assign(static_cast<size_t>(hog_->threads()), std::vector<int32_t>(static_cast<size_t>(run.batch)));
    return Status::Ok();
  }

  Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                               nn::BatchStats& stats) override {
    auto train_one = [&](int t, int64_t i, nn::Network& mine, Rng& rng) {
      const int64_t start = i * run.batch, n = std::min(run.batch, run.n_train - start);
      float* bx = x_[static_cast<size_t>(t)].data();
      int32_t* by = y_[static_cast<size_t>(t)].data();
      gather_rows(run.data.train, run.split, order.data() + start, n, bx, by);
      return mine.forward_backward(bx, by, n, 1.0f / static_cast<float>(n), rng);
    };
    const HogwildEpochResult r = hog_->run(
        run.net, *run.optimizer, run.blocks(epoch), run.batches_per_epoch, run.step,
        [&run](int64_t k) { return run.lr(k); }, derive_seed(run.dropout_seed, static_cast<uint64_t>(epoch)),
        run.dropout_rng, train_one, run.ctx.stop_requested, kStopPollBatches);
    run.step += r.batches_done;
    stats = r.stats;
    if (r.diverged) {
      return err(Errc::kFailed, run.who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                    "); try a smaller 'lr'");
    }
    return r.stopped ? EpochEnd::kStopped : EpochEnd::kEvaluate;
  }

  void add_metrics(ClassifierRun& run, TrialResult& result) override {
    result.sync_mode = sync_mode_name(run.s.parallel.sync);
  }

 private:
  std::unique_ptr<HogwildWorkers> hog_;
  std::vector<std::vector<float>> x_;
  std::vector<std::vector<int32_t>> y_;
};

}  // namespace

std::unique_ptr<EpochRunner> make_hogwild_runner() { return std::make_unique<HogwildRunner>(); }

}  // namespace hpctune::trainers
