// The CUDA runtime side of the backend: device discovery and selection, the one compute stream
// every op is queued on, a caching device allocator with live/peak accounting, and host<->device
// copies. Plain C++ interface (no CUDA types), so callers and tests compile without nvcc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/device_runtime.h"

namespace mg::cuda {

// True when the CUDA runtime finds at least one usable device; otherwise *why (if given) says
// what the runtime reported ("no CUDA-capable device is detected", a driver mismatch, ...).
bool available(std::string* why = nullptr);
int device_count();
// Selects the device for this process (one GPU per rank: the local rank modulo device_count).
void set_device(int ordinal);
// Picks this rank's GPU: local_rank (its place among the ranks of its node, which the caller
// knows: comm's local_rank()) modulo the visible devices. Returns the device ordinal chosen.
int select_local_gpu(int local_rank);
// "NVIDIA H200 (sm_90, 139.8 GiB)" for the current device.
std::string device_name();

// The compute stream (a cudaStream_t) all kernels and copies of this backend are queued on.
void* stream();
// Waits for everything queued on the compute stream; reports any asynchronous kernel error.
void synchronize();

// Device memory from a caching allocator: freed blocks are kept per rounded size and reused in
// stream order, so the steady state of a training step makes no cudaMalloc/cudaFree calls.
void* alloc(size_t bytes);
void release(void* p);
int64_t bytes_live();  // bytes handed out and not yet released (rounded sizes)
int64_t bytes_peak();  // the most ever live at once
// Device memory this process can still get: the driver's free memory plus the blocks this
// allocator caches.
int64_t available_bytes();
// Returns every cached free block to the driver.
void empty_cache();

// Queued on the stream; src may be reused once it returns. Up to 1 MiB goes through pinned
// staging slots (upload.cu), so the call does not wait for the GPU; larger copies go direct.
void copy_to_device(void* dst, const void* src, size_t bytes);
// How many copy_to_device calls went through the pinned slots and how many went direct.
struct UploadCounts {
  int64_t staged = 0, direct = 0, slot_bytes = 0;
};
UploadCounts upload_counts();
void copy_to_host(void* dst, const void* src, size_t bytes);    // returns once copied
void copy_on_device(void* dst, const void* src, size_t bytes);  // queued on the stream
void memset_zero(void* dst, size_t bytes);                      // queued on the stream
// Whether p points into device memory (host memory, registered or not, is false).
bool is_device_pointer(const void* p);
// The functions above as tensor/'s device runtime (ops::set_device registers them).
const DeviceRuntime& device_runtime();

// An owning device buffer (RAII over alloc/release).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) : p_(bytes ? alloc(bytes) : nullptr), n_(bytes) {}
  ~Buffer() {
    if (p_) release(p_);
  }
  Buffer(Buffer&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      if (p_) release(p_);
      p_ = o.p_;
      n_ = o.n_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace mg::cuda
