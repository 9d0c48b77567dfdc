// 16-bit GEMMs with fp32 accumulation on oneDNN's matmul primitive (AVX512_BF16 brgemm kernels
// for bf16 on this CPU), and the 16-bit paths of the linear layer. Primitives are created once
// per shape and cached: creating one costs milliseconds, running one is the GEMM itself. Each
// call passes its thread's own scratchpad (oneDNN's shared library scratchpad only serves the
// thread that created the primitive), so threads may run cached primitives side by side
// (grouped_gemm.cpp's tiles do).
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/staging.h"
#include "backend/ops.h"
#include "core/timers.h"
#include "core/error.h"
#include "tensor/tensor.h"

namespace mg::cpu {

namespace {

using dnnl::memory;

struct Key {
  bool ta, tb, acc;
  int64_t M, N, K, lda, ldb, ldc;
  DType t;
  auto tie() const { return std::tie(ta, tb, acc, M, N, K, lda, ldb, ldc, t); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Prim {
  dnnl::matmul mm;
  memory::desc a, b, c, scratchpad;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::data_type dnnl_type(DType t) {
  return t == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f16;
}

// Null when oneDNN has no kernel for this dtype on this CPU.
Prim* primitive(const Key& k) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Prim>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(k);
  if (it != cache.end()) return it->second.get();
  // Logical A [M,K], B [K,N]; a transposed operand is the same matrix read with swapped strides.
  const memory::dims sa = k.ta ? memory::dims{1, k.lda} : memory::dims{k.lda, 1};
  const memory::dims sb = k.tb ? memory::dims{1, k.ldb} : memory::dims{k.ldb, 1};
  auto p = std::make_unique<Prim>();
  p->a = memory::desc({k.M, k.K}, dnnl_type(k.t), sa);
  p->b = memory::desc({k.K, k.N}, dnnl_type(k.t), sb);
  p->c = memory::desc({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.acc) {
    dnnl::post_ops po;
    po.append_sum(1.f);
    attr.set_post_ops(po);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->c), attr, engine());
    p->mm = dnnl::matmul(pd);
    p->scratchpad = pd.scratchpad_desc();
  } catch (const dnnl::error&) {
    p.reset();
  }
  return (cache[k] = std::move(p)).get();
}

// Grows-only scratch (no allocation in the steady state).
void* scratch(Tensor& t, int64_t bytes) {
  if (int64_t(t.nbytes()) < bytes) t = Tensor({(bytes + 3) / 4});
  return t.data<float>();
}

// The bias a 16-bit output adds: rounded to t (as the GPU's epilogue must take it) and widened
// back. A 16-bit model's biases are 16-bit values already, so for them this changes nothing.
const float* rounded_bias(const float* bias, DType t, int64_t n) {
  thread_local std::vector<float> b;
  b.resize(size_t(n));
  round_through(b.data(), bias, t, n);
  return b.data();
}

}  // namespace

bool native_lowp_gemm(DType dtype) {
  return primitive({false, false, false, 16, 16, 16, 16, 16, 16, dtype}) != nullptr;
}

void gemm_lowp(bool ta, bool tb, int64_t M, int64_t N, int64_t K, Mat A, int64_t lda, Mat B,
               int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  MG_CHECK(A.dtype == B.dtype && A.dtype != DType::F32, "gemm_lowp operands ", dtype_name(A.dtype),
           " x ", dtype_name(B.dtype));
  if (M == 0 || N == 0) return;
  if (Prim* p = primitive({ta, tb, accumulate, M, N, K, lda, ldb, ldc, A.dtype})) {
    static thread_local dnnl::stream strm(engine());
    memory a(p->a, engine(), const_cast<void*>(A.data));
    memory b(p->b, engine(), const_cast<void*>(B.data));
    memory c(p->c, engine(), C);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a},
                                         {DNNL_ARG_WEIGHTS, b},
                                         {DNNL_ARG_DST, c}};
    static thread_local std::vector<char> scratch_bytes;
    if (const size_t n = p->scratchpad.get_size()) {
      if (scratch_bytes.size() < n) scratch_bytes.resize(n);
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(p->scratchpad, engine(), scratch_bytes.data()));
    }
    p->mm.execute(strm, args);
    strm.wait();
    return;
  }
  // No native kernel: widen both operands (as stored, ld included) and run the f32 GEMM.
  static thread_local Tensor wa, wb;
  const int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb;
  float* a32 = static_cast<float*>(scratch(wa, na * 4));
  float* b32 = static_cast<float*>(scratch(wb, nb * 4));
  cast_to_f32(a32, A.data, A.dtype, na);
  cast_to_f32(b32, B.data, B.dtype, nb);
  gemm(ta, tb, M, N, K, 1.f, a32, lda, b32, ldb, accumulate ? 1.f : 0.f, C, ldc);
}

void linear_forward(MatOut out16, Mat inp, Mat weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT) {
  timers::Scope timer(timers::kGemm);
  MG_CHECK(inp.dtype == weight.dtype, "linear input ", dtype_name(inp.dtype), " but weight ",
           dtype_name(weight.dtype));
  MG_CHECK(out16.dtype == DType::F32 || out16.dtype == inp.dtype, "linear output ",
           dtype_name(out16.dtype), " from ", dtype_name(inp.dtype), " operands");
  float* out = f32_result(out16, N * OUT);
  if (bias) {
    if (out16.dtype != DType::F32) bias = rounded_bias(bias, out16.dtype, OUT);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OUT; ++o) out[n * OUT + o] = bias[o];
  }
  if (inp.dtype == DType::F32)
    gemm(false, true, N, OUT, IN, 1.0f, static_cast<const float*>(inp.data), IN,
         static_cast<const float*>(weight.data), IN, bias ? 1.0f : 0.0f, out, OUT);
  else gemm_lowp(false, true, N, OUT, IN, inp, IN, weight, IN, bias != nullptr, out, OUT);
  store_result(out16, out, N * OUT);
}

void linear_residual_forward(float* out, Mat inp, Mat weight, const float* bias,
                             const float* residual, int64_t N, int64_t IN, int64_t OUT) {
  linear_forward(out, inp, weight, nullptr, N, IN, OUT);
  if (bias) bias_add_forward(out, bias, N, OUT);
  residual_forward(out, residual, out, N * OUT);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                     Mat weight, int64_t N, int64_t IN, int64_t OUT, GradWrite dinp_write) {
  timers::Scope timer(timers::kGemm);
  MG_CHECK(inp.dtype == weight.dtype, "linear input ", dtype_name(inp.dtype), " but weight ",
           dtype_name(weight.dtype));
  if (dinp && dinp_write == GradWrite::Set) std::memset(dinp, 0, size_t(N * IN) * sizeof(float));
  if (dbias) bias_backward(dbias, dout, N, OUT);
  if (inp.dtype == DType::F32) {
    const float* x = static_cast<const float*>(inp.data);
    const float* w = static_cast<const float*>(weight.data);
    if (dinp) gemm(false, false, N, IN, OUT, 1.0f, dout, OUT, w, IN, 1.0f, dinp, IN);
    gemm(true, false, OUT, IN, N, 1.0f, dout, OUT, x, IN, 1.0f, dweight, IN);
    return;
  }
  static thread_local Tensor dout_buf;
  void* d16 = scratch(dout_buf, N * OUT * 2);
  cast_from_f32(d16, inp.dtype, dout, N * OUT);
  const Mat d{d16, inp.dtype};
  if (dinp) gemm_lowp(false, false, N, IN, OUT, d, OUT, weight, IN, true, dinp, IN);
  gemm_lowp(true, false, OUT, IN, N, d, OUT, inp, IN, true, dweight, IN);
}

}  // namespace mg::cpu
