// Host memory, and the dispatch to the registered device runtime (tensor/device_runtime.h).
#include "tensor/device_runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace mg {

namespace {
// Constant-initialized, so a registration during static initialization cannot be overwritten.
constinit std::atomic<const DeviceRuntime*> g_runtime{nullptr};
constinit DeviceRuntime g_storage{};

const DeviceRuntime& device_runtime(const char* what) {
  const DeviceRuntime* rt = g_runtime.load(std::memory_order_acquire);
  MG_CHECK(rt != nullptr, what, " needs the CUDA backend, which this process has not selected "
           "(a build without it, or no ops::set_device(Device::CUDA) yet)");
  return *rt;
}
}  // namespace

void register_device_runtime(const DeviceRuntime& runtime) {
  const DeviceRuntime* rt = g_runtime.load(std::memory_order_acquire);
  if (rt) {
    MG_CHECK(rt->alloc == runtime.alloc && rt->release == runtime.release,
             "a second, different device runtime registered");
    return;
  }
  g_storage = runtime;
  g_runtime.store(&g_storage, std::memory_order_release);
}

bool device_runtime_registered() { return g_runtime.load(std::memory_order_acquire) != nullptr; }

namespace runtime {

void* alloc(size_t bytes, Device d) {
  if (d == Device::CUDA) return device_runtime("CUDA memory").alloc(bytes);
  return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}

void release(void* p, Device d) {
  if (d == Device::CUDA) return device_runtime("CUDA memory").release(p);
  std::free(p);
}

void memset_zero(void* p, size_t bytes, Device d) {
  if (!bytes) return;
  if (d == Device::CUDA) return device_runtime("CUDA memory").memset_zero(p, bytes);
  std::memset(p, 0, bytes);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (!bytes) return;
  if (dst_device == Device::CPU && src_device == Device::CPU) {
    std::memmove(dst, src, bytes);
    return;
  }
  const DeviceRuntime& rt = device_runtime("a device copy");
  if (dst_device == Device::CUDA && src_device == Device::CUDA) rt.copy_on_device(dst, src, bytes);
  else if (dst_device == Device::CUDA) rt.copy_to_device(dst, src, bytes);
  else rt.copy_to_host(dst, src, bytes);
}

Device where(const void* p) {
  const DeviceRuntime* rt = g_runtime.load(std::memory_order_acquire);
  return p && rt && rt->is_device_pointer(p) ? Device::CUDA : Device::CPU;
}

void synchronize() {
  if (const DeviceRuntime* rt = g_runtime.load(std::memory_order_acquire)) rt->synchronize();
}

void* stream() { return device_runtime("the device stream").stream(); }

}  // namespace runtime
}  // namespace mg
