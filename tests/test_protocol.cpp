// Protocol: every message round-trips; malformed frames are errors naming the field.
#include <doctest/doctest.h>

#include "scheduler/protocol.h"

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
  Hello h{kVersion, 0xFFFFFFFFFFFFFFF0ULL, 3, 4242, "node07", 2, 4, {"mlp", "sleep"}};
  auto h2 = round_trip(h);
  CHECK(h2.version == kVersion);
  CHECK(h2.incarnation == 0xFFFFFFFFFFFFFFF0ULL);
  CHECK(h2.group == 3);
  CHECK(h2.pid == 4242);
  CHECK(h2.host == "node07");
  CHECK(h2.ranks_data == 2);
  CHECK(h2.ranks_model == 4);
  CHECK(h2.trainers == std::vector<std::string>{"mlp", "sleep"});

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
  auto a2 = round_trip(a);
  CHECK(a2.trial_id == 17);
  CHECK(a2.attempt == 2);
  CHECK(a2.seed == 123456789012345ULL);
  CHECK(a2.params == a.params);
  CHECK(a2.trainer == a.trainer);
  CHECK(a2.trial_dir == "/tmp/x/17");

  auto r = round_trip(Report{17, 2, 3, {{"val_accuracy", 0.91}, {"val_loss", 0.25}}});
  CHECK(r.step == 3);
  CHECK(r.metrics.at("val_accuracy") == doctest::Approx(0.91));

  auto s = round_trip(Stop{17, 2, "pruned"});
  CHECK(s.reason == "pruned");

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
    std::string big(static_cast<size_t>(kMaxMessageBytes) + 1, 'x');
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
