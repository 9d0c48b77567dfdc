// The CUDA emulator's cuBLASLt (tests/cuda_emu/README.md): column-major
// D = alpha op(A) op(B) + beta C (+ bias[row]) with f32 accumulation (8 partial sums), C not read
// when beta is 0, one rounding into D. The heuristic checks the layouts against the operation
// and records the alignments it was promised; a matmul whose pointers break them fails, as a
// GPU kernel picked for wider vector loads would.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <vector>

#include "emu.h"

struct mg_emu_lt_handle {};
struct mg_emu_lt_desc {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
};
struct mg_emu_lt_layout {
  cudaDataType_t t;
  uint64_t rows, cols;
  int64_t ld;
};
struct mg_emu_lt_pref {
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D; 256 unless told less
};

namespace {

float load(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16BF: return float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return float(static_cast<const __half*>(p)[i]);
  }
  return 0.f;
}
void store(void* p, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = v; break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
  }
}
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// op(X) is m x k when X (column-major, rows x cols) is read as given or transposed.
bool fits(const mg_emu_lt_layout* x, cublasOperation_t op, uint64_t m, uint64_t k) {
  const uint64_t r = op == CUBLAS_OP_N ? m : k, c = op == CUBLAS_OP_N ? k : m;
  return x->rows == r && x->cols == c && x->ld >= int64_t(x->rows) && x->ld >= 1;
}
cublasStatus_t check(const mg_emu_lt_desc* d, const mg_emu_lt_layout* a, const mg_emu_lt_layout* b,
                     const mg_emu_lt_layout* c, const mg_emu_lt_layout* dl) {
  if (!d || !a || !b || !c || !dl) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t m = dl->rows, n = dl->cols;
  const uint64_t k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
  if (!fits(a, d->ta, m, k) || !fits(b, d->tb, k, n)) return CUBLAS_STATUS_INVALID_VALUE;
  if (c->rows != m || c->cols != n || c->t != dl->t || c->ld < int64_t(m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a->t != b->t) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && d->bias_type != dl->t)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // a bias of D's type
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new mg_emu_lt_handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new mg_emu_lt_desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void* v,
                                              size_t bytes) {
  auto take = [&](auto& field) {
    if (bytes != sizeof(field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, v, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(d->ta);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(d->tb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(d->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return take(d->bias_type);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *l = new mg_emu_lt_layout{t, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new mg_emu_lt_pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void* v, size_t bytes) {
  int slot = -1;
  switch (a) {
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: slot = 0; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: slot = 1; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: slot = 2; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: slot = 3; break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return bytes == sizeof(size_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return bytes == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  if (slot < 0 || bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&p->align[slot], v, bytes);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* found) {
  *found = 0;
  if (!h || !p || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t st = check(d, a, b, c, dl);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = p->align[i];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  if (!h || !algo) return CUBLAS_STATUS_INVALID_VALUE;
  mg_emu::nccl_drain();  // the stream's NCCL calls come first
  const cublasStatus_t st = check(d, a, b, c, dl);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const void* ptrs[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if (alignment(ptrs[i]) < algo->data[i]) return CUBLAS_STATUS_INVALID_VALUE;
  const bool with_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (with_bias && (!d->bias || alignment(d->bias) < 16)) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const int64_t m = int64_t(dl->rows), n = int64_t(dl->cols);
  const int64_t k = d->ta == CUBLAS_OP_N ? int64_t(a->cols) : int64_t(a->rows);
  // op(A) row i and op(B) column j, widened to f32 with k contiguous.
  std::vector<float> at(size_t(m * k)), bt(size_t(n * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q)
      at[i * k + q] = load(A, a->t, d->ta == CUBLAS_OP_N ? i + q * a->ld : q + i * a->ld);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t q = 0; q < k; ++q)
      bt[j * k + q] = load(B, b->t, d->tb == CUBLAS_OP_N ? q + j * b->ld : j + q * b->ld);
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      // Eight partial sums (k mod 8 each), added in order at the end: vectorizable, and a
      // summation order cuBLAS might use as well (it promises none).
      float part[8] = {};
      const float* x = &at[size_t(i * k)];
      const float* y = &bt[size_t(j * k)];
      int64_t q = 0;
      for (; q + 8 <= k; q += 8)
        for (int l = 0; l < 8; ++l) part[l] += x[q + l] * y[q + l];
      for (; q < k; ++q) part[q % 8] += x[q] * y[q];
      float acc = 0.f;
      for (float p : part) acc += p;
      float v = al * acc;
      if (be != 0.f) v += be * load(C, c->t, i + j * c->ld);
      if (with_bias) v += load(d->bias, d->bias_type, i);
      store(D, dl->t, i + j * dl->ld, v);
    }
  return CUBLAS_STATUS_SUCCESS;
}
