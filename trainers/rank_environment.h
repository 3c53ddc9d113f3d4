// The environment a command trainer's ranks find each other with: MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE, RANK, LOCAL_RANK and LOCAL_WORLD_SIZE, as torch.distributed's env:// rendezvous
// (and Horovod, DeepSpeed, JAX's and TensorFlow's cluster resolvers) read them.
//
//   - MASTER_ADDR and MASTER_PORT are the group's: this host (the worker's, where mpirun runs and
//     rank 0 starts; "127.0.0.1" for one rank, or when the host name does not resolve) and a TCP
//     port that was free a moment ago (bound to port 0, then released). WORLD_SIZE is the group's
//     number of ranks. They are the same for every rank: set in the environment mpirun is
//     started with, and named to mpirun with -x so that ranks on other nodes get them too.
//   - RANK, LOCAL_RANK and LOCAL_WORLD_SIZE differ per rank, so each rank derives them itself
//     from what its launcher gave it: rank_script() runs in every rank (mpirun ... /bin/sh -c
//     <rank_script> hpctune-rank /bin/sh -c <the command>) and then execs the command. The first
//     launcher found supplies all four (never a mix): Open MPI (OMPI_COMM_WORLD_RANK, _SIZE,
//     _LOCAL_RANK, _LOCAL_SIZE), PMIx (PMIX_RANK), MPICH's Hydra (PMI_RANK, PMI_SIZE,
//     MPI_LOCALRANKID, MPI_LOCALNRANKS), SLURM's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//     and the tasks on this node from SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID, else
//     SLURM_NTASKS_PER_NODE). Open MPI comes first: under SLURM, mpirun's ranks also inherit the
//     SLURM_* of the step that started the worker, which describe that step, not the ranks. A
//     launcher that names no local rank (PMIx alone) gets LOCAL_RANK = RANK and LOCAL_WORLD_SIZE =
//     WORLD_SIZE, true on one host. A rank with none of these, or with values that are not numbers
//     or a RANK not below WORLD_SIZE, exits 97 saying so on standard error; so does rank 0 when it
//     is not on the host MASTER_ADDR names (HPCTUNE_RANK0_HOST), where the others would wait for
//     it in vain. The script holds no text of the user's: the command stays its own `sh -c` word.
//   - One rank: WORLD_SIZE=1, RANK=0, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1 and the same MASTER_ADDR and
//     MASTER_PORT, so that a script that always calls init_process_group runs unchanged.
//   - GPUs: where the group was given some (HPCTUNE_GPUS, HPCTUNE_GPUS_PER_RANK: common/device_list.h),
//     each rank's CUDA_VISIBLE_DEVICES becomes its own slice of them, by LOCAL_RANK.
// A name the user sets in `trainer.env` wins over the group's (MASTER_PORT pinned, say); the
// per-rank names are always the launcher's.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "launch/child_process.h"

namespace hpctune::trainers {

// The POSIX sh script each rank runs before the program (argv: the program follows as "$@").
std::string_view rank_script();

// A TCP port that is free on this host now (bound to port 0 on every address, then closed).
Result<int> free_tcp_port();

// The address the other ranks reach this host at: its name when that resolves, else 127.0.0.1.
std::string group_host_address();

// Adds the variables above to `spawn.env` and, for ranks > 1, the wrapper to `spawn.argv` (which
// holds the mpirun prefix; the `/bin/sh -c <command>` comes after) and -x for each shared name.
// kIo when no free port can be had for several ranks (one rank then runs without MASTER_PORT).
Status add_rank_environment(int ranks, launch::SpawnOptions& spawn);

}  // namespace hpctune::trainers
