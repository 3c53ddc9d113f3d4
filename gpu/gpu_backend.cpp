// The loader of gpu_backend.h: dlopen(), the ABI check and the device inventory.
#include "gpu/gpu_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace hpctune::gpu {

namespace {

constexpr const char* kLibraryName = "libhpctune_gpu_cuda.so";

std::string executable_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

}  // namespace

bool built_with_cuda() noexcept {
#ifdef HPCTUNE_GPU_BUILD_LIBRARY
  return true;
#else
  return false;
#endif
}

std::vector<std::string> default_gpu_library_candidates() {
  if (const char* env = std::getenv("HPCTUNE_GPU_LIBRARY"); env != nullptr && *env != '\0') return {env};
  std::vector<std::string> out;
  if (auto dir = executable_dir(); !dir.empty()) {
    out.push_back(dir + "/" + kLibraryName);
    out.push_back(dir + "/../lib/hpctune/" + kLibraryName);
  }
#ifdef HPCTUNE_GPU_BUILD_LIBRARY
  out.push_back(HPCTUNE_GPU_BUILD_LIBRARY);
#endif
  return out;
}

Result<GpuLibrary> GpuLibrary::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return err(Errc::kNotFound, "GPU library " + path + ": no such file");
  // RTLD_LOCAL: the CUDA symbols stay out of the global namespace; RTLD_NOW: a missing libcudart or
  // cuBLAS is reported here, not at the first call.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return err(Errc::kUnavailable, "GPU library " + path + " cannot be loaded: " + (why ? why : "dlopen failed"));
  }
  dlerror();
  void* symbol = dlsym(handle, HPCTUNE_GPU_API_SYMBOL);
  if (symbol == nullptr) {
    dlclose(handle);  // not ours, and not CUDA: safe to unload
    return err(Errc::kUnavailable, "GPU library " + path + " is not hpctune's: it does not export " +
                                       HPCTUNE_GPU_API_SYMBOL + "()");
  }
  auto entry = reinterpret_cast<HpctuneGpuApiEntry>(symbol);
  const HpctuneGpuApi* api = entry();
  if (api == nullptr || api->abi_version != HPCTUNE_GPU_ABI_VERSION || api->struct_size != sizeof(HpctuneGpuApi))
    return err(Errc::kUnavailable,
               "GPU library " + path + " has ABI version " + (api ? std::to_string(api->abi_version) : "?") +
                   ", table size " + (api ? std::to_string(api->struct_size) : "?") + "; this hpctune needs version " +
                   std::to_string(HPCTUNE_GPU_ABI_VERSION) + ", size " + std::to_string(sizeof(HpctuneGpuApi)) +
                   " (rebuild both from one checkout)");
  return GpuLibrary(path, api);
}

Result<GpuLibrary> GpuLibrary::open_default() {
  const bool from_env = std::getenv("HPCTUNE_GPU_LIBRARY") != nullptr && *std::getenv("HPCTUNE_GPU_LIBRARY") != '\0';
  if (!from_env && !built_with_cuda())
    return err(Errc::kUnavailable,
               "hpctune was built without CUDA (HPCTUNE_CUDA=OFF or no toolkit at build time): the built-in trainers "
               "have no GPU backend; set HPCTUNE_GPU_LIBRARY to a libhpctune_gpu_cuda.so to use one");
  std::string tried;
  for (const auto& candidate : default_gpu_library_candidates()) {
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return open(candidate);
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  return err(Errc::kNotFound, std::string("GPU library ") + kLibraryName + " not found (looked in: " + tried + ")");
}

std::string GpuLibrary::last_error() const {
  const char* message = api_->last_error();
  return message != nullptr ? message : "";
}

GpuInventory GpuLibrary::inventory() const {
  GpuInventory inv;
  inv.library_path = path_;
  int32_t version = 0;
  if (api_->runtime_version(&version) == 0) inv.runtime_version = version;
  version = 0;
  if (api_->driver_version(&version) == 0) inv.driver_version = version;
  int32_t count = 0;
  if (api_->device_count(&count) != 0) {
    inv.no_device_reason = "no CUDA device: " + last_error();
    return inv;
  }
  for (int32_t i = 0; i < count; ++i) {
    HpctuneGpuDeviceProps props{};
    if (api_->device_properties(i, &props) != 0) {
      // A device that cannot be queried is not usable; keep the others.
      continue;
    }
    GpuDevice d;
    d.index = i;
    d.name = props.name;
    d.memory_bytes = props.memory_bytes;
    d.compute_major = props.compute_major;
    d.compute_minor = props.compute_minor;
    d.multiprocessors = props.multiprocessors;
    d.pci_bus_id = props.pci_bus_id;
    inv.devices.push_back(std::move(d));
  }
  if (inv.devices.empty())
    inv.no_device_reason = count == 0 ? "no CUDA device: cudaGetDeviceCount found 0 devices"
                                      : "no CUDA device: none of " + std::to_string(count) +
                                            " devices could be queried: " + last_error();
  return inv;
}

std::string cuda_version_string(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace hpctune::gpu
