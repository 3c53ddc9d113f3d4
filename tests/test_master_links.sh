#!/usr/bin/env bash
# test_master_links: the master's side links no neural-network, BLAS, oneDNN or MPI library. The
# programs built from the master's libraries alone (the scheduler's, the store's, the config's and
# the protocol's tests, and simulate/'s cost model test) must not need libopenblas, libdnnl, libmpi or libgomp; the hpctune binary,
# which also holds the trainers, does (so the check can see them).
# And the readers link no master: a program built from report/ alone (test_report) or from the
# dashboard alone (dashboard_link_probe) has no scheduler, launcher, protocol, workflow or ZeroMQ on
# its link line (read from the build's build.ninja, or link.txt with a Makefile generator); the
# scheduler's test has them (so the check can see them).
set -euo pipefail
usage="usage: test_master_links.sh BUILD_TESTS_DIR HPCTUNE_BINARY BUILD_DIR"
tests=${1:?$usage}
binary=${2:?$usage}
root=${3:?$usage}
fail() { echo "test_master_links: FAILED: $*" >&2; exit 1; }
heavy='libopenblas|libblas|libdnnl|libmpi|libgomp'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

needed "$binary" | grep -qE "$heavy" || fail "$binary needs none of $heavy: the check cannot see them"
for t in test_scheduler test_store test_config test_protocol test_group_launch test_simulation_cost_model; do
  [ -x "$tests/$t" ] || fail "$tests/$t is missing"
  if found=$(needed "$tests/$t" | grep -E "$heavy"); then
    fail "$t (master's side) needs $(echo $found | tr '\n' ' ')"
  fi
done
echo "test_master_links: 6 programs of the master's side (the simulator's included) link no BLAS, oneDNN or MPI"

# The libraries on the link line of tests/NAME, one a line.
link_line() {
  local line=""
  if [ -f "$root/build.ninja" ]; then
    line=$(awk -v head="build tests/$1:" '
      index($0, head) == 1 { found = 1; next }
      found && /^build / { exit }
      found && /^  LINK_LIBRARIES = / { sub(/^  LINK_LIBRARIES = /, ""); print; exit }' "$root/build.ninja")
  elif [ -f "$tests/CMakeFiles/$1.dir/link.txt" ]; then
    line=$(cat "$tests/CMakeFiles/$1.dir/link.txt")
  fi
  [ -n "$line" ] || fail "no link line for tests/$1 in $root (build.ninja or tests/CMakeFiles/$1.dir/link.txt)"
  echo "$line" | tr -s ' ' '\n'
}
master='libhpctune_scheduler|libhpctune_launch|libhpctune_protocol|libhpctune_workflow|libzmq'
[ "$(link_line test_scheduler | grep -cE "libhpctune_scheduler|libzmq")" -ge 2 ] ||
  fail "test_scheduler's link line has no libhpctune_scheduler and libzmq: the check cannot see them"
for t in test_report dashboard_link_probe; do
  if found=$(link_line "$t" | grep -E "$master"); then
    fail "$t (report/ or the dashboard alone) links $(echo $found | tr '\n' ' ')"
  fi
done
echo "test_master_links: report/ and the dashboard link no scheduler, launcher, protocol or ZeroMQ"
