// The epoch runner of the group's allreduce on the CPU (or of one rank alone): every rank gathers
// the same global minibatch, the engine takes its rows (data-parallel shards, pipeline micro-batches)
// and sums the gradients, and every rank takes the same optimizer step.
#include "trainers/classifier_run.h"

namespace hpctune::trainers {

namespace {

class AllreduceRunner final : public EpochRunner {
 public:
  Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                               nn::BatchStats& stats) override {
    int64_t batch_no = 0;
    return each_batch(run, 0, batch_no, [&](int64_t start, int64_t n, int64_t no) -> Status {
      if (run.lay.data_size > 1) test_kill_replica(run.lay.data_rank, run.step);
      gather_rows(run.data.train, run.split, order.data() + start, n, run.x.data(), run.y.data());
      HPCTUNE_ASSIGN(nn::BatchStats b, run.engine->train_batch(run.x.data(), run.y.data(), n, run.dropout_rng));
      HPCTUNE_TRY(run.diverged(b, epoch, no));
      run.optimizer->step(run.engine->params(), run.engine->grads(), run.blocks(epoch), run.lr(run.step++));
      stats += b;
      return Status::Ok();
    });
  }
};

}  // namespace

std::unique_ptr<EpochRunner> make_allreduce_runner() { return std::make_unique<AllreduceRunner>(); }

}  // namespace hpctune::trainers
