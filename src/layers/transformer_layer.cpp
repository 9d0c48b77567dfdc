#include "layers/transformer_layer.h"

#include "backend/dispatch.h"
#include "tensor_parallel/parallel_linear.h"

namespace mg {

namespace {
cpu::Mat act(const Tensor& t) { return {t.raw(), t.dtype()}; }
cpu::MatOut store(Tensor& t) { return {t.raw(), t.dtype()}; }
cpu::Mat weight(void* w, const LayerDims& d) { return {w, d.dtype}; }
float* f32(void* grad) { return static_cast<float*>(grad); }
}  // namespace

LayerCache::LayerCache(const LayerDims& d)
    : ln1({d.local_rows(), d.H}, d.dtype, d.device),
      ln1_mean({d.local_rows()}, DType::F32, d.device),
      ln1_rstd({d.local_rows()}, DType::F32, d.device),
      ln1_full({d.sp ? d.rows() : 0, d.H}, d.dtype, d.device),
      qkv({d.rows(), 3 * d.H_local()}, d.dtype, d.device),
      lse({d.B, d.NH_local(), d.S}, DType::F32, d.device),
      attn({d.rows(), d.H_local()}, d.dtype, d.device),
      x_mid({d.local_rows(), d.H}, DType::F32, d.device),
      ln2({d.local_rows(), d.H}, d.dtype, d.device),
      ln2_mean({d.local_rows()}, DType::F32, d.device),
      ln2_rstd({d.local_rows()}, DType::F32, d.device),
      ln2_full({d.sp ? d.rows() : 0, d.H}, d.dtype, d.device),
      fc1({d.rows(), d.F_local()}, d.dtype, d.device),
      gelu({d.rows(), d.F_local()}, d.dtype, d.device) {}

LayerScratch::LayerScratch(const LayerDims& d)
    : full({d.rows(), d.H}, DType::F32, d.device),
      d_ln({d.local_rows(), d.H}, DType::F32, d.device),
      d_qkv({d.rows(), 3 * d.H_local()}, DType::F32, d.device),
      d_attn({d.rows(), d.H_local()}, DType::F32, d.device),
      d_fc1({d.rows(), d.F_local()}, DType::F32, d.device),
      d_gelu({d.rows(), d.F_local()}, DType::F32, d.device) {}

void transformer_layer_forward(const tp::TPGroup& g, float* y, const float* x,
                               const LayerWeights& w, LayerCache& c, LayerScratch& s,
                               const LayerDims& d, const int32_t* seg_start) {
  const int64_t R = d.local_rows(), H = d.H, HD = d.H / d.NH, N = d.rows();
  float* full = s.full.data<float>();
  // Attention block.
  ops::layernorm_forward(store(c.ln1), c.ln1_mean.data<float>(), c.ln1_rstd.data<float>(), x,
                         w.ln1_w, w.ln1_b, R, H, d.eps);
  tp::column_parallel_forward(g, store(c.qkv), c.ln1.raw(), c.ln1_full.raw(),
                              weight(w.qkv_w, d), w.qkv_b, {N, H, 3 * d.H_local()});
  ops::attention_forward(store(c.attn), c.lse.data<float>(), act(c.qkv), d.B, d.S, d.NH_local(),
                         HD, seg_start);
  tp::row_parallel_forward(g, c.x_mid.data<float>(), full, act(c.attn), weight(w.proj_w, d),
                           w.proj_b, x, {N, d.H_local(), H});
  // MLP block.
  ops::layernorm_forward(store(c.ln2), c.ln2_mean.data<float>(), c.ln2_rstd.data<float>(),
                         c.x_mid.data<float>(), w.ln2_w, w.ln2_b, R, H, d.eps);
  tp::column_parallel_forward(g, store(c.fc1), c.ln2.raw(), c.ln2_full.raw(), weight(w.fc1_w, d),
                              w.fc1_b, {N, H, d.F_local()});
  ops::gelu_forward(store(c.gelu), act(c.fc1), N * d.F_local());
  tp::row_parallel_forward(g, y, full, act(c.gelu), weight(w.fc2_w, d), w.fc2_b,
                           c.x_mid.data<float>(), {N, d.F_local(), H});
}

// d_resid is the residual-stream gradient: it passes through both residual adds unchanged, and
// each branch's input gradient is added into it, so no separate dx_mid buffer is needed.
void transformer_layer_backward(const tp::TPGroup& g, float* d_resid, const float* x,
                                const LayerWeights& w, const LayerWeights& gw,
                                const LayerCache& c, LayerScratch& s, const LayerDims& d,
                                const int32_t* seg_start) {
  const int64_t R = d.local_rows(), H = d.H, HD = d.H / d.NH, N = d.rows();
  float* full = s.full.data<float>();
  const cpu::Mat ln2_used = act(d.sp ? c.ln2_full : c.ln2);
  const cpu::Mat ln1_used = act(d.sp ? c.ln1_full : c.ln1);
  // MLP block.
  tp::row_parallel_backward(g, s.d_gelu.data<float>(), f32(gw.fc2_w), gw.fc2_b, d_resid, full,
                            act(c.gelu), weight(w.fc2_w, d), {N, d.F_local(), H});
  ops::gelu_backward(s.d_fc1.data<float>(), act(c.fc1), s.d_gelu.data<float>(),
                     N * d.F_local(), ops::GradWrite::Set);
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, f32(gw.fc1_w), gw.fc1_b,
                               s.d_fc1.data<float>(), ln2_used, weight(w.fc1_w, d),
                               {N, H, d.F_local()});
  ops::layernorm_backward(d_resid, gw.ln2_w, gw.ln2_b, s.d_ln.data<float>(),
                          c.x_mid.data<float>(), w.ln2_w, c.ln2_mean.data<float>(),
                          c.ln2_rstd.data<float>(), R, H);
  // Attention block.
  tp::row_parallel_backward(g, s.d_attn.data<float>(), f32(gw.proj_w), gw.proj_b, d_resid, full,
                            act(c.attn), weight(w.proj_w, d), {N, d.H_local(), H});
  ops::attention_backward(s.d_qkv.data<float>(), s.d_attn.data<float>(), act(c.attn),
                          act(c.qkv), c.lse.data<float>(), d.B, d.S, d.NH_local(), HD,
                          seg_start, ops::GradWrite::Set);
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, f32(gw.qkv_w), gw.qkv_b,
                               s.d_qkv.data<float>(), ln1_used, weight(w.qkv_w, d),
                               {N, H, 3 * d.H_local()});
  ops::layernorm_backward(d_resid, gw.ln1_w, gw.ln1_b, s.d_ln.data<float>(), x, w.ln1_w,
                          c.ln1_mean.data<float>(), c.ln1_rstd.data<float>(), R, H);
}

}  // namespace mg
