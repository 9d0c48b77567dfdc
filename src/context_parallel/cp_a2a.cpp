// Ulysses attention (--cp-comm-type a2a; Jacobs et al. 2023): an all-to-all over heads turns
// each rank's local rows of all heads into the whole sequence of its NH/N query heads (and
// NKV/N K/V heads: grouped-query head h reads h / (NH/NKV) within the slice too), the rows are
// put back in position order, one ordinary causal attention runs, and the reverse all-to-all
// returns the local rows of every head. Backward repeats the forward all-to-alls (q, k, v, out),
// sends dout the same way and returns dq, dk, dv.
#include "context_parallel/cp_a2a.h"

#include <vector>

#include "context_parallel/cp_buffers.h"
#include "core/error.h"

namespace mg::cp {

namespace {

struct Ulysses {
  CpLayout l;
  int64_t B, HD, rows;  // rows: S_local * B
  int N() const { return l.size; }
};

// The full natural sequence of this rank's head slice [rank*nh/N, (rank+1)*nh/N) of x (rows
// local rows of nh heads): (S*B, nh/N, HD) in x's dtype.
std::vector<float> to_heads(Communicator& comm, const Ulysses& u, const ops::Heads& x, int64_t nh) {
  const int64_t ns = nh / u.N(), block = u.rows * ns * u.HD;
  const size_t e = dtype_size(x.dtype);
  std::vector<float> send = byte_buffer(block * u.N() * int64_t(e)), recv = send;
  for (int j = 0; j < u.N(); ++j)
    copy_heads(reinterpret_cast<char*>(send.data()) + block * j * e, x, u.rows, j * ns, ns, u.HD);
  comm.all_to_all(send.data(), recv.data(), block, x.dtype);
  std::vector<float> full = byte_buffer(block * u.N() * int64_t(e));
  local_to_natural(full.data(), recv.data(), u.l, u.B, ns * u.HD * int64_t(e));
  return full;
}

// The inverse: the whole sequence of this rank's slice (S*B, nh/N, HD) -> the local rows of all
// nh heads, contiguous (rows, nh, HD) in dtype t.
std::vector<float> to_sequence(Communicator& comm, const Ulysses& u, const void* full, DType t,
                               int64_t nh) {
  const int64_t ns = nh / u.N(), block = u.rows * ns * u.HD;
  const size_t e = dtype_size(t);
  std::vector<float> send = byte_buffer(block * u.N() * int64_t(e)), recv = send;
  natural_to_local(send.data(), full, u.l, u.B, ns * u.HD * int64_t(e));
  comm.all_to_all(send.data(), recv.data(), block, t);
  std::vector<float> local = byte_buffer(block * u.N() * int64_t(e));
  const ops::Heads local_heads = contiguous_heads(local.data(), t, nh, u.HD);
  for (int j = 0; j < u.N(); ++j) {  // rank j's block holds heads [j*ns, (j+1)*ns)
    const char* src = reinterpret_cast<const char*>(recv.data()) + block * j * e;
    auto* dst = static_cast<char*>(local_heads.data) + j * ns * u.HD * e;
    for (int64_t n = 0; n < u.rows; ++n)
      std::copy(src + n * ns * u.HD * e, src + (n + 1) * ns * u.HD * e, dst + n * nh * u.HD * e);
  }
  return local;
}

// seg_start (B, S_local) of every rank -> (B, S) in position order.
std::vector<int32_t> full_seg_start(Communicator& comm, const Ulysses& u, const int32_t* seg) {
  const int64_t S_local = u.l.local_length(), S = S_local * u.N();
  std::vector<int32_t> all(size_t(u.B * S)), full(size_t(u.B * S));
  comm.all_gather(seg, all.data(), u.B * S_local, DType::I32);
  for (int s = 0; s < u.N(); ++s) {
    const CpLayout owner{u.N(), s, S};
    for (int64_t b = 0; b < u.B; ++b)
      for (int64_t t = 0; t < S_local; ++t)
        full[size_t(b * S + owner.position(t))] = all[size_t((s * u.B + b) * S_local + t)];
  }
  return full;
}

// The attention shape over the whole sequence of this rank's head slice.
ops::AttentionShape slice_shape(const Ulysses& u, const ops::AttentionShape& a) {
  ops::AttentionShape f = a;
  f.Sq = f.Sk = u.l.local_length() * u.N();
  f.NH = a.NH / u.N();
  f.NKV = a.NKV / u.N();
  f.q_pos0 = f.k_pos0 = 0;
  f.dropout.head0 += u.l.rank * f.NH;
  return f;
}

Ulysses ulysses(const CpAttention& cp, const ops::AttentionShape& a) {
  return {cp_layout(cp, a.Sq), a.B, a.HD, a.Sq * a.B};
}

}  // namespace

void a2a_attention_forward(const CpAttention& cp, ops::MatOut out, float* lse, const ops::Heads& q,
                           const ops::Heads& k, const ops::Heads& v, const ops::AttentionShape& a,
                           const int32_t* seg_start) {
  const Ulysses u = ulysses(cp, a);
  const ops::AttentionShape f = slice_shape(u, a);
  const DType t = q.dtype;
  const std::vector<float> qf = to_heads(*cp.comm, u, q, a.NH),
                           kf = to_heads(*cp.comm, u, k, a.NKV),
                           vf = to_heads(*cp.comm, u, v, a.NKV);
  const std::vector<int32_t> seg =
      seg_start ? full_seg_start(*cp.comm, u, seg_start) : std::vector<int32_t>{};
  std::vector<float> of = byte_buffer(f.Sq * u.B * f.NH * u.HD * int64_t(dtype_size(t)));
  auto heads = [&](const std::vector<float>& x, int64_t n) {
    return contiguous_heads(const_cast<float*>(x.data()), t, n, u.HD);
  };
  ops::attention_forward(ops::MatOut(of.data(), t), lse, heads(qf, f.NH), heads(kf, f.NKV),
                         heads(vf, f.NKV), f, seg_start ? seg.data() : nullptr);
  const std::vector<float> o = to_sequence(*cp.comm, u, of.data(), t, a.NH);
  const auto* src = reinterpret_cast<const char*>(o.data());
  std::copy(src, src + u.rows * a.NH * u.HD * dtype_size(t), static_cast<char*>(out.data));
}

void a2a_attention_backward(const CpAttention& cp, const ops::Heads& dq, const ops::Heads& dk,
                            const ops::Heads& dv, const float* dout, ops::Mat out,
                            const ops::Heads& q, const ops::Heads& k, const ops::Heads& v,
                            const float* lse, const ops::AttentionShape& a,
                            const int32_t* seg_start, ops::GradWrite write) {
  const Ulysses u = ulysses(cp, a);
  const ops::AttentionShape f = slice_shape(u, a);
  const DType t = q.dtype;
  Communicator& comm = *cp.comm;
  const std::vector<float> qf = to_heads(comm, u, q, a.NH), kf = to_heads(comm, u, k, a.NKV),
                           vf = to_heads(comm, u, v, a.NKV);
  const ops::Heads out_heads = contiguous_heads(const_cast<void*>(out.data), out.dtype, a.NH, u.HD);
  const ops::Heads dout_heads = contiguous_heads(const_cast<float*>(dout), DType::F32, a.NH, u.HD);
  const std::vector<float> of = to_heads(comm, u, out_heads, a.NH);
  const std::vector<float> dof = to_heads(comm, u, dout_heads, a.NH);
  const std::vector<int32_t> seg =
      seg_start ? full_seg_start(comm, u, seg_start) : std::vector<int32_t>{};
  const int64_t rows = f.Sq * u.B;
  std::vector<float> dqf(size_t(rows * f.NH * u.HD)), dkf(size_t(rows * f.NKV * u.HD)),
      dvf(dkf.size());
  auto heads = [&](const std::vector<float>& x, DType dt, int64_t n) {
    return contiguous_heads(const_cast<float*>(x.data()), dt, n, u.HD);
  };
  ops::attention_backward(heads(dqf, DType::F32, f.NH), heads(dkf, DType::F32, f.NKV),
                          heads(dvf, DType::F32, f.NKV), dof.data(), ops::Mat(of.data(), t),
                          heads(qf, t, f.NH), heads(kf, t, f.NKV), heads(vf, t, f.NKV), lse, f,
                          seg_start ? seg.data() : nullptr, ops::GradWrite::Set);
  write_heads(dq, to_sequence(comm, u, dqf.data(), DType::F32, a.NH).data(), u.rows, a.NH, u.HD,
              write);
  write_heads(dk, to_sequence(comm, u, dkf.data(), DType::F32, a.NKV).data(), u.rows, a.NKV, u.HD,
              write);
  write_heads(dv, to_sequence(comm, u, dvf.data(), DType::F32, a.NKV).data(), u.rows, a.NKV, u.HD,
              write);
}

}  // namespace mg::cp
