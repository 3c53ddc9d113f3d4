// The hierarchical allreduce (see collectives.h): ring reduce-scatter inside the node, allreduce of
// the node shards across nodes, ring allgather inside the node.
//
// With L ranks on every node, local rank j owns part j of the L-part partition after the
// reduce-scatter and allreduces it with local rank j of every other node (the `cross`
// communicator), so the inter-node traffic per rank is 2(N-1)/N * n/L for N nodes.
// Nodes of different sizes partition the buffer differently, so there is no common shard to
// exchange; then the node leaders gather their node's parts, allreduce the whole buffer among
// themselves, and scatter the parts back before the allgather.
#include <mpi.h>

#include <algorithm>
#include <vector>

#include "collectives/allreduce_detail.h"

namespace hpctune::collectives::detail {
namespace {

// Leader (local rank 0) collects part j of the node partition from local rank j (gather = true),
// or hands part j back to it (gather = false).
Status move_parts_via_leader(const Peers& node, float* data, size_t count, bool gather,
                             const Pipeline& pipeline) {
  const int tag = gather ? kTagGatherToLeader : kTagScatterFromLeader;
  Requests requests(pipeline);
  std::vector<size_t> indices;
  if (node.rank == 0) {
    for (int j = 1; j < node.size; ++j) {
      HPCTUNE_TRY(post_segments(requests, indices, /*receive=*/gather, data,
                                balanced_part(count, node.size, j), pipeline.segment_floats, j,
                                tag, node.comm));
    }
  } else {
    HPCTUNE_TRY(post_segments(requests, indices, /*receive=*/!gather, data,
                              balanced_part(count, node.size, node.rank), pipeline.segment_floats,
                              0, tag, node.comm));
  }
  return requests.wait_all();
}

}  // namespace

Result<Hierarchy> Hierarchy::create(const Communicator& comm, int ranks_per_node) {
  Hierarchy hierarchy;
  if (ranks_per_node > 0) {
    HPCTUNE_ASSIGN(hierarchy.node,
                   Communicator::split(comm.handle(), comm.rank() / ranks_per_node, comm.rank()));
  } else {
    HPCTUNE_ASSIGN(hierarchy.node, Communicator::split_shared(comm.handle()));
  }
  const int local_rank = hierarchy.node.rank();
  {
    HPCTUNE_ASSIGN(Communicator sharing, Communicator::split_shared(hierarchy.node.handle()));
    int shares = sharing.size() == hierarchy.node.size() ? 1 : 0;
    HPCTUNE_TRY(mpi_status(MPI_Allreduce(MPI_IN_PLACE, &shares, 1, MPI_INT, MPI_MIN, hierarchy.node.handle()),
                           "MPI_Allreduce(node shares memory)"));
    hierarchy.node_shares_memory = shares == 1;
  }

  // [node size, -node size, leaders]: max and min node size, and the node count, in one call.
  int stats[3] = {hierarchy.node.size(), -hierarchy.node.size(), local_rank == 0 ? 1 : 0};
  int maxima[2] = {0, 0};
  HPCTUNE_TRY(mpi_status(MPI_Allreduce(stats, maxima, 2, MPI_INT, MPI_MAX, comm.handle()),
                         "MPI_Allreduce(node sizes)"));
  HPCTUNE_TRY(mpi_status(MPI_Allreduce(MPI_IN_PLACE, &stats[2], 1, MPI_INT, MPI_SUM, comm.handle()),
                         "MPI_Allreduce(node count)"));
  hierarchy.uniform = maxima[0] == -maxima[1];
  hierarchy.nodes = stats[2];

  if (hierarchy.uniform) {
    HPCTUNE_ASSIGN(hierarchy.cross, Communicator::split(comm.handle(), local_rank, comm.rank()));
  } else {
    HPCTUNE_ASSIGN(hierarchy.leaders,
                   Communicator::split(comm.handle(), local_rank == 0 ? 0 : MPI_UNDEFINED,
                                       comm.rank()));
  }
  return hierarchy;
}

Status hierarchical_allreduce(const Hierarchy& hierarchy, float* data, size_t count,
                              float* scratch, const Pipeline& pipeline) {
  const Peers node = peers_of(hierarchy.node);
  HPCTUNE_TRY(ring_reduce_scatter(node, data, count, scratch, pipeline));
  if (hierarchy.uniform) {
    const Range shard = balanced_part(count, node.size, node.rank);
    HPCTUNE_TRY(ring_allreduce(peers_of(hierarchy.cross), data + shard.begin, shard.count,
                               scratch, pipeline));
  } else {
    HPCTUNE_TRY(move_parts_via_leader(node, data, count, /*gather=*/true, pipeline));
    if (node.rank == 0) {
      HPCTUNE_TRY(ring_allreduce(peers_of(hierarchy.leaders), data, count, scratch, pipeline));
    }
    HPCTUNE_TRY(move_parts_via_leader(node, data, count, /*gather=*/false, pipeline));
  }
  return ring_allgather(node, data, count, pipeline);
}

}  // namespace hpctune::collectives::detail
