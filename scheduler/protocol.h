// The master <-> trainer-group protocol: every message, with its encoding and decoding.
//
// Transport: the master binds a ZeroMQ ROUTER; each trainer-group leader (rank 0 of the group)
// connects a DEALER. One ZeroMQ frame per message (the ROUTER adds the peer's routing id).
// Encoding: a MessagePack map {"t": <type name>, ...fields}. Decoding checks every field's
// presence and type and answers kProtocol naming "<type>.<field>" on any mismatch.
//
//   worker                         master
//   hello{version, incarnation} -> 
//                               <- welcome{heartbeat settings}     (or shutdown on a bad version)
//   ready                       ->                                  idle, wants a trial
//                               <- assign{trial, attempt, params}
//   report{step, metrics}       ->                                  0..n intermediate reports
//                               <- stop{trial, attempt}            early stopping / shutdown
//   done{metrics} | failed{error} ->                               the worker is idle again
//   heartbeat                  <->  both ways, every heartbeat_interval
//                               <- shutdown                         the campaign is over
//
// Results are keyed by (trial_id, attempt): a result for an attempt the master already declared
// lost is logged and ignored, so a result applies exactly once. `incarnation` is a random id the
// worker process draws at start; a hello with a new incarnation from a known group means the group
// restarted, and whatever its old incarnation was running is lost.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::protocol {

inline constexpr int kVersion = 1;
// ZMQ_MAXMSGSIZE on the master's socket: larger frames are dropped by ZeroMQ itself.
inline constexpr int64_t kMaxMessageBytes = 4 << 20;

using Metrics = std::map<std::string, double>;

struct Hello {
  int version = kVersion;
  uint64_t incarnation = 0;  // random per worker process
  int64_t group = -1;        // the group index the launcher gave it (-1: unknown, e.g. started by hand)
  int64_t pid = 0;
  std::string host;
  int64_t ranks_data = 1;
  int64_t ranks_model = 1;
  std::vector<std::string> trainers;  // trainer kinds this worker can run
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
};

struct Report {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  int64_t step = 0;
  Metrics metrics;
};

struct Stop {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  std::string reason;  // "pruned", "shutdown", "interrupted"
};

struct Artifact {
  std::string kind;  // "checkpoint", "val_probs", "test_probs", "log", ...
  std::string path;
  int64_t bytes = -1;  // the file's size when the trial ended; -1 = unknown (optional on the wire)
};

struct Done {
  int64_t trial_id = 0;
  int64_t attempt = 0;
  int64_t step = 0;  // the last step reached
  bool stopped = false;  // true when the trial ended early because of a stop message
  Metrics metrics;
  std::vector<Artifact> artifacts;
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
// kProtocol for malformed bytes, an unknown type, or a missing/mistyped field.
Result<Message> decode(std::string_view bytes);

}  // namespace hpctune::protocol
