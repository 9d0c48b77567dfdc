// The CP attention's entry points, its layout and checks, and the host moves the ring and the
// all-to-all share (cp_buffers.h).
#include "context_parallel/cp_attention.h"

#include <cstring>

#include "context_parallel/cp_a2a.h"
#include "context_parallel/cp_buffers.h"
#include "context_parallel/cp_ring.h"
#include "core/error.h"
#include "tensor/device_runtime.h"

namespace mg::cp {

CpCommType parse_cp_comm_type(const std::string& name) {
  if (name == "p2p") return CpCommType::P2P;
  if (name == "a2a") return CpCommType::A2A;
  throw UsageError("--cp-comm-type " + name + ": expected p2p (ring) or a2a (all-to-all)");
}

const char* cp_comm_type_name(CpCommType t) { return t == CpCommType::P2P ? "p2p" : "a2a"; }

CpLayout cp_layout(const CpAttention& cp, int64_t S_local) {
  return {cp.comm->size(), cp.comm->rank(), S_local * cp.comm->size()};
}

void check_cp_attention(const CpAttention& cp, int64_t S_local, int64_t NH, int64_t NKV) {
  const int N = cp.comm->size();
  MG_USER_CHECK(S_local % 2 == 0, "--context-parallel-size ", N, ": the sequence (", S_local * N,
                ") must split into 2 x ", N, " equal chunks");
  if (cp.type == CpCommType::A2A)
    MG_USER_CHECK(NH % N == 0 && NKV % N == 0, "--cp-comm-type a2a with --context-parallel-size ",
                  N, " needs the attention heads (", NH, " per TP rank) and the query groups (",
                  NKV, " per TP rank) divisible by ", N, "; use --cp-comm-type p2p");
}

void cp_attention_forward(const CpAttention& cp, ops::MatOut out, float* lse, const ops::Heads& q,
                          const ops::Heads& k, const ops::Heads& v, const ops::AttentionShape& a,
                          const int32_t* seg_start) {
  check_cp_attention(cp, a.Sq, a.NH, a.NKV);
  MG_CHECK(a.causal && a.Sq == a.Sk, "context-parallel attention is causal self-attention");
  check_host(out.data);
  if (cp.type == CpCommType::P2P) ring_attention_forward(cp, out, lse, q, k, v, a, seg_start);
  else a2a_attention_forward(cp, out, lse, q, k, v, a, seg_start);
}

void cp_attention_backward(const CpAttention& cp, const ops::Heads& dq, const ops::Heads& dk,
                           const ops::Heads& dv, const float* dout, ops::Mat out,
                           const ops::Heads& q, const ops::Heads& k, const ops::Heads& v,
                           const float* lse, const ops::AttentionShape& a, const int32_t* seg_start,
                           ops::GradWrite write) {
  check_cp_attention(cp, a.Sq, a.NH, a.NKV);
  MG_CHECK(a.causal && a.Sq == a.Sk, "context-parallel attention is causal self-attention");
  check_host(dout);
  if (cp.type == CpCommType::P2P)
    ring_attention_backward(cp, dq, dk, dv, dout, out, q, k, v, lse, a, seg_start, write);
  else a2a_attention_backward(cp, dq, dk, dv, dout, out, q, k, v, lse, a, seg_start, write);
}

void copy_heads(void* dst, const ops::Heads& src, int64_t rows, int64_t h0, int64_t nh,
                int64_t HD) {
  const size_t e = dtype_size(src.dtype), head = size_t(HD) * e;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src.data);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < nh; ++h)
      std::memcpy(d + size_t(n * nh + h) * head, s + size_t(src.offset(n, h0 + h, HD)) * e, head);
}

void write_heads(const ops::Heads& dst, const float* src, int64_t rows, int64_t nh, int64_t HD,
                 ops::GradWrite write) {
  MG_CHECK(dst.dtype == DType::F32, "attention gradients in ", dtype_name(dst.dtype));
  auto* d = static_cast<float*>(dst.data);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < nh; ++h) {
      float* x = d + dst.offset(n, h, HD);
      const float* y = src + (n * nh + h) * HD;
      for (int64_t i = 0; i < HD; ++i) x[i] = write == ops::GradWrite::Set ? y[i] : x[i] + y[i];
    }
}

// f(offset in per_rank, offset in natural, bytes) for chunk `half` of each rank s's block,
// which is global chunk chunk_index(half) of rank s.
template <typename F>
void for_each_chunk(const CpLayout& l, int64_t B, int64_t row_bytes, F f) {
  const size_t chunk = size_t(l.chunk() * B * row_bytes);
  for (int s = 0; s < l.size; ++s)
    for (int half = 0; half < 2; ++half)
      f((size_t(2 * s) + size_t(half)) * chunk,
        size_t(CpLayout{l.size, s, l.S}.chunk_index(half)) * chunk, chunk);
}

void local_to_natural(void* natural, const void* per_rank, const CpLayout& l, int64_t B,
                      int64_t row_bytes) {
  for_each_chunk(l, B, row_bytes, [&](size_t local, size_t global, size_t n) {
    std::memcpy(static_cast<char*>(natural) + global, static_cast<const char*>(per_rank) + local,
                n);
  });
}

void natural_to_local(void* per_rank, const void* natural, const CpLayout& l, int64_t B,
                      int64_t row_bytes) {
  for_each_chunk(l, B, row_bytes, [&](size_t local, size_t global, size_t n) {
    std::memcpy(static_cast<char*>(per_rank) + local, static_cast<const char*>(natural) + global,
                n);
  });
}

void check_host(const void* p) {
  MG_USER_CHECK(runtime::where(p) == Device::CPU,
                "--context-parallel-size > 1 runs its attention on the CPU for now "
                "(--device cpu)");
}

}  // namespace mg::cp
