// CUDA emulation (MG_CUDA=EMU, tests/cuda_emu/README.md): the slice of the CUDA runtime API and
// kernel language that src/backend/cuda uses, run on the host. Device memory is host memory
// the emulator tracks; every call is synchronous (a stream is a name, an event always fired).
// Each kernel thread runs as a fiber (runtime.cpp), so barriers, warp shuffles and shared
// memory behave as on a GPU and a missing barrier shows up as wrong results or a reported
// deadlock.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

// ---- kernel-language keywords ----
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
};
using cudaError = cudaError_t;

struct mg_emu_stream;
struct mg_emu_event;
using cudaStream_t = mg_emu_stream*;
using cudaEvent_t = mg_emu_event*;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int major, minor;
  int multiProcessorCount;
  int warpSize;
  int maxThreadsPerBlock;
};
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;

const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemsetAsync(void* dst, int v, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t mg_emu_func_set_attribute(const void* f, cudaFuncAttribute a, int v);
template <typename F>
cudaError_t cudaFuncSetAttribute(F* f, cudaFuncAttribute a, int v) {
  return mg_emu_func_set_attribute(reinterpret_cast<const void*>(f), a, v);
}

// ---- the emulator's kernel-side interface (runtime.cpp) ----
namespace mg_emu {

constexpr int kWarpSize = 32;
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_smem();
// The calling block's copy of the static __shared__ array identified by key: fresh and
// poisoned (0xff bytes) for every block, as shared memory is undefined when a block starts.
void* shared_storage(const void* key, size_t bytes);
template <typename A>
A* shared_array(const void* key) {
  static_assert(alignof(A) <= 64, "__shared__ array aligned past 64 bytes");
  return static_cast<A*>(shared_storage(key, sizeof(A)));
}
void sync_block();
bool sync_block_or(bool pred);
void sync_warp();
int lane_id();
// Prints "CUDA emulator: what" and aborts: a kernel broke a rule a GPU would not survive.
[[noreturn]] void fatal(const std::string& what);
uint64_t* warp_slots();  // kWarpSize exchange words of the calling thread's warp

// Runs body for every thread of the grid (grid x block), with `smem` bytes of dynamic shared
// memory per block; a kernel thread reaches its coordinates through thread_idx() etc.
void run_grid(dim3 grid, dim3 block, size_t smem, void (*body)(void*), void* ctx);

// kernel<<<g, b, smem, s>>>(args) becomes launch([&](auto... a) { kernel(a...); }, g, b,
// smem, s)(args): the arguments are copied (kernel parameters are by value) before the grid runs.
template <typename K>
struct Launch {
  K k;
  dim3 grid, block;
  size_t smem;
  template <typename... A>
  void operator()(A... args) {
    auto call = [&] { k(args...); };
    run_grid(
        grid, block, smem, [](void* c) { (*static_cast<decltype(call)*>(c))(); }, &call);
  }
};
template <typename K>
Launch<K> launch(K k, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t = nullptr) {
  return Launch<K>{k, grid, block, smem};
}

}  // namespace mg_emu

#define threadIdx (::mg_emu::thread_idx())
#define blockIdx (::mg_emu::block_idx())
#define blockDim (::mg_emu::block_dim())
#define gridDim (::mg_emu::grid_dim())

inline void __syncthreads() { ::mg_emu::sync_block(); }
inline int __syncthreads_or(int pred) { return ::mg_emu::sync_block_or(pred != 0) ? 1 : 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  ::mg_emu::sync_warp();
}
// A butterfly shuffle: every lane publishes its value, the warp meets, each reads its partner's,
// the warp meets again (so no slot is overwritten before it is read).
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  (void)mask;
  if (lane_mask < 0 || lane_mask >= width || width != 32)
    ::mg_emu::fatal("__shfl_xor_sync with lane mask " + std::to_string(lane_mask) + " and width " +
                    std::to_string(width) + " (the emulator has full-warp shuffles)");
  uint64_t* slots = ::mg_emu::warp_slots();
  const int lane = ::mg_emu::lane_id();
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof(T));
  slots[lane] = w;
  ::mg_emu::sync_warp();
  uint64_t got = slots[lane ^ lane_mask];
  ::mg_emu::sync_warp();
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}
// Threads of a block run one at a time: a read-modify-write is atomic.
inline int atomicOr(int* p, int v) {
  const int old = *p;
  *p = old | v;
  return old;
}
using std::isfinite;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <typename T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
inline T max(T a, T b) {
  return a < b ? b : a;
}
