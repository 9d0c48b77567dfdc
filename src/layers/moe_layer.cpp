#include "layers/moe_layer.h"

#include <cstring>

#include "backend/dispatch.h"
#include "core/timers.h"
#include "layers/transformer_layer.h"
#include "tensor_parallel/parallel_linear.h"

namespace mg {

namespace {
// Element `row` x `width` of a buffer of dtype t.
void* at(void* base, int64_t elements, DType t) {
  return static_cast<char*>(base) + elements * int64_t(dtype_size(t));
}
const void* at(const void* base, int64_t elements, DType t) {
  return static_cast<const char*>(base) + elements * int64_t(dtype_size(t));
}
bool swiglu(const LayerDims& d) { return d.spec.mlp == MlpKind::SwiGLU; }

// The activation of an MLP: out (n, F) from fc1 (n, fc1 width).
void activation_forward(cpu::MatOut out, cpu::Mat fc1, int64_t n, int64_t F, const LayerDims& d) {
  if (swiglu(d))
    ops::swiglu_forward(out, fc1, n, F);
  else
    ops::gelu_forward(out, fc1, n * F);
}
void activation_backward(float* dfc1, cpu::Mat fc1, const float* dact, int64_t n, int64_t F,
                         const LayerDims& d) {
  if (swiglu(d))
    ops::swiglu_backward(dfc1, fc1, dact, n, F, ops::GradWrite::Set);
  else
    ops::gelu_backward(dfc1, fc1, dact, n * F, ops::GradWrite::Set);
}

// Fills the permutation: the kept (token, slot) assignments grouped by expert, each expert's in
// token order (Megatron's permute order).
void permute(MoeRouting& r, int64_t N, int64_t k, int64_t E) {
  const std::vector<int32_t>& ex = r.router.experts;
  r.expert_begin.assign(size_t(E + 1), 0);
  for (int64_t i = 0; i < N * k; ++i)
    if (r.keep[size_t(i)]) ++r.expert_begin[size_t(ex[size_t(i)]) + 1];
  for (int64_t e = 0; e < E; ++e) r.expert_begin[size_t(e + 1)] += r.expert_begin[size_t(e)];
  r.row_token.resize(size_t(r.rows()));
  r.row_slot.resize(size_t(r.rows()));
  std::vector<int64_t> next(r.expert_begin.begin(), r.expert_begin.end() - 1);
  for (int64_t i = 0; i < N * k; ++i) {
    if (!r.keep[size_t(i)]) continue;
    const int64_t row = next[size_t(ex[size_t(i)])]++;
    r.row_token[size_t(row)] = int32_t(i / k);
    r.row_slot[size_t(row)] = i;
  }
}
}  // namespace

void moe_forward(const tp::TPGroup& g, float* y, const float* x_mid, const LayerWeights& w,
                 LayerCache& c, LayerScratch& s, const LayerDims& d, const DropoutRows* dropout) {
  MG_CHECK(d.device == Device::CPU, "MoE layers run on the CPU backend");
  const MoeSpec& m = d.spec.moe;
  const int64_t N = d.rows(), H = d.H, E = m.num_experts, k = m.router.topk;
  const int64_t F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
  // Every TP rank routes the full rows.
  const void* x = c.ln2.raw();
  if (d.sp) {
    tp::gather_from_sp_region_forward(g, c.ln2.raw(), c.ln2_full.raw(), d.local_rows() * H, t);
    x = c.ln2_full.raw();
  }
  float* logits = c.moe_logits.data<float>();
  MoeRouting& r = c.routing;
  {
    timers::Scope timer(timers::kMoeRouter);
    ops::linear_forward(logits, {x, t}, {w.moe.router_w, t}, nullptr, N, H, E);
    r.router = moe_router_forward(m.router, logits, N);
    if (m.capacity_factor > 0) {
      CapacityDrop drop =
          moe_capacity_drop(r.router.experts, r.router.weights, N, k, E, m.capacity_factor);
      r.keep = std::move(drop.keep);
      r.dropped = drop.dropped;
    } else {
      r.keep.assign(size_t(N * k), 1);
      r.dropped = 0;
    }
  }
  {
    timers::Scope timer(timers::kMoePermute);
    permute(r, N, k, E);
    const size_t row_bytes = size_t(H) * dtype_size(t);
    for (int64_t row = 0; row < r.rows(); ++row)
      std::memcpy(at(c.moe_x.raw(), row * H, t), at(x, int64_t(r.row_token[size_t(row)]) * H, t),
                  row_bytes);
  }
  timers::Scope experts_timer(timers::kMoeExperts);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = r.expert_begin[size_t(e)], n = r.expert_begin[size_t(e + 1)] - b;
    if (n == 0) continue;
    ops::linear_forward({at(c.moe_fc1.raw(), b * F1, t), t}, {at(c.moe_x.raw(), b * H, t), t},
                        {w.moe.fc1_w[size_t(e)], t}, w.moe.fc1_b[size_t(e)], n, H, F1);
    activation_forward({at(c.moe_act.raw(), b * F, t), t}, {at(c.moe_fc1.raw(), b * F1, t), t},
                       n, F, d);
    ops::linear_forward(c.moe_y.data<float>() + b * H, {at(c.moe_act.raw(), b * F, t), t},
                        {w.moe.fc2_w[size_t(e)], t}, g.rank() == 0 ? w.moe.fc2_b[size_t(e)] : nullptr,
                        n, F, H);
  }
  experts_timer.stop();
  // Combine: each token's rows weighted by its routing weights, into the TP-partial sums.
  timers::Scope combine_timer(timers::kMoeCombine);
  float* full = s.full.data<float>();
  std::memset(full, 0, size_t(N * H) * sizeof(float));
  const float* ye = c.moe_y.data<float>();
  for (int64_t row = 0; row < r.rows(); ++row) {
    const float wt = r.router.weights[size_t(r.row_slot[size_t(row)])];
    float* out = full + int64_t(r.row_token[size_t(row)]) * H;
    const float* in = ye + row * H;
    for (int64_t h = 0; h < H; ++h) out[h] += wt * in[h];
  }
  combine_timer.stop();
  if (d.spec.ffn > 0) {  // shared experts: every token, as a dense MLP
    ops::linear_forward({c.fc1.raw(), t}, {x, t}, {w.fc1_w, t}, w.fc1_b, N, H, d.fc1_local());
    activation_forward({c.act.raw(), t}, {c.fc1.raw(), t}, N, d.F_local(), d);
    float* shared = s.moe_full.data<float>();
    ops::linear_forward(shared, {c.act.raw(), t}, {w.fc2_w, t}, g.rank() == 0 ? w.fc2_b : nullptr,
                        N, d.F_local(), H);
    for (int64_t i = 0; i < N * H; ++i) full[i] += shared[i];
  }
  tp::reduce_bias_dropout_add(g, y, full, nullptr, x_mid, N, H, dropout);
}

void moe_backward(const tp::TPGroup& g, const float* dy, const LayerWeights& w,
                  const LayerWeights& gw, const LayerCache& c, LayerScratch& s,
                  const LayerDims& d, const LayerInputs& in) {
  const MoeSpec& m = d.spec.moe;
  const int64_t N = d.rows(), R = d.local_rows(), H = d.H, E = m.num_experts, k = m.router.topk;
  const int64_t F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
  const MoeRouting& r = c.routing;
  const float* dy_full = dy;
  if (d.sp) {
    tp::reduce_scatter_to_sp_backward(g, dy, s.full.data<float>(), R * H);
    dy_full = s.full.data<float>();
  }
  const void* x = d.sp ? c.ln2_full.raw() : c.ln2.raw();
  float* dx_full = s.moe_full.data<float>();
  if (d.spec.ffn > 0) {  // shared experts; their input gradient sets dx_full
    ops::linear_backward(s.d_act.data<float>(), static_cast<float*>(gw.fc2_w), gw.fc2_b, dy_full,
                         {c.act.raw(), t}, {w.fc2_w, t}, N, d.F_local(), H, ops::GradWrite::Set);
    activation_backward(s.d_fc1.data<float>(), {c.fc1.raw(), t}, s.d_act.data<float>(), N,
                        d.F_local(), d);
    ops::linear_backward(dx_full, static_cast<float*>(gw.fc1_w), gw.fc1_b, s.d_fc1.data<float>(),
                         {x, t}, {w.fc1_w, t}, N, H, d.fc1_local(), ops::GradWrite::Set);
  } else {
    std::memset(dx_full, 0, size_t(N * H) * sizeof(float));
  }
  // Each routed row's output gradient is its weight x the token's; each weight's gradient is
  // the row's output . the token's gradient (TP-partial: summed over TP below).
  std::vector<float> dweights(size_t(N * k), 0.f);
  timers::Scope combine_timer(timers::kMoeCombine);
  const float* ye = c.moe_y.data<float>();
  float* drow = s.moe_dy.data<float>();
  for (int64_t row = 0; row < r.rows(); ++row) {
    const int64_t slot = r.row_slot[size_t(row)];
    const float wt = r.router.weights[size_t(slot)];
    const float* go = dy_full + int64_t(r.row_token[size_t(row)]) * H;
    const float* yo = ye + row * H;
    float* gr = drow + row * H;
    double dot = 0;
    for (int64_t h = 0; h < H; ++h) {
      dot += double(yo[h]) * double(go[h]);
      gr[h] = wt * go[h];
    }
    dweights[size_t(slot)] = float(dot);
  }
  combine_timer.stop();
  timers::Scope experts_timer(timers::kMoeExperts);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = r.expert_begin[size_t(e)], n = r.expert_begin[size_t(e + 1)] - b;
    if (n == 0) continue;
    float* dact = s.moe_d_act.data<float>() + b * F;
    float* dfc1 = s.moe_d_fc1.data<float>() + b * F1;
    ops::linear_backward(dact, static_cast<float*>(gw.moe.fc2_w[size_t(e)]),
                         gw.moe.fc2_b[size_t(e)], drow + b * H,
                         {at(c.moe_act.raw(), b * F, t), t}, {w.moe.fc2_w[size_t(e)], t}, n, F, H,
                         ops::GradWrite::Set);
    activation_backward(dfc1, {at(c.moe_fc1.raw(), b * F1, t), t}, dact, n, F, d);
    ops::linear_backward(s.moe_dx.data<float>() + b * H,
                         static_cast<float*>(gw.moe.fc1_w[size_t(e)]), gw.moe.fc1_b[size_t(e)],
                         dfc1, {at(c.moe_x.raw(), b * H, t), t}, {w.moe.fc1_w[size_t(e)], t}, n,
                         H, F1, ops::GradWrite::Set);
  }
  experts_timer.stop();
  {
    timers::Scope timer(timers::kMoePermute);
    const float* dx_rows = s.moe_dx.data<float>();
    for (int64_t row = 0; row < r.rows(); ++row) {
      float* out = dx_full + int64_t(r.row_token[size_t(row)]) * H;
      const float* src = dx_rows + row * H;
      for (int64_t h = 0; h < H; ++h) out[h] += src[h];
    }
  }
  if (g.size() > 1) {
    timers::Scope timer(timers::kTpComm);
    g.comm->all_reduce(dweights.data(), N * k);
  }
  // The router: the weights' gradients plus the aux and z losses, scaled as the LM loss is.
  MoeRouterConfig scaled = m.router;
  scaled.aux_loss_coeff *= in.loss_scale;
  scaled.z_loss_coeff *= in.loss_scale;
  float* dlogits = s.moe_dlogits.data<float>();
  {
    timers::Scope timer(timers::kMoeRouter);
    moe_router_backward(scaled, r.router, c.moe_logits.data<float>(), dweights.data(), N,
                        dlogits);
    // Every TP rank holds the same router gradient; the input gradient is added once (rank 0).
    ops::linear_backward(g.rank() == 0 ? dx_full : nullptr, static_cast<float*>(gw.moe.router_w),
                         nullptr, dlogits, {x, t}, {w.moe.router_w, t}, N, H, E);
  }
  if (d.sp) {
    tp::reduce_scatter_to_sp_forward(g, dx_full, s.d_ln.data<float>(), R * H);
  } else {
    if (g.size() > 1) tp::reduce_from_region_forward(g, dx_full, N * H);
    std::memcpy(s.d_ln.data<float>(), dx_full, size_t(N * H) * sizeof(float));
  }
}

}  // namespace mg
