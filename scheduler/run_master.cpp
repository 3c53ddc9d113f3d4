// run_master (scheduler/master.h): the driver of `hpctune run` and `resume`, the Master on the real
// clock, the ZeroMQ transport and the launcher of resources.backend. The campaign's preparation is
// the simulator's too (scheduler/campaign_preparation.h); what a backend adds (an allocation, its
// time limit, a requeue) the launcher says (launch/launcher.h).
#include <filesystem>
#include <functional>
#include <map>

#include "common/clock.h"
#include "common/endpoint.h"
#include "common/limits.h"
#include "launch/mps_daemon.h"
#include "protocol/curve_keys.h"
#include "protocol/transport.h"
#include "scheduler/launcher_options.h"
#include "scheduler/master.h"

namespace hpctune::scheduler {
namespace {

namespace fs = std::filesystem;

// A new database's trial directory must not hold an earlier campaign's trials: an earlier campaign
// at the same path whose database was removed without its `<db>.trials` left their checkpoints,
// outputs and pbt snapshots there, and trial 1 of the new campaign would resume from trial 1's
// checkpoint of the old one. Nothing is created when it is refused. An empty directory, or one
// holding only an empty `logs` (a start that failed before any trial), is fine.
Status check_no_earlier_trials(const std::string& db_path) {
  const std::string run_dir = db_path + ".trials";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(run_dir, ec))) return {};
  std::string first;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const bool empty_logs = entry.path().filename() == "logs" && entry.is_directory(ec) && fs::is_empty(entry.path(), ec);
    if (!empty_logs) {
      first = entry.path().filename().string();
      break;
    }
  }
  if (ec) return err(Errc::kIo, "cannot read " + run_dir + ": " + ec.message());
  // A master that created the database meanwhile (racing for it) made these: refused as such later.
  if (first.empty() || fs::exists(db_path)) return {};
  return err(Errc::kInvalidArgument,
             run_dir + " holds an earlier campaign's files ('" + first + "', ...) but " + db_path +
                 " does not exist: a new campaign would read them as its own trials' checkpoints and outputs. "
                 "Remove the directory (rm -r '" + run_dir + "'), or choose another --db");
}

void log_line(const MasterOptions& options, const std::string& line) {
  if (options.log) options.log(line);
}

Status in_context(Status s, const std::string& line) {
  if (s.ok()) return s;
  return std::move(s).error().with_context(line);
}

// The real transport's and the backend's checks, before the campaign records anything: CURVE
// where the address needs it, an allocation for a backend that runs in one.
Status preflight(const MasterOptions& options, const config::CampaignConfig& cfg) {
  if (transport_uses_curve(cfg.resources.security, options.bind.value_or(cfg.resources.bind))) {
    HPCTUNE_TRY(in_context(protocol::check_libzmq_for_curve(), "resources.security: the master's transport needs CURVE"));
  }
  return launch::check_backend(cfg.resources.backend);
}

// --bind, else resources.bind; the default private socket becomes the backend's (slurm: the batch
// host's own address, which the compute nodes reach). A port is chosen at bind time either way.
std::string master_bind(const MasterOptions& options, const config::Resources& r) {
  std::string bind = options.bind.value_or(r.bind);
  // (tcp://127.0.0.1:* was the default before issue 21: a campaign recorded with it resumes the same.)
  if (!options.bind && (bind == config::Resources{}.bind || bind == "tcp://127.0.0.1:*")) {
    bind = launch::backend_default_bind(r.backend, bind);
  }
  return bind;
}

// The transport's options and what the workers need to pass it. resources.security: CURVE with the
// campaign's keys (created on the first run, reused on resume) everywhere but the private ipc
// socket (the default, which only this user can reach), unless the config says none: then ZeroMQ
// PLAIN with the campaign secret, so that a connection without it never becomes a peer
// (common/endpoint.h, protocol/transport.h).
struct MasterTransport {
  protocol::TransportOptions options;
  std::map<std::string, std::string> worker_env;  // every group's environment, never a command line
};

Result<MasterTransport> master_transport(const MasterOptions& options, const config::Resources& r,
                                         const std::string& bind, const std::string& key_dir, const std::string& secret) {
  MasterTransport out;
  out.options = options.transport;
  if (transport_uses_curve(r.security, bind)) {
    HPCTUNE_TRY(in_context(protocol::check_libzmq_for_curve(), "resources.security: the master's transport needs CURVE"));
    HPCTUNE_ASSIGN(protocol::CampaignKeys keys, protocol::load_or_create_keys(key_dir));
    protocol::use_curve_server(out.options, keys);
    out.worker_env = protocol::worker_key_environment(keys);
    log_line(options, "transport: CURVE encryption, only the campaign's workers admitted (keys in " + key_dir + ")");
  } else if (!private_ipc_endpoint(bind)) {
    out.options.security = protocol::TransportOptions::Security::kPlain;
    out.options.plain_secret = secret;
    out.worker_env[protocol::kPlainAuthEnv] = "1";
    if (options.warn) options.warn(network_bind_warning(bind));
  }
  return out;
}

// A warning of the master's start: logged, and recorded as a master_warning event (the campaign's
// store is open), which `hpctune status` and the dashboard show to whoever looks later.
using Warn = std::function<void(const std::string&)>;

// One TCP connection per group, plus ZeroMQ's and SQLite's own descriptors (and, with the local
// backend, each group's log): past the soft limit of open files (often 1024) new connections
// would be refused. Raised to the hard limit; below what the groups need, said once.
void warn_open_files(const Warn& warn, int64_t groups) {
  const int64_t open_files = raise_open_files_limit();
  if (const int64_t wanted = 2 * groups + 64; open_files >= 0 && open_files < wanted) {
    warn("the limit of open files is " + std::to_string(open_files) + ", below the " + std::to_string(wanted) + " that " +
         std::to_string(groups) + " trainer groups may need; raise the hard limit (ulimit -Hn, limits.conf; README: limits)");
  }
}

// resources.mps (scheduler/launcher_options.h: mps_control): the private MPS control daemon, started
// before the first group, its two variables in every group's environment; nullptr when none.
// Stopped by run_master at the end, and by its destructor on every other way out (a failure, an
// error). auto: a daemon that will not start is a warning (the groups run without it); on: an error.
Result<std::unique_ptr<launch::MpsDaemon>> start_mps(const MasterOptions& options, const config::Resources& r,
                                                     launch::LocalLauncherOptions& lopt, const Warn& warn) {
  auto log = [&](const std::string& line) { log_line(options, line); };
  HPCTUNE_ASSIGN(const std::string control, mps_control(r, lopt.resources, log));
  if (control.empty()) return std::unique_ptr<launch::MpsDaemon>();
  launch::MpsDaemon::Options mps_options;
  mps_options.control = control;
  mps_options.campaign = fs::absolute(campaign_db_path(options)).string();
  mps_options.log = log;
  auto mps = launch::MpsDaemon::start(mps_options);
  if (!mps.ok()) {
    if (r.mps == "on") return std::move(mps).error().with_context("resources.mps: on: starting the MPS daemon");
    warn("resources.mps: auto: the MPS daemon did not start (" + mps.error().message() +
         "): the groups share their GPUs without MPS");
    return std::unique_ptr<launch::MpsDaemon>();
  }
  for (const auto& [name, value] : (*mps)->environment()) lopt.environment[name] = value;
  log("MPS: control daemon started; " + std::string(launch::kMpsPipeEnv) + "=" +
      (*mps)->environment().at(launch::kMpsPipeEnv) + ", " + launch::kMpsLogEnv + "=" +
      (*mps)->environment().at(launch::kMpsLogEnv));
  return std::move(mps).value();
}

}  // namespace

Result<CampaignOutcome> run_master(const MasterOptions& options) {
  const std::string db_path = campaign_db_path(options);
  if (!options.config && !fs::exists(db_path)) return err(Errc::kNotFound, "no campaign database at " + db_path);
  if (options.config && !fs::exists(db_path)) HPCTUNE_TRY(check_no_earlier_trials(db_path));
  // A key directory others can read is refused before the store is opened, so nothing is recorded.
  const std::string key_dir = protocol::key_dir_for(db_path);
  HPCTUNE_TRY(protocol::check_key_dir(key_dir));
  const WallClock wall = WallClock::real();
  HPCTUNE_ASSIGN(CampaignInStore prepared,
                 prepare_campaign(options, wall.unix_s, [&](const config::CampaignConfig& c) { return preflight(options, c); }));
  PreparedCampaign& campaign = prepared.campaign;
  const config::CampaignConfig& cfg = campaign.cfg;

  const std::string bind = master_bind(options, cfg.resources);
  // The campaign secret: only in this process's memory (a resumed master draws a new one; it
  // relaunches every group anyway). Each launch gets it with its own token (launch_credential).
  HPCTUNE_ASSIGN(const std::string secret, protocol::random_hex(16));
  HPCTUNE_ASSIGN(MasterTransport transport, master_transport(options, cfg.resources, bind, key_dir, secret));
  const Warn warn = [&](const std::string& text) {
    log_line(options, "warning: " + text);
    const Status recorded = record_master_warning(*prepared.store, campaign.campaign_id, text, wall.unix_at(Clock::now()));
    if (!recorded.ok()) log_line(options, "cannot record that warning in the database: " + recorded.error().message());
  };
  warn_open_files(warn, cfg.resources.groups);
  HPCTUNE_ASSIGN(std::unique_ptr<protocol::ServerTransport> server, protocol::bind_zmq(bind, transport.options));
  HPCTUNE_TRY(make_trial_directories(campaign));

  HPCTUNE_ASSIGN(launch::LocalLauncherOptions lopt,
                 launcher_options(cfg, [&](const std::string& line) { log_line(options, line); }));
  lopt.program = options.worker_program;
  lopt.master_endpoint = server->endpoint();
  lopt.log_dir = db_path + ".trials/logs";
  // Names the campaign in `ps` output, so a user (and the orphan tests) can tell whose worker it is.
  lopt.extra_args = {"--campaign", fs::absolute(db_path).string()};
  // The workers' CURVE keys: in the environment of every group (never on a command line).
  for (auto& [name, value] : transport.worker_env) lopt.environment[name] = std::move(value);
  // Declared before the launcher: destroyed after it (its groups stopped) on every way out.
  HPCTUNE_ASSIGN(std::unique_ptr<launch::MpsDaemon> mps, start_mps(options, cfg.resources, lopt, warn));
  HPCTUNE_ASSIGN(std::unique_ptr<launch::Launcher> launcher, launch::make_launcher(cfg.resources.backend, lopt));

  MasterParts parts;
  parts.transport = server.get();
  parts.store = prepared.store.get();
  parts.launcher = launcher.get();
  parts.wall = wall;
  parts.log_dir = lopt.log_dir;
  parts.log = options.log;
  parts.failpoint = options.failpoint;
  parts.failpoint_hit = options.failpoint_hit;
  parts.make_stage = options.make_stage;
  parts.interrupt = options.interrupt;
  parts.preempt = options.preempt;
  parts.master_incarnation = make_incarnation();
  parts.secret = secret;

  Master master(std::move(campaign), std::move(parts));
  const auto start = Clock::now();
  HPCTUNE_TRY(master.start(start));
  auto last_progress = Clock::time_point{};
  bool preempted = false;
  // Connections the transport refused at the handshake: one line per 10 s at most, with the count.
  int64_t refused_logged = 0;
  auto next_refused_line = Clock::now();
  while (true) {
    if (Clock::now() >= next_refused_line) {
      next_refused_line = Clock::now() + std::chrono::seconds(10);
      if (const int64_t refused = server->refused_connections(); refused > refused_logged) {
        log_line(options, "refused " + std::to_string(refused - refused_logged) +
                              " connection(s) that did not authenticate (" + std::to_string(refused) + " so far)");
        refused_logged = refused;
      }
    }
    // The allocation ends soon: SIGUSR1 (SLURM's warning before pre-emption or the time limit),
    // or the launcher sees its time limit near, in case the signal never comes (`hpctune run`
    // inside salloc, a script without --signal). As Ctrl-C, and the outcome may name a requeue.
    const std::string ending = launcher->allocation_ending();
    if (((options.preempt && options.preempt->load() > 0) || !ending.empty()) && !master.interrupted()) {
      preempted = true;
      log_line(options, !ending.empty() ? ending : "SIGUSR1: the allocation ends soon (pre-emption or its time limit)");
      HPCTUNE_TRY(master.interrupt(Clock::now()));
    }
    if (options.interrupt && options.interrupt->load() > 0 && !master.interrupted()) {
      HPCTUNE_TRY(master.interrupt(Clock::now()));
    }
    if (master.scheduler().finished()) break;
    HPCTUNE_TRY(in_context(master.wait(master.poll_interval()), "while waiting for workers"));
    const auto now = Clock::now();
    HPCTUNE_ASSIGN(bool finished, master.step(now));
    if (options.progress && now - last_progress >= std::chrono::milliseconds(100)) {
      last_progress = now;
      options.progress(master.progress(), std::chrono::duration<double>(now - start).count());
    }
    if (finished) break;
  }
  HPCTUNE_ASSIGN(CampaignOutcome out, master.stop(Clock::now()));
  // The groups have stopped (Master::stop): the MPS daemon now, saying so when it would not quit.
  if (mps) {
    if (Status quit = mps->stop(); !quit.ok()) {
      log_line(options, "warning: MPS: " + quit.error().message());
    } else {
      log_line(options, "MPS: control daemon stopped");
    }
  }
  if (options.progress) options.progress(out.progress, out.elapsed_s);
  out.preempted = preempted && out.interrupted;
  if (out.preempted) out.requeue_job = launcher->requeue_job();
  return out;
}

}  // namespace hpctune::scheduler
