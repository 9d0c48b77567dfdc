// Host-to-device copies through a ring of pinned (page-locked) staging slots. A copy from
// pageable memory may make the driver wait for the stream before it stages the bytes (the CUDA
// API's "synchronization behavior" notes say so); a copy from pinned memory is queued and returns
// at once. copy_to_device therefore memcpy's a small source into the next pinned slot, queues the
// DMA from it on the compute stream and records an event; the slot is written again only after
// its event has fired, so the caller may reuse its own buffer as soon as the call returns (the
// same contract as before) while the host runs ahead of the GPU. Copies larger than a slot (the
// parameter uploads at start-up) go straight from the caller's memory, which is then pageable
// (every host buffer here is): the driver has staged it when the call returns. A pinned source
// over 1 MiB would still be read after the return.
#include <cstring>
#include <mutex>

#include "backend/cuda/check.cuh"

namespace mg::cuda {

namespace {

constexpr int kSlots = 16;
constexpr size_t kSlotBytes = size_t(1) << 20;  // a micro-batch's ids up to 262144 rows

struct UploadRing {
  std::mutex mu;
  char* base = nullptr;                // kSlots * kSlotBytes of pinned host memory
  cudaEvent_t done[kSlots] = {};       // recorded after the DMA out of each slot
  bool queued[kSlots] = {};
  int next = 0;
  int64_t staged = 0, direct = 0;
};

UploadRing& ring() {
  static UploadRing* r = [] {
    auto* u = new UploadRing;  // never destroyed: copies may be in flight at exit
    MG_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&u->base), kSlots * kSlotBytes));
    for (cudaEvent_t& e : u->done)
      MG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return u;
  }();
  return *r;
}

}  // namespace

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > kSlotBytes) {
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_stream()));
    std::lock_guard<std::mutex> lock(ring().mu);
    ++ring().direct;
    return;
  }
  UploadRing& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  const int slot = r.next;
  r.next = (r.next + 1) % kSlots;
  // The slot's previous DMA has to have read it; it is kSlots copies old, so this rarely waits.
  if (r.queued[slot]) MG_CUDA_CHECK(cudaEventSynchronize(r.done[slot]));
  char* staging = r.base + size_t(slot) * kSlotBytes;
  std::memcpy(staging, src, bytes);
  MG_CUDA_CHECK(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, compute_stream()));
  MG_CUDA_CHECK(cudaEventRecord(r.done[slot], compute_stream()));
  r.queued[slot] = true;
  ++r.staged;
}

UploadCounts upload_counts() {
  std::lock_guard<std::mutex> lock(ring().mu);
  return {ring().staged, ring().direct, int64_t(kSlotBytes)};
}

}  // namespace mg::cuda
