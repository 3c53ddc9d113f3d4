// The single-process group of a trainer that starts its own ranks (group_worker.h).
#include "worker/group_worker.h"

#include "trainers/trainer.h"

namespace hpctune::worker {
namespace {

using Clock = std::chrono::steady_clock;
using trainers::MakeTrainer;

// A trainer that starts its own ranks: the trial only needs to know how many.
class RanksTrainer final : public trainers::Trainer {
 public:
  RanksTrainer(std::unique_ptr<trainers::Trainer> inner, int ranks) : inner_(std::move(inner)), ranks_(ranks) {}
  std::string kind() const override { return inner_->kind(); }
  Result<trainers::TrialResult> run(const trainers::TrialContext& ctx) override {
    trainers::TrialContext c = ctx;
    c.ranks = ranks_;
    return inner_->run(c);
  }

 private:
  std::unique_ptr<trainers::Trainer> inner_;
  int ranks_;
};

}  // namespace

Status run_single_process_worker(const GroupWorkerOptions& options) {
  if (!options.connect) return err(Errc::kInvalidArgument, "no way to connect to the master");
  HPCTUNE_ASSIGN(auto transport, options.connect());
  WorkerOptions worker = options.worker;
  const MakeTrainer make = options.worker.make;
  const int ranks = options.ranks_data * options.ranks_model;
  worker.make = [make, ranks](const std::string& kind) -> Result<std::unique_ptr<trainers::Trainer>> {
    HPCTUNE_ASSIGN(auto inner, make(kind));
    return std::unique_ptr<trainers::Trainer>(std::make_unique<RanksTrainer>(std::move(inner), ranks));
  };
  return run_worker(*transport, worker);
}

}  // namespace hpctune::worker
