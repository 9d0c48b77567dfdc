#include "layers/transformer_layer.h"

#include "backend/ops.h"

namespace mg {

LayerCache::LayerCache(const LayerDims& d)
    : ln1({d.N(), d.H}), ln1_mean({d.N()}), ln1_rstd({d.N()}), qkv({d.N(), 3 * d.H}),
      probs({d.B, d.NH, d.S, d.S}), attn({d.N(), d.H}), x_mid({d.N(), d.H}), ln2({d.N(), d.H}),
      ln2_mean({d.N()}), ln2_rstd({d.N()}), fc1({d.N(), d.F}), gelu({d.N(), d.F}) {}

LayerScratch::LayerScratch(const LayerDims& d)
    : branch_out({d.N(), d.H}), d_ln({d.N(), d.H}), d_qkv({d.N(), 3 * d.H}),
      d_attn({d.N(), d.H}), d_fc1({d.N(), d.F}), d_gelu({d.N(), d.F}),
      d_probs({cpu::attention_backward_scratch(d.S)}) {}

void transformer_layer_forward(float* y, const float* x, const LayerWeights& w, LayerCache& c,
                               LayerScratch& s, const LayerDims& d) {
  const int64_t N = d.N(), H = d.H, F = d.F;
  float* out = s.branch_out.data<float>();
  cpu::layernorm_forward(c.ln1.data<float>(), c.ln1_mean.data<float>(), c.ln1_rstd.data<float>(),
                         x, w.ln1_w, w.ln1_b, N, H, d.eps);
  cpu::linear_forward(c.qkv.data<float>(), c.ln1.data<float>(), w.qkv_w, w.qkv_b, N, H, 3 * H);
  cpu::attention_forward(c.attn.data<float>(), c.probs.data<float>(), c.qkv.data<float>(), d.B,
                         d.S, d.NH, H / d.NH);
  cpu::linear_forward(out, c.attn.data<float>(), w.proj_w, w.proj_b, N, H, H);
  cpu::residual_forward(c.x_mid.data<float>(), x, out, N * H);
  cpu::layernorm_forward(c.ln2.data<float>(), c.ln2_mean.data<float>(), c.ln2_rstd.data<float>(),
                         c.x_mid.data<float>(), w.ln2_w, w.ln2_b, N, H, d.eps);
  cpu::linear_forward(c.fc1.data<float>(), c.ln2.data<float>(), w.fc1_w, w.fc1_b, N, H, F);
  cpu::gelu_forward(c.gelu.data<float>(), c.fc1.data<float>(), N * F);
  cpu::linear_forward(out, c.gelu.data<float>(), w.fc2_w, w.fc2_b, N, F, H);
  cpu::residual_forward(y, c.x_mid.data<float>(), out, N * H);
}

// d_resid is the residual-stream gradient: it passes through both residual adds unchanged, and
// each branch's input gradient is added into it, so no separate dx_mid buffer is needed.
void transformer_layer_backward(float* d_resid, const float* x, const LayerWeights& w,
                                const LayerWeights& g, const LayerCache& c, LayerScratch& s,
                                const LayerDims& d) {
  const int64_t N = d.N(), H = d.H, F = d.F;
  s.d_gelu.zero();
  s.d_fc1.zero();
  s.d_ln.zero();
  cpu::linear_backward(s.d_gelu.data<float>(), g.fc2_w, g.fc2_b, d_resid, c.gelu.data<float>(),
                       w.fc2_w, N, F, H);
  cpu::gelu_backward(s.d_fc1.data<float>(), c.fc1.data<float>(), s.d_gelu.data<float>(), N * F);
  cpu::linear_backward(s.d_ln.data<float>(), g.fc1_w, g.fc1_b, s.d_fc1.data<float>(),
                       c.ln2.data<float>(), w.fc1_w, N, H, F);
  cpu::layernorm_backward(d_resid, g.ln2_w, g.ln2_b, s.d_ln.data<float>(), c.x_mid.data<float>(),
                          w.ln2_w, c.ln2_mean.data<float>(), c.ln2_rstd.data<float>(), N, H);
  s.d_attn.zero();
  s.d_qkv.zero();
  s.d_ln.zero();
  cpu::linear_backward(s.d_attn.data<float>(), g.proj_w, g.proj_b, d_resid, c.attn.data<float>(),
                       w.proj_w, N, H, H);
  cpu::attention_backward(s.d_qkv.data<float>(), s.d_probs.data<float>(), s.d_attn.data<float>(),
                          c.qkv.data<float>(), c.probs.data<float>(), d.B, d.S, d.NH, H / d.NH);
  cpu::linear_backward(s.d_ln.data<float>(), g.qkv_w, g.qkv_b, s.d_qkv.data<float>(),
                       c.ln1.data<float>(), w.qkv_w, N, H, 3 * H);
  cpu::layernorm_backward(d_resid, g.ln1_w, g.ln1_b, s.d_ln.data<float>(), x, w.ln1_w,
                          c.ln1_mean.data<float>(), c.ln1_rstd.data<float>(), N, H);
}

}  // namespace mg
