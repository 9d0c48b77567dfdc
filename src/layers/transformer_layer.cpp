#include "layers/transformer_layer.h"

#include "backend/dispatch.h"
#include "tensor_parallel/parallel_linear.h"

namespace mg {

namespace {
cpu::Mat act(const Tensor& t) { return {t.raw(), t.dtype()}; }
cpu::MatOut store(Tensor& t) { return {t.raw(), t.dtype()}; }
cpu::Mat weight(void* w, const LayerDims& d) { return {w, d.dtype}; }
float* f32(void* grad) { return static_cast<float*>(grad); }
bool rms(const LayerDims& d) { return d.spec.norm == NormKind::RMSNorm; }
bool swiglu(const LayerDims& d) { return d.spec.mlp == MlpKind::SwiGLU; }

// Norm over the H channels of R rows, into a saved activation.
void norm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const float* x, const float* w,
                  const float* b, const LayerDims& d) {
  if (rms(d))
    return ops::rmsnorm_forward(store(out), rstd.data<float>(), x, w, d.local_rows(), d.H, d.eps);
  ops::layernorm_forward(store(out), mean.data<float>(), rstd.data<float>(), x, w, b,
                         d.local_rows(), d.H, d.eps);
}
// dx += the norm's input gradient; dw, db += its parameter gradients.
void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                   const float* w, const Tensor& mean, const Tensor& rstd, const LayerDims& d) {
  if (rms(d))
    return ops::rmsnorm_backward(dx, dw, dout, x, w, rstd.data<float>(), d.local_rows(), d.H);
  ops::layernorm_backward(dx, dw, db, dout, x, w, mean.data<float>(), rstd.data<float>(),
                          d.local_rows(), d.H);
}

// Q, K and V of this rank's groups inside the fused QKV rows (values or f32 gradients).
ops::FusedQKV qkv_views(const Tensor& t, const LayerDims& d) {
  ops::FusedQKV f = ops::fused_qkv(t.raw(), t.dtype(), d.B, d.S, d.NH_local(), d.NG_local(), d.HD());
  return f;
}
}  // namespace

std::vector<ActivationDecl> layer_cache_decls(const LayerDims& d) {
  const int64_t R = d.local_rows(), N = d.rows(), H = d.H, full = d.sp ? N : 0;
  const int64_t mean_rows = rms(d) ? 0 : R;
  const DType t = d.dtype, f = DType::F32;
  using C = LayerCache;
  return {{&C::ln1, "ln1", {R, H}, t},
          {&C::ln1_mean, "ln1_mean", {mean_rows}, f},
          {&C::ln1_rstd, "ln1_rstd", {R}, f},
          {&C::ln1_full, "ln1_full", {full, H}, t},
          {&C::qkv, "qkv", {N, d.qkv_local()}, t},
          {&C::lse, "lse", {d.B, d.NH_local(), d.S}, f},
          {&C::attn, "attn", {N, d.attn_local()}, t},
          {&C::x_mid, "x_mid", {R, H}, f},
          {&C::ln2, "ln2", {R, H}, t},
          {&C::ln2_mean, "ln2_mean", {mean_rows}, f},
          {&C::ln2_rstd, "ln2_rstd", {R}, f},
          {&C::ln2_full, "ln2_full", {full, H}, t},
          {&C::fc1, "fc1", {N, d.fc1_local()}, t},
          {&C::act, "act", {N, d.F_local()}, t}};
}

size_t layer_cache_bytes(const LayerDims& d) {
  size_t b = 0;
  for (const ActivationDecl& a : layer_cache_decls(d))
    b += size_t(shape_numel(a.shape)) * dtype_size(a.dtype);
  return b;
}

LayerCache::LayerCache(const LayerDims& d) {
  for (const ActivationDecl& a : layer_cache_decls(d)) this->*a.member = Tensor(a.shape, a.dtype, d.device);
}

LayerScratch::LayerScratch(const LayerDims& d)
    : full({d.rows(), d.H}, DType::F32, d.device),
      d_ln({d.local_rows(), d.H}, DType::F32, d.device),
      d_qkv({d.rows(), d.qkv_local()}, DType::F32, d.device),
      d_attn({d.rows(), d.attn_local()}, DType::F32, d.device),
      d_fc1({d.rows(), d.fc1_local()}, DType::F32, d.device),
      d_act({d.rows(), d.F_local()}, DType::F32, d.device) {}

size_t LayerScratch::bytes() const {
  return full.nbytes() + d_ln.nbytes() + d_qkv.nbytes() + d_attn.nbytes() + d_fc1.nbytes() +
         d_act.nbytes();
}

void transformer_layer_forward(const tp::TPGroup& g, float* y, const float* x,
                               const LayerWeights& w, LayerCache& c, LayerScratch& s,
                               const LayerDims& d, const LayerInputs& in) {
  const int64_t H = d.H, N = d.rows();
  float* full = s.full.data<float>();
  // Attention block.
  norm_forward(c.ln1, c.ln1_mean, c.ln1_rstd, x, w.ln1_w, w.ln1_b, d);
  tp::column_parallel_forward(g, store(c.qkv), c.ln1.raw(), c.ln1_full.raw(),
                              weight(w.qkv_w, d), w.qkv_b, {N, H, d.qkv_local()});
  const ops::FusedQKV v = qkv_views(c.qkv, d);
  if (d.spec.rope) {
    ops::rope_forward(v.q, in.positions, in.inv_freq, N, d.NH_local(), d.HD(), d.rotary_dim,
                      d.rotary_interleaved);
    ops::rope_forward(v.k, in.positions, in.inv_freq, N, d.NG_local(), d.HD(), d.rotary_dim,
                      d.rotary_interleaved);
  }
  ops::attention_forward(store(c.attn), c.lse.data<float>(), v.q, v.k, v.v, v.shape,
                         in.seg_start);
  tp::row_parallel_forward(g, c.x_mid.data<float>(), full, act(c.attn), weight(w.proj_w, d),
                           w.proj_b, x, {N, d.attn_local(), H});
  // MLP block.
  norm_forward(c.ln2, c.ln2_mean, c.ln2_rstd, c.x_mid.data<float>(), w.ln2_w, w.ln2_b, d);
  tp::column_parallel_forward(g, store(c.fc1), c.ln2.raw(), c.ln2_full.raw(), weight(w.fc1_w, d),
                              w.fc1_b, {N, H, d.fc1_local()});
  if (swiglu(d))
    ops::swiglu_forward(store(c.act), act(c.fc1), N, d.F_local());
  else
    ops::gelu_forward(store(c.act), act(c.fc1), N * d.F_local());
  tp::row_parallel_forward(g, y, full, act(c.act), weight(w.fc2_w, d), w.fc2_b,
                           c.x_mid.data<float>(), {N, d.F_local(), H});
}

// d_resid is the residual-stream gradient: it passes through both residual adds unchanged, and
// each branch's input gradient is added into it, so no separate dx_mid buffer is needed.
void transformer_layer_backward(const tp::TPGroup& g, float* d_resid, const float* x,
                                const LayerWeights& w, const LayerWeights& gw,
                                const LayerCache& c, LayerScratch& s, const LayerDims& d,
                                const LayerInputs& in) {
  const int64_t H = d.H, N = d.rows();
  float* full = s.full.data<float>();
  const cpu::Mat ln2_used = act(d.sp ? c.ln2_full : c.ln2);
  const cpu::Mat ln1_used = act(d.sp ? c.ln1_full : c.ln1);
  // MLP block.
  tp::row_parallel_backward(g, s.d_act.data<float>(), f32(gw.fc2_w), gw.fc2_b, d_resid, full,
                            act(c.act), weight(w.fc2_w, d), {N, d.F_local(), H});
  if (swiglu(d))
    ops::swiglu_backward(s.d_fc1.data<float>(), act(c.fc1), s.d_act.data<float>(), N,
                         d.F_local(), ops::GradWrite::Set);
  else
    ops::gelu_backward(s.d_fc1.data<float>(), act(c.fc1), s.d_act.data<float>(),
                       N * d.F_local(), ops::GradWrite::Set);
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, f32(gw.fc1_w), gw.fc1_b,
                               s.d_fc1.data<float>(), ln2_used, weight(w.fc1_w, d),
                               {N, H, d.fc1_local()});
  norm_backward(d_resid, gw.ln2_w, gw.ln2_b, s.d_ln.data<float>(), c.x_mid.data<float>(),
                w.ln2_w, c.ln2_mean, c.ln2_rstd, d);
  // Attention block.
  tp::row_parallel_backward(g, s.d_attn.data<float>(), f32(gw.proj_w), gw.proj_b, d_resid, full,
                            act(c.attn), weight(w.proj_w, d), {N, d.attn_local(), H});
  const ops::FusedQKV v = qkv_views(c.qkv, d), dv = qkv_views(s.d_qkv, d);
  ops::attention_backward(dv.q, dv.k, dv.v, s.d_attn.data<float>(), act(c.attn), v.q, v.k, v.v,
                          c.lse.data<float>(), v.shape, in.seg_start, ops::GradWrite::Set);
  if (d.spec.rope) {  // back through the rotation: the transpose rotates by the opposite angles
    ops::rope_backward(dv.q, in.positions, in.inv_freq, N, d.NH_local(), d.HD(), d.rotary_dim,
                       d.rotary_interleaved);
    ops::rope_backward(dv.k, in.positions, in.inv_freq, N, d.NG_local(), d.HD(), d.rotary_dim,
                       d.rotary_interleaved);
  }
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, f32(gw.qkv_w), gw.qkv_b,
                               s.d_qkv.data<float>(), ln1_used, weight(w.qkv_w, d),
                               {N, H, d.qkv_local()});
  norm_backward(d_resid, gw.ln1_w, gw.ln1_b, s.d_ln.data<float>(), x, w.ln1_w, c.ln1_mean,
                c.ln1_rstd, d);
}

}  // namespace mg
