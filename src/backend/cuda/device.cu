// Device selection, the compute stream and the caching allocator. The stream (and gemm.cu's
// cuBLASLt handle and workspace) are created on first use on the then-current device: select
// the device (set_device / select_local_gpu) before any other CUDA call. Blocks are rounded up (512
// bytes below 1 MiB, 2 MiB above) and kept on a per-size free list when released; since every
// op runs on the one compute stream, a block released after its last use is safe to hand out
// again to work queued later on the same stream.
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/check.cuh"

namespace mg::cuda {

namespace {

struct Allocator {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;     // rounded size -> block
  std::unordered_map<void*, size_t> in_use;     // block -> rounded size
  int64_t live = 0, peak = 0;
};
Allocator& allocator() {
  static Allocator* a = new Allocator;  // never destroyed: blocks may be released at exit
  return *a;
}

size_t rounded(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  return bytes < (size_t(1) << 20) ? (bytes + kSmall - 1) / kSmall * kSmall
                                   : (bytes + kLarge - 1) / kLarge * kLarge;
}

}  // namespace

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error of a failed probe
    return false;
  }
  return true;
}

int device_count() {
  int n = 0;
  MG_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

void set_device(int ordinal) { MG_CUDA_CHECK(cudaSetDevice(ordinal)); }

int select_local_gpu(int local_rank) {
  const int n = device_count();
  MG_USER_CHECK(n > 0, "no CUDA device visible to this rank (CUDA_VISIBLE_DEVICES?)");
  const int dev = local_rank % n;
  set_device(dev);
  return dev;
}

std::string device_name() {
  int dev = 0;
  MG_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  MG_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return str_cat(p.name, " (sm_", p.major, p.minor, ", ",
                 double(p.totalGlobalMem) / double(1u << 30), " GiB)");
}

void* stream() {
  static cudaStream_t s = [] {
    cudaStream_t st = nullptr;
    MG_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return st;
  }();
  return s;
}

void synchronize() { MG_CUDA_CHECK(cudaStreamSynchronize(compute_stream())); }

void* alloc(size_t bytes) {
  Allocator& a = allocator();
  const size_t n = rounded(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(a.mu);
  void* p = nullptr;
  // Last in, first out among blocks of this size: the most recently released is the likeliest
  // to be warm in L2.
  auto it = a.free_blocks.upper_bound(n);
  if (it != a.free_blocks.begin() && std::prev(it)->first == n) {
    --it;
    p = it->second;
    a.free_blocks.erase(it);
  } else {
    cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      cudaGetLastError();
      MG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
      for (auto& [size, block] : a.free_blocks) cudaFree(block);
      a.free_blocks.clear();
      e = cudaMalloc(&p, n);
    }
    // Out of memory is the user's to fix (the start-up check refuses what cannot fit; this is
    // memory taken meanwhile); any other failure is a bug.
    MG_USER_CHECK(e != cudaErrorMemoryAllocation, "out of GPU memory allocating ", n,
                  " bytes (", a.live, " bytes live on the device); free GPU memory, or lower "
                  "the sizes that drive it");
    MG_CHECK(e == cudaSuccess, "cudaMalloc of ", n, " bytes (", a.live,
             " bytes live on the device): ", cudaGetErrorString(e));
  }
  a.in_use[p] = n;
  a.live += int64_t(n);
  if (a.live > a.peak) a.peak = a.live;
  return p;
}

void release(void* p) {
  if (!p) return;
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.in_use.find(p);
  MG_CHECK(it != a.in_use.end(), "release of a pointer this allocator did not hand out");
  a.live -= int64_t(it->second);
  a.free_blocks.emplace(it->second, p);
  a.in_use.erase(it);
}

int64_t bytes_live() {
  std::lock_guard<std::mutex> lock(allocator().mu);
  return allocator().live;
}
int64_t bytes_peak() {
  std::lock_guard<std::mutex> lock(allocator().mu);
  return allocator().peak;
}

int64_t available_bytes() {
  size_t free = 0, total = 0;
  MG_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  int64_t cached = 0;
  for (const auto& [size, block] : a.free_blocks) cached += int64_t(size);
  return int64_t(free) + cached;
}

void empty_cache() {
  Allocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  MG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  for (auto& [size, block] : a.free_blocks) MG_CUDA_CHECK(cudaFree(block));
  a.free_blocks.clear();
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_stream()));
  synchronize();
}
void copy_on_device(void* dst, const void* src, size_t bytes) {
  MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream()));
}
void memset_zero(void* dst, size_t bytes) {
  MG_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_stream()));
}

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // unregistered host memory on old runtimes: clear the error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

const DeviceRuntime& device_runtime() {
  static const DeviceRuntime rt{alloc,          release,        memset_zero,
                                copy_to_device, copy_to_host,   copy_on_device,
                                is_device_pointer, synchronize, stream,
                                available_bytes};
  return rt;
}

}  // namespace mg::cuda
