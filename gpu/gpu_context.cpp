// GpuContext and DeviceBuffer (gpu_context.h).
#include "gpu/gpu_context.h"

#include <utility>

namespace hpctune::gpu {

Result<GpuContext> GpuContext::create(const GpuLibrary& library, int device) {
  HpctuneGpuContext* ctx = nullptr;
  if (library.api().context_create(device, &ctx) != 0 || ctx == nullptr)
    return err(Errc::kUnavailable, "GPU " + std::to_string(device) + " cannot be used: " + library.last_error());
  return GpuContext(library, ctx);
}

GpuContext::GpuContext(GpuContext&& other) noexcept
    : library_(other.library_), ctx_(std::exchange(other.ctx_, nullptr)) {}

GpuContext& GpuContext::operator=(GpuContext&& other) noexcept {
  if (this != &other) {
    if (ctx_ != nullptr) api().context_destroy(ctx_);
    library_ = other.library_;
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}

GpuContext::~GpuContext() {
  if (ctx_ != nullptr) api().context_destroy(ctx_);
}

Status GpuContext::check(int rc, const char* what) const {
  if (rc == 0) return Status::Ok();
  return err(Errc::kFailed, std::string("GPU ") + what + ": " + library_.last_error());
}

Result<DeviceBuffer> GpuContext::allocate(size_t bytes) const {
  void* ptr = nullptr;
  if (bytes > 0) HPCTUNE_TRY(check(api().alloc(ctx_, bytes, &ptr), "alloc"));
  return DeviceBuffer(this, ptr, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (owner_ != nullptr && ptr_ != nullptr) (void)owner_->api().release(owner_->raw(), ptr_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::write(const void* host, size_t bytes, size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset)
    return err(Errc::kInvalidArgument, "GPU write of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                                           " past the end of a buffer of " + std::to_string(bytes_));
  if (bytes == 0) return Status::Ok();
  return owner_->check(owner_->api().copy_to_device(owner_->raw(), static_cast<char*>(ptr_) + offset, host, bytes),
                       "copy to device");
}

Status DeviceBuffer::fill_zero() const {
  if (bytes_ == 0) return Status::Ok();
  return owner_->check(owner_->api().fill_zero(owner_->raw(), ptr_, bytes_), "fill zero");
}

}  // namespace hpctune::gpu
