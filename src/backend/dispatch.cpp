#include "backend/dispatch.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/timers.h"
#include "tensor/device_runtime.h"
#ifdef MG_HAS_CUDA
#include "backend/cuda/device.h"
#include "backend/cuda/ops.h"
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

void set_device(Device d, int local_rank) {
  if (d == Device::CUDA) {
    std::string why;
    MG_USER_CHECK(cuda_available(&why), "--device cuda: no usable GPU: ", why,
                  "; run with --device cpu");
#ifdef MG_HAS_CUDA
    cuda::select_local_gpu(local_rank);
    register_device_runtime(cuda::device_runtime());
#endif
  }
  (void)local_rank;
  g_device = d;
}

Device device() { return g_device; }
bool on_cuda() { return g_device == Device::CUDA; }

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

int64_t memory_available_to_rank(int local_rank, int ranks_on_node, std::string* source) {
  std::string what;
  const int64_t avail = runtime::available_bytes(g_device, &what);
  int sharing = std::max(1, ranks_on_node);
#ifdef MG_HAS_CUDA
  if (on_cuda()) {  // ranks pick GPU local_rank % n (cuda::select_local_gpu)
    const int n = std::max(1, cuda::device_count()), gpu = local_rank % n;
    sharing = 0;
    for (int r = 0; r < std::max(1, ranks_on_node); ++r) sharing += r % n == gpu;
  }
#endif
  (void)local_rank;
  if (source) *source = sharing > 1 ? str_cat(what, " / ", sharing, " ranks sharing it") : what;
  return avail < 0 ? avail : avail / sharing;
}

void synchronize() {
#ifdef MG_HAS_CUDA
  if (on_cuda()) cuda::synchronize();
#endif
}

// Tensor memory is tensor/'s (device_runtime.h); these keep the op set's names for it.
void* alloc(size_t bytes, Device d) { return runtime::alloc(bytes, d); }
void release(void* p, Device d) { runtime::release(p, d); }
void memset_zero(void* p, size_t bytes, Device d) { runtime::memset_zero(p, bytes, d); }
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  runtime::copy(dst, dst_device, src, src_device, bytes);
}
Device where(const void* p) { return runtime::where(p); }

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
