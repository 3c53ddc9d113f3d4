#!/usr/bin/env bash
# test_master_links: the master's side links no neural-network, BLAS, oneDNN or MPI library. The
# programs built from the master's libraries alone (the scheduler's, the store's, the config's and
# the protocol's tests) must not need libopenblas, libdnnl, libmpi or libgomp; the hpctune binary,
# which also holds the trainers, does (so the check can see them).
set -euo pipefail
tests=${1:?usage: test_master_links.sh BUILD_TESTS_DIR HPCTUNE_BINARY}
binary=${2:?usage: test_master_links.sh BUILD_TESTS_DIR HPCTUNE_BINARY}
fail() { echo "test_master_links: FAILED: $*" >&2; exit 1; }
heavy='libopenblas|libblas|libdnnl|libmpi|libgomp'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

needed "$binary" | grep -qE "$heavy" || fail "$binary needs none of $heavy: the check cannot see them"
for t in test_scheduler test_store test_config test_protocol test_group_launch; do
  [ -x "$tests/$t" ] || fail "$tests/$t is missing"
  if found=$(needed "$tests/$t" | grep -E "$heavy"); then
    fail "$t (master's side) needs $(echo $found | tr '\n' ' ')"
  fi
done
echo "test_master_links: 5 programs of the master's side link no BLAS, oneDNN or MPI"
