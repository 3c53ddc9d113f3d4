// MpiTrainerGroup: TrainerGroup (trainer_group.h) over MPI, for the ranks of one `mpirun` job.
//
// Communicators, all made at create() (collective over `world`):
//   control   a duplicate of `world`: sum(), broadcast_flag(), broadcast_bytes()
//   pipeline  the ranks of this data replica (color data_rank), ranked by model_rank: the
//             point-to-point traffic of the pipeline
//   replicas  the ranks with this model_rank (color model_rank), ranked by data_rank: an Allreducer
//             with the trial's `allreduce` algorithm averages each stage's gradients over them
//   messages  a duplicate of `replicas`: post_to_replica() / receive_from_replicas() (MPI_Isend of
//             bytes, MPI_Improbe + MPI_Imrecv), so their tags never meet the allreduce's traffic.
//             Neither waits: a matched message still arriving is kept and completed by later
//             calls, so a sender that dies half-way through a message holds no one up. Such a
//             receive cannot be cancelled (it is matched): past the group's timeout it is given up,
//             the message lost (the modes' own silence rules then drop its sender), and the group
//             goes on. Sends still pending when the group ends are cancelled, and every buffer MPI
//             may still touch is kept until the process exits.
//
// Deadlines: every call polls non-blocking MPI operations (MPI_Iallreduce, MPI_Ibcast, MPI_Isend,
// MPI_Irecv) against options.timeout, except sum_gradients with the `mpi` algorithm, which
// blocks in MPI_Allreduce. So a hung peer shows either as kTimeout or as a collective that has been
// running too long: collective_started() is what the group worker's watchdog watches, from another
// thread. After any error the group is broken(): every later call fails at once (kFailed), and the
// group worker ends the process so that mpirun tears down the whole job.
//
// Test hook: when the environment variable HPCTUNE_TEST_HANG_FILE names a file that does not exist
// yet, the rank whose group rank equals HPCTUNE_TEST_HANG_RANK (default 1) creates it and then
// sleeps inside its first sum_gradients() (marked as started) for an hour: a hung rank, for the
// watchdog test. The file makes it happen once per campaign, so the requeued attempt runs normally.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include "common/result.h"
#include "collectives/allreduce_algorithm.h"
#include "collectives/collectives.h"
#include "collectives/trainer_group.h"

namespace hpctune::collectives {

struct MpiGroupOptions {
  int data = 1;   // data replicas; data * model must equal the size of `world`
  int model = 1;  // pipeline stages
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kHierarchical;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // per call
};

class MpiTrainerGroup final : public TrainerGroup {
 public:
  // kInvalidArgument when data * model != size of `world`; MPI errors as mpi_status().
  static Result<std::unique_ptr<MpiTrainerGroup>> create(MPI_Comm world, const MpiGroupOptions& options);
  ~MpiTrainerGroup() override;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return options_.data * options_.model; }
  int data_rank() const noexcept override { return rank_ / options_.model; }
  int data_size() const noexcept override { return options_.data; }
  int model_rank() const noexcept override { return rank_ % options_.model; }
  int model_size() const noexcept override { return options_.model; }

  Status sum_gradients(std::span<float> grads) override;
  Result<GradientBuffer> gradient_buffer(size_t count) override;
  // How the gradient allreduce uses the node's shared memory (Allreducer::shared_memory()), or
  // "one replica".
  std::string shared_memory() const;
  Status sum(std::span<double> values) override;
  Result<bool> broadcast_flag(bool value) override;
  Status broadcast_bytes(std::vector<uint8_t>& bytes) override;
  Status send_to_model_rank(int model_rank, std::span<const float> data, int tag) override;
  Status recv_from_model_rank(int model_rank, std::span<float> data, int tag) override;
  Status post_to_replica(int data_rank, int tag, std::vector<uint8_t> bytes) override;
  Result<std::optional<ReplicaMessage>> receive_from_replicas(int tag) override;
  Result<bool> posts_delivered(int tag) override;
  std::chrono::milliseconds timeout() const noexcept override { return options_.timeout; }
  int64_t replica_messages_given_up() const noexcept override {
    return static_cast<int64_t>(unfinished_receives_.size());
  }
  void give_up_arriving() noexcept override;

  // When the call now running began (nullopt when none); safe from any thread.
  std::optional<std::chrono::steady_clock::time_point> collective_started() const noexcept override;
  // A call failed, or abandon() was called: the group must be torn down.
  bool broken() const noexcept { return broken_.load(); }
  void abandon() noexcept override { broken_.store(true); }
  const MpiGroupOptions& options() const noexcept { return options_; }

 private:
  MpiTrainerGroup() = default;
  class Scope;  // marks a call as running and the group broken when it fails
  Status check_usable() const;
  Status poll(MPI_Request& request, const char* what, bool receive = false);
  Status progress_posted();  // drops the posted messages whose sends completed
  Status match_arriving(int tag);  // starts receiving every message of `tag` that has come in
  Result<std::optional<ReplicaMessage>> take_arrived(int tag);  // the first complete one, in order
  struct Arriving;
  void give_up(Arriving& a) noexcept;

  MpiGroupOptions options_;
  int rank_ = 0;
  Communicator control_, pipeline_, replicas_, messages_;
  struct Posted {
    MPI_Request request = MPI_REQUEST_NULL;
    int tag = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<Posted> posted_;  // sends of post_to_replica() not yet complete
  struct Arriving {  // a matched message of receive_from_replicas() not yet complete
    int tag = 0;
    int from = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<uint8_t> bytes;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Arriving> arriving_;
  std::vector<std::vector<uint8_t>> unfinished_receives_;  // buffers of receives given up
  std::unique_ptr<Allreducer> allreducer_;  // null when data == 1
  std::atomic<int64_t> started_ns_{0};      // steady_clock ns since epoch; 0: no call running
  std::atomic<bool> broken_{false};
};

}  // namespace hpctune::collectives
