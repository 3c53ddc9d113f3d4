// RAII over the CUDA library's C table (gpu_library_abi.h): a context on one device (its stream and
// cuBLAS handle) and device buffers, with every failure an Error carrying the library's message.
// Move-only; destructors never throw and free what they own (queued on the context's stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_backend.h"

namespace hpctune::gpu {

class DeviceBuffer;

class GpuContext {
 public:
  // kUnavailable with the library's message when the device cannot be used (no such device, ...).
  static Result<GpuContext> create(const GpuLibrary& library, int device);
  GpuContext(GpuContext&& other) noexcept;
  GpuContext& operator=(GpuContext&& other) noexcept;
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;
  ~GpuContext();

  const HpctuneGpuApi& api() const noexcept { return library_.api(); }
  HpctuneGpuContext* raw() const noexcept { return ctx_; }
  // kFailed "what: message (code N)" from a nonzero return code of the library; ok for 0.
  Status check(int rc, const char* what) const;
  Status synchronize() const { return check(api().synchronize(ctx_), "synchronize"); }

  Result<DeviceBuffer> allocate(size_t bytes) const;
  template <typename T>
  Result<DeviceBuffer> upload(std::span<const T> host) const;

 private:
  GpuContext(GpuLibrary library, HpctuneGpuContext* ctx) : library_(std::move(library)), ctx_(ctx) {}
  GpuLibrary library_;
  HpctuneGpuContext* ctx_ = nullptr;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void* data() const noexcept { return ptr_; }
  template <typename T>
  T* as() const noexcept { return static_cast<T*>(ptr_); }
  size_t bytes() const noexcept { return bytes_; }

  // Copies `bytes` from host memory at `offset` bytes into the buffer; kInvalidArgument past its end.
  Status write(const void* host, size_t bytes, size_t offset = 0) const;
  // Copies the whole buffer to the host (waits for the queued work first).
  template <typename T>
  Result<std::vector<T>> read() const;
  Status fill_zero() const;

 private:
  friend class GpuContext;
  DeviceBuffer(const GpuContext* owner, void* ptr, size_t bytes) : owner_(owner), ptr_(ptr), bytes_(bytes) {}
  void reset() noexcept;
  // The context that owns the memory (not owned). A buffer must not outlive its context, nor its
  // context move while it lives.
  const GpuContext* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
Result<DeviceBuffer> GpuContext::upload(std::span<const T> host) const {
  HPCTUNE_ASSIGN(DeviceBuffer buffer, allocate(host.size_bytes()));
  HPCTUNE_TRY(buffer.write(host.data(), host.size_bytes()));
  return buffer;
}

template <typename T>
Result<std::vector<T>> DeviceBuffer::read() const {
  std::vector<T> out(bytes_ / sizeof(T));
  if (bytes_ == 0) return out;
  HPCTUNE_TRY(owner_->check(owner_->api().copy_to_host(owner_->raw(), out.data(), ptr_, out.size() * sizeof(T)),
                            "copy to host"));
  return out;
}

}  // namespace hpctune::gpu
