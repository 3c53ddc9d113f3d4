// The butterfly allreduce (recursive doubling), with folding for rank counts that are not a power
// of two (see collectives.h):
//
//   p = 6, pof2 = 4, rem = 2:  ranks 0..3 pair up (0->1, 2->3): 1 and 3 add their partner's data
//   and take part as butterfly ranks 0 and 1; ranks 4 and 5 are butterfly ranks 2 and 3. After
//   log2(pof2) exchanges, 1 and 3 send the result back to 0 and 2.
//
// Each exchange is cut into segments; segment k is added as soon as both its receive and the send
// of the same segment have completed (the send reads the very elements the addition overwrites).
#include <algorithm>
#include <vector>

#include "collectives/allreduce_detail.h"

namespace hpctune::collectives::detail {
namespace {

// Sends data[0, count) to `peer` and waits until it has been taken.
Status send_all(float* data, size_t count, int peer, int tag, const Peers& peers,
                const Pipeline& pipeline) {
  Requests requests(pipeline);
  std::vector<size_t> sent;
  HPCTUNE_TRY(post_segments(requests, sent, /*receive=*/false, data, Range{0, count},
                            pipeline.segment_floats, peer, tag, peers.comm));
  return requests.wait_all();
}

// Receives data[0, count) from `peer` in place.
Status receive_all(float* data, size_t count, int peer, int tag, const Peers& peers,
                   const Pipeline& pipeline) {
  Requests requests(pipeline);
  std::vector<size_t> received;
  HPCTUNE_TRY(post_segments(requests, received, /*receive=*/true, data, Range{0, count},
                            pipeline.segment_floats, peer, tag, peers.comm));
  return requests.wait_all();
}

// data += the peer's data, received into scratch; with exchange = true the peer gets ours too.
Status reduce_from(float* data, size_t count, float* scratch, int peer, bool exchange, int tag,
                   const Peers& peers, const Pipeline& pipeline) {
  const size_t seg = pipeline.segment_floats;
  Requests requests(pipeline);
  std::vector<size_t> received, sent;
  HPCTUNE_TRY(post_segments(requests, received, /*receive=*/true, scratch, Range{0, count}, seg,
                            peer, tag, peers.comm));
  if (exchange) {
    HPCTUNE_TRY(post_segments(requests, sent, /*receive=*/false, data, Range{0, count}, seg, peer,
                              tag, peers.comm));
  }
  for (size_t k = 0; k < received.size(); ++k) {
    HPCTUNE_TRY(requests.wait(received[k]));
    if (exchange) HPCTUNE_TRY(requests.wait(sent[k]));
    const size_t offset = k * seg;
    add_into(data + offset, scratch + offset, std::min(seg, count - offset));
  }
  return requests.wait_all();
}

}  // namespace

Status recursive_doubling_allreduce(const Peers& peers, float* data, size_t count, float* scratch,
                                    const Pipeline& pipeline) {
  const int p = peers.size, r = peers.rank;
  if (p == 1 || count == 0) return Status::Ok();
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int rem = p - pof2;

  // Fold: the even ranks below 2*rem hand their data to the odd neighbour and sit out.
  int butterfly_rank = r - rem;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      HPCTUNE_TRY(send_all(data, count, r + 1, kTagFoldIn, peers, pipeline));
      butterfly_rank = -1;
    } else {
      HPCTUNE_TRY(reduce_from(data, count, scratch, r - 1, /*exchange=*/false, kTagFoldIn, peers,
                              pipeline));
      butterfly_rank = r / 2;
    }
  }

  if (butterfly_rank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int partner_butterfly = butterfly_rank ^ mask;
      const int partner =
          partner_butterfly < rem ? partner_butterfly * 2 + 1 : partner_butterfly + rem;
      HPCTUNE_TRY(reduce_from(data, count, scratch, partner, /*exchange=*/true, kTagButterfly,
                              peers, pipeline));
    }
  }

  // Unfold: the odd ranks below 2*rem give the result back.
  if (r < 2 * rem) {
    if (r % 2 == 1) return send_all(data, count, r - 1, kTagFoldOut, peers, pipeline);
    return receive_all(data, count, r + 1, kTagFoldOut, peers, pipeline);
  }
  return Status::Ok();
}

}  // namespace hpctune::collectives::detail
