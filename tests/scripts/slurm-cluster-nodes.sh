#!/bin/sh
# ctest slurm_cluster_nodes (fixture "slurm", SLURM_CONF set): the cluster of tools/slurm-cluster
# shows 4 idle nodes and one step runs a task on each of n1..n4.
set -eu
nodes=$(sinfo -h -N -o '%N' | sort -u | tr '\n' ' ')
[ "$nodes" = "n1 n2 n3 n4 " ] || { echo "sinfo nodes: '$nodes' (expected n1 n2 n3 n4)"; exit 1; }
# shellcheck disable=SC2016 # expanded by the step's shell, on each node
ran=$(timeout 60 srun -N4 -n4 --time=1 sh -c 'echo $SLURMD_NODENAME' | sort | tr '\n' ' ')
[ "$ran" = "n1 n2 n3 n4 " ] || { echo "srun -N4 -n4 ran on: '$ran' (expected n1 n2 n3 n4)"; exit 1; }
echo "ok: $ran"
