#include "layers/moe_layer.h"

#include <algorithm>
#include <numeric>
#include <type_traits>

#include "backend/dispatch.h"
#include "context_parallel/cp_attention.h"
#include "core/timers.h"
#include "layers/transformer_layer.h"
#include "moe/ep_dispatch.h"
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

// Rows (rows, width) of t on the compute device, grown when routing sends this rank more rows
// than it holds room for (expert parallelism: a rank's experts may receive up to EP x its own
// rows).
void* room(Tensor& t, int64_t rows, int64_t width, DType dt) {
  if (t.numel() < rows * width) t = Tensor({rows, width}, dt, ops::device());
  return t.raw();
}
float* room_f32(Tensor& t, int64_t rows, int64_t width) {
  return static_cast<float*>(room(t, rows, width, DType::F32));
}

// v's copy on the compute device, in t (grown as needed).
template <typename T>
T* to_device(Tensor& t, const std::vector<T>& v) {
  static_assert(sizeof(T) == 4);
  T* p = static_cast<T*>(room(t, std::max<int64_t>(1, int64_t(v.size())), 1,
                              std::is_same_v<T, float> ? DType::F32 : DType::I32));
  if (!v.empty()) ops::copy(p, ops::device(), v.data(), Device::CPU, v.size() * sizeof(T));
  return p;
}
// n floats of device memory on the host (p itself on the CPU; else copied into v).
const float* on_host(const float* p, int64_t n, std::vector<float>& v) {
  if (ops::device() == Device::CPU) return p;
  v.resize(size_t(n));
  ops::copy(v.data(), Device::CPU, p, ops::device(), size_t(n) * sizeof(float));
  return v.data();
}
// The router's logits on the host (routing.logits holds the GPU's copy).
const float* host_logits(const LayerCache& c, const MoeRouting& r) {
  return ops::device() == Device::CPU ? c.moe_logits.data<float>() : r.logits.data();
}
// Context parallelism: each sequence's tokens are split over the CP ranks, so the routed counts
// are summed over them and this rank's losses become its share of the whole sequence's.
void sum_over_cp(Communicator& cp, const MoeRouterConfig& cfg, MoeRouterCache<float>& c,
                 int64_t tokens) {
  std::vector<int64_t>& counts = c.tokens_per_expert;
  const int64_t n = int64_t(counts.size());
  std::vector<int64_t> all(size_t(n * cp.size()));  // every rank's counts, summed exactly here
  cp.all_gather(counts.data(), all.data(), n, DType::I64);
  for (int64_t i = 0; i < n; ++i) {
    counts[size_t(i)] = 0;
    for (int r = 0; r < cp.size(); ++r) counts[size_t(i)] += all[size_t(r * n + i)];
  }
  moe_router_global_losses(cfg, c, tokens * cp.size());
}

// The row each (token, k) slot went to, -1 where dropped: the inverse of row_slot.
std::vector<int32_t> slot_rows(const std::vector<int32_t>& row_slot, int64_t slots) {
  std::vector<int32_t> m(size_t(slots), -1);
  for (size_t row = 0; row < row_slot.size(); ++row) m[size_t(row_slot[row])] = int32_t(row);
  return m;
}

// This rank's experts on their rows: xe (rows, H) grouped by local expert (counts), fc1 and act
// saved, ye (rows, H) f32 TP-partial outputs (the fc2 bias on TP rank 0). With
// --moe-grouped-gemm each GEMM is one grouped op over all local experts; else one call each.
void experts_forward(const tp::TPGroup& g, const LayerWeights& w, const LayerDims& d,
                     const std::vector<int64_t>& counts, const void* xe, void* fc1, void* act,
                     float* ye) {
  timers::Scope timer(timers::kMoeExperts);
  const int64_t H = d.H, F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
  const bool fc2_bias = g.rank() == 0;
  if (d.spec.moe.grouped_gemm) {
    const int64_t G = int64_t(counts.size());
    const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    ops::grouped_linear_forward({fc1, t}, {xe, t}, w.moe.fc1_w.data(), w.moe.fc1_b.data(),
                                counts.data(), G, H, F1);
    activation_forward({act, t}, {fc1, t}, rows, F, d);
    ops::grouped_linear_forward(ye, {act, t}, w.moe.fc2_w.data(),
                                fc2_bias ? w.moe.fc2_b.data() : nullptr, counts.data(), G, F, H);
    return;
  }
  int64_t b = 0;
  for (size_t e = 0; e < counts.size(); b += counts[e], ++e) {
    const int64_t n = counts[e];
    if (n == 0) continue;
    ops::linear_forward({at(fc1, b * F1, t), t}, {at(xe, b * H, t), t}, {w.moe.fc1_w[e], t},
                        w.moe.fc1_b[e], n, H, F1);
    activation_forward({at(act, b * F, t), t}, {at(fc1, b * F1, t), t}, n, F, d);
    ops::linear_forward(ye + b * H, {at(act, b * F, t), t}, {w.moe.fc2_w[e], t},
                        fc2_bias ? w.moe.fc2_b[e] : nullptr, n, F, H);
  }
}
// Their backward: dye (rows, H) -> dxe (rows, H) (=), parameter grads (+=) into gw.
void experts_backward(const LayerWeights& w, const LayerWeights& gw, const LayerDims& d,
                      const std::vector<int64_t>& counts, const void* xe, const void* fc1,
                      const void* act, const float* dye, float* d_fc1, float* d_act, float* dxe) {
  timers::Scope timer(timers::kMoeExperts);
  const int64_t H = d.H, F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
  if (d.spec.moe.grouped_gemm) {
    const int64_t G = int64_t(counts.size());
    const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    auto f32 = [](const std::vector<void*>& v) {
      std::vector<float*> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float*>(v[i]);
      return out;
    };
    ops::grouped_linear_backward(d_act, f32(gw.moe.fc2_w).data(), gw.moe.fc2_b.data(), dye,
                                 {act, t}, w.moe.fc2_w.data(), counts.data(), G, F, H,
                                 ops::GradWrite::Set);
    activation_backward(d_fc1, {fc1, t}, d_act, rows, F, d);
    ops::grouped_linear_backward(dxe, f32(gw.moe.fc1_w).data(), gw.moe.fc1_b.data(), d_fc1,
                                 {xe, t}, w.moe.fc1_w.data(), counts.data(), G, H, F1,
                                 ops::GradWrite::Set);
    return;
  }
  int64_t b = 0;
  for (size_t e = 0; e < counts.size(); b += counts[e], ++e) {
    const int64_t n = counts[e];
    if (n == 0) continue;
    ops::linear_backward(d_act + b * F, static_cast<float*>(gw.moe.fc2_w[e]), gw.moe.fc2_b[e],
                         dye + b * H, {at(act, b * F, t), t}, {w.moe.fc2_w[e], t}, n, F, H,
                         ops::GradWrite::Set);
    activation_backward(d_fc1 + b * F1, {at(fc1, b * F1, t), t}, d_act + b * F, n, F, d);
    ops::linear_backward(dxe + b * H, static_cast<float*>(gw.moe.fc1_w[e]), gw.moe.fc1_b[e],
                         d_fc1 + b * F1, {at(xe, b * H, t), t}, {w.moe.fc1_w[e], t}, n, H, F1,
                         ops::GradWrite::Set);
  }
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
    r.row_slot[size_t(row)] = int32_t(i);
  }
  r.slot_row = slot_rows(r.row_slot, N * k);
}
}  // namespace

void moe_forward(const tp::TPGroup& g, float* y, const float* x_mid, const LayerWeights& w,
                 LayerCache& c, LayerScratch& s, const LayerDims& d, const LayerInputs& in,
                 const DropoutRows* dropout) {
  const MoeSpec& m = d.spec.moe;
  const int64_t N = d.rows(), H = d.H, E = m.num_experts, k = m.router.topk;
  const int64_t F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
  Communicator* ep = in.ep && in.ep->size() > 1 ? in.ep : nullptr;
  const int64_t EP = ep ? ep->size() : 1, LE = E / EP, first = ep ? ep->rank() * LE : 0;
  MG_CHECK(EP * N * k < (int64_t(1) << 31), "MoE routing indexes ", EP * N * k,
           " slots in 32 bits; lower --micro-batch-size or --seq-length");
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
    r.router = moe_router_forward(m.router, on_host(logits, N * E, r.logits), N, d.B);
    if (in.cp && in.cp->comm->size() > 1) sum_over_cp(*in.cp->comm, m.router, r.router, N);
    if (m.capacity_factor > 0) {
      CapacityDrop drop =
          moe_capacity_drop(r.router.experts, r.router.weights, N, k, E, m.capacity_factor,
                            m.drop_by_position);
      r.keep = std::move(drop.keep);
      r.dropped = drop.dropped;
    } else {
      r.keep.assign(size_t(N * k), 1);
      r.dropped = 0;
    }
  }
  float* full = s.full.data<float>();
  if (ep && in.ep_allgather) {
    // allgather: every EP rank's rows and routing gathered; this rank's experts take their
    // rows (by local expert, then source rank, then the source's order); their weighted
    // outputs, placed at their tokens, come home by a reduce-scatter over EP.
    void* xg = room(s.moe_xg, EP * N, H, t);
    std::vector<int32_t> mine(size_t(N * k)), all(size_t(EP * N * k));
    for (int64_t i = 0; i < N * k; ++i)
      mine[size_t(i)] = r.keep[size_t(i)] ? r.router.experts[size_t(i)] : -1;
    r.g_weights.resize(size_t(EP * N * k));
    {
      timers::Scope timer(timers::kMoePermute);
      ep->all_gather(x, xg, N * H, t);
      ep->all_gather(mine.data(), all.data(), N * k, DType::I32);
      ep->all_gather(r.router.weights.data(), r.g_weights.data(), N * k, DType::F32);
      r.local_rows.assign(size_t(LE), 0);
      r.g_token.clear();
      r.g_slot.clear();
      for (int64_t le = 0; le < LE; ++le)
        for (int64_t i = 0; i < EP * N * k; ++i)
          if (all[size_t(i)] == first + le) {
            ++r.local_rows[size_t(le)];
            r.g_token.push_back(int32_t(i / k));
            r.g_slot.push_back(int32_t(i));
          }
      r.g_slot_row = slot_rows(r.g_slot, EP * N * k);
    }
    const int64_t Re = int64_t(r.g_token.size());
    void* xe = room(c.moe_xe, Re, H, t);
    ops::gather_rows(xe, xg, to_device(r.dev_row_token, r.g_token), Re, H, t);
    to_device(r.dev_row_slot, r.g_slot);
    float* ye = room_f32(c.moe_ye, Re, H);
    experts_forward(g, w, d, r.local_rows, xe, room(c.moe_fc1, Re, F1, t),
                    room(c.moe_act, Re, F, t), ye);
    timers::Scope timer(timers::kMoeCombine);
    float* out = room_f32(s.moe_g, EP * N, H);
    ops::combine_rows(out, ye, to_device(r.dev_slot_row, r.g_slot_row),
                      to_device(r.dev_weights, r.g_weights), EP * N, k, H, false);
    ep->reduce_scatter(out, full, N * H);
  } else {
    {
      timers::Scope timer(timers::kMoePermute);
      permute(r, N, k, E);
      ops::gather_rows(c.moe_x.raw(), x, to_device(r.dev_row_token, r.row_token), r.rows(), H,
                       t);
      to_device(r.dev_row_slot, r.row_slot);
    }
    // alltoall (or EP 1): the permuted rows go to their experts' ranks and come back.
    const void* xe = c.moe_x.raw();
    float* ye = c.moe_y.data<float>();
    if (ep) {
      timers::Scope timer(timers::kMoePermute);
      std::vector<int64_t> per_expert(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e)
        per_expert[size_t(e)] = r.expert_begin[size_t(e + 1)] - r.expert_begin[size_t(e)];
      r.route = moe::ep_route(*ep, per_expert);
      r.local_rows = r.route.rows_per_local_expert();
      xe = room(c.moe_xe, r.route.rows_out(), H, t);
      moe::ep_dispatch(*ep, r.route, c.moe_x.raw(), const_cast<void*>(xe), H, t);
      ye = room_f32(c.moe_ye, r.route.rows_out(), H);
    } else {
      r.local_rows.assign(r.expert_begin.begin() + 1, r.expert_begin.end());
      for (int64_t e = E - 1; e > 0; --e) r.local_rows[size_t(e)] -= r.local_rows[size_t(e - 1)];
    }
    const int64_t Re = ep ? r.route.rows_out() : r.rows();
    experts_forward(g, w, d, r.local_rows, xe, room(c.moe_fc1, Re, F1, t),
                    room(c.moe_act, Re, F, t), ye);
    if (ep) {
      timers::Scope timer(timers::kMoePermute);
      moe::ep_combine(*ep, r.route, ye, c.moe_y.raw(), H, DType::F32);
    }
    timers::Scope timer(timers::kMoeCombine);
    ops::combine_rows(full, c.moe_y.data<float>(), to_device(r.dev_slot_row, r.slot_row),
                      to_device(r.dev_weights, r.router.weights), N, k, H, false);
  }
  if (d.spec.ffn > 0) {  // shared experts: every token, as a dense MLP
    ops::linear_forward({c.fc1.raw(), t}, {x, t}, {w.fc1_w, t}, w.fc1_b, N, H, d.fc1_local());
    activation_forward({c.act.raw(), t}, {c.fc1.raw(), t}, N, d.F_local(), d);
    float* shared = s.moe_full.data<float>();
    ops::linear_forward(shared, {c.act.raw(), t}, {w.fc2_w, t}, g.rank() == 0 ? w.fc2_b : nullptr,
                        N, d.F_local(), H);
    ops::residual_forward(full, full, shared, N * H);
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
  Communicator* ep = in.ep && in.ep->size() > 1 ? in.ep : nullptr;
  const int64_t EP = ep ? ep->size() : 1;
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
    ops::memset_zero(dx_full, size_t(N * H) * sizeof(float), ops::device());
  }
  // Each routed row's output gradient is its weight x the token's; each weight's gradient is
  // the row's output . the token's gradient (TP-partial: summed over TP below). Slots without
  // a row (dropped) keep a zero gradient.
  const int32_t* row_token = r.dev_row_token.data<int32_t>();
  const int32_t* row_slot = r.dev_row_slot.data<int32_t>();
  const int32_t* slot_row = r.dev_slot_row.data<int32_t>();
  const float* weights = r.dev_weights.data<float>();
  const bool allgather = ep && in.ep_allgather;
  float* dweights = room_f32(s.moe_dw, (allgather ? 2 : 1) * EP * N * k, 1);
  if (allgather) {
    const int64_t Re = int64_t(r.g_token.size());
    float* dyg = room_f32(s.moe_g, EP * N, H);
    ep->all_gather(dy_full, dyg, N * H, DType::F32);
    float* dw_all = dweights + EP * N * k;  // every EP rank's slots, reduce-scattered below
    ops::memset_zero(dw_all, size_t(EP * N * k) * sizeof(float), ops::device());
    float* dye = room_f32(s.moe_dye, Re, H);
    {
      timers::Scope timer(timers::kMoeCombine);
      ops::combine_rows_backward(dye, dw_all, c.moe_ye.data<float>(), dyg, row_token, row_slot,
                                 weights, Re, H);
    }
    float* dxe = room_f32(s.moe_dxe, Re, H);
    experts_backward(w, gw, d, r.local_rows, c.moe_xe.raw(), c.moe_fc1.raw(), c.moe_act.raw(),
                     dye, room_f32(s.moe_d_fc1, Re, F1), room_f32(s.moe_d_act, Re, F), dxe);
    timers::Scope timer(timers::kMoePermute);
    float* dxg = room_f32(s.moe_g2, EP * N, H);
    ops::combine_rows(dxg, dxe, slot_row, nullptr, EP * N, k, H, false);
    float* mine = room_f32(s.moe_dx, N, H);
    ep->reduce_scatter(dxg, mine, N * H);
    ops::residual_forward(dx_full, dx_full, mine, N * H);
    ep->reduce_scatter(dw_all, dweights, N * k);
  } else {
    float* drow = room_f32(s.moe_dy, r.rows(), H);
    ops::memset_zero(dweights, size_t(N * k) * sizeof(float), ops::device());
    {
      timers::Scope timer(timers::kMoeCombine);
      ops::combine_rows_backward(drow, dweights, c.moe_y.data<float>(), dy_full, row_token,
                                 row_slot, weights, r.rows(), H);
    }
    const int64_t Re = ep ? r.route.rows_out() : r.rows();
    const void* xe = c.moe_x.raw();
    const float* dye = drow;
    float* dxe = room_f32(s.moe_dx, r.rows(), H);
    if (ep) {
      timers::Scope timer(timers::kMoePermute);
      float* dispatched = room_f32(s.moe_dye, Re, H);
      moe::ep_dispatch(*ep, r.route, drow, dispatched, H, DType::F32);
      dye = dispatched;
      xe = c.moe_xe.raw();
      dxe = room_f32(s.moe_dxe, Re, H);
    }
    experts_backward(w, gw, d, r.local_rows, xe, c.moe_fc1.raw(), c.moe_act.raw(), dye,
                     room_f32(s.moe_d_fc1, Re, F1), room_f32(s.moe_d_act, Re, F), dxe);
    timers::Scope timer(timers::kMoePermute);
    const float* dx_rows = dxe;
    if (ep) {
      float* home = room_f32(s.moe_dx, r.rows(), H);
      moe::ep_combine(*ep, r.route, dxe, home, H, DType::F32);
      dx_rows = home;
    }
    ops::combine_rows(dx_full, dx_rows, slot_row, nullptr, N, k, H, true);
  }
  if (g.size() > 1) {
    timers::Scope timer(timers::kTpComm);
    g.comm->all_reduce(dweights, N * k);
  }
  // The router: the weights' gradients plus the aux and z losses, scaled as the LM loss is.
  MoeRouterConfig scaled = m.router;
  scaled.aux_loss_coeff *= in.loss_scale;
  scaled.z_loss_coeff *= in.loss_scale;
  {
    timers::Scope timer(timers::kMoeRouter);
    // On the GPU the router's gradient is computed on the host and uploaded.
    std::vector<float> dw_host, dlog_host;
    float* dlog = s.moe_dlogits.data<float>();
    const bool on_cpu = ops::device() == Device::CPU;
    if (!on_cpu) dlog_host.resize(size_t(N * E));
    moe_router_backward(scaled, r.router, host_logits(c, r), on_host(dweights, N * k, dw_host), N,
                        on_cpu ? dlog : dlog_host.data());
    if (!on_cpu)
      ops::copy(dlog, ops::device(), dlog_host.data(), Device::CPU,
                dlog_host.size() * sizeof(float));
    // Every TP rank holds the same router gradient; the input gradient is added once (rank 0).
    // --moe-router-dtype fp32: a 16-bit model's router backward runs in fp32 on the widened
    // input and weight (the logits' gradient is not rounded to 16 bits), as Megatron's.
    cpu::Mat xr{x, t}, wr{w.moe.router_w, t};
    if (t != DType::F32) {
      float* x32 = room_f32(s.moe_router_x32, N, H);
      float* w32 = room_f32(s.moe_router_w32, E, H);
      ops::cast_to_f32(x32, x, t, N * H);
      ops::cast_to_f32(w32, w.moe.router_w, t, E * H);
      xr = {x32, DType::F32};
      wr = {w32, DType::F32};
    }
    ops::linear_backward(g.rank() == 0 ? dx_full : nullptr, static_cast<float*>(gw.moe.router_w),
                         nullptr, dlog, xr, wr, N, H, E);
  }
  if (d.sp) {
    tp::reduce_scatter_to_sp_forward(g, dx_full, s.d_ln.data<float>(), R * H);
  } else {
    if (g.size() > 1) tp::reduce_from_region_forward(g, dx_full, N * H);
    ops::copy(s.d_ln.data<float>(), ops::device(), dx_full, ops::device(),
              size_t(N * H) * sizeof(float));
  }
}

}  // namespace mg
