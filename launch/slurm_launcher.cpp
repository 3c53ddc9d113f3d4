// The SLURM backend: trainer groups as job steps (see slurm_launcher.h).
#include "launch/slurm_launcher.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/safe_open.h"
#include "common/system.h"
#include "common/text.h"
#include "launch/child_process.h"
#include "protocol/messages.h"

namespace hpctune::launch {
namespace {

constexpr const char* kMarker = "hpctune: step ";
constexpr const char* kNodeFailure = "Node failure on ";  // srun's report of a node lost under a step


// Whether the step's program is one process that starts the ranks (mpirun, or a trainer that runs
// its own): only task 0 runs it.
bool one_starter(const LocalLauncherOptions& opt) {
  const GroupResources& r = opt.resources;
  return r.trainer_starts_ranks || (opt.slurm.launch == "mpirun" && r.ranks_data * r.ranks_model > 1);
}

// The script `bash -c` runs in every task of the step; the program follows as "$@".
std::string step_script(const LocalLauncherOptions& opt) {
  std::string s;
  if (one_starter(opt)) {
    s += "[ \"${SLURM_PROCID:-0}\" = 0 ] || exit 0\n";
    s += "echo \"hpctune: step $SLURM_JOB_ID.$SLURM_STEP_ID on $SLURM_STEP_NODELIST\"\n";
    // Open MPI's mpirun takes the allocation from these: the step's nodes and slots, not the job's.
    // Its daemons start in a step of their own (srun from mpirun) that shares this one's cores
    // (--overlap) on this one's nodes: mpirun names the nodes itself when it needs daemons on only
    // some of them (its own node is one: the usual case), and its --nodelist comes after these
    // arguments; when it takes its own node for none of the step's (virtual nodes that share one
    // host name, as on a one-machine test cluster) it names none, and SLURM would pick any nodes.
    s += "export SLURM_NODELIST=\"$SLURM_STEP_NODELIST\" SLURM_JOB_NODELIST=\"$SLURM_STEP_NODELIST\" "
         "SLURM_TASKS_PER_NODE=\"$SLURM_STEP_TASKS_PER_NODE\" SLURM_NNODES=\"$SLURM_STEP_NUM_NODES\" "
         "SLURM_JOB_NUM_NODES=\"$SLURM_STEP_NUM_NODES\" "
         "OMPI_MCA_plm_slurm_args=\"--overlap --nodelist=$SLURM_STEP_NODELIST\"\n";
  } else {
    s += "[ \"${SLURM_PROCID:-0}\" != 0 ] || echo \"hpctune: step $SLURM_JOB_ID.$SLURM_STEP_ID on $SLURM_STEP_NODELIST\"\n";
  }
  if (!opt.slurm.setup.empty()) {
    // A setup line that fails (a module that does not load) ends the step with its status.
    s += "set -e\n";
    for (const std::string& line : opt.slurm.setup) s += line + "\n";
    s += "set +e\n";
  }
  s += "exec \"$@\"";
  return s;
}

int64_t threads_per_rank(const LocalLauncherOptions& opt) {
  if (opt.resources.threads > 0) return opt.resources.threads;
  return opt.slurm.cpus_per_task > 0 ? opt.slurm.cpus_per_task : 0;
}

// Runs `argv` to its end (at most `limit`), returning what it wrote on stdout and stderr.
Result<std::string> run_capture(const std::vector<std::string>& argv, std::chrono::milliseconds limit) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return err(Errc::kIo, "cannot create a pipe for " + argv.front());
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.stdout_fd = fds[1];
  spawn.stderr_fd = fds[1];
  auto child = ChildProcess::spawn(spawn);
  ::close(fds[1]);
  if (!child.ok()) {
    ::close(fds[0]);
    return std::move(child).error();
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    if (out.size() < (1u << 20)) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  auto status = child->wait_for(std::chrono::milliseconds(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count())));
  if (!status) {
    child->terminate(std::chrono::milliseconds(0));
    return err(Errc::kTimeout, join(argv, " ") + " did not finish within " + std::to_string(limit.count()) + " ms");
  }
  if (!status->success()) return err(Errc::kFailed, join(argv, " ") + ": " + status->describe() + ": " + out);
  return out;
}

}  // namespace

Result<std::string> slurm_allocation(const SlurmStepOptions& options) {
  if (!options.job_id.empty()) return options.job_id;
  const char* id = std::getenv("SLURM_JOB_ID");
  if (id && *id) return std::string(id);
  return err(Errc::kConfig,
             "resources.backend slurm: this is not inside a SLURM allocation (SLURM_JOB_ID is not set); submit the "
             "campaign with `hpctune slurm submit CONFIG --nodes N --time T`, or run it inside one (`salloc -N N "
             "hpctune run CONFIG`)");
}

Result<std::vector<std::string>> slurm_step_command(const LocalLauncherOptions& opt, int64_t group,
                                                    const std::set<std::string>& exclude) {
  const GroupResources& r = opt.resources;
  const SlurmStepOptions& so = opt.slurm;
  if (r.ranks_data < 1 || r.ranks_model < 1) {
    return err(Errc::kConfig, "resources.ranks: data and model must be >= 1 (got " + std::to_string(r.ranks_data) +
                                  " x " + std::to_string(r.ranks_model) + ")");
  }
  if (so.ranks_per_node < 1) {
    return err(Errc::kConfig, "resources.slurm.ranks_per_node must be >= 1 (got " + std::to_string(so.ranks_per_node) + ")");
  }
  if (so.launch != "srun" && so.launch != "mpirun") {
    return err(Errc::kConfig, "resources.slurm.launch: '" + so.launch + "' is not srun or mpirun");
  }
  HPCTUNE_ASSIGN(std::string job, slurm_allocation(so));
  const int64_t ranks = r.ranks_data * r.ranks_model;
  const int64_t per_node = std::min(so.ranks_per_node, ranks);
  const int64_t nodes = (ranks + so.ranks_per_node - 1) / so.ranks_per_node;

  std::vector<std::string> argv = {so.srun,
                                   "--jobid=" + job,
                                   "--job-name=hpctune-g" + std::to_string(group),
                                   "--nodes=" + std::to_string(nodes),
                                   "--ntasks=" + std::to_string(ranks),
                                   "--ntasks-per-node=" + std::to_string(per_node),
                                   "--exclusive",
                                   "--kill-on-bad-exit=1",
                                   // The master's environment (the launch credential, CURVE keys)
                                   // reaches the tasks even where the batch job set --export=NONE.
                                   "--export=ALL"};
  int64_t het_group = so.het_group;
  if (het_group < 0) {
    const char* het_size = std::getenv("SLURM_HET_SIZE");
    if (het_size && std::atoi(het_size) > 1) het_group = 1;
  }
  if (het_group >= 0) argv.push_back("--het-group=" + std::to_string(het_group));
  if (!so.mpi.empty()) argv.push_back("--mpi=" + so.mpi);
  if (!so.gres.empty()) argv.push_back("--gres=" + so.gres);
  for (auto& o : slurm_gpu_options(opt)) argv.push_back(std::move(o));
  if (so.cpus_per_task > 0) argv.push_back("--cpus-per-task=" + std::to_string(so.cpus_per_task));
  if (!exclude.empty()) argv.push_back("--exclude=" + join(std::vector<std::string>(exclude.begin(), exclude.end()), ","));
  argv.insert(argv.end(), {"bash", "-c", step_script(opt), "hpctune-step"});

  if (ranks > 1 && one_starter(opt) && !r.trainer_starts_ranks) {
    const std::string mpirun = mpirun_name(opt.mpirun);
    const std::string found = find_in_path(mpirun);
    if (found.empty()) {
      return err(Errc::kUnavailable, "resources.slurm.launch mpirun: '" + mpirun +
                                         "' was not found (groups of several ranks need Open MPI's mpirun)");
    }
    // Over the nodes SLURM gave the step: no shared-memory-only transports, slots from SLURM. A
    // campaign whose trials survive a rank's loss runs the ranks under --enable-recovery, as the
    // local backend does (launcher.h, rank_recovery; the ranks learn it from kGroupRecoveryEnv).
    for (auto& a : mpirun_command(found, ranks, {.enable_recovery = r.rank_recovery})) argv.push_back(std::move(a));
  }
  for (auto& a : worker_command(opt, group, threads_per_rank(opt))) argv.push_back(std::move(a));
  return argv;
}

int64_t slurm_gpus_per_rank(const SlurmStepOptions& so) {
  return so.gpus_per_rank > 0 ? so.gpus_per_rank : std::max<int64_t>(0, so.gpus_per_task);
}

std::vector<std::string> slurm_gpu_options(const LocalLauncherOptions& opt) {
  const int64_t gpus = slurm_gpus_per_rank(opt.slurm);
  if (gpus <= 0) return {};
  const std::string n = std::to_string(gpus);
  return {"--gpus-per-task=" + n, one_starter(opt) ? std::string("--gpu-bind=none") : "--gpu-bind=per_task:" + n};
}

std::map<std::string, std::string> slurm_step_environment(const LocalLauncherOptions& opt) {
  std::map<std::string, std::string> env = opt.environment;
  const int64_t ranks = opt.resources.ranks_data * opt.resources.ranks_model;
  if (ranks > 1 && !opt.resources.trainer_starts_ranks) {
    // As the local backend: containers often deny the ptrace rights Open MPI's single copy needs.
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none";
    // Only mpirun can keep the others running when a rank dies: srun's step ends with its first
    // task that fails (--kill-on-bad-exit=1), and the attempt runs again.
    if (opt.resources.rank_recovery && one_starter(opt)) env[kGroupRecoveryEnv] = "1";
  }
  if (const int64_t t = threads_per_rank(opt); t > 0) env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = std::to_string(t);
  return env;
}

std::set<std::string> failed_nodes(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string name, state;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      if (w.rfind("NodeName=", 0) == 0) name = w.substr(9);
      if (w.rfind("State=", 0) == 0) state = w.substr(6);
    }
    if (name.empty()) continue;
    // State=IDLE+DRAIN, DOWN*, MIXED+NOT_RESPONDING, ALLOCATED+FAIL ...
    for (const char* bad : {"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"}) {
      if (state.find(bad) != std::string::npos) out.insert(name);
    }
  }
  return out;
}

std::string slurm_default_bind() {
  std::string address = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host_name().c_str(), nullptr, &hints, &res) == 0) {
    bool first = true;
    for (addrinfo* a = res; a; a = a->ai_next) {
      char text[INET_ADDRSTRLEN] = {};
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      if (!::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text)) continue;
      const bool loopback = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
      if (first || !loopback) address = text;
      first = false;
      if (!loopback) break;
    }
    ::freeaddrinfo(res);
  }
  return "tcp://" + address + ":*";
}

namespace {
// One field of squeue's %L: at most 9 digits (a billion days is past any time limit; a longer field
// is not a time, and std::stod threw on one of 400 digits).
std::optional<double> slurm_duration_field(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return static_cast<double>(v);
}
}  // namespace

std::optional<double> parse_slurm_duration(const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.empty() || t.find_first_not_of("0123456789-:") != std::string::npos) return std::nullopt;
  double days = 0;
  if (const auto dash = t.find('-'); dash != std::string::npos) {
    const auto d = slurm_duration_field(t.substr(0, dash));
    if (!d) return std::nullopt;
    days = *d;
    t = t.substr(dash + 1);
  }
  std::vector<double> parts;
  std::istringstream in(t);
  std::string part;
  while (std::getline(in, part, ':')) {
    const auto p = slurm_duration_field(part);
    if (!p) return std::nullopt;
    parts.push_back(*p);
  }
  if (parts.empty() || parts.size() > 3) return std::nullopt;
  double seconds = 0;
  for (double p : parts) seconds = seconds * 60 + p;
  if (parts.size() == 1) seconds *= 60;  // minutes alone
  return days * 86400 + seconds;
}

std::optional<double> slurm_time_left(const std::string& job_id, const std::string& squeue) {
  auto out = run_capture({squeue, "-h", "-j", job_id, "-o", "%L"}, std::chrono::milliseconds(10000));
  if (!out.ok()) return std::nullopt;
  return parse_slurm_duration(*out);
}

std::string batch_job_to_requeue(const SlurmStepOptions& options) {
  const char* job = std::getenv("SLURM_JOB_ID");
  return options.requeue && job && *job ? job : "";
}

Status slurm_requeue(const std::string& job_id, const std::string& scontrol) {
  auto out = run_capture({scontrol, "requeue", job_id}, std::chrono::milliseconds(30000));
  if (!out.ok()) return std::move(out).error().with_context("while requeueing SLURM job " + job_id);
  return {};
}

namespace {

class SlurmLauncher final : public Launcher {
 public:
  SlurmLauncher(LocalLauncherOptions options, std::string job) : opt_(std::move(options)), job_(std::move(job)) {
    if (opt_.program.empty()) {
      auto self = self_program();
      opt_.program = self.ok() ? *self : "hpctune";  // else found in PATH
    }
    opt_.slurm.job_id = job_;
  }
  ~SlurmLauncher() override { stop_all(std::chrono::milliseconds(2000)); }

  std::string name() const override { return "slurm"; }

  std::string allocation_ending() override {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_time_check_) {
      next_time_check_ = now + std::chrono::seconds(60);
      if (auto left = slurm_time_left(job_, opt_.slurm.squeue)) {
        // At most a century ahead: the steady clock's nanoseconds overflow past 292 years.
        constexpr double kFarMs = 100.0 * 365 * 86400 * 1000;
        const double ms = std::min((*left - opt_.slurm.signal_before_s) * 1000, kFarMs);
        stop_by_ = now + std::chrono::milliseconds(static_cast<int64_t>(ms));
      }
    }
    if (stop_by_ && now >= *stop_by_) return "the allocation's time limit is less than resources.slurm.signal_before away";
    return "";
  }

  std::string requeue_job() const override { return batch_job_to_requeue(opt_.slurm); }

  Status start(int64_t group, const std::string& credential) override {
    SpawnOptions spawn;
    HPCTUNE_ASSIGN(spawn.argv, slurm_step_command(opt_, group, excluded_));
    spawn.env = slurm_step_environment(opt_);
    // srun passes the master's environment on to the step's tasks (--export=ALL, its default): the
    // credential reaches the worker without appearing on any command line.
    if (!credential.empty()) spawn.env[protocol::kSecretEnv] = credential;
    Step step;
    if (!opt_.log_dir.empty()) {
      spawn.stdout_path = log_path(group);
      spawn.stderr_path = "=stdout";
      // A link or a FIFO planted at the log's name is refused (as by the local launcher).
      if (auto log = open_own_for_writing(spawn.stdout_path, /*truncate=*/false); !log.ok())
        return std::move(log).error().with_context("the log of group " + std::to_string(group));
      std::error_code ec;
      const auto size = std::filesystem::file_size(spawn.stdout_path, ec);
      step.log_offset = ec ? 0 : static_cast<std::size_t>(size);
    }
    if (!opt_.log_dir.empty()) {
      // The step asked for, in the log before srun's own output (the script shown as '...').
      std::vector<std::string> shown = spawn.argv;
      for (std::size_t i = 0; i + 1 < shown.size(); ++i) {
        if (shown[i] == "-c") shown[i + 1] = "'...'";
      }
      std::ofstream(log_path(group), std::ios::app) << "hpctune: starting group " << group << ": " << join(shown, " ") << "\n";
    }
    HPCTUNE_ASSIGN(step.srun, ChildProcess::spawn(spawn));
    steps_[group] = std::move(step);
    return {};
  }

  GroupState state(int64_t group) const override {
    auto it = steps_.find(group);
    if (it == steps_.end()) return GroupState::kExited;
    return read_marker(group, it->second) ? GroupState::kStarting : GroupState::kPending;
  }

  std::vector<GroupExit> poll_exits() override {
    std::vector<GroupExit> exits;
    for (auto it = steps_.begin(); it != steps_.end();) {
      Step& step = it->second;
      auto status = step.srun.poll();
      if (!status) {
        ++it;
        continue;
      }
      read_marker(it->first, step, true);
      GroupExit e;
      e.group = it->first;
      e.how = "srun " + status->describe();
      if (!step.id.empty()) e.how += " (step " + step.id + " on " + step.nodes + ")";
      e.success = status->success();
      if (!e.success && !step.nodes.empty()) {
        std::set<std::string> failed = step_nodes_failed(step.nodes);
        for (const std::string& n : srun_node_failures(it->first, step)) failed.insert(n);
        if (!failed.empty()) {
          e.how += "; node failure: " + join(std::vector<std::string>(failed.begin(), failed.end()), ",") +
                   " excluded from later steps";
          excluded_.insert(failed.begin(), failed.end());
        }
      }
      if (!opt_.log_dir.empty()) e.log_tail = tail_file(log_path(it->first), 20);
      exits.push_back(std::move(e));
      it = steps_.erase(it);
    }
    return exits;
  }

  // A step that runs is cancelled through SLURM (killing srun alone would leave its tasks running
  // until slurmstepd notices); a step still waiting for nodes has no tasks: its srun goes.
  void kill(int64_t group) override {
    auto it = steps_.find(group);
    if (it == steps_.end()) return;
    read_marker(group, it->second, true);
    if (!it->second.id.empty()) {
      signal_steps("KILL", {it->second.id});
    } else {
      it->second.srun.signal(SIGKILL);
    }
  }

  // A moment for the steps to end on their own, then SIGTERM to the tasks of every step (one `scancel --signal=TERM J.S ...`: srun itself would
  // answer a SIGTERM by killing its step at once, leaving the trainers no time to checkpoint), up
  // to `grace` for the sruns to end, then what is left is killed (scancel --signal=KILL, then its
  // srun). A step still waiting for nodes has no tasks: its srun is killed at once.
  void stop_all(std::chrono::milliseconds grace) override {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    // Workers told to shut down (the master's stop) end on their own: a moment for that first.
    const auto own_end = std::chrono::steady_clock::now() + std::min(grace / 3, std::chrono::milliseconds(1000));
    for (auto& [group, step] : steps_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(own_end - std::chrono::steady_clock::now());
      if (!step.srun.wait_for(std::max(left, std::chrono::milliseconds(0)))) break;
    }
    std::vector<std::string> running;
    for (auto& [group, step] : steps_) {
      if (!step.srun.running()) continue;
      if (read_marker(group, step, true)) {
        running.push_back(step.id);
      } else {
        step.srun.signal(SIGKILL);
      }
    }
    signal_steps("TERM", running);
    std::vector<std::string> left_over;
    for (auto& [group, step] : steps_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!step.srun.wait_for(std::max(left, std::chrono::milliseconds(0))) && !step.id.empty()) {
        left_over.push_back(step.id);
      }
    }
    signal_steps("KILL", left_over);
    for (auto& [group, step] : steps_) {
      if (!step.srun.wait_for(std::chrono::milliseconds(3000))) step.srun.terminate(std::chrono::milliseconds(0));
    }
    steps_.clear();
  }

 private:
  struct Step {
    ChildProcess srun;
    std::size_t log_offset = 0;  // the group's log before this step: its marker comes after
    // What read_marker() read from the log (a cache, filled by the const state() too):
    mutable std::string id;      // "J.S" once the marker was read
    mutable std::string nodes;   // the step's node list (SLURM's hostlist form)
    mutable std::chrono::steady_clock::time_point next_look{};  // read_marker's next read of the log
  };

  std::string log_path(int64_t group) const { return opt_.log_dir + "/group-" + std::to_string(group) + ".log"; }
  // Whether the step's marker line is in the group's log (cached once found; `force`: read
  // the log whatever the time since the last look).
  bool read_marker(int64_t group, const Step& step, bool force = false) const {
    if (!step.id.empty()) return true;
    if (opt_.log_dir.empty()) return step.srun.running();  // no log to read: started when spawned
    // A step waiting for nodes is looked for at most every 200 ms (the master asks every tick,
    // for each of up to thousands of groups).
    const auto now = std::chrono::steady_clock::now();
    if (now < step.next_look && !force) return false;
    step.next_look = now + std::chrono::milliseconds(200);
    std::ifstream in(log_path(group));
    if (!in) return false;
    in.seekg(static_cast<std::streamoff>(step.log_offset));
    std::string line;
    for (int n = 0; n < 10000 && std::getline(in, line); ++n) {
      const auto at = line.find(kMarker);
      if (at == std::string::npos) continue;
      std::istringstream words(line.substr(at + std::char_traits<char>::length(kMarker)));
      std::string id, on, nodes;
      words >> id >> on >> nodes;
      if (id.empty() || on != "on") continue;
      step.id = id;
      step.nodes = nodes;
      return true;
    }
    return false;
  }

  // The nodes srun reported failed in this step's part of the group's log ("srun: error: Node
  // failure on n2"): a node that failed and was already back (ReturnToService) when scontrol was
  // asked, or removed from a --no-kill job, is still named here.
  std::set<std::string> srun_node_failures(int64_t group, const Step& step) const {
    std::set<std::string> out;
    if (opt_.log_dir.empty()) return out;
    std::ifstream in(log_path(group));
    in.seekg(static_cast<std::streamoff>(step.log_offset));
    std::string line;
    for (int n = 0; n < 100000 && std::getline(in, line); ++n) {
      const auto at = line.find(kNodeFailure);
      if (at == std::string::npos) continue;
      std::istringstream words(line.substr(at + std::char_traits<char>::length(kNodeFailure)));
      std::string node;
      words >> node;
      while (!node.empty() && (node.back() == '.' || node.back() == ',' || node.back() == ':')) node.pop_back();
      if (!node.empty()) out.insert(node);
    }
    return out;
  }

  // `scancel --signal=SIG` to the steps `ids` (J.S), in one call.
  void signal_steps(const std::string& sig, const std::vector<std::string>& ids) const {
    if (ids.empty()) return;
    std::vector<std::string> argv = {opt_.slurm.scancel, "--signal=" + sig};
    argv.insert(argv.end(), ids.begin(), ids.end());
    (void)run_capture(argv, std::chrono::milliseconds(10000));
  }

  std::set<std::string> step_nodes_failed(const std::string& nodes) const {
    auto out = run_capture({opt_.slurm.scontrol, "-o", "show", "node", nodes}, std::chrono::milliseconds(10000));
    return out.ok() ? failed_nodes(*out) : std::set<std::string>{};
  }

  LocalLauncherOptions opt_;
  std::string job_;
  // allocation_ending(): when the master must stop, as SLURM last said; its next question.
  std::optional<std::chrono::steady_clock::time_point> stop_by_;
  std::chrono::steady_clock::time_point next_time_check_{};
  std::map<int64_t, Step> steps_;
  std::set<std::string> excluded_;
};

}  // namespace

Result<std::unique_ptr<Launcher>> make_slurm_launcher(LocalLauncherOptions options) {
  HPCTUNE_ASSIGN(std::string job, slurm_allocation(options.slurm));
  return std::unique_ptr<Launcher>(std::make_unique<SlurmLauncher>(std::move(options), std::move(job)));
}

}  // namespace hpctune::launch
