// The epoch runner of the replica exchange (replica_exchange.h): sync: ssp, gradient_compression:
// 1bit and backup replicas (min_replica_fraction < 1). Each replica computes its shard's gradient
// alone (the engine's local gradients) and the exchange applies the clocks; every epoch ends with
// every replica's clocks applied (drain), so that validation, reports and checkpoints are the
// same collectives on the same weights as the allreduce's. Coordinated: once a commit says the
// group lost a replica, no collective of the group runs any more: the leader evaluates alone (the
// replicas hold the same weights after each drain), and stop requests come with the commits.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "collectives/trainer_group.h"
#include "common/safe_open.h"
#include "common/text.h"
#include "trainers/classifier_run.h"
#include "trainers/replica_exchange.h"

namespace hpctune::trainers {

namespace {

class ExchangeRunner final : public EpochRunner {
 public:
  void adjust(EngineOptions& o) const override { o.local_gradients = true; }

  Status start(ClassifierRun& run) override {
    const ClassifierSettings& s = run.s;
    note_lag_ = s.parallel.sync == SyncMode::kSsp ? s.parallel.staleness : 0;
    if (run.lay.leader() && s.parallel.sync == SyncMode::kSsp && s.parallel.staleness > 0 &&
        s.optimizer.kind == nn::OptimizerKind::kSgd && s.optimizer.momentum >= 0.8) {
      // Measured (README, "ssp and momentum"): the two momenta together overshoot.
      run.warn("ssp with staleness " + std::to_string(s.parallel.staleness) + " and momentum " +
               format_number(s.optimizer.momentum) +
               ": stale gradients add momentum of their own, and training may degrade or stall; a momentum "
               "of 0-0.5 trains as allreduce does (README, \"ssp and momentum\")");
    }
    ReplicaExchangeOptions xo;
    xo.staleness = note_lag_;
    xo.onebit = s.parallel.compression == GradientCompression::kOneBit;
    xo.coordinated = s.parallel.coordinated();
    xo.min_fraction = s.parallel.min_replica_fraction;
    xo.compressed_allreduce = xo.onebit && s.parallel.sync == SyncMode::kAllreduce && !xo.coordinated;
    xo.leader_stop = run.ctx.leader_stop_requested;
    xo.run_id = run_id_of(run);
    HPCTUNE_ASSIGN(exchange_, ReplicaExchange::create(*run.ctx.group, run.engine->params().size(), xo));
    // A complete clock: the optimizer step the allreduce path takes at that step.
    apply_ = [this, &run](int64_t clock, std::span<const float> sum) {
      run.optimizer->step(run.engine->params(), sum, run.blocks(epoch_), run.lr(clock));
    };
    return exchange_->start_at(run.step);
  }

  bool stop_now(ClassifierRun& run, int64_t clock) override {
    if (auto note = group_lost_at(clock)) {
      alone_ = true;
      return note->stop;
    }
    return run.ctx.stop_requested();
  }

  Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                               nn::BatchStats& stats) override {
    epoch_ = epoch;
    int64_t batch_no = 0;
    HPCTUNE_ASSIGN(const EpochEnd end, each_batch(run, note_lag_, batch_no, [&](int64_t start, int64_t n, int64_t no) -> Status {
      test_kill_replica(run.lay.data_rank, run.step);
      HPCTUNE_ASSIGN(const bool compute, exchange_->begin_step(run.step, apply_));
      if (!compute) {  // applied without this replica (coordinated): a straggler catches up
        ++run.step;
        return run.diverged(exchange_->take_applied_stats(stats), epoch, no);
      }
      gather_rows(run.data.train, run.split, order.data() + start, n, run.x.data(), run.y.data());
      HPCTUNE_ASSIGN(const nn::BatchStats own, run.engine->train_batch(run.x.data(), run.y.data(), n, run.dropout_rng));
      HPCTUNE_TRY(exchange_->publish(run.step++, run.engine->grads(), own, apply_));
      return run.diverged(exchange_->take_applied_stats(stats), epoch, no);
    }));
    if (end == EpochEnd::kStopped) return end;
    // Every replica's clocks of the epoch applied: the same weights everywhere from here.
    HPCTUNE_TRY(exchange_->drain(run.step, apply_));
    HPCTUNE_TRY(run.diverged(exchange_->take_applied_stats(stats), epoch, batch_no - 1));
    for (const std::string& e : exchange_->take_events()) run.warn(e);
    if (group_lost_at(run.step - 1)) alone_ = true;  // every replica holds commit step - 1 now
    return alone_ && !run.lay.leader() ? EpochEnd::kSkip : EpochEnd::kEvaluate;
  }

  Result<EpochEnd> finish(ClassifierRun& run) override {
    // Every live replica's clocks are applied: a message still arriving is a dead sender's.
    run.ctx.group->give_up_arriving();
    for (const std::string& e : exchange_->take_events()) run.warn(e);
    if (stop_now(run, run.step - 1)) return EpochEnd::kStopped;
    return alone_ && !run.lay.leader() ? EpochEnd::kSkip : EpochEnd::kEvaluate;
  }

  void add_metrics(ClassifierRun& run, TrialResult& result) override {
    protocol::Metrics& m = result.metrics;
    m["sync_bytes_per_step"] = exchange_->bytes_per_step();
    m["sync_staleness_max"] = static_cast<double>(exchange_->staleness_max());
    m["sync_staleness_mean"] = exchange_->staleness_mean();
    m["sync_replica_fraction_min"] = 1.0;
    if (exchange_->coordinated()) add_coordinated_metrics(run, result);
    if (exchange_->coordinated() && !run.ctx.trial_dir.empty()) write_clock_log(run);
  }

 protected:
  bool evaluates_alone() const override { return alone_; }

 private:
  std::optional<CommitNote> group_lost_at(int64_t clock) const {
    if (!exchange_ || !exchange_->coordinated()) return std::nullopt;
    auto note = exchange_->commit_note(clock);
    if (!note || note->dropped == 0) return std::nullopt;
    return note;
  }

  // The leader's view of a coordinated exchange: each replica's fraction of the steps it
  // contributed to, the late gradients dropped, the replicas dropped (an event each; the group
  // then lost a rank).
  void add_coordinated_metrics(ClassifierRun& run, TrialResult& result) const {
    const ReplicaExchange& x = *exchange_;
    protocol::Metrics& m = result.metrics;
    const double clocks = static_cast<double>(std::max<int64_t>(1, x.clocks_applied()));
    double lowest = 1.0;
    for (size_t r = 0; r < x.included().size(); ++r) {
      const double fraction = static_cast<double>(x.included()[r]) / clocks;
      lowest = std::min(lowest, fraction);
      if (r < 16) m["sync_replica" + std::to_string(r) + "_fraction"] = fraction;
    }
    m["sync_replica_fraction_min"] = lowest;
    m["sync_late_packets"] = static_cast<double>(x.late_packets());
    const std::vector<int> dropped = x.dropped_now();
    m["sync_replicas_dropped"] = static_cast<double>(dropped.size());
    for (int r : dropped) {
      result.events.push_back({"replica_dropped",
                               {{"sync", sync_mode_name(run.s.parallel.sync)}, {"replica", r},
                                {"steps", x.included()[static_cast<size_t>(r)]},
                                {"silent_ms", run.ctx.group != nullptr ? run.ctx.group->timeout().count() : 0}}});
      result.group_degraded = true;
    }
  }

  // sync_clocks_replica<r>.csv: a line "begin,<clock>,<clocks applied>,<ns>" when a clock starts and
  // "publish,<clock>,-1,<ns>" when its gradient leaves (steady clock), the record that no replica
  // ran more than `staleness` ahead. A failed write is a warning.
  void write_clock_log(ClassifierRun& run) const {
    const std::filesystem::path path =
        std::filesystem::path(run.ctx.trial_dir) / ("sync_clocks_replica" + std::to_string(run.lay.data_rank) + ".csv");
    std::string text;
    for (const ClockEvent& e : exchange_->events()) {
      text += std::string(e.applied < 0 ? "publish," : "begin,") + std::to_string(e.clock) + ',' +
              std::to_string(e.applied) + ',' + std::to_string(e.t_ns) + '\n';
    }
    // A link or a FIFO planted at the name is refused (common/safe_open.h), with the warning.
    auto fd = open_own_for_writing(path.string(), /*truncate=*/true);
    if (!fd.ok()) return run.warn("could not write " + path.string() + ": " + fd.error().message());
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd->get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return run.warn("could not write " + path.string());
      done += static_cast<std::size_t>(n);
    }
  }

  std::unique_ptr<ReplicaExchange> exchange_;
  ReplicaExchange::Apply apply_;
  int64_t note_lag_ = 0;
  int64_t epoch_ = 0;
  bool alone_ = false;
};

}  // namespace

std::unique_ptr<EpochRunner> make_exchange_runner() { return std::make_unique<ExchangeRunner>(); }

}  // namespace hpctune::trainers
