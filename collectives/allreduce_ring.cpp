// The ring allreduce: reduce-scatter then allgather around rank -> rank + 1 (see collectives.h).
//
// Part numbering: with p ranks the buffer is cut into p balanced parts. In the reduce-scatter,
// rank r sends part r-1-s at step s and receives part r-2-s from its left neighbour, adds it and
// forwards it at step s+1, so after p-1 steps it holds the complete sum of part r. In the
// allgather, rank r sends part r-s at step s and receives part r-1-s, which it forwards next.
//
// Every receive of a phase is posted before the first send, each into its own place (scratch for
// the reduce-scatter, the final place in `data` for the allgather), and parts are cut into
// segments. A segment is reduced and forwarded the moment it arrives, so step s+1 of one segment
// overlaps step s of the next: the pipeline that makes large buffers run at link speed.
#include <algorithm>
#include <vector>

#include "collectives/allreduce_detail.h"

namespace hpctune::collectives::detail {

Status ring_reduce_scatter(const Peers& peers, float* data, size_t count, float* scratch,
                           const Pipeline& pipeline) {
  const int p = peers.size, r = peers.rank;
  if (p == 1 || count == 0) return Status::Ok();
  const int right = modulo(r + 1, p), left = modulo(r - 1, p);
  const size_t seg = pipeline.segment_floats;

  Requests requests(pipeline);
  std::vector<std::vector<size_t>> received(static_cast<size_t>(p - 1));
  for (int s = 0; s < p - 1; ++s) {
    HPCTUNE_TRY(post_segments(requests, received[s], /*receive=*/true, scratch,
                              balanced_part(count, p, modulo(r - 2 - s, p)), seg, left,
                              kTagRingReduceScatter, peers.comm));
  }
  std::vector<size_t> sent;
  HPCTUNE_TRY(post_segments(requests, sent, /*receive=*/false, data,
                            balanced_part(count, p, modulo(r - 1, p)), seg, right,
                            kTagRingReduceScatter, peers.comm));

  for (int s = 0; s < p - 1; ++s) {
    const Range part = balanced_part(count, p, modulo(r - 2 - s, p));
    for (size_t k = 0; k < received[s].size(); ++k) {
      HPCTUNE_TRY(requests.wait(received[s][k]));
      const size_t offset = part.begin + k * seg;
      const size_t n = std::min(seg, part.count - k * seg);
      add_into(data + offset, scratch + offset, n);
      if (s < p - 2) {
        HPCTUNE_TRY(requests.send(data + offset, n, right, kTagRingReduceScatter, peers.comm));
      }
    }
  }
  return requests.wait_all();
}

Status ring_allgather(const Peers& peers, float* data, size_t count, const Pipeline& pipeline) {
  const int p = peers.size, r = peers.rank;
  if (p == 1 || count == 0) return Status::Ok();
  const int right = modulo(r + 1, p), left = modulo(r - 1, p);
  const size_t seg = pipeline.segment_floats;

  Requests requests(pipeline);
  std::vector<std::vector<size_t>> received(static_cast<size_t>(p - 1));
  for (int s = 0; s < p - 1; ++s) {
    HPCTUNE_TRY(post_segments(requests, received[s], /*receive=*/true, data,
                              balanced_part(count, p, modulo(r - 1 - s, p)), seg, left,
                              kTagRingAllgather, peers.comm));
  }
  std::vector<size_t> sent;
  HPCTUNE_TRY(post_segments(requests, sent, /*receive=*/false, data, balanced_part(count, p, r),
                            seg, right, kTagRingAllgather, peers.comm));

  for (int s = 0; s < p - 2; ++s) {  // the last step's parts stop here: nothing to forward
    const Range part = balanced_part(count, p, modulo(r - 1 - s, p));
    for (size_t k = 0; k < received[s].size(); ++k) {
      HPCTUNE_TRY(requests.wait(received[s][k]));
      const size_t offset = part.begin + k * seg;
      const size_t n = std::min(seg, part.count - k * seg);
      HPCTUNE_TRY(requests.send(data + offset, n, right, kTagRingAllgather, peers.comm));
    }
  }
  return requests.wait_all();
}

Status ring_allreduce(const Peers& peers, float* data, size_t count, float* scratch,
                      const Pipeline& pipeline) {
  // The allgather overwrites parts that the reduce-scatter sent from; its receives are posted only
  // after every reduce-scatter send has completed (wait_all above), so no send reads a part that a
  // receive is filling.
  HPCTUNE_TRY(ring_reduce_scatter(peers, data, count, scratch, pipeline));
  return ring_allgather(peers, data, count, pipeline);
}

}  // namespace hpctune::collectives::detail
