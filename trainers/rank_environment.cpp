#include "trainers/rank_environment.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/device_list.h"
#include "common/system.h"

namespace hpctune::trainers {

namespace {

// Run as `/bin/sh -c <this> hpctune-rank <program...>`. No user text: the program is "$@".
constexpr std::string_view kRankScript = R"sh(fail() { echo "hpctune: rank environment: $*" >&2; exit 97; }
if [ -n "${OMPI_COMM_WORLD_RANK:-}" ]; then
  RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=${OMPI_COMM_WORLD_SIZE:-${WORLD_SIZE:-}}
  LOCAL_RANK=${OMPI_COMM_WORLD_LOCAL_RANK:-} LOCAL_WORLD_SIZE=${OMPI_COMM_WORLD_LOCAL_SIZE:-}
elif [ -n "${PMIX_RANK:-}" ]; then
  RANK=$PMIX_RANK WORLD_SIZE=${WORLD_SIZE:-} LOCAL_RANK= LOCAL_WORLD_SIZE=
elif [ -n "${PMI_RANK:-}" ]; then
  RANK=$PMI_RANK WORLD_SIZE=${PMI_SIZE:-${WORLD_SIZE:-}}
  LOCAL_RANK=${MPI_LOCALRANKID:-} LOCAL_WORLD_SIZE=${MPI_LOCALNRANKS:-}
elif [ -n "${SLURM_PROCID:-}" ]; then
  RANK=$SLURM_PROCID WORLD_SIZE=${SLURM_NTASKS:-${WORLD_SIZE:-}} LOCAL_RANK=${SLURM_LOCALID:-} LOCAL_WORLD_SIZE=
  node=${SLURM_NODEID:-0}
  case $node in ''|*[!0-9]*) node=0 ;; esac
  set -f; IFS=,
  for part in ${SLURM_STEP_TASKS_PER_NODE:-}; do
    case $part in
      *'(x'*')') tasks=${part%%(*}; times=${part#*(x}; times=${times%)} ;;
      *) tasks=$part times=1 ;;
    esac
    case $tasks$times in ''|*[!0-9]*) break ;; esac
    if [ "$node" -lt "$times" ]; then LOCAL_WORLD_SIZE=$tasks; break; fi
    node=$((node - times))
  done
  unset IFS; set +f
  [ -n "$LOCAL_WORLD_SIZE" ] || LOCAL_WORLD_SIZE=${SLURM_NTASKS_PER_NODE:-}
else
  fail "no launcher variable names this rank (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID)"
fi
[ -n "$LOCAL_RANK" ] || LOCAL_RANK=$RANK
[ -n "$LOCAL_WORLD_SIZE" ] || LOCAL_WORLD_SIZE=$WORLD_SIZE
for value in "$RANK" "$WORLD_SIZE" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE"; do
  case $value in ''|*[!0-9]*) fail "not a number: RANK='$RANK' WORLD_SIZE='$WORLD_SIZE' LOCAL_RANK='$LOCAL_RANK' LOCAL_WORLD_SIZE='$LOCAL_WORLD_SIZE'" ;; esac
done
[ "$RANK" -lt "$WORLD_SIZE" ] || fail "RANK $RANK is not below WORLD_SIZE $WORLD_SIZE"
[ "$LOCAL_RANK" -lt "$LOCAL_WORLD_SIZE" ] || fail "LOCAL_RANK $LOCAL_RANK is not below LOCAL_WORLD_SIZE $LOCAL_WORLD_SIZE"
if [ "$RANK" = 0 ] && [ -n "${HPCTUNE_RANK0_HOST:-}" ] && [ "$(uname -n)" != "$HPCTUNE_RANK0_HOST" ]; then
  fail "rank 0 runs on $(uname -n), but MASTER_ADDR ($MASTER_ADDR) is on $HPCTUNE_RANK0_HOST, where mpirun runs"
fi
export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
if [ -n "${HPCTUNE_GPUS:-}" ]; then
  per=${HPCTUNE_GPUS_PER_RANK:-}
  case $per in ''|*[!0-9]*|0) fail "HPCTUNE_GPUS_PER_RANK='$per' is not a number of GPUs" ;; esac
  first=$((LOCAL_RANK * per)) i=0 mine=
  set -f; IFS=,
  for d in $HPCTUNE_GPUS; do
    if [ "$i" -ge "$first" ] && [ "$i" -lt $((first + per)) ]; then mine=${mine:+$mine,}$d; fi
    i=$((i + 1))
  done
  unset IFS; set +f
  [ "$i" -ge $((first + per)) ] || fail "LOCAL_RANK $LOCAL_RANK has no $per GPU(s) of its own in HPCTUNE_GPUS=$HPCTUNE_GPUS"
  CUDA_VISIBLE_DEVICES=$mine
  export CUDA_VISIBLE_DEVICES
fi
exec "$@")sh";

}  // namespace

std::string_view rank_script() { return kRankScript; }

Result<int> free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return err(Errc::kIo, std::string("command trainer: socket for a free port: ") + strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = strerror(errno);
    ::close(fd);
    return err(Errc::kIo, "command trainer: no free TCP port for MASTER_PORT: " + why);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string group_host_address() {
  const std::string host = host_name();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (host == "unknown" || ::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return "127.0.0.1";
  ::freeaddrinfo(found);
  return host;
}

Status add_rank_environment(int ranks, launch::SpawnOptions& spawn) {
  auto port = free_tcp_port();
  // A program of one rank rarely needs the port: where no socket can be had (a sandbox), it runs
  // without MASTER_PORT rather than not at all.
  if (!port.ok() && ranks > 1) return std::move(port).error();
  if (port.ok()) spawn.env["MASTER_PORT"] = std::to_string(*port);
  spawn.env["WORLD_SIZE"] = std::to_string(std::max(1, ranks));
  if (ranks <= 1) {
    // Whole strings moved in: assigning the short literals made GCC 12 warn -Wrestrict (a false alarm).
    for (const auto& [name, value] : {std::pair<const char*, std::string>{"MASTER_ADDR", "127.0.0.1"},
                                      {"RANK", "0"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}})
      spawn.env.insert_or_assign(name, value);
    return Status::Ok();
  }
  spawn.env["MASTER_ADDR"] = group_host_address();
  spawn.env["HPCTUNE_RANK0_HOST"] = host_name();
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "HPCTUNE_RANK0_HOST"})
    spawn.argv.insert(spawn.argv.end(), {"-x", name});
  // The group's GPUs (common/device_list.h), for each rank to take its slice of.
  for (const char* name : {kGpusEnv, kGpusPerRankEnv})
    if (std::getenv(name) != nullptr || spawn.env.count(name)) spawn.argv.insert(spawn.argv.end(), {"-x", name});
  spawn.argv.insert(spawn.argv.end(), {"/bin/sh", "-c", std::string(kRankScript), "hpctune-rank"});
  return Status::Ok();
}

}  // namespace hpctune::trainers
