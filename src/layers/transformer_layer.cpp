#include "layers/transformer_layer.h"

#include "backend/dispatch.h"
#include "context_parallel/cp_attention.h"
#include "tensor_parallel/parallel_linear.h"

namespace mg {

namespace {
cpu::Mat act(const Tensor& t) { return {t.raw(), t.dtype()}; }
cpu::MatOut store(Tensor& t) { return {t.raw(), t.dtype()}; }
cpu::Mat weight(void* w, const LayerDims& d) { return {w, d.dtype}; }
float* f32(void* grad) { return static_cast<float*>(grad); }
bool rms(const LayerDims& d) { return d.spec.norm == NormKind::RMSNorm; }
bool swiglu(const LayerDims& d) { return d.spec.mlp == MlpKind::SwiGLU; }

// The layer's norm (LayerNorm or RMSNorm) over C channels of `rows` rows.
void norm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const float* x, const float* w,
                  const float* b, int64_t rows, int64_t C, const LayerDims& d) {
  const float offset = d.spec.norm_weight_offset;
  if (rms(d))
    return ops::rmsnorm_forward(store(out), rstd.data<float>(), x, w, rows, C, d.eps, offset);
  ops::layernorm_forward(store(out), mean.data<float>(), rstd.data<float>(), x, w, b, rows, C,
                         d.eps, offset);
}
void norm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const float* x, const float* w,
                  const float* b, const LayerDims& d) {
  norm_forward(out, mean, rstd, x, w, b, d.local_rows(), d.H, d);
}
// dx += the norm's input gradient; dw, db += its parameter gradients.
void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                   const float* w, const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t C,
                   const LayerDims& d) {
  const float offset = d.spec.norm_weight_offset;
  if (rms(d)) return ops::rmsnorm_backward(dx, dw, dout, x, w, rstd.data<float>(), rows, C, offset);
  ops::layernorm_backward(dx, dw, db, dout, x, w, mean.data<float>(), rstd.data<float>(), rows, C,
                          offset);
}
void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                   const float* w, const Tensor& mean, const Tensor& rstd, const LayerDims& d) {
  norm_backward(dx, dw, db, dout, x, w, mean, rstd, d.local_rows(), d.H, d);
}

// --qk-layernorm on n_heads heads of the view: saved inputs `pre`, normalized in place.
void head_norm_forward(const ops::Heads& heads, int64_t n_heads, Tensor& pre, Tensor& mean,
                       Tensor& rstd, const float* w, const float* b, LayerScratch& s,
                       const LayerDims& d) {
  const int64_t N = d.rows(), HD = d.HD();
  ops::heads_gather(pre.data<float>(), heads, N, n_heads, HD);
  norm_forward(s.qk_out, mean, rstd, pre.data<float>(), w, b, N * n_heads, HD, d);
  ops::heads_scatter(heads, act(s.qk_out), N, n_heads, HD);
}
// The gradient in the view (after the norm) replaced by the gradient before it.
void head_norm_backward(const ops::Heads& dheads, int64_t n_heads, const Tensor& pre,
                        const Tensor& mean, const Tensor& rstd, const float* w, float* dw,
                        float* db, LayerScratch& s, const LayerDims& d) {
  const int64_t N = d.rows(), HD = d.HD();
  ops::heads_gather(s.d_qk_in.data<float>(), dheads, N, n_heads, HD);
  ops::memset_zero(s.d_qk.raw(), size_t(N * n_heads * HD) * sizeof(float), d.device);
  norm_backward(s.d_qk.data<float>(), dw, db, s.d_qk_in.data<float>(), pre.data<float>(), w, mean,
                rstd, N * n_heads, HD, d);
  ops::heads_scatter(dheads, s.d_qk.data<float>(), N, n_heads, HD);
}

// The rows (R, H) of this rank's residual stream under dropout site `site` (the bias-dropout-add
// after a block): SP ranks hold tokens [rank S/TP, ..), others all S.
DropoutRows hidden_dropout(const tp::TPGroup& g, const LayerDims& d, const LayerInputs& in,
                           DropoutSite site) {
  const DropoutStep& st = *in.dropout;
  const bool cp = in.cp && in.cp->comm->size() > 1;  // masks keyed by global positions
  return {
      st.key(st.hidden, in.layer, site),  st.sample0, d.B,
      d.sp ? g.rank() * (d.S / d.tp) : 0, 0,          cp ? cp::cp_layout(*in.cp, d.S) : CpLayout{}};
}
bool hidden_dropout_on(const LayerInputs& in) { return in.dropout && in.dropout->hidden > 0.f; }

// The attention call's shape with its probability dropout: this rank's query heads are the
// global heads [rank NH/TP, ..).
ops::AttentionShape attention_shape(const tp::TPGroup& g, const ops::FusedQKV& v,
                                    const LayerDims& d, const LayerInputs& in) {
  ops::AttentionShape a = v.shape;
  if (in.dropout && in.dropout->attention > 0.f)
    a.dropout = {in.dropout->key(in.dropout->attention, in.layer, DropoutSite::AttentionProbs),
                 in.dropout->sample0, g.rank() * d.NH_local()};
  return a;
}

bool context_parallel(const LayerInputs& in) { return in.cp && in.cp->comm->size() > 1; }

// Q, K and V of this rank's groups inside the fused QKV rows (values or f32 gradients).
ops::FusedQKV qkv_views(const Tensor& t, const LayerDims& d) {
  return ops::fused_qkv(t.raw(), t.dtype(), d.B, d.S, d.NH_local(), d.NG_local(), d.HD());
}
}  // namespace

cpu::Mat gathered_norm(const tp::TPGroup& g, const Tensor& ln, LayerScratch& s,
                       const LayerDims& d) {
  if (!d.sp) return act(ln);
  tp::gather_from_sp_region_forward(g, ln.raw(), s.ln_full.raw(), ln.numel(), ln.dtype());
  return act(s.ln_full);
}

std::vector<ActivationDecl> layer_cache_decls(const LayerDims& d) {
  const int64_t R = d.local_rows(), N = d.rows(), H = d.H;
  const int64_t mean_rows = rms(d) ? 0 : R;
  const bool qk = d.spec.qk_layernorm;
  const int64_t q_rows = qk ? N * d.NH_local() : 0, k_rows = qk ? N * d.NG_local() : 0;
  const int64_t q_mean = rms(d) ? 0 : q_rows, k_mean = rms(d) ? 0 : k_rows;
  const DType t = d.dtype, f = DType::F32;
  using C = LayerCache;
  return {{&C::ln1, "ln1", {R, H}, t},
          {&C::ln1_mean, "ln1_mean", {mean_rows}, f},
          {&C::ln1_rstd, "ln1_rstd", {R}, f},
          {&C::qkv, "qkv", {N, d.qkv_local()}, t},
          {&C::q_pre, "q_pre", {q_rows, d.HD()}, f},
          {&C::q_mean, "q_mean", {q_mean}, f},
          {&C::q_rstd, "q_rstd", {q_rows}, f},
          {&C::k_pre, "k_pre", {k_rows, d.HD()}, f},
          {&C::k_mean, "k_mean", {k_mean}, f},
          {&C::k_rstd, "k_rstd", {k_rows}, f},
          {&C::lse, "lse", {d.B, d.NH_local(), d.S}, f},
          {&C::attn, "attn", {N, d.attn_local()}, t},
          {&C::x_mid, "x_mid", {R, H}, f},
          {&C::ln2, "ln2", {R, H}, t},
          {&C::ln2_mean, "ln2_mean", {mean_rows}, f},
          {&C::ln2_rstd, "ln2_rstd", {R}, f},
          {&C::fc1, "fc1", {N, d.fc1_local()}, t},
          {&C::act, "act", {N, d.F_local()}, t},
          {&C::moe_logits, "moe_logits", {d.spec.is_moe() ? N : 0, d.num_experts()}, f},
          {&C::moe_x, "moe_x", {d.moe_rows(), H}, t},
          {&C::moe_fc1, "moe_fc1", {d.moe_rows(), d.expert_fc1_local()}, t},
          {&C::moe_act, "moe_act", {d.moe_rows(), d.expert_F_local()}, t},
          {&C::moe_y, "moe_y", {d.moe_rows(), H}, f},
          // Expert parallelism: declared at the balanced share (grown when routing is not).
          {&C::moe_xe, "moe_xe", {d.ep > 1 ? d.moe_rows() : 0, H}, t},
          {&C::moe_ye, "moe_ye", {d.ep > 1 ? d.moe_rows() : 0, H}, f}};
}

int64_t layer_cache_bytes(const LayerDims& d) { return decl_bytes(layer_cache_decls(d)); }

LayerCache::LayerCache(const LayerDims& d) {
  allocate_decls(*this, layer_cache_decls(d), d.device);
}

std::vector<TensorDecl<LayerScratch>> layer_scratch_decls(const LayerDims& d) {
  const int64_t N = d.rows(), qk_rows = d.spec.qk_layernorm ? N * d.NH_local() : 0;
  const DType f = DType::F32;
  using S = LayerScratch;
  return {{&S::full, "full", {N, d.H}, f},
          {&S::ln_full, "ln_full", {d.sp ? N : 0, d.H}, d.dtype},
          {&S::d_ln, "d_ln", {d.local_rows(), d.H}, f},
          {&S::d_qkv, "d_qkv", {N, d.qkv_local()}, f},
          {&S::d_attn, "d_attn", {N, d.attn_local()}, f},
          {&S::d_fc1, "d_fc1", {N, d.fc1_local()}, f},
          {&S::d_act, "d_act", {N, d.F_local()}, f},
          {&S::qk_out, "qk_out", {qk_rows, d.HD()}, d.dtype},
          {&S::d_qk_in, "d_qk_in", {qk_rows, d.HD()}, f},
          {&S::d_qk, "d_qk", {qk_rows, d.HD()}, f},
          {&S::moe_full, "moe_full", {d.spec.is_moe() ? N : 0, d.H}, f},
          {&S::moe_dy, "moe_dy", {d.moe_rows(), d.H}, f},
          {&S::moe_d_fc1, "moe_d_fc1", {d.moe_rows(), d.expert_fc1_local()}, f},
          {&S::moe_d_act, "moe_d_act", {d.moe_rows(), d.expert_F_local()}, f},
          {&S::moe_dx, "moe_dx", {d.moe_rows(), d.H}, f},
          {&S::moe_dlogits, "moe_dlogits", {d.spec.is_moe() ? N : 0, d.num_experts()}, f},
          {&S::moe_dye, "moe_dye", {d.ep > 1 ? d.moe_rows() : 0, d.H}, f},
          {&S::moe_dxe, "moe_dxe", {d.ep > 1 ? d.moe_rows() : 0, d.H}, f}};
}

int64_t layer_scratch_bytes(const LayerDims& d) { return decl_bytes(layer_scratch_decls(d)); }

LayerScratch::LayerScratch(const LayerDims& d) {
  allocate_decls(*this, layer_scratch_decls(d), d.device);
}

void transformer_layer_forward(const tp::TPGroup& g, float* y, const float* x,
                               const LayerWeights& w, LayerCache& c, LayerScratch& s,
                               const LayerDims& d, const LayerInputs& in) {
  const int64_t H = d.H, N = d.rows();
  float* full = s.full.data<float>();
  // Attention block.
  norm_forward(c.ln1, c.ln1_mean, c.ln1_rstd, x, w.ln1_w, w.ln1_b, d);
  tp::column_parallel_forward(g, store(c.qkv), c.ln1.raw(), s.ln_full.raw(), weight(w.qkv_w, d),
                              w.qkv_b, {N, H, d.qkv_local()});
  const ops::FusedQKV v = qkv_views(c.qkv, d);
  if (d.spec.qk_layernorm) {
    head_norm_forward(v.q, d.NH_local(), c.q_pre, c.q_mean, c.q_rstd, w.q_ln_w, w.q_ln_b, s, d);
    head_norm_forward(v.k, d.NG_local(), c.k_pre, c.k_mean, c.k_rstd, w.k_ln_w, w.k_ln_b, s, d);
  }
  if (d.spec.rope) {
    ops::rope_forward(v.q, in.positions, in.inv_freq, N, d.NH_local(), d.HD(), d.rotary_dim,
                      d.rotary_interleaved);
    ops::rope_forward(v.k, in.positions, in.inv_freq, N, d.NG_local(), d.HD(), d.rotary_dim,
                      d.rotary_interleaved);
  }
  if (in.kv)
    in.kv->forward(in.layer, store(c.attn), v.q, v.k, v.v, d.NH_local(), d.NG_local(), d.HD());
  else if (context_parallel(in))
    cp::cp_attention_forward(*in.cp, store(c.attn), c.lse.data<float>(), v.q, v.k, v.v,
                             attention_shape(g, v, d, in), in.seg_start);
  else
    ops::attention_forward(store(c.attn), c.lse.data<float>(), v.q, v.k, v.v,
                           attention_shape(g, v, d, in), in.seg_start);
  const bool drop = hidden_dropout_on(in);
  DropoutRows attn_drop, mlp_drop;
  if (drop) {
    attn_drop = hidden_dropout(g, d, in, DropoutSite::AttentionOut);
    mlp_drop = hidden_dropout(g, d, in, DropoutSite::MlpOut);
  }
  tp::row_parallel_forward(g, c.x_mid.data<float>(), full, act(c.attn), weight(w.proj_w, d),
                           w.proj_b, x, {N, d.attn_local(), H}, drop ? &attn_drop : nullptr);
  // MLP block.
  norm_forward(c.ln2, c.ln2_mean, c.ln2_rstd, c.x_mid.data<float>(), w.ln2_w, w.ln2_b, d);
  if (d.spec.is_moe())
    return moe_forward(g, y, c.x_mid.data<float>(), w, c, s, d, in, drop ? &mlp_drop : nullptr);
  tp::column_parallel_forward(g, store(c.fc1), c.ln2.raw(), s.ln_full.raw(), weight(w.fc1_w, d),
                              w.fc1_b, {N, H, d.fc1_local()});
  if (swiglu(d)) ops::swiglu_forward(store(c.act), act(c.fc1), N, d.F_local());
  else ops::gelu_forward(store(c.act), act(c.fc1), N * d.F_local());
  tp::row_parallel_forward(g, y, full, act(c.act), weight(w.fc2_w, d), w.fc2_b,
                           c.x_mid.data<float>(), {N, d.F_local(), H}, drop ? &mlp_drop : nullptr);
}

// d_resid is the residual-stream gradient: it passes through both residual adds unchanged, and
// each branch's input gradient is added into it, so no separate dx_mid buffer is needed.
void transformer_layer_backward(const tp::TPGroup& g, float* d_resid, const float* x,
                                const LayerWeights& w, const LayerWeights& gw, const LayerCache& c,
                                LayerScratch& s, const LayerDims& d, const LayerInputs& in) {
  const int64_t H = d.H, N = d.rows();
  float* full = s.full.data<float>();
  // Under dropout a block's output gradient is the residual's through the mask (into d_ln,
  // free until the block's norm backward).
  const bool drop = hidden_dropout_on(in);
  auto branch_grad = [&](DropoutSite site) -> const float* {
    if (!drop) return d_resid;
    ops::dropout_backward(s.d_ln.data<float>(), d_resid, d.local_rows(), H,
                          hidden_dropout(g, d, in, site));
    return s.d_ln.data<float>();
  };
  // MLP block.
  if (d.spec.is_moe()) {
    moe_backward(g, branch_grad(DropoutSite::MlpOut), w, gw, c, s, d, in);
  } else {
    tp::row_parallel_backward(g, s.d_act.data<float>(), f32(gw.fc2_w), gw.fc2_b,
                              branch_grad(DropoutSite::MlpOut), full, act(c.act),
                              weight(w.fc2_w, d), {N, d.F_local(), H});
    if (swiglu(d))
      ops::swiglu_backward(s.d_fc1.data<float>(), act(c.fc1), s.d_act.data<float>(), N, d.F_local(),
                           ops::GradWrite::Set);
    else
      ops::gelu_backward(s.d_fc1.data<float>(), act(c.fc1), s.d_act.data<float>(), N * d.F_local(),
                         ops::GradWrite::Set);
    tp::column_parallel_backward(g, s.d_ln.data<float>(), full, f32(gw.fc1_w), gw.fc1_b,
                                 s.d_fc1.data<float>(), gathered_norm(g, c.ln2, s, d),
                                 weight(w.fc1_w, d), {N, H, d.fc1_local()});
  }
  norm_backward(d_resid, gw.ln2_w, gw.ln2_b, s.d_ln.data<float>(), c.x_mid.data<float>(), w.ln2_w,
                c.ln2_mean, c.ln2_rstd, d);
  // Attention block.
  tp::row_parallel_backward(g, s.d_attn.data<float>(), f32(gw.proj_w), gw.proj_b,
                            branch_grad(DropoutSite::AttentionOut), full, act(c.attn),
                            weight(w.proj_w, d), {N, d.attn_local(), H});
  const ops::FusedQKV v = qkv_views(c.qkv, d), dv = qkv_views(s.d_qkv, d);
  if (context_parallel(in))
    cp::cp_attention_backward(*in.cp, dv.q, dv.k, dv.v, s.d_attn.data<float>(), act(c.attn), v.q,
                              v.k, v.v, c.lse.data<float>(), attention_shape(g, v, d, in),
                              in.seg_start, ops::GradWrite::Set);
  else
    ops::attention_backward(dv.q, dv.k, dv.v, s.d_attn.data<float>(), act(c.attn), v.q, v.k, v.v,
                            c.lse.data<float>(), attention_shape(g, v, d, in), in.seg_start,
                            ops::GradWrite::Set);
  if (d.spec.rope) {  // back through the rotation: the transpose rotates by the opposite angles
    ops::rope_backward(dv.q, in.positions, in.inv_freq, N, d.NH_local(), d.HD(), d.rotary_dim,
                       d.rotary_interleaved);
    ops::rope_backward(dv.k, in.positions, in.inv_freq, N, d.NG_local(), d.HD(), d.rotary_dim,
                       d.rotary_interleaved);
  }
  if (d.spec.qk_layernorm) {
    head_norm_backward(dv.q, d.NH_local(), c.q_pre, c.q_mean, c.q_rstd, w.q_ln_w, gw.q_ln_w,
                       gw.q_ln_b, s, d);
    head_norm_backward(dv.k, d.NG_local(), c.k_pre, c.k_mean, c.k_rstd, w.k_ln_w, gw.k_ln_w,
                       gw.k_ln_b, s, d);
  }
  tp::column_parallel_backward(g, s.d_ln.data<float>(), full, f32(gw.qkv_w), gw.qkv_b,
                               s.d_qkv.data<float>(), gathered_norm(g, c.ln1, s, d),
                               weight(w.qkv_w, d), {N, H, d.qkv_local()});
  norm_backward(d_resid, gw.ln1_w, gw.ln1_b, s.d_ln.data<float>(), x, w.ln1_w, c.ln1_mean,
                c.ln1_rstd, d);
}

}  // namespace mg
