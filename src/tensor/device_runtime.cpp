// Host memory, and the dispatch to the registered device runtime (tensor/device_runtime.h).
#include "tensor/device_runtime.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <utility>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace mg {

namespace {
// Constant-initialized, so a registration during static initialization cannot be overwritten.
constinit std::atomic<const DeviceRuntime*> g_runtime{nullptr};
constinit DeviceRuntime g_storage{};

const DeviceRuntime& device_runtime(const char* what) {
  const DeviceRuntime* rt = g_runtime.load(std::memory_order_acquire);
  MG_CHECK(rt != nullptr, what,
           " needs the CUDA backend, which this process has not selected "
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

namespace {
// The first number in a file (a cgroup limit or usage), -1 if none ("max": no limit).
int64_t read_number(const char* path) {
  std::ifstream f(path);
  int64_t v = -1;
  return f >> v ? v : -1;
}
// "MemAvailable:   22769768 kB" in /proc/meminfo, in bytes; -1 if absent.
int64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}
}  // namespace

int64_t available_bytes(Device d, std::string* source) {
  if (d == Device::CUDA) {
    const DeviceRuntime& rt = device_runtime("device memory");
    if (source) *source = "GPU free memory";
    return rt.available_bytes ? rt.available_bytes() : -1;
  }
  int64_t avail = mem_available();
  if (source) *source = "host MemAvailable";
  // A cgroup limit below what the host has (cgroup v2, then v1; a v1 "no limit" is ~2^63).
  for (const auto& [limit_file, usage_file] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const int64_t limit = read_number(limit_file), usage = read_number(usage_file);
    if (limit <= 0 || usage < 0) continue;
    const int64_t left = std::max<int64_t>(0, limit - usage);
    if (avail < 0 || left < avail) {
      avail = left;
      if (source) *source = "host cgroup memory limit";
    }
    break;
  }
  return avail;
}

void check_host_fits(int64_t bytes, const std::string& what) {
  std::string source;
  const int64_t available = available_bytes(Device::CPU, &source);
  MG_USER_CHECK(available < 0 || bytes <= available, what, " needs ", format_bytes(bytes),
                ", only ", format_bytes(available), " available (", source, ")");
}

}  // namespace runtime
}  // namespace mg
