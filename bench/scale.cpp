// bench_scale: the real master holding thousands of trainer groups (issue 13, "Scale").
//
// The master is the product's: scheduler::Master with the real SQLite store on a file in a temporary
// directory, the real ZeroMQ ROUTER over TCP loopback (protocol::bind_zmq with the default
// TransportOptions), the real search stage (workflow::make_stage) and the driver loop of
// run_master() (wait up to the poll interval, step, until finished). Only the launcher is the
// bench's: it hands each group's launch credential to simulator processes instead of starting
// `hpctune worker`. These groups and this launcher are not simulate/'s (simulate/simulator.h): those
// live in the master's process on a simulated clock, over the in-process hub; these are other
// processes on real time over real sockets, which is what this bench measures (the master under a
// real load of frames, heartbeats and CPU contention). --simulated runs the same campaign through
// simulate/ instead (simulate::simulate_campaign).
//
// The groups are simulated in --procs forked processes (forked before the master creates anything,
// so they share none of its state), --groups / --procs groups each. Every group has its own DEALER
// socket over TCP loopback and speaks the real protocol as worker/worker.cpp does: hello (with its
// credential), ready once welcomed, then per assign a started report (step 0), after
// --trial-seconds a report of step 1 and done; heartbeats every heartbeat interval; it closes on
// shutdown. The simulators time everything on CLOCK_MONOTONIC (steady_clock), which all
// processes share:
//   registration   first hello sent (any group) -> last welcome received (any group)
//   assign latency ready or done sent -> the next assign received, per assign
//   utilization    time busy (assign received -> done sent) over time alive (welcome ->
//                  shutdown received); also over the time work remained (welcome -> the last assign
//                  any group received), which leaves out the idle tail of the last round
// The master's side: results recorded per second from the store (done trials over the span from
// the first trial created to the last finished, as bench/overhead), the master process's CPU time
// and peak RSS (getrusage: the simulators are other processes), the scheduler's counters and its
// group_lost events (a false heartbeat loss: every group is alive, so any loss is false). To tell
// the master's part of the latency from the machine's: the master's own part of each assign (its
// transport timed: the ready/done read -> the assign sent), the duration of its turns (step()),
// and how late the simulators acted on their own timers (their wait for a CPU).
//
// Prints one JSON object on stdout; exits 1 when a check fails (a trial not recorded exactly once,
// a heartbeat loss, a protocol counter that is not zero, a group that never registered), with the
// object still printed. bench/run-scale runs it and writes bench/results/scale.{json,md}; ctest runs
// it small (bench_scale_smoke).
//
//   bench_scale [--groups 2048] [--procs 8] [--trials 20000] [--trial-seconds 0]
//               [--heartbeat-interval 1] [--heartbeat-timeout 10] [--timeout 600] [--keep DIR]
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <unordered_map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.h>

#include "common/system.h"
#include "config/config.h"
#include "launch/launcher.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "scheduler/master.h"
#include "simulate/simulate.h"
#include "store/store.h"
#include "workflow/stages.h"

namespace {

using namespace hpctune;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct Args {
  int64_t groups = 2048;
  int64_t procs = 8;
  int64_t trials = 20000;
  double trial_seconds = 0;
  double heartbeat_interval = 1;
  double heartbeat_timeout = 10;
  double timeout = 600;  // the whole run's deadline
  std::string keep;      // keep the database in this directory
  bool simulated = false;  // --simulated: the same campaign through simulate::simulate_campaign
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "bench_scale: %s\nusage: bench_scale [--groups N] [--procs P] [--trials T] [--trial-seconds S] "
               "[--heartbeat-interval S] [--heartbeat-timeout S] [--timeout S] [--keep DIR] [--simulated]\n", why.c_str());
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--simulated") {
      a.simulated = true;
      continue;
    }
    if (i + 1 >= argc) usage(k + " needs a value");
    const std::string v = argv[++i];
    try {
      if (k == "--groups") a.groups = std::stoll(v);
      else if (k == "--procs") a.procs = std::stoll(v);
      else if (k == "--trials") a.trials = std::stoll(v);
      else if (k == "--trial-seconds") a.trial_seconds = std::stod(v);
      else if (k == "--heartbeat-interval") a.heartbeat_interval = std::stod(v);
      else if (k == "--heartbeat-timeout") a.heartbeat_timeout = std::stod(v);
      else if (k == "--timeout") a.timeout = std::stod(v);
      else if (k == "--keep") a.keep = v;
      else usage("unknown option " + k);
    } catch (const std::exception&) {
      usage("bad value for " + k + ": " + v);
    }
  }
  if (a.groups < 1 || a.procs < 1 || a.procs > a.groups || a.trials < 1 || a.trial_seconds < 0) {
    usage("need groups >= procs >= 1, trials >= 1, trial-seconds >= 0");
  }
  return a;
}

// --- the simulator process ---------------------------------------------------------------------

// One simulated group: its socket and what it measured.
struct SimGroup {
  int64_t id = -1;
  std::string credential;
  void* socket = nullptr;
  bool welcomed = false, closed = false;
  // Touched since it was last read to the end: ZeroMQ may have taken in the signal of a frame that
  // arrived meanwhile (ZMQ_FD is edge-like), so it is read again before the simulator sleeps.
  bool dirty = true;
  int64_t hello_ns = 0, welcome_ns = 0, shutdown_ns = 0;
  int64_t waiting_since = 0;  // ready or done sent, no assign yet (0: not waiting)
  int64_t last_hb_ns = 0;
  // The trial it runs (trial_id 0: none).
  int64_t trial_id = 0, attempt = 0, busy_since = 0, ends_at = 0;
  double value = 0;
  std::vector<std::pair<int64_t, int64_t>> busy;  // (assign received, done sent)
  std::vector<int64_t> latencies_ns;
  std::vector<int64_t> late_ns;  // how late the simulator ended each trial (its own wait for a CPU)
  int64_t heartbeats_sent = 0, heartbeats_received = 0, dones = 0;
};

void die(const std::string& why) {
  std::fprintf(stderr, "bench_scale simulator %d: %s\n", getpid(), why.c_str());
  std::fflush(stderr);
  _exit(3);
}

bool send_msg(SimGroup& g, const protocol::Message& m) {
  g.dirty = true;
  const std::string bytes = protocol::encode(m);
  if (zmq_send(g.socket, bytes.data(), bytes.size(), ZMQ_DONTWAIT) < 0) {
    // A DEALER queues up to its high-water mark: a refusal here means the master stopped reading.
    std::fprintf(stderr, "bench_scale: group %lld could not send a %s: %s\n", static_cast<long long>(g.id),
                 protocol::type_name(m), zmq_strerror(zmq_errno()));
    return false;
  }
  return true;
}

void open_socket(void* ctx, SimGroup& g, const std::string& endpoint) {
  g.socket = zmq_socket(ctx, ZMQ_DEALER);
  if (!g.socket) die(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
  // The worker's options (protocol/transport_zmq.cpp, ZmqClient::open) with TransportOptions' defaults.
  const protocol::TransportOptions o;
  const int linger = static_cast<int>(o.linger.count()), hwm = o.send_hwm;
  const int ivl = static_cast<int>(o.reconnect_interval.count()), ivl_max = static_cast<int>(o.reconnect_interval_max.count());
  const int64_t max_bytes = o.max_message_bytes;
  zmq_setsockopt(g.socket, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(g.socket, ZMQ_MAXMSGSIZE, &max_bytes, sizeof max_bytes);
  zmq_setsockopt(g.socket, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(g.socket, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  zmq_setsockopt(g.socket, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
  if (zmq_connect(g.socket, endpoint.c_str()) != 0) die("cannot connect to " + endpoint + ": " + zmq_strerror(zmq_errno()));
  g.dirty = true;
}

// Watches a group's socket in the simulator's epoll set: one epoll_wait over all of them costs
// what zmq_poll over 256 sockets costs per socket, so the simulators leave the CPU to the master.
void watch(int epfd, SimGroup& g, std::size_t index) {
  int fd = -1;
  size_t size = sizeof fd;
  if (zmq_getsockopt(g.socket, ZMQ_FD, &fd, &size) != 0) die(std::string("ZMQ_FD: ") + zmq_strerror(zmq_errno()));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = index;
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) die(std::string("epoll_ctl: ") + std::strerror(errno));
}

void say_hello(SimGroup& g, uint64_t incarnation) {
  protocol::Hello h;
  h.secret = g.credential;
  h.incarnation = incarnation;
  h.group = g.id;
  h.pid = getpid();
  h.host = host_name();
  h.trainers = {"sleep"};
  g.hello_ns = now_ns();
  g.welcomed = false;
  if (!send_msg(g, h)) die("hello refused by the socket");
}

// Reads "<key> <value>" lines from the control pipe until "go": the master's endpoint and this
// process's groups with their credentials; later lines ("relaunch <group> <credential>") come while
// running.
std::string read_line(FILE* in) {
  std::string line;
  for (int c = std::fgetc(in); c != EOF && c != '\n'; c = std::fgetc(in)) line.push_back(static_cast<char>(c));
  return line;
}

void write_results(const std::string& path, const std::vector<SimGroup>& groups) {
  json out = json::array();
  for (const SimGroup& g : groups) {
    json busy = json::array();
    for (const auto& [a, b] : g.busy) busy.push_back({a, b});
    out.push_back({{"group", g.id}, {"hello_ns", g.hello_ns}, {"welcome_ns", g.welcome_ns},
                   {"shutdown_ns", g.shutdown_ns}, {"busy", busy}, {"latencies_ns", g.latencies_ns}, {"late_ns", g.late_ns},
                   {"heartbeats_sent", g.heartbeats_sent}, {"heartbeats_received", g.heartbeats_received},
                   {"dones", g.dones}});
  }
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp);
  f << out.dump();
  f.close();
  if (!f || std::rename(tmp.c_str(), path.c_str()) != 0) die("cannot write " + path);
}

// The simulator's whole life: wait for the endpoint and credentials, connect every group, serve
// until every group got its shutdown (or the deadline), write what it measured.
[[noreturn]] void simulator(int control_fd, const std::string& result_path, const Args& a) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  FILE* in = fdopen(control_fd, "r");
  const std::string endpoint = read_line(in);
  std::vector<SimGroup> groups;
  for (std::string line = read_line(in); line != "go"; line = read_line(in)) {
    if (line.empty()) _exit(0);  // the master gave up before starting
    std::istringstream s(line);
    SimGroup g;
    s >> g.id >> g.credential;
    groups.push_back(std::move(g));
  }
  std::map<int64_t, std::size_t> index;
  for (std::size_t i = 0; i < groups.size(); ++i) index[groups[i].id] = i;
  fcntl(control_fd, F_SETFL, O_NONBLOCK);

  void* ctx = zmq_ctx_new();
  zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, static_cast<int>(groups.size()) + 64);
  const int64_t hb_ns = static_cast<int64_t>(a.heartbeat_interval * 1e9);
  const int64_t trial_ns = static_cast<int64_t>(a.trial_seconds * 1e9);
  const int64_t deadline = now_ns() + static_cast<int64_t>(a.timeout * 1e9);
  uint64_t incarnation = (static_cast<uint64_t>(getpid()) << 32) + 1;
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
  {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = groups.size();  // the control pipe
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, control_fd, &ev) != 0) die(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  for (std::size_t i = 0; i < groups.size(); ++i) {
    open_socket(ctx, groups[i], endpoint);
    watch(epfd, groups[i], i);
  }
  for (SimGroup& g : groups) say_hello(g, incarnation++);

  std::vector<char> readable(groups.size() + 1);
  std::vector<epoll_event> events(groups.size() + 1);
  std::string control_buf;
  std::size_t open = groups.size();
  char buf[1 << 16];
  while (open > 0 && now_ns() < deadline) {
    // The next timer: a trial's end or a heartbeat.
    int64_t now = now_ns(), next = now + 100'000'000;
    for (const SimGroup& g : groups) {
      if (g.closed || !g.welcomed) continue;
      if (g.trial_id != 0) next = std::min(next, g.ends_at);
      next = std::min(next, g.last_hb_ns + hb_ns);
    }
    bool any_dirty = false;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      readable[i] = !groups[i].closed && groups[i].dirty;
      any_dirty = any_dirty || readable[i];
    }
    readable[groups.size()] = 0;
    const int wait_ms = any_dirty ? 0 : static_cast<int>(std::max<int64_t>(0, (next - now + 999'999) / 1'000'000));
    const int n_events = epoll_wait(epfd, events.data(), static_cast<int>(events.size()), wait_ms);
    if (n_events < 0 && errno != EINTR) die(std::string("epoll_wait: ") + std::strerror(errno));
    for (int k = 0; k < n_events; ++k) readable[events[k].data.u64] = 1;
    // A relaunch: the master declared the group lost and started it again with a new credential.
    if (readable[groups.size()]) {
      const ssize_t n = read(control_fd, buf, sizeof buf);
      if (n > 0) control_buf.append(buf, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = control_buf.find('\n')) != std::string::npos; control_buf.erase(0, nl + 1)) {
        std::istringstream s(control_buf.substr(0, nl));
        std::string word;
        int64_t id = -1;
        std::string credential;
        s >> word >> id >> credential;
        if (word == "stop") {
          // The launcher's SIGTERM: the campaign is over (a group that never registered gets no shutdown).
          for (SimGroup& g : groups) {
            if (g.closed) continue;
            g.closed = true;
            --open;
            zmq_close(g.socket);
            g.socket = nullptr;
          }
          break;
        }
        auto it = index.find(id);
        if (word != "relaunch" || it == index.end()) continue;
        SimGroup& g = groups[it->second];
        zmq_close(g.socket);
        g.credential = credential;
        g.trial_id = 0;
        g.waiting_since = 0;
        if (g.closed) {
          g.closed = false;
          ++open;
        }
        open_socket(ctx, g, endpoint);
        watch(epfd, g, it->second);
        say_hello(g, incarnation++);
      }
    }
    for (std::size_t i = 0; i < groups.size(); ++i) {
      SimGroup& g = groups[i];
      if (g.closed || !readable[i]) continue;
      g.dirty = false;  // read to the end now (a send below makes it dirty again)
      while (!g.closed) {
        const int n = zmq_recv(g.socket, buf, sizeof buf, ZMQ_DONTWAIT);
        if (n < 0) break;
        if (static_cast<std::size_t>(n) > sizeof buf) die("the master sent a frame larger than the simulator's buffer");
        const int64_t t = now_ns();
        auto msg = protocol::decode(std::string_view(buf, std::min<std::size_t>(n, sizeof buf)));
        if (!msg.ok()) die("the master sent a frame that does not decode: " + msg.error().to_string());
        if (std::holds_alternative<protocol::Welcome>(*msg)) {
          if (g.welcomed) continue;
          g.welcomed = true;
          if (g.welcome_ns == 0) g.welcome_ns = t;
          g.last_hb_ns = t;
          if (!send_msg(g, protocol::Ready{})) die("ready refused by the socket");
          g.waiting_since = now_ns();
        } else if (auto* as = std::get_if<protocol::Assign>(&*msg)) {
          if (g.waiting_since != 0) g.latencies_ns.push_back(t - g.waiting_since);
          g.waiting_since = 0;
          g.trial_id = as->trial_id;
          g.attempt = as->attempt;
          g.busy_since = t;
          g.ends_at = t + trial_ns;
          g.value = as->params.begin()->is_number() ? as->params.begin()->get<double>() : 0.0;
          if (!send_msg(g, protocol::Report{g.trial_id, g.attempt, 0, {}})) die("report refused by the socket");
        } else if (std::holds_alternative<protocol::Heartbeat>(*msg)) {
          ++g.heartbeats_received;
        } else if (auto* st = std::get_if<protocol::Stop>(&*msg)) {
          if (st->trial_id == g.trial_id) g.ends_at = t;  // ends now (a done with stopped would say so)
        } else if (std::holds_alternative<protocol::Shutdown>(*msg)) {
          g.shutdown_ns = t;
          g.closed = true;
          --open;
          zmq_close(g.socket);
          g.socket = nullptr;
        }
      }
    }
    // Trials that end now, and heartbeats due.
    now = now_ns();
    for (SimGroup& g : groups) {
      if (g.closed || !g.welcomed) continue;
      if (g.trial_id != 0 && now >= g.ends_at) {
        g.late_ns.push_back(now - g.ends_at);
        const protocol::Metrics metrics{{"value", g.value}};
        if (!send_msg(g, protocol::Report{g.trial_id, g.attempt, 1, metrics})) die("report refused by the socket");
        if (!send_msg(g, protocol::Done{g.trial_id, g.attempt, 1, false, metrics, {}})) die("done refused by the socket");
        const int64_t t = now_ns();
        g.busy.emplace_back(g.busy_since, t);
        g.waiting_since = t;
        g.trial_id = 0;
        ++g.dones;
      }
      if (now - g.last_hb_ns >= hb_ns) {
        g.last_hb_ns = now;
        if (!send_msg(g, protocol::Heartbeat{g.trial_id, g.trial_id ? g.attempt : 0})) die("heartbeat refused by the socket");
        ++g.heartbeats_sent;
      }
    }
  }
  for (SimGroup& g : groups) {
    if (!g.closed && g.socket) zmq_close(g.socket);
  }
  zmq_ctx_term(ctx);
  write_results(result_path, groups);
  _exit(open == 0 ? 0 : 4);
}

// --- the master's side ---------------------------------------------------------------------------

struct SimProc {
  pid_t pid = -1;
  int control_fd = -1;
  std::string result_path;
  std::vector<int64_t> groups;
  bool exited = false;
  int status = 0;
};

// Hands each group's credential to the simulator process that holds it: at start() before the run
// (collected, sent with "go"), and as a relaunch line after a loss. kill() (a group declared lost:
// every simulated group is alive, so a false heartbeat loss) is counted and reported as an exit, so
// that the master restarts the group as it would a real one.
class SimLauncher final : public launch::Launcher {
 public:
  explicit SimLauncher(std::vector<SimProc>& procs) : procs_(procs) {
    for (std::size_t p = 0; p < procs_.size(); ++p) {
      for (int64_t g : procs_[p].groups) owner_[g] = p;
    }
  }
  std::string name() const override { return "bench"; }
  Status start(int64_t group, const std::string& credential) override {
    auto it = owner_.find(group);
    if (it == owner_.end()) return err(Errc::kInvalidArgument, "bench: no simulator holds group " + std::to_string(group));
    SimProc& p = procs_[it->second];
    if (p.exited) return err(Errc::kFailed, "bench: the simulator of group " + std::to_string(group) + " has exited");
    credentials[group] = credential;
    alive_[group] = true;
    if (started_) {
      ++relaunches;
      const std::string line = "relaunch " + std::to_string(group) + " " + credential + "\n";
      if (write(p.control_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        return err(Errc::kIo, "bench: cannot tell simulator " + std::to_string(p.pid) + " of a relaunch");
      }
    }
    return {};
  }
  // Sends the endpoint and every credential: the simulators connect from here.
  Status go(const std::string& endpoint) {
    started_ = true;
    for (SimProc& p : procs_) {
      std::string text = endpoint + "\n";
      for (int64_t g : p.groups) text += std::to_string(g) + " " + credentials.at(g) + "\n";
      text += "go\n";
      for (std::size_t off = 0; off < text.size();) {
        const ssize_t n = write(p.control_fd, text.data() + off, text.size() - off);
        if (n <= 0) return err(Errc::kIo, "bench: cannot reach simulator " + std::to_string(p.pid));
        off += static_cast<std::size_t>(n);
      }
    }
    return {};
  }
  launch::GroupState state(int64_t group) const override {
    auto it = alive_.find(group);
    return it != alive_.end() && it->second ? launch::GroupState::kStarting : launch::GroupState::kExited;
  }
  std::vector<launch::GroupExit> poll_exits() override {
    std::vector<launch::GroupExit> out = std::exchange(exits_, {});
    for (SimProc& p : procs_) {
      if (p.exited || waitpid(p.pid, &p.status, WNOHANG) != p.pid) continue;
      p.exited = true;
      for (int64_t g : p.groups) {
        if (!alive_[g]) continue;
        alive_[g] = false;
        out.push_back({g, "its simulator process ended (status " + std::to_string(p.status) + ")", false, ""});
      }
    }
    return out;
  }
  void kill(int64_t group) override {
    if (!alive_[group]) return;
    ++kills;
    alive_[group] = false;
    exits_.push_back({group, "declared lost by the master (bench: a false heartbeat loss)", false, ""});
  }
  // The simulators end on their groups' shutdowns. A real launcher's SIGTERM comes at half the
  // grace (a "stop" line: each simulator closes what is still open, as a group that never
  // registered gets no shutdown, writes its results and exits); past `grace`, SIGKILL.
  void stop_all(std::chrono::milliseconds grace) override {
    const auto start = Clock::now();
    bool told = false;
    while (true) {
      bool all = true;
      for (SimProc& p : procs_) {
        if (!p.exited && waitpid(p.pid, &p.status, WNOHANG) == p.pid) p.exited = true;
        all = all && p.exited;
      }
      if (all) break;
      const auto waited = Clock::now() - start;
      if (!told && waited > grace / 2) {
        told = true;
        for (SimProc& p : procs_) {
          if (!p.exited && write(p.control_fd, "stop\n", 5) != 5) ::kill(p.pid, SIGKILL);
        }
      }
      if (waited > grace) {
        for (SimProc& p : procs_) {
          if (p.exited) continue;
          ::kill(p.pid, SIGKILL);
          waitpid(p.pid, &p.status, 0);
          p.exited = true;
          killed_at_stop = true;
        }
        break;
      }
      usleep(2000);
    }
    for (auto& [g, a] : alive_) a = false;
  }

  std::map<int64_t, std::string> credentials;
  int64_t kills = 0, relaunches = 0;
  bool killed_at_stop = false;

 private:
  std::vector<SimProc>& procs_;
  std::map<int64_t, std::size_t> owner_;
  std::map<int64_t, bool> alive_;
  std::vector<launch::GroupExit> exits_;
  bool started_ = false;
};

// The master's transport, timed: for each assign sent, the time since the main thread read the
// last frame from that peer (its ready or done). That is the master's own part of the assign
// latency the groups measure; the rest is the way there and back (ZeroMQ's I/O threads, loopback
// TCP, the simulator) and the wait for a CPU.
class TimedTransport final : public protocol::ServerTransport {
 public:
  explicit TimedTransport(protocol::ServerTransport& inner) : inner_(inner) {}
  std::string endpoint() const override { return inner_.endpoint(); }
  Status send(const protocol::PeerId& peer, std::string_view bytes) override {
    // {"t": "assign"} in MessagePack: the type's key and value, wherever the map puts them.
    static const std::string kAssign = std::string("\xa1t\xa6") + "assign";
    if (bytes.find(kAssign) != std::string_view::npos) {
      if (auto it = last_recv_.find(peer); it != last_recv_.end()) assign_ns.push_back(now_ns() - it->second);
    }
    return inner_.send(peer, bytes);
  }
  Result<std::optional<protocol::Envelope>> recv(std::chrono::milliseconds timeout) override {
    auto r = inner_.recv(timeout);
    if (r.ok() && *r) last_recv_[(*r)->peer] = now_ns();
    return r;
  }
  std::vector<int64_t> assign_ns;

 private:
  protocol::ServerTransport& inner_;
  std::unordered_map<protocol::PeerId, int64_t> last_recv_;
};

std::string config_text(const Args& a) {
  std::ostringstream c;
  c << "name: scale\nseed: 1\nobjective: {metric: value, mode: max}\n"
    << "search: {algorithm: random, max_trials: " << a.trials << "}\n"
    << "space:\n  value: {type: float, low: 0.0, high: 1.0}\n"
    << "trainer: {kind: sleep, seconds: " << a.trial_seconds << ", steps: 1, metric: value}\n"
    << "resources: {groups: " << a.groups << ", heartbeat_interval: " << a.heartbeat_interval
    << ", heartbeat_timeout: " << a.heartbeat_timeout << ", startup_timeout: " << a.timeout << "}\n";
  return c.str();
}

double percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())) - 1));
  return static_cast<double>(v[k]) / 1e6;  // ms
}

double seconds(const rusage& u) {
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// --- one run ---------------------------------------------------------------------------------------
//
// run (at the end of this section) reads top to bottom: the simulator processes are forked first, a
// BenchMaster prepares the campaign and drives it as run_master() does, then the store's records and
// the simulators' measurements are tallied into the JSON object, with the problems found.

// The run's directory: --keep's, or a new one in the temporary directory named `prefix` + pid,
// removed when the run ends, whether it passed or failed (a forked simulator never returns here).
struct WorkDir {
  std::string path;
  bool keep = false;
  WorkDir(const Args& a, const std::string& prefix)
      : path(a.keep.empty() ? (std::filesystem::temp_directory_path() / (prefix + std::to_string(getpid()))).string()
                            : a.keep),
        keep(!a.keep.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) usage("cannot create " + path + ": " + ec.message());
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir() {
    std::error_code ec;
    if (!keep) std::filesystem::remove_all(path, ec);
  }
};

// The simulators, forked before the master opens a socket or a file: group g is in process g % procs,
// each process's control pipe is its SimProc's control_fd.
std::vector<SimProc> fork_simulators(const Args& a, const std::string& dir) {
  std::vector<SimProc> procs(static_cast<std::size_t>(a.procs));
  for (int64_t g = 0; g < a.groups; ++g) procs[static_cast<std::size_t>(g % a.procs)].groups.push_back(g);
  for (std::size_t p = 0; p < procs.size(); ++p) {
    int fds_[2];
    if (pipe(fds_) != 0) usage("pipe failed");
    procs[p].result_path = dir + "/sim-" + std::to_string(p) + ".json";
    const pid_t pid = fork();
    if (pid < 0) usage("fork failed");
    if (pid == 0) {
      close(fds_[1]);
      for (std::size_t q = 0; q < p; ++q) close(procs[q].control_fd);
      simulator(fds_[0], procs[p].result_path, a);
    }
    close(fds_[0]);
    procs[p].pid = pid;
    procs[p].control_fd = fds_[1];
  }
  return procs;
}

// The product's master with the bench's transport (timed) and launcher (the simulators), and what
// its run measured of itself: its log, its turns, its wall and CPU time, its counters.
class BenchMaster {
 public:
  explicit BenchMaster(std::vector<SimProc>& procs) : launcher(procs) {}
  // Prepares the campaign in a new store at db_path and binds the ZeroMQ ROUTER.
  Status prepare(const Args& a, const std::string& db_path);
  // Starts the master, hands the simulators their endpoint, and steps until the campaign finished.
  Status run(const Args& a);

  std::unique_ptr<store::Store> db;
  int64_t campaign_id = 0;
  std::unique_ptr<protocol::ServerTransport> server;
  std::unique_ptr<TimedTransport> timed;
  SimLauncher launcher;
  int64_t lines = 0, registered_lines = 0;
  std::vector<std::string> other_lines;  // the first 50 log lines other than registrations
  std::unique_ptr<scheduler::Master> master;
  std::vector<int64_t> step_ns;  // each step()'s duration: a long one holds up every group's frames
  double wall_s = 0;             // start -> finished
  rusage usage_self{};           // the master process's (the simulators are other processes)
  scheduler::Counters counters;
};

Status BenchMaster::prepare(const Args& a, const std::string& db_path) {
  HPCTUNE_ASSIGN(auto parsed, config::parse_config(config_text(a), "scale.yaml"));
  // Prepared as `hpctune run` and `simulate` prepare theirs (scheduler/campaign_preparation.h); the
  // bench's transport and launcher need no preflight.
  scheduler::MasterOptions options;
  options.config = parsed;
  options.db_path = db_path;
  const auto wall = scheduler::WallClock::real();
  HPCTUNE_ASSIGN(auto prepared, scheduler::prepare_campaign(options, wall.unix_s, nullptr));
  db = std::move(prepared.store);
  campaign_id = prepared.campaign.campaign_id;
  HPCTUNE_ASSIGN(server, protocol::bind_zmq("tcp://127.0.0.1:*"));

  timed = std::make_unique<TimedTransport>(*server);
  scheduler::MasterParts parts;
  parts.transport = timed.get();
  parts.store = db.get();
  parts.launcher = &launcher;
  parts.wall = wall;
  parts.log = [this](const std::string& line) {
    ++lines;
    if (line.find(" registered (pid ") != std::string::npos) {
      ++registered_lines;
    } else if (other_lines.size() < 50) {
      other_lines.push_back(line);
    }
  };
  parts.make_stage = workflow::make_stage;
  HPCTUNE_ASSIGN(parts.secret, protocol::random_hex(16));
  parts.master_incarnation = 1;
  master = std::make_unique<scheduler::Master>(std::move(prepared.campaign), std::move(parts));
  return {};
}

// run_master()'s loop: wait up to the poll interval, step, until finished (or --timeout).
Status BenchMaster::run(const Args& a) {
  const auto t_start = Clock::now();
  HPCTUNE_TRY(master->start(t_start));
  HPCTUNE_TRY(launcher.go(server->endpoint()));
  const auto deadline = t_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.timeout));
  while (!master->scheduler().finished()) {
    if (Clock::now() > deadline) return err(Errc::kTimeout, "the campaign did not finish within --timeout");
    HPCTUNE_TRY(master->wait(master->poll_interval()));
    const int64_t step_start = now_ns();
    auto finished = master->step(Clock::now());
    step_ns.push_back(now_ns() - step_start);
    if (!finished.ok()) return std::move(finished).error();
    if (*finished) break;
  }
  const auto t_finished = Clock::now();
  HPCTUNE_ASSIGN(auto outcome, master->stop(Clock::now()));
  counters = outcome.counters;
  getrusage(RUSAGE_SELF, &usage_self);
  wall_s = std::chrono::duration<double>(t_finished - t_start).count();
  return {};
}

// The store's side: every trial recorded once, done, first attempt; the span of the records; the
// group_lost events (every group is alive, so any is a false heartbeat loss).
struct StoreTally {
  int64_t recorded = 0, done = 0, retried = 0, lost_events = 0;
  double first_created = INFINITY, last_finished = 0;
  std::map<int64_t, int> ids;  // trial id -> rows
};

Result<StoreTally> tally_store(store::Store& db, int64_t campaign_id) {
  HPCTUNE_ASSIGN(const auto trials, db.trials(campaign_id));
  StoreTally s;
  s.recorded = static_cast<int64_t>(trials.size());
  for (const auto& t : trials) {
    ++s.ids[t.id];
    s.done += t.state == store::TrialState::kDone;
    s.retried += t.attempt != 1;
    s.first_created = std::min(s.first_created, t.created_at);
    s.last_finished = std::max(s.last_finished, t.finished_at);
  }
  HPCTUNE_ASSIGN(const auto events, db.events(campaign_id, 0));
  for (const auto& e : events) s.lost_events += e.kind == "group_lost";
  return s;
}

// The simulators' measurements (their result files, write_results), all groups together.
struct GroupLife {
  int64_t welcome, shutdown;
  std::vector<std::pair<int64_t, int64_t>> busy;
};
struct SimTally {
  std::vector<int64_t> latencies, late;
  int64_t first_hello = INT64_MAX, last_welcome = 0, welcomed = 0, last_assign = 0, sim_dones = 0;
  int64_t hb_sent = 0, hb_received = 0, shut = 0;
  std::vector<GroupLife> lives;
};

// A simulator that left no readable results is a problem; the others are tallied.
SimTally read_simulator_results(const std::vector<SimProc>& procs, std::vector<std::string>& problems) {
  SimTally s;
  for (const SimProc& p : procs) {
    std::ifstream f(p.result_path);
    if (!f) {
      problems.push_back("simulator " + std::to_string(p.pid) + " left no results (status " + std::to_string(p.status) + ")");
      continue;
    }
    json groups = json::parse(f, nullptr, false);
    if (groups.is_discarded()) {
      problems.push_back("simulator " + std::to_string(p.pid) + " left unreadable results");
      continue;
    }
    for (const json& g : groups) {
      s.first_hello = std::min(s.first_hello, g["hello_ns"].get<int64_t>());
      const int64_t w = g["welcome_ns"].get<int64_t>(), sd = g["shutdown_ns"].get<int64_t>();
      if (w > 0) {
        ++s.welcomed;
        s.last_welcome = std::max(s.last_welcome, w);
      }
      s.shut += sd > 0;
      for (const json& l : g["latencies_ns"]) s.latencies.push_back(l.get<int64_t>());
      for (const json& l : g["late_ns"]) s.late.push_back(l.get<int64_t>());
      GroupLife life{w, sd, {}};
      for (const json& b : g["busy"]) {
        life.busy.emplace_back(b[0].get<int64_t>(), b[1].get<int64_t>());
        s.last_assign = std::max(s.last_assign, b[0].get<int64_t>());
      }
      s.lives.push_back(std::move(life));
      s.sim_dones += g["dones"].get<int64_t>();
      s.hb_sent += g["heartbeats_sent"].get<int64_t>();
      s.hb_received += g["heartbeats_received"].get<int64_t>();
    }
  }
  return s;
}

// Utilization: busy over alive (welcome -> shutdown), and over the time work remained (welcome ->
// the last assign of the campaign, busy time clipped to it).
// The idle time over life, by where it falls: before the first assign (registration to ready to
// assign), between trials (the assign latencies), after the last trial (no work left: the last
// round's groups still running, then the shutdown). All in nanoseconds.
struct Utilization {
  double busy_alive = 0, alive = 0, busy_work = 0, alive_work = 0, idle_first = 0, idle_between = 0, idle_last = 0;
};

Utilization utilization_of(const SimTally& s) {
  Utilization u;
  for (const GroupLife& l : s.lives) {
    if (l.welcome == 0) continue;
    const int64_t end = l.shutdown > 0 ? l.shutdown : l.welcome;
    u.alive += static_cast<double>(end - l.welcome);
    if (!l.busy.empty()) {
      u.idle_first += static_cast<double>(l.busy.front().first - l.welcome);
      u.idle_last += static_cast<double>(std::max<int64_t>(0, end - l.busy.back().second));
      for (std::size_t k = 1; k < l.busy.size(); ++k) u.idle_between += static_cast<double>(l.busy[k].first - l.busy[k - 1].second);
    } else {
      u.idle_last += static_cast<double>(end - l.welcome);
    }
    u.alive_work += static_cast<double>(std::max<int64_t>(0, s.last_assign - l.welcome));
    for (const auto& [b0, b1] : l.busy) {
      u.busy_alive += static_cast<double>(b1 - b0);
      u.busy_work += static_cast<double>(std::max<int64_t>(0, std::min(b1, s.last_assign) - std::max(b0, l.welcome)));
    }
  }
  return u;
}

// The figures of the run into `out` (the keys bench/run-scale reads).
void add_figures(json& out, const BenchMaster& m, const StoreTally& st, const SimTally& s, const Utilization& u) {
  const scheduler::Counters& c = m.counters;
  const double span = st.last_finished - st.first_created;
  out["master"] = {{"wall_s", m.wall_s}, {"cpu_s", seconds(m.usage_self)},
                   {"cpu_fraction", seconds(m.usage_self) / std::max(m.wall_s, 1e-9)},
                   {"peak_rss_mib", static_cast<double>(m.usage_self.ru_maxrss) / 1024.0}, {"log_lines", m.lines}};
  out["registration_s"] = s.welcomed > 0 ? static_cast<double>(s.last_welcome - s.first_hello) / 1e9 : NAN;
  out["registered"] = s.welcomed;
  out["registered_log_lines"] = m.registered_lines;
  out["results_per_s"] = span > 0 ? static_cast<double>(st.done) / span : NAN;
  out["record_span_s"] = span;
  out["assign_latency_ms"] = {{"count", s.latencies.size()}, {"p50", percentile(s.latencies, 0.5)},
                              {"p90", percentile(s.latencies, 0.9)}, {"p99", percentile(s.latencies, 0.99)},
                              {"max", percentile(s.latencies, 1.0)}};
  const std::vector<int64_t>& assign_ns = m.timed->assign_ns;
  out["master_assign_latency_ms"] = {{"count", assign_ns.size()}, {"p50", percentile(assign_ns, 0.5)},
                                     {"p99", percentile(assign_ns, 0.99)}, {"max", percentile(assign_ns, 1.0)}};
  int64_t long_steps = 0;
  for (int64_t d : m.step_ns) long_steps += d > 10'000'000;
  out["master_step_ms"] = {{"count", m.step_ns.size()}, {"p50", percentile(m.step_ns, 0.5)}, {"p99", percentile(m.step_ns, 0.99)},
                           {"max", percentile(m.step_ns, 1.0)}, {"over_10ms", long_steps}};
  out["simulator_lateness_ms"] = {{"p50", percentile(s.late, 0.5)}, {"p99", percentile(s.late, 0.99)},
                                  {"max", percentile(s.late, 1.0)}};
  out["utilization"] = {{"while_work_remained", u.alive_work > 0 ? u.busy_work / u.alive_work : NAN},
                        {"over_life", u.alive > 0 ? u.busy_alive / u.alive : NAN},
                        {"idle_share_before_first_trial", u.alive > 0 ? u.idle_first / u.alive : NAN},
                        {"idle_share_between_trials", u.alive > 0 ? u.idle_between / u.alive : NAN},
                        {"idle_share_after_last_trial", u.alive > 0 ? u.idle_last / u.alive : NAN},
                        {"ideal_over_life_note", "the last round leaves groups idle: over_life is at most trials / "
                                                 "(groups * ceil(trials / groups)) even with no overhead"}};
  out["trials_recorded"] = st.recorded;
  out["trials_done"] = st.done;
  out["trials_retried"] = st.retried;
  out["simulator_dones"] = s.sim_dones;
  out["heartbeats"] = {{"sent_by_groups", s.hb_sent}, {"sent_by_master", s.hb_received}};
  out["false_heartbeat_losses"] = {{"group_lost_events", st.lost_events}, {"kills", m.launcher.kills},
                                   {"relaunches", m.launcher.relaunches}};
  out["counters"] = {{"malformed", c.malformed}, {"unregistered", c.unregistered}, {"out_of_order", c.out_of_order},
                     {"stale_results", c.stale_results}, {"unauthenticated", c.unauthenticated},
                     {"identity_refused", c.identity_refused}, {"send_failures", c.send_failures},
                     {"lost_attempts", c.lost_attempts}};
  if (!m.other_lines.empty()) out["log"] = m.other_lines;
}

// bench_scale's checks: each trial recorded exactly once and done at its first attempt, every group
// registered and shut down, no heartbeat loss, the scheduler's counters zero.
void add_problems(std::vector<std::string>& problems, const Args& a, const BenchMaster& m, const StoreTally& st,
                  const SimTally& s) {
  const scheduler::Counters& c = m.counters;
  if (st.done != a.trials || st.recorded != a.trials) {
    problems.push_back(std::to_string(st.done) + " of " + std::to_string(st.recorded) + " trials done, expected " +
                       std::to_string(a.trials));
  }
  for (const auto& [id, n] : st.ids) {
    if (n != 1) problems.push_back("trial " + std::to_string(id) + " recorded " + std::to_string(n) + " times");
  }
  if (st.retried != 0) problems.push_back(std::to_string(st.retried) + " trials needed another attempt");
  if (s.sim_dones != a.trials) problems.push_back("the groups finished " + std::to_string(s.sim_dones) + " trials, expected " + std::to_string(a.trials));
  if (s.welcomed != a.groups) problems.push_back(std::to_string(s.welcomed) + " of " + std::to_string(a.groups) + " groups registered");
  if (s.shut != s.welcomed) problems.push_back(std::to_string(s.shut) + " of " + std::to_string(s.welcomed) + " registered groups got their shutdown");
  if (st.lost_events != 0 || m.launcher.kills != 0) problems.push_back("heartbeat losses: " + std::to_string(st.lost_events) + " group_lost events, " + std::to_string(m.launcher.kills) + " kills");
  if (c.malformed + c.unregistered + c.out_of_order + c.stale_results + c.unauthenticated + c.identity_refused +
          c.send_failures + c.lost_attempts != 0) {
    problems.push_back("the scheduler's counters are not all zero");
  }
  if (m.launcher.killed_at_stop) problems.push_back("a simulator did not end on its shutdowns");
}

// A run that could not go on: the simulators killed, `out` printed with the error; exit 1.
int fail(std::vector<SimProc>& procs, json& out, const std::string& why) {
  for (SimProc& p : procs) {
    if (!p.exited) ::kill(p.pid, SIGKILL);
  }
  out["error"] = why;
  std::printf("%s\n", out.dump(2).c_str());
  return 1;
}

int run(const Args& a) {
  // File descriptors: the master holds one TCP connection per group (plus ZeroMQ's own), and so do
  // the simulators between them. Raised to the hard limit, as run_master() does.
  const auto fds = raise_open_files_limit();
  const WorkDir work(a, "hpctune-scale-");
  const std::string& dir = work.path;
  std::vector<SimProc> procs = fork_simulators(a, dir);

  json out = {{"groups", a.groups}, {"procs", a.procs}, {"trials", a.trials}, {"trial_seconds", a.trial_seconds},
              {"heartbeat_interval_s", a.heartbeat_interval}, {"heartbeat_timeout_s", a.heartbeat_timeout},
              {"open_files_limit", fds}};
  const std::string db_path = dir + "/scale.db";
  std::error_code ec;
  std::filesystem::remove(db_path, ec);
  BenchMaster m(procs);
  if (auto s = m.prepare(a, db_path); !s.ok()) return fail(procs, out, s.error().to_string());
  if (auto s = m.run(a); !s.ok()) return fail(procs, out, s.error().to_string());

  auto st = tally_store(*m.db, m.campaign_id);
  if (!st.ok()) return fail(procs, out, st.error().to_string());
  std::vector<std::string> problems;
  const SimTally sims = read_simulator_results(procs, problems);
  const Utilization u = utilization_of(sims);

  add_figures(out, m, *st, sims, u);
  add_problems(problems, a, m, *st, sims);
  out["problems"] = problems;
  std::printf("%s\n", out.dump(2).c_str());
  return problems.empty() ? 0 : 1;
}

}  // namespace

// --simulated: the same campaign (config_text: groups, trials, trial seconds, heartbeats) through
// simulate::simulate_campaign, the master on simulated time with in-process groups: no socket, no
// process, no timer. It measures none of what run() does (registration over TCP, assign latency,
// heartbeats under load, the simulators' CPU): it is the master's own cost for the same campaign,
// printed beside the real-socket figures (bench/results/scale.md), never instead of them.
int run_simulated(const Args& a) {
  auto parsed = config::parse_config(config_text(a), "scale.yaml");
  if (!parsed.ok()) usage(parsed.error().to_string());
  std::error_code ec;
  const WorkDir work(a, "hpctune-scale-sim-");
  const std::string& dir = work.path;
  simulate::SimulateOptions o;
  o.master.config = parsed.value();
  o.master.db_path = dir + "/scale-sim.db";
  std::filesystem::remove(o.master.db_path, ec);
  o.master.make_stage = workflow::make_stage;
  // As the forked groups do: a started report, then after --trial-seconds step 1 and done, whose
  // metric is the trial's parameter.
  o.model = [&a](const protocol::Assign& as) {
    const double v = as.params.begin()->is_number() ? as.params.begin()->get<double>() : 0.0;
    simulate::SimulatedTrial t;
    t.reports = {{{"value", v}}};
    t.final_metrics = {{"value", v}};
    t.seconds_per_step = a.trial_seconds;
    return t;
  };
  o.startup_seconds = 0;
  o.max_simulated_seconds = a.timeout * 1000;
  auto out = simulate::simulate_campaign(o);
  json j = {{"simulated", true}, {"groups", a.groups}, {"trials", a.trials}, {"trial_seconds", a.trial_seconds}};
  if (!out.ok()) {
    j["error"] = out.error().to_string();
    std::printf("%s\n", j.dump(2).c_str());
    return 1;
  }
  const Progress& p = out->campaign.progress;
  j["done"] = p.done;
  j["wall_s"] = out->wall_s;
  j["simulated_s"] = out->simulated_s;
  j["master_turns"] = out->turns;
  j["wall_us_per_trial"] = p.done > 0 ? out->wall_s * 1e6 / static_cast<double>(p.done) : NAN;
  j["lost_attempts"] = out->campaign.counters.lost_attempts;
  std::printf("%s\n", j.dump(2).c_str());
  return p.done == a.trials && out->campaign.counters.lost_attempts == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  const Args a = parse_args(argc, argv);
  return a.simulated ? run_simulated(a) : run(a);
}
