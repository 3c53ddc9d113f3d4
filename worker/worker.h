// The trainer-group leader's loop: connects to the master, runs the trials it is assigned, and
// keeps talking while a trial trains.
//
// Threads: the loop thread owns the transport (sockets are single-threaded); each trial runs on a
// trial thread that hands its reports and its result to the loop through a queue and wakes it with
// ClientTransport::notify(). Exceptions on the trial thread become a `failed` message; none is lost.
//
// Nothing is dropped when the master reads slower than the trial reports: what the send queue
// does not take waits, in order, and is sent again on the next turn of the loop; reports of one
// step merge while they wait, and past RunningTrial::kMaxOutbox waiting reports the trial thread
// itself waits (a command trainer's program then blocks on its output). A queue that stays full
// for the heartbeat timeout means a lost master. Heartbeats never overtake waiting messages: they
// name the trial that runs, and the master loses an attempt that a heartbeat says is not running.
//
// Liveness, both ways: the loop sends a heartbeat every heartbeat_interval, and treats a master
// that has been silent for heartbeat_timeout as lost. It then abandons the current trial (the
// master queues it again when it comes back) and says hello again with exponential back-off
// (reconnect_initial doubling up to reconnect_max), giving up after give_up without a master.
//
// Every join has a deadline: a trial asked to stop (or one that sent its result) must end within
// stop_grace, its trainer's destructor included. A trial thread that does not cannot be joined (the loop would hang) nor detached (it uses the loop's transport and
// services), so the process logs why and _exits with kTrialStuckExitCode; its launcher sees the
// group exit and starts it again, and the master queues the trial again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "protocol/transport.h"
#include "trainers/trainer.h"

namespace hpctune::worker {

// The exit status of a worker whose trial did not end within stop_grace of being asked to stop.
inline constexpr int kTrialStuckExitCode = 4;

struct WorkerOptions {
  int64_t group = -1;
  int threads = 0;                                              // per trial; 0 = 1
  std::string secret;  // the credential the launcher handed over (take_worker_secret()); sent in hello
  std::chrono::milliseconds reconnect_initial{200};
  std::chrono::milliseconds reconnect_max{5000};
  std::chrono::milliseconds give_up{std::chrono::minutes(10)};  // without a master; then exit 1
  std::chrono::milliseconds default_heartbeat_timeout{10000};   // until the welcome says otherwise
  const std::atomic<int>* terminate = nullptr;                  // > 0: stop the trial and exit (SIGTERM)
  std::chrono::milliseconds stop_grace{30000};  // for a stopped trial to end; then _exit(kTrialStuckExitCode)
  // Builds the trainer for a kind (required; the hpctune binary passes trainers::trainer_factory()),
  // and the kinds it knows, which the hello announces.
  trainers::MakeTrainer make;
  std::vector<std::string> kinds;
  std::function<void(const std::string&)> log;
};

// Takes the launch credential out of the environment (protocol::kSecretEnv): returns it, overwrites
// its bytes in the process's environment block (so /proc/PID/environ no longer shows it) and unsets
// it, so that no program the worker starts (the `command` trainer's) inherits it. Call first thing
// in main, before any thread starts. "" when it is not set.
std::string take_worker_secret();

// Takes the workers' CURVE keys out of the environment (protocol/curve_keys.h: the server's public
// key and the worker's key pair, which the master's launcher sets), wiping and unsetting them as
// take_worker_secret() does. The transport options a worker connects with: kCurve with those keys
// when all three are set, kNone when none is; kConfig naming the missing ones when only some are
// (a half-configured worker would only be refused by the master). Call first thing in main.
Result<protocol::TransportOptions> take_worker_curve_keys();

// take_worker_curve_keys(), and: when the master's launcher said that its transport is ZeroMQ PLAIN
// (protocol::kPlainAuthEnv, taken out of the environment too) and no CURVE keys were given, kPlain
// with `credential` (take_worker_secret()'s) as the password. Call first thing in main.
Result<protocol::TransportOptions> take_worker_transport(const std::string& credential);

// Runs until the master says shutdown (Ok), `terminate` is set (Ok), or no master was reachable for
// give_up (kTimeout). kConfig at once when options.secret is empty (the master would ignore it).
Status run_worker(protocol::ClientTransport& transport, const WorkerOptions& options);

// A packed group (launch/launcher.h, pack_slots): one run_worker() loop per slot, each on its own
// thread with its own transport and options (its own group, credential and hello), in one process.
// options[0].terminate (shared by all) ends them all; when one loop ends, the others are asked to
// end too (the pack lives and dies as one process). The first error, else Ok.
Status run_worker_slots(const std::vector<protocol::ClientTransport*>& transports, std::vector<WorkerOptions> options);

}  // namespace hpctune::worker
