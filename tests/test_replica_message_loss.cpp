// A data replica that dies half-way through sending a message (collectives/trainer_group_mpi.h,
// "messages"): three ranks under `mpirun --enable-recovery`. Rank 1 posts a message far past any
// eager limit (8 MiB) to rank 0 and SIGKILLs itself before it can finish sending; rank 2 sends
// small messages before and after. Rank 0 must neither wait nor break the group: it gives the
// half-received message up after the group's timeout, counts it (the modes report it), and goes
// on receiving rank 2's messages. Before, the receive of the half-sent message blocked rank 0 for
// the whole timeout and then broke the group: a downpour shard stopped serving everyone, and an
// attempt that should have dropped one replica ran again (a flake of test_replica_loss_campaign
// and test_slurm under load).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include <csignal>
#include <thread>

#include "collectives/trainer_group_mpi.h"
#include "tests/mpi_test_main.h"

using namespace hpctune;
using namespace hpctune::collectives;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kTag = 7;

// Receives on rank 0 until `until`, or until `want` messages from rank 2 came; counts rank 1's.
struct Received {
  int from_1 = 0, from_2 = 0;
  Status status = Status::Ok();
};
Received receive_until(TrainerGroup& g, Clock::time_point until, int want) {
  Received r;
  while (Clock::now() < until && r.from_2 < want) {
    auto m = g.receive_from_replicas(kTag);
    if (!m.ok()) {
      r.status = m.error();
      return r;
    }
    if (!*m) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ((*m)->from == 1 ? r.from_1 : r.from_2) += 1;
  }
  return r;
}

}  // namespace

TEST_CASE("replica messages: a sender that dies half-way through a message holds no one up") {
  REQUIRE(hpctune::testing::world_size() == 3);
  MpiGroupOptions go;
  go.data = 3;
  go.timeout = std::chrono::seconds(3);
  auto created = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(created.ok());
  MpiTrainerGroup& g = **created;
  // Everyone is connected before the kill (a first small message each way).
  REQUIRE(g.broadcast_flag(true).ok());
  if (g.rank() == 1) {
    REQUIRE(g.post_to_replica(0, kTag, std::vector<uint8_t>(8u << 20, 0x5a)).ok());
    std::raise(SIGKILL);  // before the receiver can have pulled 8 MiB
  }
  if (g.rank() == 2) {
    REQUIRE(g.post_to_replica(0, kTag, std::vector<uint8_t>(100, 1)).ok());
    // After rank 0 has matched rank 1's message (it probes every millisecond) and well within the
    // timeout: rank 0 must be receiving, not waiting on the dead sender.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    REQUIRE(g.post_to_replica(0, kTag, std::vector<uint8_t>(100, 2)).ok());
    // Keeps the sends moving until rank 0 has them (no collective: a rank is dead).
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < until) {
      auto m = g.receive_from_replicas(kTag + 1);
      REQUIRE(m.ok());
      if (*m) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (g.rank() == 0) {
    // Both of rank 2's messages come in well before the timeout would end a blocked receive.
    const auto t0 = Clock::now();
    Received r = receive_until(g, t0 + std::chrono::seconds(20), 2);
    REQUIRE_MESSAGE(r.status.ok(), r.status.error().to_string());
    CHECK(r.from_2 == 2);
    CHECK(r.from_1 == 0);
    // Past the timeout the half-received message is given up, counted, and the group still works.
    r = receive_until(g, Clock::now() + go.timeout + std::chrono::seconds(2), 1);
    REQUIRE_MESSAGE(r.status.ok(), r.status.error().to_string());
    CHECK(r.from_1 == 0);
    CHECK(g.replica_messages_given_up() == 1);
    CHECK_FALSE(g.broken());
    std::vector<std::string> lines;
    int64_t seen = 0;
    note_given_up_messages(g, seen, lines);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("gave up 1 message(s)") != std::string::npos);
    CHECK(seen == 1);
    REQUIRE(g.post_to_replica(2, kTag + 1, std::vector<uint8_t>(10, 3)).ok());
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < until) {
      auto m = g.receive_from_replicas(kTag);  // moves the post on
      REQUIRE(m.ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

int main(int argc, char** argv) { hpctune::testing::mpi_kill_test_main(argc, argv, "test_replica_message_loss"); }
