// Protocol: every message round-trips; malformed frames are errors naming the field. The ZeroMQ
// transport applies its TransportOptions on real sockets (loopback); bind addresses are checked
// (common/endpoint.h). CURVE: only the allowlisted worker key gets through; a campaign's key
// directory is private to its owner (protocol/curve_keys.h) (issue 13).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "common/endpoint.h"
#include "protocol/curve_keys.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using namespace hpctune::protocol;

namespace {

template <class T>
T round_trip(const T& in) {
  auto decoded = decode(encode(Message(in)));
  REQUIRE_MESSAGE(decoded.ok(), (decoded.ok() ? "" : decoded.error().message()));
  REQUIRE(std::holds_alternative<T>(*decoded));
  return std::get<T>(*decoded);
}

std::string msgpack(const nlohmann::json& j) {
  auto bytes = nlohmann::json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

TEST_CASE("every message type round-trips") {
  Hello h{kVersion, "c0ffee.beef", 0xFFFFFFFFFFFFFFF0ULL, 3, 4242, "node07", 2, 4, {"mlp", "sleep"},
          {"0", "3", "GPU-8f0e1c2a-aa11-4b1c-9d3e-0123456789ab", "MIG-1:2"}};
  auto h2 = round_trip(h);
  CHECK(h2.version == kVersion);
  CHECK(h2.secret == "c0ffee.beef");
  CHECK(h2.incarnation == 0xFFFFFFFFFFFFFFF0ULL);
  CHECK(h2.group == 3);
  CHECK(h2.pid == 4242);
  CHECK(h2.host == "node07");
  CHECK(h2.ranks_data == 2);
  CHECK(h2.ranks_model == 4);
  CHECK(h2.trainers == std::vector<std::string>{"mlp", "sleep"});
  CHECK(h2.gpus == h.gpus);

  auto w = round_trip(Welcome{kVersion, 99, 250, 1500});
  CHECK(w.master_incarnation == 99);
  CHECK(w.heartbeat_interval_ms == 250);
  CHECK(w.heartbeat_timeout_ms == 1500);

  round_trip(Ready{});

  Assign a;
  a.trial_id = 17;
  a.attempt = 2;
  a.seed = 123456789012345ULL;
  a.params = {{"lr", 0.01}, {"hidden", {128, 64}}, {"act", "relu"}};
  a.trainer = {{"kind", "mlp"}, {"epochs", 3}};
  a.trial_dir = "/tmp/x/17";
  a.resume_from = "/tmp/x/9/checkpoint";
  auto a2 = round_trip(a);
  CHECK(a2.resume_from == "/tmp/x/9/checkpoint");
  CHECK(a2.trial_id == 17);
  CHECK(a2.attempt == 2);
  CHECK(a2.seed == 123456789012345ULL);
  CHECK(a2.params == a.params);
  CHECK(a2.trainer == a.trainer);
  CHECK(a2.trial_dir == "/tmp/x/17");

  auto r = round_trip(Report{17, 2, 3, {{"val_accuracy", 0.91}, {"val_loss", 0.25}}});
  CHECK(r.step == 3);
  CHECK(r.metrics.at("val_accuracy") == doctest::Approx(0.91));

  for (StopReason reason : kStopReasons) {
    auto s = round_trip(Stop{17, 2, reason});
    CHECK(s.reason == reason);
  }
  CHECK(std::string(to_string(StopReason::kPause)) == "pause");

  Done d;
  d.trial_id = 17;
  d.attempt = 2;
  d.step = 5;
  d.stopped = true;
  d.metrics = {{"val_accuracy", 0.5}};
  d.artifacts = {{"val_probs", "/tmp/x/17/val.npy", 4096}, {"log", "/tmp/x/17/stdout.log"}};
  auto d2 = round_trip(d);
  CHECK(d2.stopped);
  CHECK(d2.step == 5);
  REQUIRE(d2.artifacts.size() == 2);
  CHECK(d2.artifacts[0].kind == "val_probs");
  CHECK(d2.artifacts[0].path == "/tmp/x/17/val.npy");
  CHECK(d2.artifacts[0].bytes == 4096);
  CHECK(d2.artifacts[1].bytes == -1);  // unknown sizes stay off the wire

  auto f = round_trip(Failed{17, 2, "exit code 3", "Traceback..."});
  CHECK(f.error == "exit code 3");
  CHECK(f.stderr_tail == "Traceback...");

  auto hb = round_trip(Heartbeat{17, 2});
  CHECK(hb.trial_id == 17);

  auto sd = round_trip(Shutdown{"campaign complete"});
  CHECK(sd.reason == "campaign complete");
}

TEST_CASE("type names match the wire names") {
  CHECK(std::string(type_name(Message(Hello{}))) == "hello");
  CHECK(std::string(type_name(Message(Shutdown{}))) == "shutdown");
  CHECK(std::string(type_name(Message(Heartbeat{}))) == "heartbeat");
}

TEST_CASE("garbage and malformed frames are protocol errors") {
  SUBCASE("empty frame") {
    auto r = decode("");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kProtocol);
  }
  SUBCASE("random bytes") {
    auto r = decode(std::string("\xc1\xff\x00garbage", 10));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kProtocol);
  }
  SUBCASE("not a map") {
    auto r = decode(msgpack(nlohmann::json::array({1, 2, 3})));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kProtocol);
  }
  SUBCASE("unknown type") {
    auto r = decode(msgpack({{"t", "teleport"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("teleport") != std::string::npos);
  }
  SUBCASE("missing field names it") {
    auto r = decode(msgpack({{"t", "report"}, {"trial_id", 1}, {"attempt", 1}, {"metrics", nlohmann::json::object()}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "report.step: missing");
  }
  SUBCASE("wrong type names it") {
    auto r = decode(msgpack({{"t", "stop"}, {"trial_id", "seven"}, {"attempt", 1}, {"reason", "x"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("stop.trial_id: wrong type") == 0);
  }
  SUBCASE("non-numeric metric") {
    auto r = decode(msgpack({{"t", "report"}, {"trial_id", 1}, {"attempt", 1}, {"step", 1},
                             {"metrics", {{"val_accuracy", "high"}}}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "report.metrics.val_accuracy: not a number");
  }
  SUBCASE("assign params must be an object") {
    auto r = decode(msgpack({{"t", "assign"}, {"trial_id", 1}, {"attempt", 1}, {"seed", 1}, {"params", 3},
                             {"trainer", nlohmann::json::object()}, {"trial_dir", ""}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "assign.params: not an object");
  }
  SUBCASE("oversized frame") {
    std::string big(static_cast<size_t>(protocol::kMaxMessageBytes) + 1, 'x');
    auto r = decode(big);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kProtocol);
  }
  SUBCASE("truncated frame") {
    std::string bytes = encode(Message(Report{1, 1, 1, {{"a", 1.0}}}));
    auto r = decode(std::string_view(bytes).substr(0, bytes.size() / 2));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kProtocol);
  }
}

namespace {

// A hello as a JSON object with every field valid; tests change one field at a time.
nlohmann::json hello_json() {
  return {{"t", "hello"}, {"version", kVersion}, {"secret", "s"}, {"incarnation", 1}, {"group", 0},
          {"pid", 10},    {"host", "h"},         {"ranks_data", 1}, {"ranks_model", 1},
          {"trainers", nlohmann::json::array()}, {"gpus", nlohmann::json::array()}};
}

std::string decode_error(const std::string& bytes) {
  auto r = decode(bytes);
  if (r.ok()) return "<decoded>";
  CHECK(r.error().code() == Errc::kProtocol);
  return r.error().message();
}

}  // namespace

TEST_CASE("a frame nested 200000 levels deep is refused without recursion") {
  // The probe that crashed the master: "\x91" * 200000 + "\xc0" (arrays of one element, then nil).
  const std::string deep = std::string(200000, '\x91') + "\xc0";
  const std::string e = decode_error(deep);
  CHECK(e.find("nested deeper than " + std::to_string(kMaxDepth)) != std::string::npos);
  // The same inside a map, and a map of maps, and just past the bound.
  CHECK(decode_error("\x81\xa1t" + std::string(100000, '\x81') + "\xc0").find("nested deeper") != std::string::npos);
  CHECK(decode_error("\x81\xa1x" + std::string(kMaxDepth, '\x91') + "\xc0").find("nested deeper") != std::string::npos);
  // Depth within the bound decodes as far as the message check.
  CHECK(decode_error("\x82\xa1t\xa5ready\xa1x" + std::string(kMaxDepth - 2, '\x91') + "\xc0") == "<decoded>");
}

TEST_CASE("lengths, types and bytes that the shape check refuses") {
  CHECK(decode_error("\xdd\xff\xff\xff\xff\xc0").find("longer than the frame") != std::string::npos);  // 2^32-1 elements
  CHECK(decode_error("\xdf\x7f\xff\xff\xff").find("longer than the frame") != std::string::npos);
  CHECK(decode_error("\xdb\x7f\xff\xff\xff" "abc").find("longer than the frame") != std::string::npos);
  CHECK(decode_error(std::string("\x81\xa1t\xc4\x01x", 6)).find("binary") != std::string::npos);
  CHECK(decode_error(std::string("\x81\xa1t\xd4\x01x", 6)).find("extension") != std::string::npos);
  CHECK(decode_error(msgpack({{"t", "ready"}}) + "x").find("after the message") != std::string::npos);
  CHECK(decode_error("\x81\xa1t\xa2\xc3\x28").find("UTF-8") != std::string::npos);  // invalid UTF-8
  CHECK(decode_error("\x81\xa1t\xa3\xe0\x80\xaf").find("UTF-8") != std::string::npos);  // overlong '/'
}

TEST_CASE("integer fields are range-checked and name the field") {
  auto with = [](const char* key, nlohmann::json value) {
    auto j = hello_json();
    j[key] = std::move(value);
    return decode_error(msgpack(j));
  };
  CHECK(with("version", (int64_t{1} << 32) + kVersion)
            .find("hello.version: " + std::to_string((int64_t{1} << 32) + kVersion) + " is out of range") == 0);
  CHECK(with("pid", -1).find("hello.pid: -1 is out of range") == 0);
  CHECK(with("ranks_data", std::numeric_limits<int64_t>::min()).find("hello.ranks_data:") == 0);
  CHECK(with("ranks_model", 65537).find("hello.ranks_model: 65537 is out of range") == 0);
  CHECK(with("ranks_model", 0).find("hello.ranks_model: 0 is out of range") == 0);
  CHECK(with("incarnation", -5).find("hello.incarnation: -5 is negative") == 0);
  CHECK(with("group", -2).find("hello.group:") == 0);
  CHECK(with("pid", 1.5).find("hello.pid: wrong type") == 0);
  CHECK(with("secret", std::string(300, 'a')).find("hello.secret:") == 0);
  CHECK(decode_error(msgpack(hello_json())) == "<decoded>");

  auto report = [](nlohmann::json trial_id, nlohmann::json attempt, nlohmann::json step) {
    return decode_error(msgpack({{"t", "report"}, {"trial_id", trial_id}, {"attempt", attempt}, {"step", step},
                                 {"metrics", nlohmann::json::object()}}));
  };
  // 2^64-1 was stored as -1; anything above INT64_MAX (msgpack uint64) is refused for int64 fields.
  CHECK(report(1, 1, std::numeric_limits<uint64_t>::max()).find("report.step: 18446744073709551615 is out of range") == 0);
  CHECK(report(1, 1, -1).find("report.step: -1 is out of range") == 0);
  CHECK(report(0, 1, 1).find("report.trial_id: 0 is out of range") == 0);
  CHECK(report(1, 0, 1).find("report.attempt: 0 is out of range") == 0);
  CHECK(report(uint64_t{1} << 63, 1, 1).find("report.trial_id:") == 0);
  CHECK(report(1, 1, 0) == "<decoded>");

  CHECK(decode_error(msgpack({{"t", "done"}, {"trial_id", 1}, {"attempt", 1}, {"step", 1}, {"stopped", false},
                              {"metrics", nlohmann::json::object()},
                              {"artifacts", {{{"kind", "log"}, {"path", "/x"}, {"bytes", -7}}}}})) ==
        "done.artifacts[0].bytes: -7 is out of range [-1, 9223372036854775807]");
  CHECK(decode_error(msgpack({{"t", "welcome"}, {"version", kVersion}, {"master_incarnation", 1},
                              {"heartbeat_interval_ms", -1}, {"heartbeat_timeout_ms", 10}}))
            .find("welcome.heartbeat_interval_ms: -1 is out of range") == 0);
  CHECK(decode_error(msgpack({{"t", "heartbeat"}, {"trial_id", 0}, {"attempt", 0}})) == "<decoded>");
}

TEST_CASE("stop.reason is one of a fixed set; assign.resume_from is required") {
  auto stop = [](nlohmann::json reason) {
    return decode_error(msgpack({{"t", "stop"}, {"trial_id", 1}, {"attempt", 1}, {"reason", reason}}));
  };
  CHECK(stop("pause") == "<decoded>");
  CHECK(stop("interrupted") == "<decoded>");
  CHECK(stop("because") == "stop.reason: unknown reason 'because' (one of pruned, pause, interrupted)");
  CHECK(stop("shutdown").find("stop.reason: unknown reason 'shutdown'") == 0);
  CHECK(stop(std::string(1000, 'x')).find("stop.reason: unknown reason '" + std::string(64, 'x') + "'") == 0);
  CHECK(stop(3).find("stop.reason: wrong type") == 0);
  CHECK(decode_error(msgpack({{"t", "assign"}, {"trial_id", 1}, {"attempt", 1}, {"seed", 1},
                              {"params", nlohmann::json::object()}, {"trainer", nlohmann::json::object()},
                              {"trial_dir", ""}})) == "assign.resume_from: missing");
}

TEST_CASE("done.events, done.sync_mode and done.group_ends: optional, round-trip, checked") {
  Done d{4, 1, 2, false, {{"v", 1.0}}, {}};
  d.events = {{"replica_dropped", {{"replica", 1}, {"sync", "ssp"}}}};
  d.sync_mode = "ssp";
  d.group_ends = true;
  const Done back = round_trip(d);
  CHECK(back.group_ends);
  REQUIRE(back.events.size() == 1);
  CHECK(back.events[0].kind == "replica_dropped");
  CHECK(back.events[0].detail == nlohmann::json{{"replica", 1}, {"sync", "ssp"}});
  CHECK(back.sync_mode == "ssp");
  // Absent (an older worker's done, or nothing to say): empty; empty ones are not sent.
  const nlohmann::json base = {{"t", "done"}, {"trial_id", 4}, {"attempt", 1}, {"step", 2}, {"stopped", false},
                               {"metrics", {{"v", 1.0}}}, {"artifacts", nlohmann::json::array()}};
  CHECK(decode_error(msgpack(base)) == "<decoded>");
  CHECK(encode(Done{4, 1, 2, false, {{"v", 1.0}}, {}}) == encode(Message(std::get<Done>(*decode(msgpack(base))))));
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = base;
    j[key] = std::move(v);
    return decode_error(msgpack(j));
  };
  CHECK(with("sync_mode", "Downpour!").find("done.sync_mode: not 0 to 32") == 0);
  CHECK(with("events", {{{"kind", "a b"}, {"detail", nlohmann::json::object()}}}).find("done.events[0].kind") == 0);
  CHECK(with("events", {{{"kind", "x"}}}).find("done.events[0].detail: missing") == 0);
  CHECK(with("events", nlohmann::json::array({nlohmann::json{{"kind", "x"}, {"detail", nlohmann::json::object()}}})) ==
        "<decoded>");
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 33; ++i) many.push_back({{"kind", "x"}, {"detail", nlohmann::json::object()}});
  CHECK(with("events", many).find("done.events: more than 32 events") == 0);
}

TEST_CASE("hello.gpus: the ids a worker was given, bounded and checked; absent is refused") {
  CHECK(decode(msgpack(hello_json())).ok());
  auto with_gpus = [](nlohmann::json gpus) {
    auto j = hello_json();
    j["gpus"] = std::move(gpus);
    return decode_error(msgpack(j));
  };
  CHECK(with_gpus({"0", "7", "GPU-8f0e1c2a", "MIG-1:2"}) == "<decoded>");
  CHECK(with_gpus({"0", ""}) == "hello.gpus[1]: not a GPU id (1 to 96 letters, digits or _.:-)");
  CHECK(with_gpus({"0;rm -rf ~"}).find("hello.gpus[0]: not a GPU id") == 0);
  CHECK(with_gpus({std::string(97, 'a')}).find("hello.gpus[0]: not a GPU id") == 0);
  CHECK(with_gpus({1, 2}).find("hello.gpus") == 0);
  CHECK(with_gpus(nlohmann::json::array()) == "<decoded>");
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i <= 1024; ++i) many.push_back(std::to_string(i));
  CHECK(with_gpus(many) == "hello.gpus: more than 1024 ids");
  auto j = hello_json();
  j.erase("gpus");
  CHECK(decode_error(msgpack(j)) == "hello.gpus: missing");
}

TEST_CASE("a hello of another version decodes to its version only") {
  auto j = nlohmann::json{{"t", "hello"}, {"version", 1}, {"incarnation", 7}};  // an old worker: no secret
  auto r = decode(msgpack(j));
  REQUIRE(r.ok());
  REQUIRE(std::holds_alternative<Hello>(*r));
  CHECK(std::get<Hello>(*r).version == 1);
  CHECK(std::get<Hello>(*r).secret.empty());
}

TEST_CASE("text that is not UTF-8 is made valid on encode") {
  Failed f{3, 1, "bad \xff byte", "tail \xc3"};
  auto f2 = round_trip(f);
  CHECK(f2.error == "bad \xEF\xBF\xBD byte");
  CHECK(f2.stderr_tail == "tail \xEF\xBF\xBD");
  Report r{1, 1, 1, {{"m\xfe", 1.0}}};
  auto r2 = round_trip(r);
  CHECK(r2.metrics.count("m\xEF\xBF\xBD") == 1);
  CHECK(round_trip(Failed{3, 1, "caf\xc3\xa9 \xf0\x9f\x98\x80", ""}).error == "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST_CASE("secrets: random hex from the system, compared in full") {
  auto a = random_hex(16);
  auto b = random_hex(16);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->size() == 32);
  CHECK(a->find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(*a != *b);
  CHECK(secrets_equal(*a, *a));
  CHECK_FALSE(secrets_equal(*a, *b));
  CHECK_FALSE(secrets_equal(*a, a->substr(0, 31)));
  CHECK_FALSE(secrets_equal("", "x"));
  CHECK(secrets_equal("", ""));
}

TEST_CASE("the fuzz seed corpus holds the current encoding of every message") {
  // fuzz/corpus/protocol/ seeds tools/fuzz: one frame of every message type and a few edge cases.
  // After a protocol change, HPCTUNE_UPDATE_CORPUS=1 ./build/tests/test_protocol rewrites it.
  Assign a;
  a.trial_id = 17;
  a.attempt = 2;
  a.seed = 123456789012345ULL;
  a.params = {{"lr", 0.01}, {"hidden", {128, 64}}, {"act", "relu"}, {"opt", {{"beta", {0.9, 0.999}}}}};
  a.trainer = {{"kind", "mlp"}, {"epochs", 3}, {"env", {{"TOKEN", "x"}}}};
  a.trial_dir = "/tmp/x.trials/17";
  Done d{17, 2, 5, true, {{"val_accuracy", 0.5}, {"loss", 1e-300}}, {{"val_probs", "/tmp/x/17/val.npy", 4096}, {"log", "/l"}}};
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"hello", encode(Hello{kVersion, std::string(32, 'a') + "." + std::string(32, 'b'), 0xFFFFFFFFFFFFFFF0ULL, 3,
                             4242, "node07", 2, 4, {"mlp", "sleep", "command"}, {"0", "1"}})},
      {"welcome", encode(Welcome{kVersion, 99, 250, 1500})},
      {"ready", encode(Ready{})},
      {"assign", encode(a)},
      {"report", encode(Report{17, 2, 3, {{"val_accuracy", 0.91}, {"val_loss", 0.25}, {"lr", -3.5}}})},
      {"stop", encode(Stop{17, 2, StopReason::kPruned})},
      {"stop-pause", encode(Stop{17, 2, StopReason::kPause})},
      {"done", encode(d)},
      {"failed", encode(Failed{17, 2, "exit code 3", "Traceback (most recent call last):\n  caf\xc3\xa9"})},
      {"heartbeat", encode(Heartbeat{17, 2})},
      {"heartbeat-idle", encode(Heartbeat{0, 0})},
      {"shutdown", encode(Shutdown{"campaign complete"})},
      {"hello-version-1", msgpack({{"t", "hello"}, {"version", 1}, {"incarnation", 7}})},
      {"report-nan", encode(Report{1, 1, 1, {{"v", std::numeric_limits<double>::quiet_NaN()}}})},
      {"report-step-uint64", msgpack({{"t", "report"}, {"trial_id", 1}, {"attempt", 1},
                                      {"step", std::numeric_limits<uint64_t>::max()}, {"metrics", {{"v", 1}}}})},
      {"deep-past-bound", "\x81\xa1t" + std::string(kMaxDepth + 1, '\x91') + "\xc0"},
      {"string-not-utf8", std::string("\x82\xa1t\xa6report\xa2\xc3\x28", 12)},
  };
  const std::string dir = std::string(HPCTUNE_SOURCE_DIR) + "/fuzz/corpus/protocol";
  const bool update = std::getenv("HPCTUNE_UPDATE_CORPUS") != nullptr;
  for (const auto& [name, bytes] : seeds) {
    const std::string path = dir + "/" + name + ".msgpack";
    if (update) {
      std::ofstream(path, std::ios::binary) << bytes;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    const std::string stored((std::istreambuf_iterator<char>(in)), {});
    CHECK_MESSAGE(stored == bytes, path << " is missing or stale: HPCTUNE_UPDATE_CORPUS=1 ./build/tests/test_protocol");
  }
}

// --- the ZeroMQ transport's options ---------------------------------------------------------------

namespace {

// The first frame the server receives within `wait`, or "" when none came.
std::string first_frame(ServerTransport& server, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    auto got = server.recv(std::chrono::milliseconds(20));
    REQUIRE(got.ok());
    if (*got) return (*got)->bytes;
  }
  return "";
}

}  // namespace

TEST_CASE("ZeroMQ: max_message_bytes is enforced by the socket; the default takes a larger frame") {
  using namespace std::chrono_literals;
  TransportOptions small;
  small.max_message_bytes = 1000;
  auto server = bind_zmq("tcp://127.0.0.1:*", small);
  REQUIRE(server.ok());
  CHECK((*server)->endpoint().rfind("tcp://127.0.0.1:", 0) == 0);
  {
    // A frame over the server's limit: ZeroMQ disconnects the sender; the server sees nothing.
    auto big = connect_zmq((*server)->endpoint());
    REQUIRE(big.ok());
    REQUIRE((*big)->send(std::string(1500, 'x')).ok());
    CHECK(first_frame(**server, 300ms).empty());
  }
  {
    // One under it arrives.
    auto fits = connect_zmq((*server)->endpoint());
    REQUIRE(fits.ok());
    REQUIRE((*fits)->send(std::string(900, 'y')).ok());
    CHECK(first_frame(**server, 3s) == std::string(900, 'y'));
  }
  // With the default options (protocol::kMaxMessageBytes), the 1500-byte frame is taken.
  auto roomy = bind_zmq("tcp://127.0.0.1:*");
  REQUIRE(roomy.ok());
  auto client = connect_zmq((*roomy)->endpoint());
  REQUIRE(client.ok());
  REQUIRE((*client)->send(std::string(1500, 'x')).ok());
  CHECK(first_frame(**roomy, 3s).size() == 1500);
  // The client's limit applies to what the master sends it.
  TransportOptions tiny;
  tiny.max_message_bytes = 100;
  auto capped = connect_zmq((*roomy)->endpoint(), tiny);
  REQUIRE(capped.ok());
  REQUIRE((*capped)->send("hello").ok());
  std::string peer;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (peer.empty() && std::chrono::steady_clock::now() < deadline) {
    auto got = (*roomy)->recv(20ms);
    REQUIRE(got.ok());
    if (*got && (*got)->bytes == "hello") peer = (*got)->peer;
  }
  REQUIRE(!peer.empty());
  REQUIRE((*roomy)->send(peer, std::string(200, 'z')).ok());
  auto got = (*capped)->recv(300ms);
  REQUIRE(got.ok());
  CHECK_FALSE(got->has_value());
}

TEST_CASE("ZeroMQ: send_hwm bounds a peer's queue (kBusy, never silent loss); bad options are refused") {
  using namespace std::chrono_literals;
  // Nobody listens at this address: the client's frames wait in its queue, up to the mark.
  TransportOptions o;
  o.send_hwm = 5;
  auto client = connect_zmq("tcp://127.0.0.1:1", o);
  REQUIRE(client.ok());
  int sent = 0;
  for (int i = 0; i < 100; ++i) {
    auto s = (*client)->send("frame");
    if (!s.ok()) {
      CHECK(s.error().code() == Errc::kBusy);
      break;
    }
    ++sent;
  }
  // ZeroMQ queues up to the mark (a pipe is created per connection attempt: none yet, or one).
  CHECK(sent <= 5);
  CHECK(sent < 100);

  TransportOptions bad;
  bad.max_message_bytes = 0;
  auto refused = bind_zmq("tcp://127.0.0.1:*", bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == Errc::kInvalidArgument);
  CHECK(refused.error().message().find("max_message_bytes") != std::string::npos);
  bad = {};
  bad.send_hwm = 0;
  CHECK_FALSE(connect_zmq("tcp://127.0.0.1:1", bad).ok());
  bad = {};
  bad.linger = -1ms;  // linger forever: a close without a deadline
  CHECK_FALSE(bind_zmq("tcp://127.0.0.1:*", bad).ok());
  bad = {};
  bad.reconnect_interval_max = 10ms;  // below reconnect_interval (100 ms)
  CHECK_FALSE(connect_zmq("tcp://127.0.0.1:1", bad).ok());
}

TEST_CASE("ZeroMQ: the master listens with a backlog for thousands of groups connecting at once") {
  // ZeroMQ's default backlog (100) dropped the SYNs of 2048 groups connecting together: each
  // dropped one cost its group a retransmit 1 s, then 3 s, later (bench/scale). The listening
  // socket's backlog is what `ss` shows as its Send-Q (capped by net.core.somaxconn).
  TransportOptions o;
  CHECK(o.listen_backlog >= 4096);
  auto server = bind_zmq("tcp://127.0.0.1:*", o);
  REQUIRE(server.ok());
  const std::string endpoint = (*server)->endpoint();
  const std::string port = endpoint.substr(endpoint.rfind(':') + 1);
  int somaxconn = 0;
  std::ifstream("/proc/sys/net/core/somaxconn") >> somaxconn;
  const std::string out = std::filesystem::temp_directory_path() / ("hpctune-ss-" + std::to_string(getpid()));
  if (somaxconn > 100 && std::system(("ss -Hltn 'sport = :" + port + "' > " + out + " 2>/dev/null").c_str()) == 0) {
    std::ifstream f(out);
    std::string state;
    long recv_q = -1, send_q = -1;
    f >> state >> recv_q >> send_q;
    CHECK(state == "LISTEN");
    CHECK(send_q == std::min<long>(somaxconn, o.listen_backlog));
  } else {
    MESSAGE("ss is not installed (or somaxconn is 100 or less): the backlog itself is not checked");
  }
  std::filesystem::remove(out);
  TransportOptions bad;
  bad.listen_backlog = 0;
  auto refused = bind_zmq("tcp://127.0.0.1:*", bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message().find("listen_backlog") != std::string::npos);
}

TEST_CASE("bind addresses: the accepted forms, the refused ones with a reason, and which are loopback") {
  for (const char* good : {"tcp://127.0.0.1:*", "tcp://127.0.0.1:5555", "tcp://*:*", "tcp://0.0.0.0:65535",
                           "tcp://eth0:*", "tcp://node-7.cluster:4000", "tcp://[::1]:*", "tcp://[fe80::1]:99",
                           "ipc:///tmp/hpctune.sock"}) {
    CHECK_MESSAGE(!endpoint_problem(good), good << ": " << endpoint_problem(good).value_or(""));
  }
  const std::pair<const char*, const char*> bad[] = {
      {"", "has no transport"},
      {"127.0.0.1:5555", "has no transport"},
      {"inproc://x", "transport 'inproc' cannot reach the workers"},
      {"udp://127.0.0.1:1", "transport 'udp'"},
      {"tcp://127.0.0.1", "has no port"},
      {"tcp://127.0.0.1:0", "port '0' is not 1..65535 or *"},
      {"tcp://127.0.0.1:65536", "port '65536'"},
      {"tcp://127.0.0.1:http", "port 'http'"},
      {"tcp://:5555", "'' is not a host"},
      {"tcp://a b:5555", "'a b' is not a host"},
      {"tcp://[zz]:1", "'[zz]' is not a host"},
      {"ipc://", "has no path"},
  };
  for (const auto& [text, why] : bad) {
    const auto problem = endpoint_problem(text);
    REQUIRE_MESSAGE(problem, text);
    CHECK_MESSAGE(problem->find(why) != std::string::npos, text << ": " << *problem);
  }
  CHECK(endpoint_problem("ipc://" + std::string(kMaxIpcPathBytes + 1, 'p'))->find("more than a Unix socket") !=
        std::string::npos);
  for (const char* local : {"tcp://127.0.0.1:*", "tcp://127.1.2.3:80", "tcp://localhost:1", "tcp://[::1]:*",
                            "ipc:///tmp/s"}) {
    CHECK_MESSAGE(loopback_endpoint(local), local);
  }
  for (const char* network : {"tcp://*:*", "tcp://0.0.0.0:1", "tcp://10.0.0.5:*", "tcp://eth0:*",
                              "tcp://127.example.org:1", "tcp://[fe80::1]:1"}) {
    CHECK_MESSAGE(!loopback_endpoint(network), network);
  }
}

// --- CURVE encryption and the ZAP allowlist (issue 13, acceptance 2) ----------------------------

namespace {

struct CurveSetup {
  CurveKeyPair server;
  CurveKeyPair worker;  // the allowlisted client
};

CurveSetup curve_setup() {
  auto server = curve_keypair();
  auto worker = curve_keypair();
  REQUIRE(server.ok());
  REQUIRE(worker.ok());
  return {*server, *worker};
}

TransportOptions curve_server_options(const CurveSetup& k) {
  TransportOptions o;
  o.security = TransportOptions::Security::kCurve;
  o.curve_server = {k.server.public_key, k.server.secret_key, {k.worker.public_key}};
  return o;
}

TransportOptions curve_client_options(const CurveKeyPair& own, const std::string& server_public_key) {
  TransportOptions o;
  o.security = TransportOptions::Security::kCurve;
  o.curve_client = {own.public_key, own.secret_key, server_public_key};
  return o;
}

// Every frame the server receives within `wait` (peer ids dropped).
std::vector<std::string> frames_within(ServerTransport& server, std::chrono::milliseconds wait) {
  std::vector<std::string> out;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    auto got = server.recv(std::chrono::milliseconds(20));
    REQUIRE(got.ok());
    if (*got) out.push_back((*got)->bytes);
  }
  return out;
}

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace

TEST_CASE("CURVE: the allowed worker talks both ways; no keys, a stranger's key or the wrong server key get nothing through") {
  using namespace std::chrono_literals;
  const auto keys = curve_setup();
  auto server = bind_zmq("tcp://127.0.0.1:*", curve_server_options(keys));
  REQUIRE_MESSAGE(server.ok(), (server.ok() ? "" : server.error().message()));
  const std::string endpoint = (*server)->endpoint();

  auto worker = connect_zmq(endpoint, curve_client_options(keys.worker, keys.server.public_key));
  REQUIRE(worker.ok());
  REQUIRE((*worker)->send("hello").ok());
  std::string peer;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (peer.empty() && std::chrono::steady_clock::now() < deadline) {
    auto got = (*server)->recv(20ms);
    REQUIRE(got.ok());
    if (*got && (*got)->bytes == "hello") peer = (*got)->peer;
  }
  REQUIRE(!peer.empty());
  REQUIRE((*server)->send(peer, "welcome").ok());
  auto reply = (*worker)->recv(3s);
  REQUIRE(reply.ok());
  REQUIRE(reply->has_value());
  CHECK(**reply == "welcome");

  // Intruders, all sending at once.
  auto plain = connect_zmq(endpoint);  // no keys: NULL mechanism against a CURVE server
  REQUIRE(plain.ok());
  auto stranger_keys = curve_keypair();
  REQUIRE(stranger_keys.ok());
  auto stranger = connect_zmq(endpoint, curve_client_options(*stranger_keys, keys.server.public_key));
  REQUIRE(stranger.ok());
  auto other_server = curve_keypair();
  REQUIRE(other_server.ok());
  // The allowed worker's own keys, but it trusts another server key: the handshake fails.
  auto misled = connect_zmq(endpoint, curve_client_options(keys.worker, other_server->public_key));
  REQUIRE(misled.ok());
  // They keep trying for a while; a send may also say kBusy (no connection to queue on after a
  // refused handshake), never more.
  std::vector<std::string> arrived;
  for (int round = 0; round < 8; ++round) {
    for (auto* intruder : {&*plain, &*stranger, &*misled}) {
      auto s = (*intruder)->send("from-intruder");
      CHECK((s.ok() || s.error().code() == Errc::kBusy));
    }
    for (auto& frame : frames_within(**server, 50ms)) arrived.push_back(frame);
  }
  CHECK(arrived.empty());

  // Meanwhile the allowed worker keeps working.
  REQUIRE((*worker)->send("still here").ok());
  CHECK(first_frame(**server, 3s) == "still here");
  CHECK(frames_within(**server, 100ms).empty());
}

TEST_CASE("CURVE: without its ZAP handler the server refuses everyone (fail closed)") {
  using namespace std::chrono_literals;
  const auto keys = curve_setup();
  auto options = curve_server_options(keys);
  options.curve_zap_handler = false;
  auto server = bind_zmq("tcp://127.0.0.1:*", options);
  REQUIRE(server.ok());
  auto worker = connect_zmq((*server)->endpoint(), curve_client_options(keys.worker, keys.server.public_key));
  REQUIRE(worker.ok());
  std::vector<std::string> arrived;
  for (int round = 0; round < 8; ++round) {
    auto s = (*worker)->send("hello");
    CHECK((s.ok() || s.error().code() == Errc::kBusy));
    for (auto& frame : frames_within(**server, 50ms)) arrived.push_back(frame);
  }
  CHECK(arrived.empty());
}

TEST_CASE("CURVE: a raw TCP connection that sends nothing does not block the allowed worker") {
  using namespace std::chrono_literals;
  const auto keys = curve_setup();
  auto server = bind_zmq("tcp://127.0.0.1:*", curve_server_options(keys));
  REQUIRE(server.ok());
  const std::string endpoint = (*server)->endpoint();
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  // Held open, silent, for the whole test (CVE-2020-15166 was this stalling other clients).
  const int raw = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(raw >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(raw, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  // A second one that sends half a greeting and stops.
  const int half = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(half >= 0);
  REQUIRE(::connect(half, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::send(half, "\xff\0\0\0\0\0\0\0\x01\x7f", 10, MSG_NOSIGNAL) == 10);

  auto worker = connect_zmq(endpoint, curve_client_options(keys.worker, keys.server.public_key));
  REQUIRE(worker.ok());
  REQUIRE((*worker)->send("through").ok());
  CHECK(first_frame(**server, 1s) == "through");
  ::close(half);
  ::close(raw);
}

TEST_CASE("CURVE: the ZAP handler's thread stops with the server") {
  const auto keys = curve_setup();
  const int before = thread_count();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    auto server = bind_zmq("tcp://127.0.0.1:*", curve_server_options(keys));
    REQUIRE(server.ok());
    CHECK(thread_count() > before);
  }
  CHECK(thread_count() == before);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
}

TEST_CASE("CURVE: keys are checked, and an unsafe libzmq is refused with the reason") {
  const auto keys = curve_setup();
  CHECK(keys.server.public_key.size() == 40);
  CHECK(keys.server.public_key != keys.worker.public_key);
  auto derived = curve_public_key(keys.server.secret_key);
  REQUIRE(derived.ok());
  CHECK(*derived == keys.server.public_key);
  CHECK_FALSE(curve_public_key("short").ok());

  auto message_of = [](const auto& result) { return result.ok() ? std::string() : result.error().message(); };
  auto o = curve_server_options(keys);
  o.curve_server.public_key = keys.worker.public_key;  // not the secret key's
  CHECK(message_of(bind_zmq("tcp://127.0.0.1:*", o)).find("does not belong") != std::string::npos);
  o = curve_server_options(keys);
  o.curve_server.allowed.clear();
  CHECK(message_of(bind_zmq("tcp://127.0.0.1:*", o)).find("allowed is empty") != std::string::npos);
  o = curve_server_options(keys);
  o.curve_server.allowed.push_back("not a key");
  CHECK(message_of(bind_zmq("tcp://127.0.0.1:*", o)).find("not a Z85") != std::string::npos);
  auto c = curve_client_options(keys.worker, "");
  CHECK(message_of(connect_zmq("tcp://127.0.0.1:1", c)).find("server_public_key") != std::string::npos);
  c = curve_client_options(keys.worker, keys.server.public_key);
  c.curve_client.secret_key = keys.server.secret_key;
  CHECK(message_of(connect_zmq("tcp://127.0.0.1:1", c)).find("curve_client.public_key does not belong") !=
        std::string::npos);

  CHECK(check_libzmq_for_curve().ok());  // this machine's libzmq (Debian 12: 4.3.4)
  auto old = check_libzmq_for_curve(4, 3, 2, true, true);
  REQUIRE_FALSE(old.ok());
  CHECK(old.error().code() == Errc::kUnavailable);
  CHECK(old.error().message().find("CVE-2020-15166") != std::string::npos);
  CHECK_FALSE(check_libzmq_for_curve(4, 2, 9, true, true).ok());
  CHECK_FALSE(check_libzmq_for_curve(3, 9, 9, true, true).ok());
  CHECK(check_libzmq_for_curve(4, 3, 3, true, true).ok());
  CHECK(check_libzmq_for_curve(5, 0, 0, true, true).ok());
  auto no_curve = check_libzmq_for_curve(4, 3, 4, false, true);
  REQUIRE_FALSE(no_curve.ok());
  CHECK(no_curve.error().message().find("without CURVE") != std::string::npos);
  CHECK(message_of(check_libzmq_for_curve(4, 3, 4, true, false)).find("ZMQ_ZAP_ENFORCE_DOMAIN") != std::string::npos);
}

// --- the campaign's key directory (protocol/curve_keys.h) -----------------------------------------

namespace {

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string message_of(const Status& s) { return s.ok() ? std::string() : s.error().message(); }

}  // namespace

TEST_CASE("CURVE keys: resources.security decides from the bind address; auto means CURVE but on the private ipc socket") {
  CHECK(transport_uses_curve("auto", "tcp://0.0.0.0:*"));
  CHECK(transport_uses_curve("auto", "tcp://*:5555"));
  CHECK(transport_uses_curve("auto", "tcp://10.1.2.3:*"));
  // Issue 21: every local user reaches a loopback port, and maybe an ipc path the user chose.
  CHECK(transport_uses_curve("auto", "tcp://127.0.0.1:*"));
  CHECK(transport_uses_curve("auto", "ipc:///tmp/m.sock"));
  CHECK_FALSE(transport_uses_curve("auto", "ipc://*"));
  CHECK(transport_uses_curve("curve", "ipc://*"));
  CHECK(transport_uses_curve("curve", "tcp://127.0.0.1:*"));
  CHECK_FALSE(transport_uses_curve("none", "tcp://0.0.0.0:*"));
  CHECK(transport_warning_needed("none", "tcp://127.0.0.1:*"));
  CHECK(transport_warning_needed("none", "ipc:///tmp/m.sock"));
  CHECK_FALSE(transport_warning_needed("none", "ipc://*"));
  CHECK_FALSE(transport_warning_needed("auto", "tcp://127.0.0.1:*"));
  CHECK(network_bind_warning("tcp://*:*").find("security none") != std::string::npos);
  CHECK(network_bind_warning("tcp://127.0.0.1:*").find("every local user") != std::string::npos);
}

TEST_CASE("CURVE keys: created 0700/0600 whatever the umask, the same keys on the next load, usable by the transport") {
  testing::TempDir dir;
  const std::string keys_dir = key_dir_for(dir.file("c.db"));
  CHECK(keys_dir == dir.file("c.db.keys"));
  CHECK(check_key_dir(keys_dir).ok());  // absent: nothing to refuse
  const mode_t old_umask = ::umask(0);  // the widest: modes must not depend on it
  auto keys = load_or_create_keys(keys_dir);
  ::umask(old_umask);
  REQUIRE_MESSAGE(keys.ok(), (keys.ok() ? "" : keys.error().message()));
  CHECK(mode_of(keys_dir) == 0700);
  CHECK(mode_of(keys_dir + "/server.key") == 0600);
  CHECK(mode_of(keys_dir + "/worker.key") == 0600);
  CHECK_FALSE(std::filesystem::exists(keys_dir + "/server.key.tmp"));
  CHECK(keys->server.public_key != keys->worker.public_key);
  CHECK(*curve_public_key(keys->worker.secret_key) == keys->worker.public_key);

  auto again = load_or_create_keys(keys_dir);  // a resume: the same keys
  REQUIRE(again.ok());
  CHECK(again->server.secret_key == keys->server.secret_key);
  CHECK(again->worker.secret_key == keys->worker.secret_key);
  CHECK(again->worker.public_key == keys->worker.public_key);

  // A missing worker key is made anew; the server's stays.
  std::filesystem::remove(keys_dir + "/worker.key");
  auto partial = load_or_create_keys(keys_dir);
  REQUIRE(partial.ok());
  CHECK(partial->server.secret_key == keys->server.secret_key);
  CHECK(partial->worker.secret_key != keys->worker.secret_key);

  // The server options admit exactly the worker key; the environment carries the three variables.
  TransportOptions o;
  use_curve_server(o, *partial);
  CHECK(o.security == TransportOptions::Security::kCurve);
  CHECK(o.curve_server.secret_key == partial->server.secret_key);
  CHECK(o.curve_server.allowed == std::vector<std::string>{partial->worker.public_key});
  const auto env = worker_key_environment(*partial);
  CHECK(env.size() == 3);
  CHECK(env.at(kCurveServerKeyEnv) == partial->server.public_key);
  CHECK(env.at(kCurvePublicKeyEnv) == partial->worker.public_key);
  CHECK(env.at(kCurveSecretKeyEnv) == partial->worker.secret_key);
  CHECK(env.count("HPCTUNE_CURVE_SERVER_SECRET") == 0);  // the server's secret never leaves the master
  for (const auto& [name, value] : env) CHECK(value != partial->server.secret_key);
}

TEST_CASE("CURVE keys: a directory or key file others could read is refused with its path, its mode and the fix") {
  testing::TempDir dir;
  const std::string keys_dir = dir.file("c.db.keys");
  REQUIRE(load_or_create_keys(keys_dir).ok());

  for (mode_t loose : {0755, 0750, 0701, 0710}) {
    REQUIRE(::chmod(keys_dir.c_str(), loose) == 0);
    const std::string m = message_of(check_key_dir(keys_dir));
    CHECK_MESSAGE(m.find("the CURVE key directory " + keys_dir + " has mode 0" + std::to_string(loose / 64) +
                         std::to_string(loose / 8 % 8) + std::to_string(loose % 8)) != std::string::npos, m);
    CHECK_MESSAGE(m.find("fix: chmod 700 " + keys_dir) != std::string::npos, m);
    auto refused = load_or_create_keys(keys_dir);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code() == Errc::kUnavailable);
  }
  REQUIRE(::chmod(keys_dir.c_str(), 0700) == 0);
  CHECK(check_key_dir(keys_dir).ok());

  const std::string file = keys_dir + "/worker.key";
  for (mode_t loose : {0644, 0640, 0604, 0660}) {
    REQUIRE(::chmod(file.c_str(), loose) == 0);
    const std::string m = message_of(check_key_dir(keys_dir));
    CHECK_MESSAGE(m.find("the CURVE key file " + file + " has mode 0" + std::to_string(loose / 64) +
                         std::to_string(loose / 8 % 8) + std::to_string(loose % 8)) != std::string::npos, m);
    CHECK_MESSAGE(m.find("fix: chmod 600 " + file) != std::string::npos, m);
    CHECK_FALSE(load_or_create_keys(keys_dir).ok());
  }
  REQUIRE(::chmod(file.c_str(), 0600) == 0);
  CHECK(load_or_create_keys(keys_dir).ok());

  // A symbolic link, for the directory or a key, is refused too (someone else's file could be behind it).
  const std::string elsewhere = dir.file("elsewhere");
  std::filesystem::rename(keys_dir, elsewhere);
  std::filesystem::create_directory_symlink(elsewhere, keys_dir);
  CHECK(message_of(check_key_dir(keys_dir)).find("is a symbolic link") != std::string::npos);
  CHECK_FALSE(load_or_create_keys(keys_dir).ok());
  std::filesystem::remove(keys_dir);
  std::filesystem::rename(elsewhere, keys_dir);
  std::filesystem::rename(file, dir.file("moved.key"));
  std::filesystem::create_symlink(dir.file("moved.key"), file);
  CHECK(message_of(check_key_dir(keys_dir)).find("the CURVE key file " + file + " is a symbolic link") != std::string::npos);
  CHECK_FALSE(load_or_create_keys(keys_dir).ok());

  // A key file that holds no key: named, its text (maybe a secret) not quoted.
  std::filesystem::remove(file);
  {
    std::ofstream(file) << "not-a-key-but-a-secret-phrase\n";
  }
  REQUIRE(::chmod(file.c_str(), 0600) == 0);
  auto bad = load_or_create_keys(keys_dir);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find(file + " does not hold a Z85 CURVE secret key") != std::string::npos);
  CHECK(bad.error().message().find("secret-phrase") == std::string::npos);

  // A plain file where the directory should be.
  testing::TempDir other;
  const std::string not_dir = other.write("d.db.keys", "x");
  CHECK(message_of(check_key_dir(not_dir)).find("is not a directory") != std::string::npos);
}
