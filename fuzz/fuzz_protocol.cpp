// Fuzz target: protocol::decode on arbitrary bytes. It must never crash, throw or recurse without
// bound; every frame it accepts must survive encode -> decode -> encode unchanged (the field list
// that encodes is the one that decodes). abort() on any violation, so libFuzzer keeps the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "protocol/messages.h"

using namespace hpctune;

namespace {

[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_protocol: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto first = protocol::decode(bytes);
  if (!first.ok()) {
    if (first.error().code() != Errc::kProtocol) violated("an error other than kProtocol", first.error().to_string());
    return 0;
  }
  const std::string once = protocol::encode(*first);
  auto second = protocol::decode(once);
  if (!second.ok()) violated("an encoded message does not decode", second.error().to_string());
  if (second->index() != first->index()) violated("the message type changed", protocol::type_name(*second));
  const std::string twice = protocol::encode(*second);
  if (once != twice) violated("encode(decode(encode(m))) differs from encode(m)", protocol::type_name(*first));
  return 0;
}
