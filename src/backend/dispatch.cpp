#include "backend/dispatch.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/timers.h"
#ifdef MG_HAS_CUDA
#include "backend/cuda/device.h"
#include "backend/cuda/ops.h"
#include "comm/nccl_communicator.h"
#endif

namespace mg::ops {

namespace {
Device g_device = Device::CPU;
}  // namespace

bool cuda_available(std::string* why) {
#ifdef MG_HAS_CUDA
  return cuda::available(why);
#else
  if (why) *why = "this megatron was built without the CUDA backend (configure with -DMG_CUDA=ON)";
  return false;
#endif
}

void set_device(Device d) {
  if (d == Device::CUDA) {
    std::string why;
    MG_USER_CHECK(cuda_available(&why), "--device cuda: no usable GPU: ", why,
                  "; run with --device cpu");
#ifdef MG_HAS_CUDA
    select_local_gpu();
#endif
  }
  g_device = d;
}

Device device() {
  return g_device;
}
bool on_cuda() {
  return g_device == Device::CUDA;
}

std::string device_description() {
#ifdef MG_HAS_CUDA
  if (on_cuda()) return "cuda: " + cuda::device_name();
#endif
  return "cpu";
}

int64_t device_bytes_peak() {
#ifdef MG_HAS_CUDA
  if (on_cuda()) return cuda::bytes_peak();
#endif
  return 0;
}

void synchronize() {
#ifdef MG_HAS_CUDA
  if (on_cuda()) cuda::synchronize();
#endif
}

void* alloc(size_t bytes, Device d) {
#ifdef MG_HAS_CUDA
  if (d == Device::CUDA) return cuda::alloc(bytes);
#endif
  MG_CHECK(d == Device::CPU, "CUDA memory requested in a build without the CUDA backend");
  return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}

void release(void* p, Device d) {
#ifdef MG_HAS_CUDA
  if (d == Device::CUDA) return cuda::release(p);
#endif
  (void)d;
  std::free(p);
}

void memset_zero(void* p, size_t bytes, Device d) {
  if (!bytes) return;
#ifdef MG_HAS_CUDA
  if (d == Device::CUDA) return cuda::memset_zero(p, bytes);
#endif
  (void)d;
  std::memset(p, 0, bytes);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (!bytes) return;
#ifdef MG_HAS_CUDA
  if (dst_device == Device::CUDA && src_device == Device::CUDA)
    return cuda::copy_on_device(dst, src, bytes);
  if (dst_device == Device::CUDA) return cuda::copy_to_device(dst, src, bytes);
  if (src_device == Device::CUDA) return cuda::copy_to_host(dst, src, bytes);
#endif
  (void)dst_device, (void)src_device;
  std::memmove(dst, src, bytes);
}

Device where(const void* p) {
#ifdef MG_HAS_CUDA
  if (p && on_cuda() && cuda::is_device_pointer(p)) return Device::CUDA;
#endif
  (void)p;
  return Device::CPU;
}

// Every op of the list: the CUDA twin when the compute device is a GPU, else the CPU op; the
// timed ones count their GPU time under their phase (a GPU run's timers synchronize the device,
// so a phase holds the op's kernels; the CPU kernels hold their own timers).
#define MG_DEFAULT(x)
#ifdef MG_HAS_CUDA
#define MG_OP(ret, name, params, args) \
  ret name params { return g_device == Device::CUDA ? cuda::name args : cpu::name args; }
#define MG_TIMED_OP(phase, ret, name, params, args) \
  ret name params {                                 \
    if (g_device == Device::CUDA) {                 \
      timers::Scope mg_timer(timers::phase);        \
      return cuda::name args;                       \
    }                                               \
    return cpu::name args;                          \
  }
#else
#define MG_OP(ret, name, params, args) \
  ret name params { return cpu::name args; }
#define MG_TIMED_OP(phase, ret, name, params, args) MG_OP(ret, name, params, args)
#endif
#include "backend/op_list.inc"
#undef MG_OP
#undef MG_TIMED_OP
#undef MG_DEFAULT

}  // namespace mg::ops
