#include "scheduler/protocol.h"

#include <type_traits>

namespace hpctune::protocol {
namespace {

using nlohmann::json;

template <class>
inline constexpr bool kAlwaysFalse = false;

// Reads field `key` of `obj` into `out`, checking presence and JSON type.
class FieldReader {
 public:
  FieldReader(const json& obj, const char* type) : obj_(obj), type_(type) {}

  template <class T>
  void get(const char* key, T& out) {
    if (!error_.empty()) return;
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      error_ = std::string(type_) + "." + key + ": missing";
      return;
    }
    const json& v = *it;
    bool ok = false;
    if constexpr (std::is_same_v<T, std::string>) {
      ok = v.is_string();
    } else if constexpr (std::is_same_v<T, bool>) {
      ok = v.is_boolean();
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    } else if constexpr (std::is_integral_v<T>) {
      ok = v.is_number_integer();
    } else if constexpr (std::is_same_v<T, json>) {
      ok = true;
    } else if constexpr (std::is_same_v<T, Metrics>) {
      ok = v.is_object();
      if (ok) {
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_number()) {
            error_ = std::string(type_) + "." + key + "." + m.key() + ": not a number";
            return;
          }
        }
      }
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      ok = v.is_array();
      if (ok) {
        for (const auto& e : v) ok = ok && e.is_string();
      }
    } else if constexpr (std::is_same_v<T, std::vector<Artifact>>) {
      ok = v.is_array();
      if (ok) {
        for (const auto& e : v) {
          ok = ok && e.is_object() && e.contains("kind") && e["kind"].is_string() && e.contains("path") &&
               e["path"].is_string() && (!e.contains("bytes") || e["bytes"].is_number_integer());
        }
      }
    } else {
      static_assert(kAlwaysFalse<T>, "unsupported field type");
    }
    if (!ok) {
      error_ = std::string(type_) + "." + key + ": wrong type (" + v.type_name() + ")";
      return;
    }
    if constexpr (std::is_same_v<T, std::vector<Artifact>>) {
      out.clear();
      for (const auto& e : v)
        out.push_back(Artifact{e["kind"].get<std::string>(), e["path"].get<std::string>(),
                               e.contains("bytes") ? e["bytes"].get<int64_t>() : -1});
    } else {
      out = v.get<T>();
    }
  }

  const std::string& error() const { return error_; }

 private:
  const json& obj_;
  const char* type_;
  std::string error_;
};

json artifacts_json(const std::vector<Artifact>& artifacts) {
  json out = json::array();
  for (const auto& a : artifacts) {
    json item = {{"kind", a.kind}, {"path", a.path}};
    if (a.bytes >= 0) item["bytes"] = a.bytes;
    out.push_back(std::move(item));
  }
  return out;
}

json to_json(const Hello& m) {
  return {{"t", "hello"}, {"version", m.version}, {"incarnation", m.incarnation}, {"group", m.group},
          {"pid", m.pid}, {"host", m.host}, {"ranks_data", m.ranks_data}, {"ranks_model", m.ranks_model},
          {"trainers", m.trainers}};
}
json to_json(const Welcome& m) {
  return {{"t", "welcome"}, {"version", m.version}, {"master_incarnation", m.master_incarnation},
          {"heartbeat_interval_ms", m.heartbeat_interval_ms}, {"heartbeat_timeout_ms", m.heartbeat_timeout_ms}};
}
json to_json(const Ready&) { return {{"t", "ready"}}; }
json to_json(const Assign& m) {
  return {{"t", "assign"}, {"trial_id", m.trial_id}, {"attempt", m.attempt}, {"seed", m.seed},
          {"params", m.params}, {"trainer", m.trainer}, {"trial_dir", m.trial_dir}};
}
json to_json(const Report& m) {
  return {{"t", "report"}, {"trial_id", m.trial_id}, {"attempt", m.attempt}, {"step", m.step}, {"metrics", m.metrics}};
}
json to_json(const Stop& m) {
  return {{"t", "stop"}, {"trial_id", m.trial_id}, {"attempt", m.attempt}, {"reason", m.reason}};
}
json to_json(const Done& m) {
  return {{"t", "done"},       {"trial_id", m.trial_id}, {"attempt", m.attempt},
          {"step", m.step},    {"stopped", m.stopped},   {"metrics", m.metrics},
          {"artifacts", artifacts_json(m.artifacts)}};
}
json to_json(const Failed& m) {
  return {{"t", "failed"}, {"trial_id", m.trial_id}, {"attempt", m.attempt}, {"error", m.error},
          {"stderr_tail", m.stderr_tail}};
}
json to_json(const Heartbeat& m) { return {{"t", "heartbeat"}, {"trial_id", m.trial_id}, {"attempt", m.attempt}}; }
json to_json(const Shutdown& m) { return {{"t", "shutdown"}, {"reason", m.reason}}; }

template <class T>
Result<Message> finish(FieldReader& r, T&& m) {
  if (!r.error().empty()) return err(Errc::kProtocol, r.error());
  return Message(std::forward<T>(m));
}

Result<Message> from_json(const json& j) {
  auto t = j.find("t");
  if (t == j.end() || !t->is_string()) return err(Errc::kProtocol, "message without a string field 't'");
  const std::string& type = t->get_ref<const std::string&>();
  if (type == "hello") {
    Hello m;
    FieldReader r(j, "hello");
    r.get("version", m.version);
    r.get("incarnation", m.incarnation);
    r.get("group", m.group);
    r.get("pid", m.pid);
    r.get("host", m.host);
    r.get("ranks_data", m.ranks_data);
    r.get("ranks_model", m.ranks_model);
    r.get("trainers", m.trainers);
    return finish(r, std::move(m));
  }
  if (type == "welcome") {
    Welcome m;
    FieldReader r(j, "welcome");
    r.get("version", m.version);
    r.get("master_incarnation", m.master_incarnation);
    r.get("heartbeat_interval_ms", m.heartbeat_interval_ms);
    r.get("heartbeat_timeout_ms", m.heartbeat_timeout_ms);
    return finish(r, std::move(m));
  }
  if (type == "ready") return Message(Ready{});
  if (type == "assign") {
    Assign m;
    FieldReader r(j, "assign");
    r.get("trial_id", m.trial_id);
    r.get("attempt", m.attempt);
    r.get("seed", m.seed);
    r.get("params", m.params);
    r.get("trainer", m.trainer);
    r.get("trial_dir", m.trial_dir);
    if (r.error().empty() && !m.params.is_object()) return err(Errc::kProtocol, "assign.params: not an object");
    if (r.error().empty() && !m.trainer.is_object()) return err(Errc::kProtocol, "assign.trainer: not an object");
    return finish(r, std::move(m));
  }
  if (type == "report") {
    Report m;
    FieldReader r(j, "report");
    r.get("trial_id", m.trial_id);
    r.get("attempt", m.attempt);
    r.get("step", m.step);
    r.get("metrics", m.metrics);
    return finish(r, std::move(m));
  }
  if (type == "stop") {
    Stop m;
    FieldReader r(j, "stop");
    r.get("trial_id", m.trial_id);
    r.get("attempt", m.attempt);
    r.get("reason", m.reason);
    return finish(r, std::move(m));
  }
  if (type == "done") {
    Done m;
    FieldReader r(j, "done");
    r.get("trial_id", m.trial_id);
    r.get("attempt", m.attempt);
    r.get("step", m.step);
    r.get("stopped", m.stopped);
    r.get("metrics", m.metrics);
    r.get("artifacts", m.artifacts);
    return finish(r, std::move(m));
  }
  if (type == "failed") {
    Failed m;
    FieldReader r(j, "failed");
    r.get("trial_id", m.trial_id);
    r.get("attempt", m.attempt);
    r.get("error", m.error);
    r.get("stderr_tail", m.stderr_tail);
    return finish(r, std::move(m));
  }
  if (type == "heartbeat") {
    Heartbeat m;
    FieldReader r(j, "heartbeat");
    r.get("trial_id", m.trial_id);
    r.get("attempt", m.attempt);
    return finish(r, std::move(m));
  }
  if (type == "shutdown") {
    Shutdown m;
    FieldReader r(j, "shutdown");
    r.get("reason", m.reason);
    return finish(r, std::move(m));
  }
  return err(Errc::kProtocol, "unknown message type '" + type + "'");
}

}  // namespace

const char* type_name(const Message& message) noexcept {
  static constexpr const char* kNames[] = {"hello", "welcome", "ready",  "assign",    "report",
                                           "stop",  "done",    "failed", "heartbeat", "shutdown"};
  static_assert(std::size(kNames) == std::variant_size_v<Message>);
  return kNames[message.index()];
}

std::string encode(const Message& message) {
  json j = std::visit([](const auto& m) { return to_json(m); }, message);
  std::vector<uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

Result<Message> decode(std::string_view bytes) {
  if (bytes.empty()) return err(Errc::kProtocol, "empty frame");
  if (static_cast<int64_t>(bytes.size()) > kMaxMessageBytes) {
    return err(Errc::kProtocol, "frame of " + std::to_string(bytes.size()) + " bytes exceeds the limit");
  }
  json j = json::from_msgpack(bytes.begin(), bytes.end(), /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err(Errc::kProtocol, "not a MessagePack document");
  if (!j.is_object()) return err(Errc::kProtocol, "message is not a map");
  return from_json(j);
}

}  // namespace hpctune::protocol
