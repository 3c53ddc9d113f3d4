// The protocol's messages on the wire: one field list per message (fields()) used by both encode
// and decode, a non-recursive shape check of the MessagePack bytes before they are decoded, range
// checks, and the random secrets of authentication.
#include "protocol/messages.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <limits>
#include <type_traits>

#include "common/system.h"
#include "common/text.h"

namespace hpctune::protocol {
namespace {

using nlohmann::json;

// The wire names, in the order of the Message variant.
constexpr const char* kNames[] = {"hello", "welcome", "ready",  "assign",    "report",
                                  "stop",  "done",    "failed", "heartbeat", "shutdown"};
static_assert(std::size(kNames) == std::variant_size_v<Message>);

// Ranges of the integer fields. Ids and steps stay below 2^53 so that they survive any JSON reader.
inline constexpr int64_t kMaxId = int64_t{1} << 53;
inline constexpr int64_t kMaxAttempt = INT32_MAX;
inline constexpr int64_t kMaxRanks = 65536;
inline constexpr std::size_t kMaxSecretBytes = 256;

struct Range {
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
};
inline constexpr Range kAny{};
inline constexpr Range kInt{INT_MIN, INT_MAX};
inline constexpr Range kTrialId{1, kMaxId};
inline constexpr Range kAttempt{1, kMaxAttempt};
inline constexpr Range kStep{0, kMaxId};
// A field that may be absent on the wire (and is left out when empty): no range of its own.
inline constexpr Range kOptional{1, 0};
inline bool optional_field(Range r) { return r.lo > r.hi; }

// --- the shape check ---------------------------------------------------------------------------

// Walks one MessagePack document without recursion (an explicit stack of element counts) and
// refuses what decode must never see: nesting deeper than kMaxDepth, a container that claims more
// elements than the frame has bytes left, a string longer than the frame, binary and extension
// types (the protocol uses none), invalid UTF-8, the reserved byte 0xc1, and trailing bytes.
Status check_shape(std::string_view b) {
  std::vector<uint64_t> left{1};  // elements still to read at each open level; [0] = the document
  std::size_t pos = 0;
  const std::size_t n = b.size();
  auto byte = [&](std::size_t i) { return static_cast<uint8_t>(b[i]); };
  auto need = [&](std::size_t k) { return k <= n - pos; };
  auto be = [&](std::size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | byte(at + i);
    return v;
  };
  auto fail = [&](const std::string& what) {
    return err(Errc::kProtocol, "malformed MessagePack at byte " + std::to_string(pos) + ": " + what);
  };
  while (!left.empty()) {
    if (left.back() == 0) {
      left.pop_back();
      continue;
    }
    --left.back();
    if (!need(1)) return fail("the frame ends inside a value");
    const uint8_t c = byte(pos++);
    uint64_t skip = 0, str = 0, items = 0;
    bool container = false, is_str = false;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
      // fixint, nil, bool: nothing follows
    } else if (c >= 0x80 && c <= 0x8f) {
      container = true, items = uint64_t{c & 0x0fu} * 2;
    } else if (c >= 0x90 && c <= 0x9f) {
      container = true, items = c & 0x0fu;
    } else if (c >= 0xa0 && c <= 0xbf) {
      is_str = true, str = c & 0x1fu;
    } else {
      switch (c) {
        case 0xca: skip = 4; break;
        case 0xcb: skip = 8; break;
        case 0xcc: case 0xd0: skip = 1; break;
        case 0xcd: case 0xd1: skip = 2; break;
        case 0xce: case 0xd2: skip = 4; break;
        case 0xcf: case 0xd3: skip = 8; break;
        case 0xd9: case 0xda: case 0xdb: {
          const int w = c == 0xd9 ? 1 : c == 0xda ? 2 : 4;
          if (!need(w)) return fail("the frame ends inside a string length");
          is_str = true, str = be(pos, w), pos += w;
          break;
        }
        case 0xdc: case 0xdd: case 0xde: case 0xdf: {
          const int w = (c == 0xdc || c == 0xde) ? 2 : 4;
          if (!need(w)) return fail("the frame ends inside a container length");
          container = true, items = be(pos, w) * ((c == 0xde || c == 0xdf) ? 2 : 1), pos += w;
          break;
        }
        case 0xc1: return fail("the reserved byte 0xc1");
        default: return fail("binary and extension types are not used by the protocol");
      }
    }
    if (skip > 0) {
      if (!need(skip)) return fail("the frame ends inside a number");
      pos += skip;
    }
    if (is_str) {
      if (!need(str)) return fail("a string of " + std::to_string(str) + " bytes is longer than the frame");
      if (!valid_utf8(b.substr(pos, str))) return fail("a string that is not valid UTF-8");
      pos += str;
    }
    if (container) {
      // Every element takes at least one byte: more elements than bytes left is a lie.
      if (items > n - pos) return fail("a container of " + std::to_string(items) + " elements is longer than the frame");
      if (static_cast<int>(left.size()) > kMaxDepth) {
        return fail("containers nested deeper than " + std::to_string(kMaxDepth) + " levels");
      }
      left.push_back(items);
    }
  }
  if (pos != n) return fail(std::to_string(n - pos) + " bytes after the message");
  return {};
}

// --- the field lists ---------------------------------------------------------------------------

// The fields of each message, in wire order, with the range of each integer field. Calls
// f(key, member, range) for every field; `M` is const when encoding.
template <class M, class F>
void fields(M& m, F&& f) {
  using T = std::remove_const_t<M>;
  if constexpr (std::is_same_v<T, Hello>) {
    f("version", m.version, kInt);
    f("secret", m.secret, kAny);
    f("incarnation", m.incarnation, kAny);
    f("group", m.group, Range{-1, INT32_MAX});
    f("pid", m.pid, Range{0, INT32_MAX});
    f("host", m.host, kAny);
    f("ranks_data", m.ranks_data, Range{1, kMaxRanks});
    f("ranks_model", m.ranks_model, Range{1, kMaxRanks});
    f("trainers", m.trainers, kAny);
    f("gpus", m.gpus, kAny);
  } else if constexpr (std::is_same_v<T, Welcome>) {
    f("version", m.version, kInt);
    f("master_incarnation", m.master_incarnation, kAny);
    // The config bounds the durations; the wire refuses only what no config can mean.
    f("heartbeat_interval_ms", m.heartbeat_interval_ms, kStep);
    f("heartbeat_timeout_ms", m.heartbeat_timeout_ms, kStep);
  } else if constexpr (std::is_same_v<T, Ready>) {
  } else if constexpr (std::is_same_v<T, Assign>) {
    f("trial_id", m.trial_id, kTrialId);
    f("attempt", m.attempt, kAttempt);
    f("seed", m.seed, kAny);
    f("params", m.params, kAny);
    f("trainer", m.trainer, kAny);
    f("trial_dir", m.trial_dir, kAny);
    f("resume_from", m.resume_from, kAny);
  } else if constexpr (std::is_same_v<T, Report>) {
    f("trial_id", m.trial_id, kTrialId);
    f("attempt", m.attempt, kAttempt);
    f("step", m.step, kStep);
    f("metrics", m.metrics, kAny);
  } else if constexpr (std::is_same_v<T, Stop>) {
    f("trial_id", m.trial_id, kTrialId);
    f("attempt", m.attempt, kAttempt);
    f("reason", m.reason, kAny);
  } else if constexpr (std::is_same_v<T, Done>) {
    f("trial_id", m.trial_id, kTrialId);
    f("attempt", m.attempt, kAttempt);
    f("step", m.step, kStep);
    f("stopped", m.stopped, kAny);
    f("metrics", m.metrics, kAny);
    f("artifacts", m.artifacts, kAny);
    f("events", m.events, kOptional);
    f("sync_mode", m.sync_mode, kOptional);
    f("group_ends", m.group_ends, kOptional);
  } else if constexpr (std::is_same_v<T, Failed>) {
    f("trial_id", m.trial_id, kTrialId);
    f("attempt", m.attempt, kAttempt);
    f("error", m.error, kAny);
    f("stderr_tail", m.stderr_tail, kAny);
  } else if constexpr (std::is_same_v<T, Heartbeat>) {
    f("trial_id", m.trial_id, Range{0, kMaxId});  // 0: idle
    f("attempt", m.attempt, Range{0, kMaxAttempt});
  } else if constexpr (std::is_same_v<T, Shutdown>) {
    f("reason", m.reason, kAny);
  } else {
    static_assert(sizeof(T) == 0, "a message without a field list");
  }
}

// --- encoding ----------------------------------------------------------------------------------

json artifacts_json(const std::vector<Artifact>& artifacts) {
  json out = json::array();
  for (const auto& a : artifacts) {
    json item = {{"kind", sanitize_utf8(a.kind)}, {"path", sanitize_utf8(a.path)}};
    if (a.bytes >= 0) item["bytes"] = a.bytes;
    out.push_back(std::move(item));
  }
  return out;
}

struct Writer {
  json& out;
  template <class T>
  void operator()(const char* key, const T& v, Range range) {
    if constexpr (requires { v.empty(); }) {
      if (optional_field(range) && v.empty()) return;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (optional_field(range) && !v) return;
    }
    if constexpr (std::is_same_v<T, std::string>) {
      out[key] = sanitize_utf8(v);
    } else if constexpr (std::is_same_v<T, Metrics>) {
      json m = json::object();
      for (const auto& [k, x] : v) m[sanitize_utf8(k)] = x;
      out[key] = std::move(m);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      json a = json::array();
      for (const auto& s : v) a.push_back(sanitize_utf8(s));
      out[key] = std::move(a);
    } else if constexpr (std::is_same_v<T, std::vector<Artifact>>) {
      out[key] = artifacts_json(v);
    } else if constexpr (std::is_same_v<T, std::vector<TrialEvent>>) {
      json a = json::array();
      for (const auto& e : v) a.push_back({{"kind", sanitize_utf8(e.kind)}, {"detail", e.detail.is_object() ? e.detail : json::object()}});
      out[key] = std::move(a);
    } else if constexpr (std::is_same_v<T, StopReason>) {
      out[key] = to_string(v);
    } else {
      out[key] = v;
    }
  }
};

// --- decoding ----------------------------------------------------------------------------------

// Reads the fields of one message, checking presence, JSON type and range; the first error wins.
class Reader {
 public:
  Reader(const json& obj, const char* type) : obj_(obj), type_(type) {}

  template <class T>
  void operator()(const char* key, T& out, Range range) {
    if (!error_.empty()) return;
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      if (optional_field(range)) return;
      return fail(key, "missing");
    }
    read(key, *it, out, range);
  }

  const std::string& error() const { return error_; }

 private:
  void fail(const std::string& key, const std::string& what) {
    if (error_.empty()) error_ = std::string(type_) + "." + key + ": " + what;
  }
  void wrong_type(const std::string& key, const json& v) { fail(key, std::string("wrong type (") + v.type_name() + ")"); }
  static std::string range_text(Range r) { return "[" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]"; }

  // Signed integers: msgpack positive ints arrive unsigned and may exceed INT64_MAX.
  bool read_int(const std::string& key, const json& v, int64_t& out, Range range) {
    if (!v.is_number_integer()) return wrong_type(key, v), false;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(range.hi)) return fail(key, std::to_string(u) + " is out of range " + range_text(range)), false;
      out = static_cast<int64_t>(u);
    } else {
      out = v.get<int64_t>();
    }
    if (out < range.lo || out > range.hi) return fail(key, std::to_string(out) + " is out of range " + range_text(range)), false;
    return true;
  }

  template <class T>
  void read(const std::string& key, const json& v, T& out, Range range) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) return wrong_type(key, v);
      out = v.get<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return wrong_type(key, v);
      out = v.get<bool>();
    } else if constexpr (std::is_same_v<T, StopReason>) {
      if (!v.is_string()) return wrong_type(key, v);
      const std::string name = v.get<std::string>();
      std::string known;
      for (StopReason r : kStopReasons) {
        if (name == to_string(r)) {
          out = r;
          return;
        }
        known += (known.empty() ? "" : ", ") + std::string(to_string(r));
      }
      return fail(key, "unknown reason '" + name.substr(0, 64) + "' (one of " + known + ")");
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      if (!v.is_number_integer()) return wrong_type(key, v);
      if (!v.is_number_unsigned()) return fail(key, std::to_string(v.get<int64_t>()) + " is negative");
      out = v.get<uint64_t>();
    } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) {
      int64_t x = 0;
      if (read_int(key, v, x, range)) out = static_cast<T>(x);
    } else if constexpr (std::is_same_v<T, json>) {
      if (!v.is_object()) return fail(key, "not an object");
      out = v;
    } else if constexpr (std::is_same_v<T, Metrics>) {
      if (!v.is_object()) return wrong_type(key, v);
      out.clear();
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_number()) return fail(key + "." + m.key(), "not a number");
        out[m.key()] = m.value().get<double>();
      }
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) return wrong_type(key, v);
      out.clear();
      for (const auto& e : v) {
        if (!e.is_string()) return wrong_type(key, v);
        out.push_back(e.get<std::string>());
      }
    } else if constexpr (std::is_same_v<T, std::vector<Artifact>>) {
      if (!v.is_array()) return wrong_type(key, v);
      out.clear();
      for (std::size_t i = 0; i < v.size(); ++i) {
        const json& e = v[i];
        const std::string at = key + "[" + std::to_string(i) + "]";
        if (!e.is_object()) return fail(at, "not an object");
        Artifact a;
        Reader r(e, at.c_str());
        r("kind", a.kind, kAny);
        r("path", a.path, kAny);
        if (e.contains("bytes")) r("bytes", a.bytes, Range{-1, std::numeric_limits<int64_t>::max()});
        if (!r.error().empty()) {
          if (error_.empty()) error_ = std::string(type_) + "." + r.error();
          return;
        }
        out.push_back(std::move(a));
      }
    } else if constexpr (std::is_same_v<T, std::vector<TrialEvent>>) {
      if (!v.is_array()) return wrong_type(key, v);
      if (v.size() > kMaxTrialEvents) return fail(key, "more than " + std::to_string(kMaxTrialEvents) + " events");
      out.clear();
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string at = key + "[" + std::to_string(i) + "]";
        if (!v[i].is_object()) return fail(at, "not an object");
        TrialEvent e;
        Reader r(v[i], at.c_str());
        r("kind", e.kind, kAny);
        r("detail", e.detail, kAny);
        if (!r.error().empty()) {
          if (error_.empty()) error_ = std::string(type_) + "." + r.error();
          return;
        }
        out.push_back(std::move(e));
      }
    } else {
      static_assert(sizeof(T) == 0, "unsupported field type");
    }
  }

  const json& obj_;
  const char* type_;
  std::string error_;
};

// A short name of a-z, 0-9 and _ (a trial event's kind, done.sync_mode).
bool is_short_name(std::string_view s, std::size_t max_bytes) {
  if (s.size() > max_bytes) return false;
  for (unsigned char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

template <class T>
Result<Message> read_message(const json& j, const char* type) {
  T m;
  Reader r(j, type);
  fields(m, r);
  if (!r.error().empty()) return err(Errc::kProtocol, r.error());
  if constexpr (std::is_same_v<T, Done>) {
    if (!is_short_name(m.sync_mode, 32)) return err(Errc::kProtocol, "done.sync_mode: not 0 to 32 of a-z, 0-9 and _");
    for (std::size_t i = 0; i < m.events.size(); ++i) {
      if (m.events[i].kind.empty() || !is_short_name(m.events[i].kind, kMaxTrialEventKindBytes)) {
        return err(Errc::kProtocol, "done.events[" + std::to_string(i) + "].kind: not 1 to " +
                                        std::to_string(kMaxTrialEventKindBytes) + " of a-z, 0-9 and _");
      }
    }
  }
  if constexpr (std::is_same_v<T, Hello>) {
    if (m.secret.size() > kMaxSecretBytes) return err(Errc::kProtocol, "hello.secret: longer than 256 bytes");
    if (m.gpus.size() > kMaxGpus)
      return err(Errc::kProtocol, "hello.gpus: more than " + std::to_string(kMaxGpus) + " ids");
    for (std::size_t i = 0; i < m.gpus.size(); ++i) {
      if (!is_gpu_id(m.gpus[i]))
        return err(Errc::kProtocol, "hello.gpus[" + std::to_string(i) + "]: not a GPU id (1 to " +
                                        std::to_string(kMaxGpuIdBytes) + " letters, digits or _.:-)");
    }
  }
  return Message(std::move(m));
}

template <std::size_t I = 0>
Result<Message> from_json(const json& j, const std::string& type) {
  if constexpr (I == std::variant_size_v<Message>) {
    return err(Errc::kProtocol, "unknown message type '" + type + "'");
  } else {
    using T = std::variant_alternative_t<I, Message>;
    if (type == kNames[I]) {
      if constexpr (std::is_same_v<T, Hello>) {
        // Another version's hello: its version, and its credential and group where they read as
        // ours do (its other fields may differ from ours), so that the master can answer only a
        // worker it launched.
        Hello h;
        Reader r(j, "hello");
        r("version", h.version, kInt);
        if (!r.error().empty()) return err(Errc::kProtocol, r.error());
        if (h.version != kVersion) {
          Hello read;
          Reader secret(j, "hello"), group(j, "hello");
          secret("secret", read.secret, kAny);
          group("group", read.group, Range{-1, INT32_MAX});
          if (secret.error().empty() && read.secret.size() <= kMaxSecretBytes) h.secret = std::move(read.secret);
          if (group.error().empty()) h.group = read.group;
          return Message(std::move(h));
        }
      }
      return read_message<T>(j, kNames[I]);
    }
    return from_json<I + 1>(j, type);
  }
}

}  // namespace

const char* to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::kPruned: return "pruned";
    case StopReason::kPause: return "pause";
    case StopReason::kInterrupted: return "interrupted";
  }
  return "?";
}

const char* type_name(const Message& message) noexcept {
  return kNames[message.index()];
}

std::string encode(const Message& message) {
  json j = json::object();
  j["t"] = type_name(message);
  std::visit([&](const auto& m) { fields(m, Writer{j}); }, message);
  std::vector<uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

Result<Message> decode(std::string_view bytes) {
  if (bytes.empty()) return err(Errc::kProtocol, "empty frame");
  if (static_cast<int64_t>(bytes.size()) > kMaxMessageBytes) {
    return err(Errc::kProtocol, "frame of " + std::to_string(bytes.size()) + " bytes exceeds the limit");
  }
  // Before the (recursive) decoder sees anything: bounded depth, honest lengths, UTF-8.
  HPCTUNE_TRY(check_shape(bytes));
  json j = json::from_msgpack(bytes.begin(), bytes.end(), /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err(Errc::kProtocol, "not a MessagePack document");
  if (!j.is_object()) return err(Errc::kProtocol, "message is not a map");
  auto t = j.find("t");
  if (t == j.end() || !t->is_string()) return err(Errc::kProtocol, "message without a string field 't'");
  return from_json(j, t->get<std::string>());
}

}  // namespace hpctune::protocol
