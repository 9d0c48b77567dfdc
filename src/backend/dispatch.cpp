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

// Every op below is one line: the CUDA twin when the compute device is a GPU, else the CPU op.
#ifdef MG_HAS_CUDA
#define MG_OP(fn, ...) (g_device == Device::CUDA ? cuda::fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__))
#else
#define MG_OP(fn, ...) cpu::fn(__VA_ARGS__)
#endif
// The same for the compute ops the op-kind timers of --timing-log-level 2 count (compute/gemm,
// compute/attention, ...): the CPU ops hold their own timer; a GPU op is timed here, and since a
// GPU run's timers synchronize the device, a phase holds the op's kernels.
#ifdef MG_HAS_CUDA
#define MG_TIMED_OP(phase, fn, ...)          \
  do {                                       \
    if (g_device == Device::CUDA) {          \
      timers::Scope mg_timer(timers::phase); \
      cuda::fn(__VA_ARGS__);                 \
    } else {                                 \
      cpu::fn(__VA_ARGS__);                  \
    }                                        \
  } while (0)
#else
#define MG_TIMED_OP(phase, fn, ...) cpu::fn(__VA_ARGS__)
#endif

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

void cast_from_f32(void* dst, DType dst_dtype, const float* src, int64_t n) {
  MG_TIMED_OP(kCast, cast_from_f32, dst, dst_dtype, src, n);
}
void cast_to_f32(float* dst, const void* src, DType src_dtype, int64_t n) {
  MG_TIMED_OP(kCast, cast_to_f32, dst, src, src_dtype, n);
}
void store_rounded(void* dst, DType dst_dtype, float* x, int64_t n) {
  MG_TIMED_OP(kCast, store_rounded, dst, dst_dtype, x, n);
}
bool has_inf_or_nan(const float* x, int64_t n) {
  return MG_OP(has_inf_or_nan, x, n);
}

void linear_forward(MatOut out, Mat inp, Mat weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT) {
  MG_TIMED_OP(kGemm, linear_forward, out, inp, weight, bias, N, IN, OUT);
}
void linear_residual_forward(float* out, Mat inp, Mat weight, const float* bias,
                             const float* residual, int64_t N, int64_t IN, int64_t OUT) {
  MG_TIMED_OP(kGemm, linear_residual_forward, out, inp, weight, bias, residual, N, IN, OUT);
}
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                     Mat weight, int64_t N, int64_t IN, int64_t OUT, GradWrite dinp_write) {
  MG_TIMED_OP(kGemm, linear_backward, dinp, dweight, dbias, dout, inp, weight, N, IN, OUT, dinp_write);
}
void embedding_forward(float* out, const int32_t* ids, Mat table, int64_t row_begin,
                       int64_t row_end, int64_t N, int64_t H, bool accumulate) {
  MG_OP(embedding_forward, out, ids, table, row_begin, row_end, N, H, accumulate);
}
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t row_begin,
                        int64_t row_end, int64_t N, int64_t H) {
  MG_OP(embedding_backward, dtable, dout, ids, row_begin, row_end, N, H);
}
void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) {
  MG_TIMED_OP(kGeluResidual, bias_add_forward, out, bias, N, C);
}
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  MG_TIMED_OP(kGeluResidual, bias_backward, dbias, dout, N, C);
}
void layernorm_forward(MatOut out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
  MG_TIMED_OP(kLayerNorm, layernorm_forward, out, mean, rstd, inp, weight, bias, N, C, eps);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  MG_TIMED_OP(kLayerNorm, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void gelu_forward(MatOut out, Mat inp, int64_t n) {
  MG_TIMED_OP(kGeluResidual, gelu_forward, out, inp, n);
}
void gelu_backward(float* dinp, Mat inp, const float* dout, int64_t n, GradWrite write) {
  MG_TIMED_OP(kGeluResidual, gelu_backward, dinp, inp, dout, n, write);
}
void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  MG_TIMED_OP(kGeluResidual, residual_forward, out, a, b, n);
}
void rmsnorm_forward(MatOut out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
  MG_OP(rmsnorm_forward, out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  MG_OP(rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void swiglu_forward(MatOut out, Mat inp, int64_t N, int64_t F) {
  MG_OP(swiglu_forward, out, inp, N, F);
}
void swiglu_backward(float* dinp, Mat inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write) {
  MG_OP(swiglu_backward, dinp, inp, dout, N, F, write);
}
void heads_gather(float* dst, const Heads& src, int64_t N, int64_t n_heads, int64_t HD) {
  MG_OP(heads_gather, dst, src, N, n_heads, HD);
}
void heads_scatter(const Heads& dst, Mat src, int64_t N, int64_t n_heads, int64_t HD) {
  MG_OP(heads_scatter, dst, src, N, n_heads, HD);
}
void rope_forward(Heads x, const int32_t* positions, const float* inv_freq, int64_t N,
                  int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved) {
  MG_OP(rope_forward, x, positions, inv_freq, N, n_heads, HD, rot_dim, interleaved);
}
void rope_backward(Heads dx, const int32_t* positions, const float* inv_freq, int64_t N,
                   int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved) {
  MG_OP(rope_backward, dx, positions, inv_freq, N, n_heads, HD, rot_dim, interleaved);
}
void attention_forward(MatOut out, float* lse, const Heads& q, const Heads& k, const Heads& v,
                       const AttentionShape& a, const int32_t* seg_start) {
  MG_TIMED_OP(kAttention, attention_forward, out, lse, q, k, v, a, seg_start);
}
void attention_backward(const Heads& dq, const Heads& dk, const Heads& dv, const float* dout,
                        Mat out, const Heads& q, const Heads& k, const Heads& v,
                        const float* lse, const AttentionShape& a, const int32_t* seg_start,
                        GradWrite write) {
  MG_TIMED_OP(kAttention, attention_backward, dq, dk, dv, dout, out, q, k, v, lse, a, seg_start,
              write);
}
void cross_entropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V) {
  MG_OP(cross_entropy_row_max, row_max, logits, N, V);
}
void cross_entropy_sum_exp(float* sum_exp, const float* logits, const float* shift, int64_t N,
                           int64_t V) {
  MG_OP(cross_entropy_sum_exp, sum_exp, logits, shift, N, V);
}
void cross_entropy_target_logit(float* target_logit, const float* logits, const int32_t* targets,
                                int64_t v_begin, int64_t N, int64_t V) {
  MG_OP(cross_entropy_target_logit, target_logit, logits, targets, v_begin, N, V);
}
void cross_entropy_combine(float* losses, float* lse, const float* row_max, const float* sum_exp,
                           const int32_t* targets, int64_t N) {
  MG_OP(cross_entropy_combine, losses, lse, row_max, sum_exp, targets, N);
}
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t v_begin,
                            int64_t N, int64_t V) {
  MG_OP(cross_entropy_backward, dlogits, logits, lse, targets, dlosses, v_begin, N, V);
}
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t, float clip) {
  MG_OP(adamw_update, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, clip);
}
void sgd_update(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, int64_t t, float clip) {
  MG_OP(sgd_update, param, grad, buf, n, lr, momentum, weight_decay, t, clip);
}
void masked_mean_accumulate(double* acc, const float* losses, const float* mask, int64_t n,
                            double mask_sum) {
  MG_OP(masked_mean_accumulate, acc, losses, mask, n, mask_sum);
}
double sum_squares(const float* x, int64_t n) {
  return MG_OP(sum_squares, x, n);
}
double sum_squares_ranges(const float* x, const Range* ranges, int64_t k) {
  return MG_OP(sum_squares_ranges, x, ranges, k);
}
void scale_inplace(float* x, float s, int64_t n) {
  MG_OP(scale_inplace, x, s, n);
}

}  // namespace mg::ops
