// The CUDA emulator's runtime API (tests/cuda_emu/README.md): device memory as tracked host
// allocations (copies checked against them), streams and events that are always complete, the
// device's properties, and CUB's pair sort.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <cub/device/device_radix_sort.cuh>

#include "emu.h"

namespace {

using mg_emu::kMaxThreads;
using mg_emu::kSmemOptin;

// ---- device memory: host allocations the emulator knows ----
constexpr size_t kDeviceBytes = size_t(141) << 30;  // an H200's worth, as far as props go

struct Region {
  size_t bytes;
  bool device;  // else pinned host memory
};
std::mutex g_mem_mu;
std::map<uintptr_t, Region> g_regions;  // base -> region
cudaError_t g_last = cudaSuccess;

const std::pair<const uintptr_t, Region>* find_region(const void* p) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_regions.upper_bound(a);
  if (it == g_regions.begin()) return nullptr;
  --it;
  return a < it->first + it->second.bytes || (a == it->first) ? &*it : nullptr;
}

cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}

// A copy's range must lie inside one allocation of the kind its direction names.
bool inside(const void* p, size_t bytes, bool device) {
  const auto* r = find_region(p);
  if (!r) return !device;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a + bytes > r->first + r->second.bytes) return false;
  return r->second.device == device;
}

}  // namespace

namespace mg_emu {
void fatal(const std::string& what) {
  std::fprintf(stderr, "CUDA emulator: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}
cudaError_t set_last_error(cudaError_t e) { return fail(e); }
}  // namespace mg_emu

// ---- the runtime API ----
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
// An HGX node of 8 emulated GPUs, unless MG_CUDA_EMU_DEVICES gives the number, or
// CUDA_VISIBLE_DEVICES lists fewer (as the runtime counts them). They share the host's memory;
// what differs is the ordinal and the PCI bus id, which is what rank-to-GPU placement looks at.
int device_count_emulated() {
  static const int n = [] {
    if (const char* e = std::getenv("MG_CUDA_EMU_DEVICES")) return std::max(0, std::atoi(e));
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
      const std::string list(v);
      if (list.empty()) return 0;
      return int(std::count(list.begin(), list.end(), ',')) + 1;
    }
    return 8;
  }();
  return n;
}
int g_device = 0;
bool valid_device(int d) { return d >= 0 && d < device_count_emulated(); }

cudaError_t cudaGetDeviceCount(int* n) {
  *n = device_count_emulated();
  return *n > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int d) {
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  g_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = g_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof(p->name), "CUDA emulator on the host, device %d", d);
  p->totalGlobalMem = kDeviceBytes;
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = kSmemOptin;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->warpSize = 32;
  p->maxThreadsPerBlock = kMaxThreads;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return fail(cudaErrorInvalidValue);
  *v = kSmemOptin;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  std::snprintf(id, size_t(len), "0000:%02x:00.0", 0x18 + d);
  return cudaSuccess;
}

// Exactly `bytes` (256-byte aligned, as cudaMalloc's): under AddressSanitizer a kernel that
// reads or writes past an allocation is reported at the access.
static void* allocate(size_t bytes) {
  void* q = nullptr;
  return posix_memalign(&q, 256, bytes == 0 ? 1 : bytes) == 0 ? q : nullptr;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  void* q = allocate(bytes);
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::memset(q, 0xff, bytes);  // poisoned: device memory starts undefined (NaN as floats)
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_regions[reinterpret_cast<uintptr_t>(q)] = Region{bytes, true};
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  void* q = allocate(bytes);
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_regions[reinterpret_cast<uintptr_t>(q)] = Region{bytes, false};
  *p = q;
  return cudaSuccess;
}
// The emulated device's size less what is allocated on it.
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  size_t used = 0;
  for (const auto& [base, r] : g_regions)
    if (r.device) used += r.bytes;
  *total = kDeviceBytes;
  *free = used < kDeviceBytes ? kDeviceBytes - used : 0;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  mg_emu::nccl_drain();  // cudaFree synchronizes the device
  std::lock_guard<std::mutex> lock(g_mem_mu);
  auto it = g_regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_regions.end() || !it->second.device) return fail(cudaErrorInvalidValue);
  g_regions.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t) {
  mg_emu::nccl_drain();
  if (bytes == 0) return cudaSuccess;
  bool ok = true;
  switch (k) {
    case cudaMemcpyHostToDevice: ok = inside(dst, bytes, true) && inside(src, bytes, false); break;
    case cudaMemcpyDeviceToHost: ok = inside(src, bytes, true) && inside(dst, bytes, false); break;
    case cudaMemcpyDeviceToDevice: ok = inside(src, bytes, true) && inside(dst, bytes, true); break;
    default: break;
  }
  if (!ok) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind k) {
  return cudaMemcpyAsync(dst, src, bytes, k, nullptr);
}
cudaError_t cudaMemsetAsync(void* dst, int v, size_t bytes, cudaStream_t) {
  mg_emu::nccl_drain();
  if (bytes == 0) return cudaSuccess;
  if (!inside(dst, bytes, true)) return fail(cudaErrorInvalidValue);
  std::memset(dst, v, bytes);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = cudaPointerAttributes{};
  if (const auto* r = find_region(p)) {
    a->type = r->second.device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->devicePointer = const_cast<void*>(p);
    a->hostPointer = r->second.device ? nullptr : const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

struct mg_emu_stream {};
// An event completes with the NCCL calls queued before it was recorded (nccl.cpp).
struct mg_emu_event {
  uint64_t nccl_calls = 0;
};
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new mg_emu_stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  mg_emu::nccl_drain();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new mg_emu_event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (!e) return fail(cudaErrorInvalidValue);
  e->nccl_calls = mg_emu::nccl_enqueued();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidValue);
  mg_emu::nccl_drain(e->nccl_calls);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidValue);
  return mg_emu::nccl_progress(e->nccl_calls) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t mg_emu_func_set_attribute(const void* f, cudaFuncAttribute a, int v) {
  if (!f || a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > kSmemOptin)
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

// ---- CUB ----
cudaError_t cub::DeviceRadixSort::SortPairs(void* temp, size_t& temp_bytes, const int32_t* keys_in,
                                            int32_t* keys_out, const int32_t* values_in,
                                            int32_t* values_out, int n, int begin_bit, int end_bit,
                                            cudaStream_t) {
  mg_emu::nccl_drain();
  const size_t need = size_t(n) * 8 + 256;
  if (!temp) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (temp_bytes < need || begin_bit != 0 || end_bit != 32 || n < 0)
    return fail(cudaErrorInvalidValue);
  std::vector<int32_t> order(static_cast<size_t>(n));
  const std::vector<int32_t> keys(keys_in, keys_in + n), vals(values_in, values_in + n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  for (int i = 0; i < n; ++i) {
    keys_out[i] = keys[order[i]];
    values_out[i] = vals[order[i]];
  }
  return cudaSuccess;
}
