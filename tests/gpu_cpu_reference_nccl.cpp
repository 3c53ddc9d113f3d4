// The CPU stand-in's NCCL entries (gpu_library_abi.h), for real across processes and threads, so
// that the NCCL paths above the table (gpu/nccl_communicator.h, the GPU trainers' groups) and their
// watchdog run end to end on every machine. It is not NCCL's algorithm, only its contract:
//
//   unique id   16 random bytes (the communicator's key), then the path of a private directory
//               (mkdtemp under $TMPDIR or /tmp: 0700, only this user reaches it), NUL-terminated.
//   comm_init   rank r listens on DIR/r<r> (a Unix socket) and the ranks join into a full mesh: r
//               connects to every lower rank and accepts every higher one; both ends of a connection
//               say hello (key, rank, ranks, the device's PCI bus id) and check the other's. Two ranks
//               on one device are refused, as NCCL refuses them ("Duplicate GPU detected").
//   the work    one background thread per communicator joins the mesh, then runs the queued
//               operations in order (the "stream"); comm_poll says IN_PROGRESS while the join or any
//               operation is pending, ERROR once one failed (last_error says why), else DONE.
//   allreduce   every rank sends its buffer to every other and sums all of them in rank order, so
//               every rank ends with the same bits (for 2 ranks, a + b: what MPI_SUM gives).
//   send, recv  one transfer each; between nccl_group_start and nccl_group_end (this thread's) they
//               go into one operation whose transfers move together.
//   failures    a peer whose socket closed (it ended or was killed) is an ERROR naming its rank; a
//               peer alive but silent, or one that never joins, keeps the operation IN_PROGRESS until
//               the caller's deadline aborts it. comm_abort cancels the thread (it looks every 50 ms),
//               closes the sockets and removes this rank's socket file (the last rank's removal of the
//               directory succeeds).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tests/gpu_cpu_reference_library.h"

namespace {

constexpr size_t kKeyBytes = 16;
constexpr int kTickMs = 50;  // how often a waiting thread looks at the cancel flag

struct Hello {
  uint8_t key[kKeyBytes];
  int32_t rank, nranks;
  char pci_bus_id[32];
};

// One transfer of an operation: `bytes` of `data` to (send) or from `peer`.
struct Transfer {
  int peer = 0;
  bool send = false;
  char* data = nullptr;
  size_t bytes = 0, done = 0;
};

struct Op {
  std::vector<Transfer> transfers;
  // allreduce: what the peers sent lands in received[peer]; then sum into `sum`.
  float* sum = nullptr;
  int64_t count = 0;
  std::vector<std::vector<float>> received;
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

struct HpctuneNcclComm {
  int rank = 0, nranks = 1;
  uint8_t key[kKeyBytes]{};
  std::string dir, pci_bus_id;
  std::vector<int> peers;  // a connected socket per rank (-1 for this rank)
  int listener = -1;

  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::unique_ptr<Op>> queue;  // the front one runs
  bool joined = false;
  std::string error;  // set once, by the thread
  std::atomic<bool> cancel{false};
  std::thread thread;

  std::string path_of(int r) const { return dir + "/r" + std::to_string(r); }
  std::string who() const { return "CPU stand-in NCCL rank " + std::to_string(rank) + " of " + std::to_string(nranks); }
};

namespace {

// ---- the sockets ------------------------------------------------------------------------------

// Waits until fd is ready for `events`; false when cancelled.
bool wait_ready(HpctuneNcclComm& c, int fd, short events) {
  while (!c.cancel) {
    pollfd p{fd, events, 0};
    if (::poll(&p, 1, kTickMs) > 0) return true;
  }
  return false;
}

// All of `bytes` through a blocking-style loop over a non-blocking socket; "" or why not.
std::string move_all(HpctuneNcclComm& c, int fd, int peer, bool send, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    if (!wait_ready(c, fd, send ? POLLOUT : POLLIN)) return "cancelled (comm_abort)";
    const ssize_t n = send ? ::send(fd, p + done, bytes - done, MSG_NOSIGNAL) : ::recv(fd, p + done, bytes - done, 0);
    if (n > 0) done += static_cast<size_t>(n);
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
      return "rank " + std::to_string(peer) + " closed its connection (it ended or was killed)";
  }
  return "";
}

std::string check_hello(const HpctuneNcclComm& c, const Hello& h, int expected_rank) {
  if (std::memcmp(h.key, c.key, kKeyBytes) != 0 || h.nranks != c.nranks)
    return "a rank of another communicator connected (key or rank count differs)";
  if (expected_rank >= 0 ? h.rank != expected_rank : (h.rank <= c.rank || h.rank >= c.nranks || c.peers[size_t(h.rank)] >= 0))
    return "an unexpected rank " + std::to_string(h.rank) + " connected";
  if (c.pci_bus_id == h.pci_bus_id)
    return "Duplicate GPU detected: ranks " + std::to_string(std::min(c.rank, int(h.rank))) + " and " +
           std::to_string(std::max(c.rank, int(h.rank))) + " are both on the device with PCI bus id " + c.pci_bus_id +
           " (NCCL refuses one GPU twice in a communicator)";
  return "";
}

Hello my_hello(const HpctuneNcclComm& c) {
  Hello h{};
  std::memcpy(h.key, c.key, kKeyBytes);
  h.rank = c.rank, h.nranks = c.nranks;
  std::snprintf(h.pci_bus_id, sizeof h.pci_bus_id, "%s", c.pci_bus_id.c_str());
  return h;
}

int unix_socket() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  return fd;
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  return a;
}

// Connects to lower rank `r`, waiting (until cancelled) for it to listen.
std::string connect_to(HpctuneNcclComm& c, int r) {
  const sockaddr_un a = address_of(c.path_of(r));
  while (!c.cancel) {
    const int fd = unix_socket();
    if (fd < 0) return errno_text("socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0 || errno == EINPROGRESS) {
      c.peers[size_t(r)] = fd;
      Hello mine = my_hello(c), theirs{};
      if (auto e = move_all(c, fd, r, true, &mine, sizeof mine); !e.empty()) return e;
      if (auto e = move_all(c, fd, r, false, &theirs, sizeof theirs); !e.empty()) return e;
      return check_hello(c, theirs, r);
    }
    const int why = errno;
    ::close(fd);
    if (why != ENOENT && why != ECONNREFUSED && why != EAGAIN)
      return "connect to rank " + std::to_string(r) + ": " + std::strerror(why);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // not listening yet
  }
  return "cancelled (comm_abort) while waiting for rank " + std::to_string(r) + " to join";
}

// Accepts one higher rank.
std::string accept_one(HpctuneNcclComm& c) {
  for (;;) {
    if (!wait_ready(c, c.listener, POLLIN)) return "cancelled (comm_abort) while waiting for the higher ranks to join";
    const int fd = ::accept4(c.listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return errno_text("accept");
    }
    Hello theirs{}, mine = my_hello(c);
    std::string e = move_all(c, fd, -1, false, &theirs, sizeof theirs);
    if (e.empty()) e = check_hello(c, theirs, -1);
    if (!e.empty()) {
      ::close(fd);
      return e;
    }
    c.peers[size_t(theirs.rank)] = fd;
    return move_all(c, fd, theirs.rank, true, &mine, sizeof mine);
  }
}

std::string join_mesh(HpctuneNcclComm& c) {
  const std::string path = c.path_of(c.rank);
  const sockaddr_un a = address_of(path);
  if (path.size() >= sizeof a.sun_path) return "socket path too long: " + path;
  c.listener = unix_socket();
  if (c.listener < 0) return errno_text("socket");
  if (::bind(c.listener, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    return errno_text(("bind " + path + " (rank " + std::to_string(c.rank) + " joined twice?)").c_str());
  if (::listen(c.listener, c.nranks) != 0) return errno_text("listen");
  for (int r = 0; r < c.rank; ++r)
    if (auto e = connect_to(c, r); !e.empty()) return e;
  for (int r = c.rank + 1; r < c.nranks; ++r)
    if (auto e = accept_one(c); !e.empty()) return e;
  return "";
}

// ---- the operations ---------------------------------------------------------------------------

// Moves every transfer of `op`: per peer, its sends in order and its receives in order, all peers
// at once through one poll() loop.
std::string run_transfers(HpctuneNcclComm& c, Op& op) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Transfer*> at;
    std::map<std::pair<int, bool>, bool> seen;  // (peer, send): its first unfinished transfer is picked
    for (Transfer& t : op.transfers) {
      if (t.done == t.bytes || seen[{t.peer, t.send}]) continue;
      seen[{t.peer, t.send}] = true;
      fds.push_back({c.peers[size_t(t.peer)], short(t.send ? POLLOUT : POLLIN), 0});
      at.push_back(&t);
    }
    if (fds.empty()) return "";
    if (c.cancel) return "cancelled (comm_abort)";
    if (::poll(fds.data(), fds.size(), kTickMs) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Transfer& t = *at[i];
      const ssize_t n = t.send ? ::send(fds[i].fd, t.data + t.done, t.bytes - t.done, MSG_NOSIGNAL)
                               : ::recv(fds[i].fd, t.data + t.done, t.bytes - t.done, 0);
      if (n > 0) t.done += static_cast<size_t>(n);
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        return "rank " + std::to_string(t.peer) + " closed its connection (it ended or was killed)";
    }
  }
}

std::string run_op(HpctuneNcclComm& c, Op& op) {
  if (auto e = run_transfers(c, op); !e.empty()) return e;
  if (op.sum == nullptr) return "";
  std::vector<float> mine(op.sum, op.sum + op.count);
  for (int64_t i = 0; i < op.count; ++i) {
    float s = 0.0f;
    for (int r = 0; r < c.nranks; ++r) s += r == c.rank ? mine[size_t(i)] : op.received[size_t(r)][size_t(i)];
    op.sum[i] = s;
  }
  return "";
}

void work(HpctuneNcclComm* c) {
  std::string e = join_mesh(*c);
  ::unlink(c->path_of(c->rank).c_str());  // joined (or gave up): nobody connects any more
  ::rmdir(c->dir.c_str());                // the last rank's succeeds
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->joined = e.empty();
    if (!e.empty()) c->error = e;
  }
  while (e.empty()) {
    Op* op = nullptr;
    {
      std::unique_lock<std::mutex> lock(c->mu);
      c->wake.wait(lock, [&] { return c->cancel || !c->queue.empty(); });
      if (c->cancel) return;
      op = c->queue.front().get();
    }
    e = run_op(*c, *op);
    std::lock_guard<std::mutex> lock(c->mu);
    c->queue.pop_front();
    if (!e.empty()) c->error = e;
  }
}

int submit(HpctuneNcclComm* c, std::unique_ptr<Op> op) {
  std::lock_guard<std::mutex> lock(c->mu);
  if (!c->error.empty()) return cpu_reference::fail_with(c->who() + ": " + c->error);
  c->queue.push_back(std::move(op));
  c->wake.notify_all();
  return 0;
}

void close_comm(HpctuneNcclComm* c) {
  c->cancel = true;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->wake.notify_all();
  }
  if (c->thread.joinable()) c->thread.join();
  for (int fd : c->peers)
    if (fd >= 0) ::close(fd);
  if (c->listener >= 0) ::close(c->listener);
  delete c;
}

// This thread's group (nccl_group_start .. nccl_group_end): the transfers by communicator.
thread_local int t_group_depth = 0;
thread_local std::map<HpctuneNcclComm*, std::unique_ptr<Op>> t_group;

int post(HpctuneNcclComm* c, HpctuneGpuContext* ctx, Transfer t, const char* what) {
  if (c == nullptr || ctx == nullptr || t.data == nullptr || t.bytes == 0 || t.peer < 0 || t.peer >= c->nranks ||
      t.peer == c->rank)
    return cpu_reference::fail_with(std::string(what) + ": communicator, context, buffer, count or peer (CPU stand-in)");
  if (t_group_depth > 0) {
    auto& op = t_group[c];
    if (!op) op = std::make_unique<Op>();
    op->transfers.push_back(t);
    return 0;
  }
  auto op = std::make_unique<Op>();
  op->transfers.push_back(t);
  return submit(c, std::move(op));
}

}  // namespace

namespace cpu_reference {

int nccl_version(int32_t* v) { return *v = 22809, 0; }  // says which contract it follows: NCCL 2.28's

int nccl_unique_id(uint8_t* out) {
  if (out == nullptr) return fail_with("nccl_unique_id: out");
  std::memset(out, 0, HPCTUNE_NCCL_UNIQUE_ID_BYTES);
  std::random_device random;
  for (size_t i = 0; i < kKeyBytes; ++i) out[i] = static_cast<uint8_t>(random());
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hpctune-nccl-XXXXXX";
  // The id must hold the path, and the sockets' paths (DIR/rNNNN) must fit a sockaddr_un.
  if (pattern.size() + 1 > HPCTUNE_NCCL_UNIQUE_ID_BYTES - kKeyBytes || pattern.size() + 7 > sizeof(sockaddr_un::sun_path))
    return fail_with("nccl_unique_id: $TMPDIR is too long for the CPU stand-in's socket paths: " + pattern);
  if (::mkdtemp(pattern.data()) == nullptr) return fail_with(errno_text(("nccl_unique_id: mkdtemp " + pattern).c_str()));
  std::memcpy(out + kKeyBytes, pattern.c_str(), pattern.size() + 1);
  return 0;
}

int nccl_comm_init(HpctuneGpuContext* ctx, int32_t nranks, int32_t rank, const uint8_t* id, HpctuneNcclComm** out) {
  if (out == nullptr) return fail_with("nccl_comm_init: out");
  *out = nullptr;
  if (ctx == nullptr || id == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
    return fail_with("nccl_comm_init: context, id, nranks or rank (CPU stand-in)");
  // Failure injection (tests): this rank's join fails at once, as a real one does on a bad id,
  // a mismatched NCCL or an unreachable network.
  if (const char* f = std::getenv("HPCTUNE_CPU_REFERENCE_NCCL_FAIL_RANK"); f != nullptr && std::atoi(f) == rank)
    return fail_with("nccl_comm_init: rank " + std::to_string(rank) + " cannot join (HPCTUNE_CPU_REFERENCE_NCCL_FAIL_RANK, CPU stand-in)");
  const char* dir = reinterpret_cast<const char*>(id + kKeyBytes);
  if (dir[0] != '/' || ::strnlen(dir, HPCTUNE_NCCL_UNIQUE_ID_BYTES - kKeyBytes) == HPCTUNE_NCCL_UNIQUE_ID_BYTES - kKeyBytes)
    return fail_with("nccl_comm_init: not a unique id of the CPU stand-in (no directory in it)");
  auto* c = new HpctuneNcclComm;
  c->rank = rank, c->nranks = nranks;
  std::memcpy(c->key, id, kKeyBytes);
  c->dir = dir;
  c->pci_bus_id = ctx->pci_bus_id;
  c->peers.assign(size_t(nranks), -1);
  c->thread = std::thread(work, c);
  *out = c;
  return 0;
}

int allreduce_sum_f32(HpctuneNcclComm* c, HpctuneGpuContext* ctx, float* buf, int64_t count) {
  if (c == nullptr || ctx == nullptr || buf == nullptr || count <= 0)
    return fail_with("allreduce_sum_f32: communicator, context, buffer or count (CPU stand-in)");
  auto op = std::make_unique<Op>();
  op->sum = buf;
  op->count = count;
  op->received.resize(size_t(c->nranks));
  const size_t bytes = size_t(count) * sizeof(float);
  for (int r = 0; r < c->nranks; ++r) {
    if (r == c->rank) continue;
    op->received[size_t(r)].resize(size_t(count));
    op->transfers.push_back({r, true, reinterpret_cast<char*>(buf), bytes});
    op->transfers.push_back({r, false, reinterpret_cast<char*>(op->received[size_t(r)].data()), bytes});
  }
  return submit(c, std::move(op));
}

int comm_poll(HpctuneNcclComm* c, HpctuneGpuContext* ctx, int32_t* state) {
  if (state == nullptr) return fail_with("comm_poll: state");
  *state = HPCTUNE_NCCL_ERROR;
  if (c == nullptr || ctx == nullptr) return fail_with("comm_poll: communicator or context");
  std::lock_guard<std::mutex> lock(c->mu);
  if (!c->error.empty()) return fail_with(c->who() + ": " + c->error);
  *state = !c->joined || !c->queue.empty() ? HPCTUNE_NCCL_IN_PROGRESS : HPCTUNE_NCCL_DONE;
  return 0;
}

int comm_abort(HpctuneNcclComm* c) {
  if (c != nullptr) close_comm(c);
  return 0;
}

int comm_destroy(HpctuneNcclComm* c) { return comm_abort(c); }

int nccl_group_start() { return ++t_group_depth, 0; }

int nccl_group_end() {
  if (t_group_depth == 0) return fail_with("nccl_group_end without nccl_group_start");
  if (--t_group_depth > 0) return 0;
  int rc = 0;
  for (auto& [comm, op] : t_group)
    if (int r = submit(comm, std::move(op)); r != 0) rc = r;
  t_group.clear();
  return rc;
}

int send_f32(HpctuneNcclComm* c, HpctuneGpuContext* ctx, const float* buf, int64_t count, int32_t peer) {
  const size_t bytes = size_t(count > 0 ? count : 0) * sizeof(float);
  return post(c, ctx, {peer, true, reinterpret_cast<char*>(const_cast<float*>(buf)), bytes}, "send_f32");
}

int recv_f32(HpctuneNcclComm* c, HpctuneGpuContext* ctx, float* buf, int64_t count, int32_t peer) {
  const size_t bytes = size_t(count > 0 ? count : 0) * sizeof(float);
  return post(c, ctx, {peer, false, reinterpret_cast<char*>(buf), bytes}, "recv_f32");
}

}  // namespace cpu_reference
