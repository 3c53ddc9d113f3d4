// gpu/gpu_backend.h without a GPU: the CUDA library loads (when this build has one), reports no
// device and why as a value; a missing, foreign or other-version library is a clear error. ctest
// runs this with CUDA_VISIBLE_DEVICES=-1, so the answers are the same on a machine with a GPU.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "gpu/gpu_backend.h"
#include "gpu/nccl_communicator.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (value) setenv(name.c_str(), value, 1); else unsetenv(name.c_str());
  }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("a missing GPU library is kNotFound naming the path") {
  auto lib = GpuLibrary::open("/nonexistent/dir/libhpctune_gpu_cuda.so");
  REQUIRE_FALSE(lib.ok());
  CHECK(lib.error().code() == Errc::kNotFound);
  CHECK(contains(lib.error().message(), "/nonexistent/dir/libhpctune_gpu_cuda.so"));
}

TEST_CASE("HPCTUNE_GPU_LIBRARY pointing nowhere is kNotFound naming it, even in a build without CUDA") {
  ScopedEnv env("HPCTUNE_GPU_LIBRARY", "/nonexistent/libx.so");
  CHECK(default_gpu_library_candidates() == std::vector<std::string>{"/nonexistent/libx.so"});
  auto lib = GpuLibrary::open_default();
  REQUIRE_FALSE(lib.ok());
  CHECK(lib.error().code() == Errc::kNotFound);
  CHECK(contains(lib.error().message(), "/nonexistent/libx.so"));
}

TEST_CASE("a file that is not a shared library is kUnavailable with dlopen's reason") {
  auto path = std::filesystem::temp_directory_path() / ("hpctune_not_a_library_" + std::to_string(getpid()) + ".so");
  { std::ofstream(path) << "not an ELF file\n"; }
  auto lib = GpuLibrary::open(path.string());
  std::filesystem::remove(path);
  REQUIRE_FALSE(lib.ok());
  CHECK(lib.error().code() == Errc::kUnavailable);
  CHECK(contains(lib.error().message(), "cannot be loaded"));
}

TEST_CASE("a library without hpctune_gpu_api is not taken for ours") {
  auto lib = GpuLibrary::open(HPCTUNE_FAKE_GPU_LIBRARY_NOT_OURS);
  REQUIRE_FALSE(lib.ok());
  CHECK(lib.error().code() == Errc::kUnavailable);
  CHECK(contains(lib.error().message(), "does not export hpctune_gpu_api()"));
}

TEST_CASE("a library of another ABI version is refused, naming both versions") {
  auto lib = GpuLibrary::open(HPCTUNE_FAKE_GPU_LIBRARY_WRONG_ABI);
  REQUIRE_FALSE(lib.ok());
  CHECK(lib.error().code() == Errc::kUnavailable);
  CHECK(contains(lib.error().message(), "ABI version " + std::to_string(HPCTUNE_GPU_ABI_VERSION + 100)));
  CHECK(contains(lib.error().message(), "needs version " + std::to_string(HPCTUNE_GPU_ABI_VERSION)));
}

TEST_CASE("the NCCL unique id travels as 256 hex digits, and malformed text is refused naming the place") {
  NcclUniqueId id;
  for (size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<uint8_t>(i * 37 + 5);
  std::string hex = id.to_hex();
  CHECK(hex.size() == 256);
  CHECK(hex.substr(0, 6) == "052a4f");
  auto back = NcclUniqueId::from_hex(hex);
  REQUIRE(back.ok());
  CHECK(back->bytes == id.bytes);
  CHECK(NcclUniqueId::from_hex("ABCDEF" + hex.substr(6)).ok());  // either case
  auto short_id = NcclUniqueId::from_hex(hex.substr(1));
  REQUIRE_FALSE(short_id.ok());
  CHECK(short_id.error().code() == Errc::kInvalidArgument);
  CHECK(contains(short_id.error().message(), "255 characters, expected 256 hex digits"));
  std::string bad = hex;
  bad[9] = 'g';
  auto not_hex = NcclUniqueId::from_hex(bad);
  REQUIRE_FALSE(not_hex.ok());
  CHECK(contains(not_hex.error().message(), "not a hex digit at character 10"));
}

TEST_CASE("cuda_version_string") {
  CHECK(cuda_version_string(13000) == "13.0");
  CHECK(cuda_version_string(12080) == "12.8");
  CHECK(cuda_version_string(0) == "none");
}

#ifdef HPCTUNE_TEST_HAVE_CUDA
TEST_CASE("the CUDA library of this build loads and reports no device, and why, as a value") {
  REQUIRE(built_with_cuda());
  // Without CUDA_VISIBLE_DEVICES=-1 (ctest sets it) a machine with a GPU would list it.
  REQUIRE(std::getenv("CUDA_VISIBLE_DEVICES") != nullptr);
  REQUIRE(std::string(std::getenv("CUDA_VISIBLE_DEVICES")) == "-1");
  auto lib = GpuLibrary::open_default();
  REQUIRE_MESSAGE(lib.ok(), (lib.ok() ? std::string() : lib.error().to_string()));
  CHECK(contains(lib->path(), "libhpctune_gpu_cuda.so"));
  GpuInventory inv = lib->inventory();
  CHECK(inv.devices.empty());
  CHECK(contains(inv.no_device_reason, "no CUDA device: cudaGetDeviceCount: "));
  CHECK(contains(inv.no_device_reason, "(code "));
  CHECK(inv.runtime_version >= 13000);  // the toolkit this was built with
  CHECK(inv.driver_version >= 0);       // 0 on a machine without a driver
  // A second call answers the same (the failure leaves the library usable).
  GpuInventory again = lib->inventory();
  CHECK(again.devices.empty());
  CHECK(again.no_device_reason == inv.no_device_reason);
  // Nothing can be created on a device that is not there: an error code and a message, no crash.
  HpctuneGpuContext* ctx = nullptr;
  CHECK(lib->api().context_create(0, &ctx) != 0);
  CHECK(ctx == nullptr);
  CHECK_FALSE(lib->last_error().empty());
}

TEST_CASE("the CUDA library's NCCL entries answer without a GPU: errors as values, never a crash") {
  REQUIRE(built_with_cuda());
  auto lib = GpuLibrary::open_default();
  REQUIRE_MESSAGE(lib.ok(), (lib.ok() ? std::string() : lib.error().to_string()));
  const HpctuneGpuApi& api = lib->api();
  REQUIRE(api.abi_version == 4u);
  const bool every_entry = api.nccl_version != nullptr && api.nccl_unique_id != nullptr && api.nccl_comm_init != nullptr && api.allreduce_sum_f32 != nullptr && api.comm_poll != nullptr && api.comm_abort != nullptr && api.comm_destroy != nullptr &&
                           api.nccl_group_start != nullptr && api.nccl_group_end != nullptr && api.send_f32 != nullptr && api.recv_f32 != nullptr;
  REQUIRE(every_entry);
  int32_t version = -1;
  const bool with_nccl = api.nccl_version(&version) == 0;
  MESSAGE("NCCL: " << (with_nccl ? "version " + std::to_string(version) : lib->last_error()));
  if (with_nccl) {
    CHECK(version >= 20000);  // 2.x
  } else {
    CHECK(version == 0);
    CHECK(contains(lib->last_error(), "built without NCCL"));
  }
  // The unique id: made without a GPU where NCCL's bootstrap finds a network, a clean error otherwise.
  auto id = NcclUniqueId::create(*lib);
  if (id.ok()) {
    CHECK(with_nccl);
    auto back = NcclUniqueId::from_hex(id->to_hex());
    REQUIRE(back.ok());
    CHECK(back->bytes == id->bytes);
  } else {
    CHECK(id.error().code() == (with_nccl ? Errc::kFailed : Errc::kUnavailable));
    CHECK_FALSE(id.error().message().empty());
  }
  // No context (there is no device to make one on), a rank outside the group: an error code and a
  // message, and no communicator.
  uint8_t raw_id[HPCTUNE_NCCL_UNIQUE_ID_BYTES] = {};
  HpctuneNcclComm* comm = reinterpret_cast<HpctuneNcclComm*>(&raw_id);  // must be overwritten with null
  CHECK(api.nccl_comm_init(nullptr, 1, 0, raw_id, &comm) != 0);
  CHECK(comm == nullptr);
  CHECK_FALSE(lib->last_error().empty());
  int32_t state = HPCTUNE_NCCL_DONE;
  CHECK(api.comm_poll(nullptr, nullptr, &state) != 0);
  CHECK(state == HPCTUNE_NCCL_ERROR);
  CHECK(api.allreduce_sum_f32(nullptr, nullptr, nullptr, 4) != 0);
  // Point to point (ABI 4): no communicator is an error code and a message, never a crash.
  CHECK(api.send_f32(nullptr, nullptr, nullptr, 4, 1) != 0);
  CHECK(api.recv_f32(nullptr, nullptr, nullptr, 4, 1) != 0);
  CHECK_FALSE(lib->last_error().empty());
}

TEST_CASE("the CUDA library's network entries (ABI 3) are there; cuDNN's version answers without a GPU") {
  auto lib = GpuLibrary::open_default();
  REQUIRE_MESSAGE(lib.ok(), (lib.ok() ? std::string() : lib.error().to_string()));
  const HpctuneGpuApi& api = lib->api();
  const bool every_entry = api.bias_activation_nchw && api.activation_backward && api.bias_gradient_nchw &&
                           api.cudnn_version && api.conv_forward && api.conv_backward_data && api.conv_backward_filter &&
                           api.maxpool_forward && api.maxpool_backward && api.dropout_forward && api.dropout_backward &&
                           api.f32_to_bf16 && api.gemm_bf16 && api.gather_rows && api.softmax;
  REQUIRE(every_entry);
  int64_t version = -1;
  const bool with_cudnn = api.cudnn_version(&version) == 0;
  MESSAGE("cuDNN: " << (with_cudnn ? "version " + std::to_string(version) : lib->last_error()));
  if (with_cudnn) {
    CHECK(version >= 90000);  // 9.x: the legacy convolution API is still there
  } else {
    CHECK(version == 0);
    CHECK(contains(lib->last_error(), "built without cuDNN"));
  }
}
#else
TEST_CASE("a build without CUDA says so when a GPU backend is asked for") {
  REQUIRE_FALSE(built_with_cuda());
  auto lib = GpuLibrary::open_default();
  REQUIRE_FALSE(lib.ok());
  CHECK(lib.error().code() == Errc::kUnavailable);
  CHECK(contains(lib.error().message(), "built without CUDA"));
}
#endif
