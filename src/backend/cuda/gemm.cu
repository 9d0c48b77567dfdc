// GEMMs on cuBLASLt. Our matrices are row-major; cuBLASLt's are column-major, so
// C[M,N] = op(A) op(B) is computed as C^T[N,M] = op(B)^T op(A)^T: the operands swap places and
// each keeps its own transpose flag. f32 runs with CUBLAS_COMPUTE_32F (no TF32: results track the
// CPU to f32 rounding); bf16/f16 operands accumulate in fp32 into an f32 D, or into a D of
// their own dtype (rounded once, from the fp32 accumulator). The linear layer's bias rides in the
// epilogue (CUBLASLT_EPILOGUE_BIAS: one value per row of the column-major output, i.e. per
// output feature; f32 for an f32 D, D's own type for a 16-bit D), and so does a residual add
// (D = A B + C with C the residual stream).
// Descriptors and the heuristic's algorithm are built once per shape and cached.
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"

namespace mg::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: MG_CHECK(false, "GEMM operand of dtype ", dtype_name(t));
  }
  return CUDA_R_32F;
}

// The largest power of two (up to 256) dividing the address: cuBLASLt must only pick kernels
// whose alignment needs the operands meet (slices of flat buffers are not 256-byte aligned).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct Key {
  bool ta, tb, bias;
  int64_t M, N, K, lda, ldb, ldc;
  DType t;            // A and B
  DType out = DType::F32;  // C and D
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0;
  auto tie() const {
    return std::tie(ta, tb, bias, M, N, K, lda, ldb, ldc, t, out, align_a, align_b, align_c,
                    align_d);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (= our B), B, C
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    MG_CUBLAS_CHECK(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

void* workspace() {
  static Buffer w(kWorkspaceBytes);
  return w.get();
}

Plan* plan(const Key& k) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Plan>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(k);
  if (it != cache.end()) return it->second.get();
  auto p = std::make_unique<Plan>();
  MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: m = N, n = M; cuBLASLt's A is our B, its B is our A.
  const cublasOperation_t op_a = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                 sizeof(op_a)));
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                 sizeof(op_b)));
  if (k.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    // An f32 output takes an f32 bias; a 16-bit one a bias of its own type (cuBLASLt's rule).
    const cudaDataType_t bias_type = lt_type(k.out);
    MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                   sizeof(epi)));
    MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  const cudaDataType_t t = lt_type(k.t);
  // A stored (column-major) as m x k when not transposed, k x m when transposed.
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, k.tb ? k.K : k.N, k.tb ? k.N : k.K, k.ldb));
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, k.ta ? k.M : k.K, k.ta ? k.K : k.M, k.lda));
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, lt_type(k.out), k.N, k.M, k.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt's A is our B and its B our A.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_d}};
  for (const auto& [attr, al] : aligns)
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al)));
  if (k.out != DType::F32) {  // a split-K reduction must add in fp32, so D is rounded once
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // With nothing to offer the heuristic answers NOT_SUPPORTED (or found = 0): say what was asked.
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle(), p->desc, p->a, p->b, p->c,
                                                           p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) MG_CUBLAS_CHECK(st);
  MG_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for M=", k.M,
           " N=", k.N, " K=", k.K, " in ", dtype_name(k.t), " into ", dtype_name(k.out),
           k.bias ? " with a bias epilogue" : "", " (operand alignments ", k.align_a, "/",
           k.align_b, "/", k.align_c, "/", k.align_d, " bytes)");
  p->algo = result.algo;
  return (cache[k] = std::move(p)).get();
}

// D = alpha op(A) op(B) + beta C (+ bias); C and D share the layout and type k.out.
void run(Key k, float alpha, const void* A, const void* B, float beta, const void* C, void* D,
         const void* bias) {
  k.align_a = alignment(A);
  k.align_b = alignment(B);
  k.align_c = alignment(C);
  k.align_d = alignment(D);
  Plan* p = plan(k);
  // The epilogue's bias vector is read with vector loads: a bias that is not 16-byte aligned (a
  // parameter packed at an odd offset) is copied to an aligned block first (k.N values).
  Buffer aligned_bias;
  if (bias && alignment(bias) < 16) {
    const size_t bytes = size_t(k.N) * (k.out == DType::F32 ? 4 : 2);
    aligned_bias = Buffer(bytes);
    copy_on_device(aligned_bias.get(), bias, bytes);
    bias = aligned_bias.get();
  }
  // The bias pointer is set on the shared cached descriptor: one GEMM at a time.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (bias)
    MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof(bias)));
  MG_CUBLAS_CHECK(cublasLtMatmul(handle(), p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, D,
                                 p->c, &p->algo, workspace(), kWorkspaceBytes, compute_stream()));
}

}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Mat A, int64_t lda,
          Mat B, int64_t ldb, float beta, float* C, int64_t ldc) {
  MG_CHECK(A.dtype == B.dtype, "GEMM operands ", dtype_name(A.dtype), " x ", dtype_name(B.dtype));
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta C
    if (beta == 1.f) return;
    MG_CHECK(beta == 0.f || ldc == N, "GEMM with K = 0, beta ", beta, " and ldc != N");
    if (beta == 0.f)
      for (int64_t m = 0; m < M; ++m) memset_zero(C + m * ldc, size_t(N) * sizeof(float));
    else
      scale_inplace(C, beta, M * N);
    return;
  }
  run({ta, tb, false, M, N, K, lda, ldb, ldc, A.dtype}, alpha, A.data, B.data, beta, C, C,
      nullptr);
}

void linear_forward(MatOut out, Mat inp, Mat weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT) {
  MG_CHECK(inp.dtype == weight.dtype, "linear input ", dtype_name(inp.dtype), " but weight ",
           dtype_name(weight.dtype));
  MG_CHECK(out.dtype == DType::F32 || out.dtype == inp.dtype, "linear output ",
           dtype_name(out.dtype), " from ", dtype_name(inp.dtype), " operands");
  if (N == 0 || OUT == 0) return;
  if (out.dtype != DType::F32 && IN == 0) {  // the f32 result (the bias, or 0), then rounded
    Buffer y(size_t(N * OUT) * sizeof(float));
    cuda::linear_forward(y.as<float>(), inp, weight, bias, N, IN, OUT);
    return cast_from_f32(out.data, out.dtype, y.as<float>(), N * OUT);
  }
  if (IN == 0) {  // no inputs: out = bias (or 0)
    float* y = static_cast<float*>(out.data);
    memset_zero(y, size_t(N * OUT) * sizeof(float));
    if (bias) bias_add_forward(y, bias, N, OUT);
    return;
  }
  // A 16-bit output's epilogue adds the bias in that dtype (as a 16-bit Megatron module holds
  // it): the f32 bias is rounded first, OUT values, and the sum is rounded once into D.
  Buffer bias16;
  const void* b = bias;
  if (bias && out.dtype != DType::F32) {
    bias16 = Buffer(size_t(OUT) * 2);
    cast_from_f32(bias16.get(), out.dtype, bias, OUT);
    b = bias16.get();
  }
  Key k{false, true, bias != nullptr, N, OUT, IN, IN, IN, OUT, inp.dtype};
  k.out = out.dtype;
  run(k, 1.0f, inp.data, weight.data, 0.0f, out.data, out.data, b);
}

void linear_residual_forward(float* out, Mat inp, Mat weight, const float* bias,
                             const float* residual, int64_t N, int64_t IN, int64_t OUT) {
  MG_CHECK(inp.dtype == weight.dtype, "linear input ", dtype_name(inp.dtype), " but weight ",
           dtype_name(weight.dtype));
  if (N == 0 || OUT == 0) return;
  if (IN == 0) {  // out = residual + bias
    copy_on_device(out, residual, size_t(N * OUT) * sizeof(float));
    if (bias) bias_add_forward(out, bias, N, OUT);
    return;
  }
  run({false, true, bias != nullptr, N, OUT, IN, IN, IN, OUT, inp.dtype}, 1.0f, inp.data,
      weight.data, 1.0f, residual, out, bias);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                     Mat weight, int64_t N, int64_t IN, int64_t OUT, GradWrite dinp_write) {
  MG_CHECK(inp.dtype == weight.dtype, "linear input ", dtype_name(inp.dtype), " but weight ",
           dtype_name(weight.dtype));
  Mat d = dout;
  Buffer d16;
  if (inp.dtype != DType::F32) {  // dout rounded to the 16-bit dtype, as on the CPU
    d16 = Buffer(size_t(N * OUT) * 2);
    if (dbias)  // the bias grad sums the f32 dout in the same pass
      bias_backward_and_round(dbias, d16.get(), inp.dtype, dout, N, OUT);
    else
      cast_from_f32(d16.get(), inp.dtype, dout, N * OUT);
    d = Mat{d16.get(), inp.dtype};
  } else if (dbias) {
    bias_backward(dbias, dout, N, OUT);
  }
  const float beta = dinp_write == GradWrite::Set ? 0.0f : 1.0f;
  if (dinp) gemm(false, false, N, IN, OUT, 1.0f, d, OUT, weight, IN, beta, dinp, IN);
  gemm(true, false, OUT, IN, N, 1.0f, d, OUT, inp, IN, 1.0f, dweight, IN);
}

}  // namespace mg::cuda
