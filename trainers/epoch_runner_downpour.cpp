// The epoch runner of sync: downpour (downpour.h): parameter-server shards. Replica i of R trains
// minibatches i, i + R, ... of the epoch's order on its own copy, each a whole step: it fetches the
// shards' weights every fetch_interval of its minibatches and pushes its gradients every
// push_interval. No collective of the group runs (a replica may die): no stop is polled, and only
// the leader validates, reports and writes checkpoints, on the weights it fetched last; at the end
// of the last epoch, once every replica is done, on the shards' final weights.
#include <algorithm>
#include <thread>

#include "collectives/trainer_group.h"
#include "trainers/classifier_run.h"
#include "trainers/downpour.h"

namespace hpctune::trainers {

namespace {

class DownpourRunner final : public EpochRunner {
 public:
  Status start(ClassifierRun& run) override {
    const DataParallelSettings& p = run.s.parallel;
    DownpourOptions o;
    o.shards = static_cast<int>(p.ps_shards);
    o.own_ranks = p.ps_on_own_ranks;
    o.push_interval = p.push_interval;
    o.fetch_interval = p.fetch_interval;
    o.adagrad = p.shard_optimizer == ShardOptimizer::kAdagrad;
    o.onebit = p.compression == GradientCompression::kOneBit;
    o.run_id = run_id_of(run);
    HPCTUNE_ASSIGN(dp_, Downpour::create(*run.ctx.group, run.engine->params(), o));
    return Status::Ok();
  }

  bool serves_only() const override { return !dp_->replica(); }

  // A rank that only serves its shard: until every replica is done or dropped.
  Result<TrialResult> serve(ClassifierRun& run) override {
    Status served = dp_->finish();
    for (const std::string& e : dp_->take_events()) run.warn(e);
    HPCTUNE_TRY(std::move(served));
    run.result.step = run.s.epochs;
    return run.result;
  }

  bool polls_stop_at_epoch_start() const override { return false; }

  Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                               nn::BatchStats& stats) override {
    const int64_t R = dp_->replicas(), first_step = run.step;
    for (int64_t i = dp_->replica_index(); i < run.batches_per_epoch; i += R, ++own_steps_) {
      if (dp_->due_fetch(own_steps_)) HPCTUNE_TRY(dp_->fetch(run.net.params()));
      test_kill_replica(run.lay.data_rank, own_steps_);
      const int64_t start = i * run.batch, n = std::min(run.batch, run.n_train - start);
      const auto t0 = ClassifierRun::Clock::now();
      gather_rows(run.data.train, run.split, order.data() + start, n, run.x.data(), run.y.data());
      const nn::BatchStats b =
          run.net.forward_backward(run.x.data(), run.y.data(), n, 1.0f / static_cast<float>(n), run.dropout_rng);
      if (run.engine_options.after_compute) HPCTUNE_TRY(straggle(run, t0));
      HPCTUNE_TRY(run.diverged(b, epoch, i));
      HPCTUNE_TRY(dp_->push(first_step + i, run.net.grads(), run.lr(first_step + i)));
      stats += b;
    }
    run.step = first_step + run.batches_per_epoch;
    // The last epoch ends once every replica is done: the leader then holds the shards' final
    // weights, the slower replicas' last pushes included, and validates, reports and saves those.
    if (epoch == run.s.epochs) return finish(run);
    for (const std::string& e : dp_->take_events()) run.warn(e);
    if (!run.lay.leader()) return EpochEnd::kSkip;
    HPCTUNE_TRY(dp_->fetch(run.net.params()));  // the shards' weights now
    return EpochEnd::kEvaluate;
  }

  Result<EpochEnd> finish(ClassifierRun& run) override {
    if (!finished_) HPCTUNE_TRY(dp_->finish(run.lay.leader() ? run.net.params() : std::span<float>{}));
    finished_ = true;
    for (const std::string& e : dp_->take_events()) run.warn(e);
    return run.lay.leader() ? EpochEnd::kEvaluate : EpochEnd::kSkip;
  }

  void add_metrics(ClassifierRun& run, TrialResult& result) override {
    add_summary(run, result.metrics);
    const DownpourSummary& sum = dp_->summary();
    for (size_t r = 0; r < sum.dropped.size(); ++r) {
      if (!sum.dropped[r]) continue;
      run.warn("downpour: replica " + std::to_string(r) + " stopped answering and was dropped after " +
               std::to_string(sum.pushes[r]) + " pushes; the trial finished with the others");
      result.events.push_back({"replica_dropped",
                               {{"sync", "downpour"}, {"replica", r}, {"pushes", sum.pushes[r]},
                                {"silent_ms", run.ctx.group->timeout().count()}}});
      // The dead replica's rank is gone from the MPI job: no later trial can use this group.
      result.group_degraded = true;
    }
  }

 protected:
  bool evaluates_alone() const override { return true; }

 private:
  // The straggler of debug_slowdown, whose shard keeps answering while it is slow.
  Status straggle(ClassifierRun& run, ClassifierRun::Clock::time_point t0) {
    const auto took = std::chrono::duration<double>(ClassifierRun::Clock::now() - t0).count();
    const auto until = ClassifierRun::Clock::now() + std::chrono::duration_cast<ClassifierRun::Clock::duration>(
                                                         std::chrono::duration<double>(took * (run.s.parallel.debug_slowdown - 1.0)));
    while (ClassifierRun::Clock::now() < until) {
      HPCTUNE_TRY(dp_->serve());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return Status::Ok();
  }

  // The sync_* metrics from the shards' summaries (the leader's, after finish()), plus
  // sync_replicas_dropped.
  void add_summary(const ClassifierRun& run, protocol::Metrics& m) const {
    const DownpourSummary& sum = dp_->summary();
    m["sync_bytes_per_step"] = dp_->bytes_per_step();
    m["sync_staleness_max"] = static_cast<double>(sum.staleness_max);
    m["sync_staleness_mean"] = sum.staleness_mean;
    double lowest = 1.0, dropped = 0.0;
    const int64_t R = dp_->replicas(), epochs = run.s.epochs - run.start_epoch;
    for (int64_t r = 0; r < R && static_cast<size_t>(r) < sum.pushes.size(); ++r) {
      // Replica r's minibatches: r, r + R, ... of every epoch; a push every push_interval of them.
      const int64_t steps = epochs * ((run.batches_per_epoch - r + R - 1) / R);
      const int64_t expected = std::max<int64_t>(1, steps / run.s.parallel.push_interval);
      const double fraction =
          std::min(1.0, static_cast<double>(sum.pushes[static_cast<size_t>(r)]) / static_cast<double>(expected));
      lowest = std::min(lowest, fraction);
      if (r < 16) m["sync_replica" + std::to_string(r) + "_fraction"] = fraction;
      dropped += sum.dropped[static_cast<size_t>(r)] ? 1.0 : 0.0;
    }
    m["sync_replica_fraction_min"] = lowest;
    m["sync_replicas_dropped"] = dropped;
    m["sync_updates"] = static_cast<double>(sum.updates);  // every push every shard applied
    m["sync_updates_in_model"] = static_cast<double>(dp_->updates_in_params());  // those the final weights hold
  }

  std::unique_ptr<Downpour> dp_;
  int64_t own_steps_ = 0;  // this replica's minibatches so far
  bool finished_ = false;  // dp_->finish() ran (at the end of the last epoch)
};

}  // namespace

std::unique_ptr<EpochRunner> make_downpour_runner() { return std::make_unique<DownpourRunner>(); }

}  // namespace hpctune::trainers
