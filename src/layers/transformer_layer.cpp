#include "layers/transformer_layer.h"

#include "backend/ops.h"
#include "tensor_parallel/parallel_linear.h"

namespace mg {

LayerCache::LayerCache(const LayerDims& d)
    : ln1({d.local_rows(), d.H}), ln1_mean({d.local_rows()}), ln1_rstd({d.local_rows()}),
      ln1_full({d.sp ? d.rows() : 0, d.H}), qkv({d.rows(), 3 * d.H_local()}),
      probs({d.B, d.NH_local(), d.S, d.S}), attn({d.rows(), d.H_local()}),
      x_mid({d.local_rows(), d.H}), ln2({d.local_rows(), d.H}), ln2_mean({d.local_rows()}),
      ln2_rstd({d.local_rows()}), ln2_full({d.sp ? d.rows() : 0, d.H}),
      fc1({d.rows(), d.F_local()}), gelu({d.rows(), d.F_local()}) {}

LayerScratch::LayerScratch(const LayerDims& d)
    : full({d.rows(), d.H}), d_ln({d.local_rows(), d.H}), d_qkv({d.rows(), 3 * d.H_local()}),
      d_attn({d.rows(), d.H_local()}), d_fc1({d.rows(), d.F_local()}),
      d_gelu({d.rows(), d.F_local()}), d_probs({cpu::attention_backward_scratch(d.S)}) {}

void transformer_layer_forward(const tp::TPGroup& g, float* y, const float* x,
                               const LayerWeights& w, LayerCache& c, LayerScratch& s,
                               const LayerDims& d, const int32_t* seg_start) {
  const int64_t R = d.local_rows(), H = d.H, HD = d.H / d.NH;
  float* full = s.full.data<float>();
  // Attention block.
  cpu::layernorm_forward(c.ln1.data<float>(), c.ln1_mean.data<float>(), c.ln1_rstd.data<float>(),
                         x, w.ln1_w, w.ln1_b, R, H, d.eps);
  tp::column_parallel_forward(g, c.qkv.data<float>(), c.ln1.data<float>(),
                              d.sp ? c.ln1_full.data<float>() : nullptr, w.qkv_w, w.qkv_b,
                              {d.rows(), H, 3 * d.H_local()});
  cpu::attention_forward(c.attn.data<float>(), c.probs.data<float>(), c.qkv.data<float>(), d.B,
                         d.S, d.NH_local(), HD, seg_start);
  tp::row_parallel_forward(g, c.x_mid.data<float>(), full, c.attn.data<float>(), w.proj_w,
                           w.proj_b, {d.rows(), d.H_local(), H});
  cpu::residual_forward(c.x_mid.data<float>(), x, c.x_mid.data<float>(), R * H);
  // MLP block.
  cpu::layernorm_forward(c.ln2.data<float>(), c.ln2_mean.data<float>(), c.ln2_rstd.data<float>(),
                         c.x_mid.data<float>(), w.ln2_w, w.ln2_b, R, H, d.eps);
  tp::column_parallel_forward(g, c.fc1.data<float>(), c.ln2.data<float>(),
                              d.sp ? c.ln2_full.data<float>() : nullptr, w.fc1_w, w.fc1_b,
                              {d.rows(), H, d.F_local()});
  cpu::gelu_forward(c.gelu.data<float>(), c.fc1.data<float>(), d.rows() * d.F_local());
  tp::row_parallel_forward(g, y, full, c.gelu.data<float>(), w.fc2_w, w.fc2_b,
                           {d.rows(), d.F_local(), H});
  cpu::residual_forward(y, c.x_mid.data<float>(), y, R * H);
}

// d_resid is the residual-stream gradient: it passes through both residual adds unchanged, and
// each branch's input gradient is added into it, so no separate dx_mid buffer is needed.
void transformer_layer_backward(const tp::TPGroup& g, float* d_resid, const float* x,
                                const LayerWeights& w, const LayerWeights& gw,
                                const LayerCache& c, LayerScratch& s, const LayerDims& d) {
  const int64_t R = d.local_rows(), H = d.H, HD = d.H / d.NH;
  float* full = s.full.data<float>();
  const float* ln2_used = d.sp ? c.ln2_full.data<float>() : c.ln2.data<float>();
  const float* ln1_used = d.sp ? c.ln1_full.data<float>() : c.ln1.data<float>();
  // MLP block.
  s.d_gelu.zero();
  s.d_fc1.zero();
  tp::row_parallel_backward(g, s.d_gelu.data<float>(), gw.fc2_w, gw.fc2_b, d_resid, full,
                            c.gelu.data<float>(), w.fc2_w, {d.rows(), d.F_local(), H});
  cpu::gelu_backward(s.d_fc1.data<float>(), c.fc1.data<float>(), s.d_gelu.data<float>(),
                     d.rows() * d.F_local());
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, gw.fc1_w, gw.fc1_b,
                               s.d_fc1.data<float>(), ln2_used, w.fc1_w,
                               {d.rows(), H, d.F_local()});
  cpu::layernorm_backward(d_resid, gw.ln2_w, gw.ln2_b, s.d_ln.data<float>(),
                          c.x_mid.data<float>(), w.ln2_w, c.ln2_mean.data<float>(),
                          c.ln2_rstd.data<float>(), R, H);
  // Attention block.
  s.d_attn.zero();
  s.d_qkv.zero();
  tp::row_parallel_backward(g, s.d_attn.data<float>(), gw.proj_w, gw.proj_b, d_resid, full,
                            c.attn.data<float>(), w.proj_w, {d.rows(), d.H_local(), H});
  cpu::attention_backward(s.d_qkv.data<float>(), s.d_probs.data<float>(), s.d_attn.data<float>(),
                          c.qkv.data<float>(), c.probs.data<float>(), d.B, d.S, d.NH_local(), HD);
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, gw.qkv_w, gw.qkv_b,
                               s.d_qkv.data<float>(), ln1_used, w.qkv_w,
                               {d.rows(), H, 3 * d.H_local()});
  cpu::layernorm_backward(d_resid, gw.ln1_w, gw.ln1_b, s.d_ln.data<float>(), x, w.ln1_w,
                          c.ln1_mean.data<float>(), c.ln1_rstd.data<float>(), R, H);
}

}  // namespace mg
