// The op set the model, the optimizer and the trainer call: backend/ops.h's functions under
// the same names and conventions, sent to backend/cpu or backend/cuda according to the
// process's compute device (set once at start-up: `megatron train --device cpu|cuda`). The
// pointers an op gets must live on that device: Tensor(shape, dtype, ops::device()) allocates
// them there, and copy() moves bytes between host and device. With no CUDA backend built,
// choosing CUDA is a clear error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/ops.h"
#include "tensor/tensor.h"

namespace mg::ops {

using cpu::Mat;
using cpu::MatOut;
using cpu::GradWrite;

// The compute device of this process. set_device(CUDA) checks that a GPU is usable and selects
// the GPU of this rank: its node-local rank (from the launcher) modulo the GPU count.
void set_device(Device d);
Device device();
bool on_cuda();
// Whether this build has the CUDA backend and the runtime finds a GPU; *why says why not.
bool cuda_available(std::string* why = nullptr);
// "cpu", or "cuda: NVIDIA H200 (sm_90, 139.8 GiB)" for the log.
std::string device_description();
// The most device memory ever live at once (the CUDA caching allocator's count; 0 on the CPU).
int64_t device_bytes_peak();
// Waits for the compute stream (no-op on the CPU). The trainer calls it before it reads an
// iteration's time, so the step time contains the step's GPU work, and the phase timers of
// --timing-log-level call it where each timed phase starts and stops (timers::set_sync).
void synchronize();

// Memory on a device, and copies where either side may be host or device.
void* alloc(size_t bytes, Device d);
void release(void* p, Device d);
void memset_zero(void* p, size_t bytes, Device d);
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Where p points: CUDA for device memory, else CPU (always CPU without the CUDA backend).
Device where(const void* p);

void cast_from_f32(void* dst, DType dst_dtype, const float* src, int64_t n);
void cast_to_f32(float* dst, const void* src, DType src_dtype, int64_t n);
void store_rounded(void* dst, DType dst_dtype, float* x, int64_t n);
bool has_inf_or_nan(const float* x, int64_t n);

void linear_forward(MatOut out, Mat inp, Mat weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
void linear_residual_forward(float* out, Mat inp, Mat weight, const float* bias,
                             const float* residual, int64_t N, int64_t IN, int64_t OUT);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                     Mat weight, int64_t N, int64_t IN, int64_t OUT,
                     GradWrite dinp_write = GradWrite::Add);
void embedding_forward(float* out, const int32_t* ids, Mat table, int64_t row_begin,
                       int64_t row_end, int64_t N, int64_t H, bool accumulate);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t row_begin,
                        int64_t row_end, int64_t N, int64_t H);
void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C);
void layernorm_forward(MatOut out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C);
void gelu_forward(MatOut out, Mat inp, int64_t n);
void gelu_backward(float* dinp, Mat inp, const float* dout, int64_t n,
                   GradWrite write = GradWrite::Add);
void residual_forward(float* out, const float* a, const float* b, int64_t n);
void rmsnorm_forward(MatOut out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);
void swiglu_forward(MatOut out, Mat inp, int64_t N, int64_t F);
void swiglu_backward(float* dinp, Mat inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write = GradWrite::Add);
using cpu::Heads;
using cpu::AttentionShape;
using cpu::fused_qkv;
using cpu::FusedQKV;
void heads_gather(float* dst, const Heads& src, int64_t N, int64_t n_heads, int64_t HD);
void heads_scatter(const Heads& dst, Mat src, int64_t N, int64_t n_heads, int64_t HD);
void rope_forward(Heads x, const int32_t* positions, const float* inv_freq, int64_t N,
                  int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved);
void rope_backward(Heads dx, const int32_t* positions, const float* inv_freq, int64_t N,
                   int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved);
// q/k/v and out in f32, or all in a 16-bit model's dtype: the GPU then runs the tensor-core
// kernels on those operands; the CPU always computes in fp32.
void attention_forward(MatOut out, float* lse, const Heads& q, const Heads& k, const Heads& v,
                       const AttentionShape& a, const int32_t* seg_start = nullptr);
void attention_backward(const Heads& dq, const Heads& dk, const Heads& dv, const float* dout,
                        Mat out, const Heads& q, const Heads& k, const Heads& v,
                        const float* lse, const AttentionShape& a,
                        const int32_t* seg_start = nullptr, GradWrite write = GradWrite::Add);
void cross_entropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V);
void cross_entropy_sum_exp(float* sum_exp, const float* logits, const float* shift, int64_t N,
                           int64_t V);
void cross_entropy_target_logit(float* target_logit, const float* logits, const int32_t* targets,
                                int64_t v_begin, int64_t N, int64_t V);
void cross_entropy_combine(float* losses, float* lse, const float* row_max, const float* sum_exp,
                           const int32_t* targets, int64_t N);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t v_begin,
                            int64_t N, int64_t V);
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float clip = 1.0f);
void sgd_update(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, int64_t t, float clip = 1.0f);
// acc, losses and mask on the compute device.
void masked_mean_accumulate(double* acc, const float* losses, const float* mask, int64_t n,
                            double mask_sum);
double sum_squares(const float* x, int64_t n);
using cpu::Range;
double sum_squares_ranges(const float* x, const Range* ranges, int64_t k);
void scale_inplace(float* x, float s, int64_t n);

}  // namespace mg::ops
