// The master <-> trainer-group protocol: every message, with its encoding and decoding.
//
// Transport: the master binds a ZeroMQ ROUTER; each trainer-group leader (rank 0 of the group)
// connects a DEALER. One ZeroMQ frame per message (the ROUTER adds the peer's routing id).
// Encoding: a MessagePack map {"t": <type name>, ...fields}. Each message's fields are listed once
// (messages.cpp, fields()) and that list drives both encoding and decoding. Decoding first walks the
// bytes without recursion and refuses nesting deeper than kMaxDepth, element counts larger than the
// frame, binary/extension types, invalid UTF-8 and trailing bytes; then it checks every field's
// presence, type and range and answers kProtocol naming "<type>.<field>" on any mismatch. Strings
// that the sender cannot vouch for (error text, a program's stderr) are made valid UTF-8 on encode.
//
//   worker                         master
//   hello{version, secret, incarnation, group} ->
//                               <- welcome{heartbeat settings}     (or shutdown on a bad version;
//                                                                   nothing at all on a bad secret)
//   ready                       ->                                  idle, wants a trial
//                               <- assign{trial, attempt, params, resume_from}
//   report{step, metrics}       ->                                  started (no metrics), then 0..n reports
//                               <- stop{trial, attempt, reason}    pruned, pause, interrupted, ...
//   done{metrics} | failed{error} ->                               the worker is idle again
//   heartbeat                  <->  both ways, every heartbeat_interval
//                               <- shutdown                         the campaign is over
//
// Results are keyed by (trial_id, attempt): a result for an attempt the master already declared
// lost is logged and ignored, so a result applies exactly once. `incarnation` is a random id the
// worker process draws at start (from the system's random source).
//
// Authentication, on top of the transport's (CURVE on a network address admits only the
// campaign's worker key: protocol/curve_keys.h): the master hands each group it launches a
// credential in the environment variable kSecretEnv, "<campaign secret>.<launch token>" (hex, 128 bits each, from the
// system's random source, kept only in the master's memory; a fresh token for every launch of a
// group). The worker takes it out of its environment at start (so programs it starts do not inherit
// it) and sends it in hello. The master refuses a hello whose secret or whose token for the named
// group is not the current one, and a hello that would displace a live registration of the group
// with another incarnation (see scheduler.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "common/result.h"
#include "common/secrets.h"

namespace hpctune::protocol {

// 2: hello carries `secret`; integer fields are range-checked.
// 3: stop.reason is one of StopReason's names; assign carries resume_from.
// 4: hello carries `gpus`, the GPUs the worker's process was given.
inline constexpr int kVersion = 4;
// hello.gpus: at most this many ids, each at most kMaxGpuIdBytes of letters, digits and "_.:-"
// (an index, or a GPU or MIG UUID).
inline constexpr std::size_t kMaxGpus = 1024;
inline constexpr std::size_t kMaxGpuIdBytes = 96;
// Whether `id` is a GPU id hello.gpus may carry (1 to kMaxGpuIdBytes of letters, digits and "_.:-").
inline bool is_gpu_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxGpuIdBytes) return false;
  for (unsigned char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
          c == ':' || c == '-'))
      return false;
  return true;
}
// Containers nested deeper than this are refused before anything is decoded (the decoder recurses).
inline constexpr int kMaxDepth = 64;
// The environment variable that carries a launched group's credential (see above).
inline constexpr const char* kSecretEnv = "HPCTUNE_SECRET";
// ZMQ_MAXMSGSIZE on the master's socket: larger frames are dropped by ZeroMQ itself. Declared once,
// in common/limits.h, where the config checks that a trial's assign fits.
inline constexpr int64_t kMaxMessageBytes = hpctune::kMaxMessageBytes;

using Metrics = std::map<std::string, double>;

// A hello of another protocol version decodes to just its version (the other fields keep their
// defaults), so that the master can answer with a shutdown naming both versions.
struct Hello {
  int version = kVersion;
  std::string secret;        // the credential from kSecretEnv
  uint64_t incarnation = 0;  // random per worker process
  int64_t group = -1;        // the group index the launcher gave it (-1: unknown, e.g. started by hand)
  int64_t pid = 0;
  std::string host;
  int64_t ranks_data = 1;
  int64_t ranks_model = 1;
  std::vector<std::string> trainers;  // trainer kinds this worker can run
  // The GPUs its process was given, as CUDA_VISIBLE_DEVICES names them (else SLURM_STEP_GPUS);
  // empty: none. The master records them with each attempt the group runs where its launcher did
  // not assign devices itself (SLURM's steps get theirs from SLURM).
  std::vector<std::string> gpus;
};

struct Welcome {
  int version = kVersion;
  uint64_t master_incarnation = 0;
  int64_t heartbeat_interval_ms = 1000;
  int64_t heartbeat_timeout_ms = 10000;
};

struct Ready {};

struct Assign {
  int64_t trial_id = 0;
  int64_t attempt = 1;
  uint64_t seed = 0;                              // the trial's seed (from the campaign seed)
  nlohmann::json params = nlohmann::json::object();   // the searched parameters
  nlohmann::json trainer = nlohmann::json::object();  // the trainer's fixed settings, incl. "kind"
  std::string trial_dir;                          // where artifacts and checkpoints go ("" = none)
  // The checkpoint to start from ("" = from scratch): the path of a checkpoint an earlier attempt
  // (of this trial, or of another one: PBT's exploit) wrote, taken from the store's artifacts. A
  // path, not a (trial, attempt) reference, so that the worker needs no store to find it.
  std::string resume_from;
};

// A report without metrics (step 0) is the worker's "started" notice, sent as the trainer begins:
// the master marks the trial running from then and records no metric row for it.
struct Report {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  int64_t step = 0;
  Metrics metrics;
};

// Why the master stops a running trial: the cases the master has. On the wire as its name; any
// other name is refused (a new reason is a new protocol version).
//   pruned       early stopping judged it (the trial ends pruned)
//   pause        its trial source paused it: it ends this attempt (a done with stopped = true) and
//                resumes later, on any free group, with new parameters, from a checkpoint (PBT)
//   interrupted  Ctrl-C on the master (recorded interrupted; resume runs it again)
// (The end of a campaign is a shutdown message, not a stop.)
enum class StopReason { kPruned, kPause, kInterrupted };
inline constexpr StopReason kStopReasons[] = {StopReason::kPruned, StopReason::kPause, StopReason::kInterrupted};
const char* to_string(StopReason reason) noexcept;

struct Stop {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  StopReason reason = StopReason::kPruned;
};

struct Artifact {
  std::string kind;  // "checkpoint", "val_probs", "test_probs", "log", ...
  std::string path;
  int64_t bytes = -1;  // the file's size when the trial ended; -1 = unknown (optional on the wire)
};

// Something that happened inside a trial that the store keeps as an event of the attempt (a data
// replica that died and was dropped, say): `kind` is 1 to kMaxTrialEventKindBytes of a-z, 0-9 and
// _; `detail` a JSON object. At most kMaxTrialEvents per done.
struct TrialEvent {
  std::string kind;
  nlohmann::json detail = nlohmann::json::object();
};
inline constexpr std::size_t kMaxTrialEvents = 32;
inline constexpr std::size_t kMaxTrialEventKindBytes = 48;

struct Done {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  int64_t step = 0;  // the last step reached
  bool stopped = false;  // true when the trial ended early because of a stop message
  Metrics metrics;
  std::vector<Artifact> artifacts;
  // Optional on the wire (absent when empty; older workers never send them):
  std::vector<TrialEvent> events = {};
  // How the trial's data replicas combined their gradients (trainer.sync: allreduce, ssp, downpour,
  // hogwild); "" when the trainer has no such setting. At most 32 bytes of a-z, 0-9 and _.
  std::string sync_mode = "";
  // The group ends after sending this (it lost a rank during the trial; its launcher starts it
  // again): the master assigns it nothing more.
  bool group_ends = false;
};

struct Failed {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  std::string error;
  std::string stderr_tail;
};

struct Heartbeat {
  int64_t trial_id = 0;  // the trial the worker is running, 0 when idle
  int64_t attempt = 0;
};

struct Shutdown {
  std::string reason;
};

using Message = std::variant<Hello, Welcome, Ready, Assign, Report, Stop, Done, Failed, Heartbeat, Shutdown>;

// The wire name of a message type ("hello", "assign", ...).
const char* type_name(const Message& message) noexcept;

std::string encode(const Message& message);
// kProtocol for malformed bytes (see the top of this file), an unknown type, or a missing,
// mistyped or out-of-range field. Never throws, never recurses deeper than kMaxDepth.
Result<Message> decode(std::string_view bytes);

// The campaign secret and launch tokens: common/secrets.h.
using ::hpctune::random_hex;
using ::hpctune::secrets_equal;

}  // namespace hpctune::protocol
