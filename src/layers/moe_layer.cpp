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
  if (swiglu(d)) ops::swiglu_forward(out, fc1, n, F);
  else ops::gelu_forward(out, fc1, n * F);
}
void activation_backward(float* dfc1, cpu::Mat fc1, const float* dact, int64_t n, int64_t F,
                         const LayerDims& d) {
  if (swiglu(d)) ops::swiglu_backward(dfc1, fc1, dact, n, F, ops::GradWrite::Set);
  else ops::gelu_backward(dfc1, fc1, dact, n * F, ops::GradWrite::Set);
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
// saved, ye (rows, H) f32 expert-TP-partial outputs (with the fc2 bias where fc2_bias). With
// --moe-grouped-gemm each GEMM is one grouped op over all local experts; else one call each.
void experts_forward(bool fc2_bias, const LayerWeights& w, const LayerDims& d,
                     const std::vector<int64_t>& counts, const void* xe, void* fc1, void* act,
                     float* ye) {
  timers::Scope timer(timers::kMoeExperts);
  const int64_t H = d.H, F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
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
    ops::grouped_linear_backward(dxe, f32(gw.moe.fc1_w).data(), gw.moe.fc1_b.data(), d_fc1, {xe, t},
                                 w.moe.fc1_w.data(), counts.data(), G, H, F1, ops::GradWrite::Set);
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

// Fills the permutation: the kept (token, slot) assignments of tokens [t0, t1) grouped by
// expert, each expert's in token order (Megatron's permute order); other slots get no row.
void permute(MoeRouting& r, int64_t N, int64_t k, int64_t E, int64_t t0, int64_t t1) {
  const std::vector<int32_t>& ex = r.router.experts;
  r.expert_begin.assign(size_t(E + 1), 0);
  for (int64_t i = t0 * k; i < t1 * k; ++i)
    if (r.keep[size_t(i)]) ++r.expert_begin[size_t(ex[size_t(i)]) + 1];
  for (int64_t e = 0; e < E; ++e) r.expert_begin[size_t(e + 1)] += r.expert_begin[size_t(e)];
  r.row_token.resize(size_t(r.rows()));
  r.row_slot.resize(size_t(r.rows()));
  std::vector<int64_t> next(r.expert_begin.begin(), r.expert_begin.end() - 1);
  for (int64_t i = t0 * k; i < t1 * k; ++i) {
    if (!r.keep[size_t(i)]) continue;
    const int64_t row = next[size_t(ex[size_t(i)])]++;
    r.row_token[size_t(row)] = int32_t(i / k);
    r.row_slot[size_t(row)] = int32_t(i);
  }
  r.slot_row = slot_rows(r.row_slot, N * k);
}

// Who computes this rank's tokens' experts. Without folding: the EP group (or this rank
// alone), every TP rank dispatching all the rows (its expert TP shards are its TP's). Folded:
// the experts' ETP x EP group, each TP rank dispatching its share [t0, t1) of the rows, each
// expert's rows going to all `copies` (= ETP) ranks holding its shards.
struct ExpertSide {
  Communicator* group = nullptr;  // null: this rank alone
  int64_t copies = 1;             // ranks each expert's rows go to
  int64_t t0 = 0, t1 = 0;         // this rank's tokens of the full rows
  int64_t local = 0, first = 0;   // local experts, the first one's global index
  bool fc2_bias = false;          // this rank adds the experts' fc2 biases
  int64_t size() const { return group ? group->size() : 1; }
  int64_t tokens() const { return t1 - t0; }
};
ExpertSide expert_side(const tp::TPGroup& g, const LayerDims& d, const LayerInputs& in) {
  const int64_t N = d.rows(), E = d.num_experts();
  ExpertSide s;
  s.t1 = N;
  s.local = E;
  s.fc2_bias = g.rank() == 0;
  if (d.folded()) {
    const int64_t x = in.etp_ep ? in.etp_ep->rank() : 0;
    s.group = in.etp_ep && in.etp_ep->size() > 1 ? in.etp_ep : nullptr;
    s.copies = d.expert_tp();
    s.t0 = N * g.rank() / g.size();
    s.t1 = N * (g.rank() + 1) / g.size();
    s.local = E / d.ep;
    s.first = x / s.copies * s.local;
    s.fc2_bias = x % s.copies == 0;
  } else if (in.ep && in.ep->size() > 1) {
    s.group = in.ep;
    s.local = E / in.ep->size();
    s.first = in.ep->rank() * s.local;
  }
  MG_CHECK(s.size() * s.local == E * s.copies, "MoE: ", s.size(), " ranks holding ", s.local,
           " of ", E, " experts in ", s.copies, " shards each");
  return s;
}

// Folding (copies > 1): the rows sent, one per (rank x of the group, its local expert, the
// expert's permuted row), x's experts being global (x / copies) x local ..; v_row maps each to
// its permuted row, v_map each permuted row's copies to theirs (row-major (rows, copies)); the
// counts per (x, local expert) are the route's.
std::vector<int64_t> copy_rows(MoeRouting& r, const ExpertSide& side) {
  const int64_t X = side.size(), LE = side.local, U = r.rows();
  std::vector<int64_t> counts(size_t(X * LE));
  r.v_row.clear();
  r.v_map.assign(size_t(U * side.copies), 0);
  for (int64_t x = 0; x < X; ++x)
    for (int64_t le = 0; le < LE; ++le) {
      const int64_t e = x / side.copies * LE + le;
      const int64_t b = r.expert_begin[size_t(e)], n = r.expert_begin[size_t(e + 1)] - b;
      counts[size_t(x * LE + le)] = n;
      for (int64_t u = b; u < b + n; ++u) {
        r.v_map[size_t(u * side.copies + x % side.copies)] = int32_t(r.v_row.size());
        r.v_row.push_back(int32_t(u));
      }
    }
  return counts;
}
}  // namespace

void moe_forward(const tp::TPGroup& g, float* y, const float* x_mid, const LayerWeights& w,
                 LayerCache& c, LayerScratch& s, const LayerDims& d, const LayerInputs& in,
                 const DropoutRows* dropout) {
  const MoeSpec& m = d.spec.moe;
  const int64_t N = d.rows(), H = d.H, E = m.num_experts, k = m.router.topk;
  const int64_t F1 = d.expert_fc1_local(), F = d.expert_F_local();
  const DType t = d.dtype;
  // Every TP rank routes the full rows.
  const void* x = gathered_norm(g, c.ln2, s, d).data;
  float* logits = c.moe_logits.data<float>();
  MoeRouting& r = c.routing;
  {
    timers::Scope timer(timers::kMoeRouter);
    ops::linear_forward(logits, {x, t}, {w.moe.router_w, t}, nullptr, N, H, E);
    r.router = moe_router_forward(m.router, on_host(logits, N * E, r.logits), N, d.B);
    if (in.cp && in.cp->comm->size() > 1) sum_over_cp(*in.cp->comm, m.router, r.router, N);
    if (m.capacity_factor > 0) {
      CapacityDrop drop = moe_capacity_drop(r.router.experts, r.router.weights, N, k, E,
                                            m.capacity_factor, m.drop_by_position);
      r.keep = std::move(drop.keep);
      r.dropped = drop.dropped;
    } else {
      r.keep.assign(size_t(N * k), 1);
      r.dropped = 0;
    }
  }
  const ExpertSide side = expert_side(g, d, in);
  Communicator* ep = side.group;
  const int64_t X = side.size(), n = side.tokens(), t0 = side.t0;
  MG_CHECK(X * N * k * side.copies < (int64_t(1) << 31), "MoE routing indexes ",
           X * N * k * side.copies, " slots in 32 bits; lower --micro-batch-size or --seq-length");
  float* full = s.full.data<float>();
  if (n < N) ops::memset_zero(full, size_t(N * H) * sizeof(float), ops::device());
  if (ep && in.ep_allgather) {
    // allgather: every group rank's tokens and routing gathered; this rank's experts take
    // their rows (by local expert, then source rank, then the source's order); their weighted
    // outputs, placed at their tokens, come home by a reduce-scatter over the group (which
    // also sums the expert-TP shards' partial outputs under folding).
    void* xg = room(s.moe_xg, X * n, H, t);
    std::vector<int32_t> mine(size_t(n * k)), all(size_t(X * n * k));
    for (int64_t i = 0; i < n * k; ++i)
      mine[size_t(i)] = r.keep[size_t(t0 * k + i)] ? r.router.experts[size_t(t0 * k + i)] : -1;
    r.g_weights.resize(size_t(X * n * k));
    {
      timers::Scope timer(timers::kMoePermute);
      ep->all_gather(at(x, t0 * H, t), xg, n * H, t);
      ep->all_gather(mine.data(), all.data(), n * k, DType::I32);
      ep->all_gather(r.router.weights.data() + t0 * k, r.g_weights.data(), n * k, DType::F32);
      r.local_rows.assign(size_t(side.local), 0);
      r.g_token.clear();
      r.g_slot.clear();
      for (int64_t le = 0; le < side.local; ++le)
        for (int64_t i = 0; i < X * n * k; ++i)
          if (all[size_t(i)] == side.first + le) {
            ++r.local_rows[size_t(le)];
            r.g_token.push_back(int32_t(i / k));
            r.g_slot.push_back(int32_t(i));
          }
      r.g_slot_row = slot_rows(r.g_slot, X * n * k);
    }
    const int64_t Re = int64_t(r.g_token.size());
    void* xe = room(c.moe_xe, Re, H, t);
    ops::gather_rows(xe, xg, to_device(r.dev_row_token, r.g_token), Re, H, t);
    to_device(r.dev_row_slot, r.g_slot);
    float* ye = room_f32(c.moe_ye, Re, H);
    experts_forward(side.fc2_bias, w, d, r.local_rows, xe, room(c.moe_fc1, Re, F1, t),
                    room(c.moe_act, Re, F, t), ye);
    timers::Scope timer(timers::kMoeCombine);
    float* out = room_f32(s.moe_g, X * n, H);
    ops::combine_rows(out, ye, to_device(r.dev_slot_row, r.g_slot_row),
                      to_device(r.dev_weights, r.g_weights), X * n, k, H, false);
    ep->reduce_scatter(out, full + t0 * H, n * H);
  } else {
    // alltoall (or one rank): the permuted rows go to their experts' ranks and come back.
    const bool copied = side.copies > 1;  // folding with expert TP > 1
    std::vector<int64_t> counts;
    {
      timers::Scope timer(timers::kMoePermute);
      permute(r, N, k, E, t0, side.t1);
      const int32_t* row_token = to_device(r.dev_row_token, r.row_token);
      to_device(r.dev_row_slot, r.row_slot);
      if (copied) {
        counts = copy_rows(r, side);
        std::vector<int32_t> v_token(r.v_row.size());
        for (size_t i = 0; i < v_token.size(); ++i) v_token[i] = r.row_token[size_t(r.v_row[i])];
        ops::gather_rows(room(c.moe_x, int64_t(v_token.size()), H, t), x,
                         to_device(r.dev_v_token, v_token), int64_t(v_token.size()), H, t);
        to_device(r.dev_v_row, r.v_row);
        to_device(r.dev_v_map, r.v_map);
      } else {
        ops::gather_rows(c.moe_x.raw(), x, row_token, r.rows(), H, t);
        counts.resize(size_t(E));
        for (int64_t e = 0; e < E; ++e)
          counts[size_t(e)] = r.expert_begin[size_t(e + 1)] - r.expert_begin[size_t(e)];
      }
    }
    const int64_t V = copied ? int64_t(r.v_row.size()) : r.rows();  // rows sent
    const void* xe = c.moe_x.raw();
    float* yv = copied ? room_f32(s.moe_g, V, H) : c.moe_y.data<float>();  // rows come back
    float* ye = yv;
    if (ep) {
      timers::Scope timer(timers::kMoePermute);
      r.route = moe::ep_route(*ep, counts);
      r.local_rows = r.route.rows_per_local_expert();
      xe = room(c.moe_xe, r.route.rows_out(), H, t);
      moe::ep_dispatch(*ep, r.route, c.moe_x.raw(), const_cast<void*>(xe), H, t);
      ye = room_f32(c.moe_ye, r.route.rows_out(), H);
    } else {
      r.local_rows = counts;
    }
    const int64_t Re = ep ? r.route.rows_out() : V;
    experts_forward(side.fc2_bias, w, d, r.local_rows, xe, room(c.moe_fc1, Re, F1, t),
                    room(c.moe_act, Re, F, t), ye);
    if (ep) {
      timers::Scope timer(timers::kMoePermute);
      moe::ep_combine(*ep, r.route, ye, yv, H, DType::F32);
    }
    timers::Scope timer(timers::kMoeCombine);
    if (copied)  // each row's expert-TP shards' partial outputs summed
      ops::combine_rows(c.moe_y.data<float>(), yv, r.dev_v_map.data<int32_t>(), nullptr, r.rows(),
                        side.copies, H, false);
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
                  const LayerWeights& gw, const LayerCache& c, LayerScratch& s, const LayerDims& d,
                  const LayerInputs& in) {
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
  const void* x = gathered_norm(g, c.ln2, s, d).data;  // gathered again: only rows were saved
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
  // the row's output . the token's gradient (TP-partial, or this TP rank's tokens' only under
  // folding: summed over TP below). Slots without a row (dropped) keep a zero gradient.
  const ExpertSide side = expert_side(g, d, in);
  Communicator* ep = side.group;
  const int64_t X = side.size(), n = side.tokens(), t0 = side.t0;
  const int32_t* row_token = r.dev_row_token.data<int32_t>();
  const int32_t* row_slot = r.dev_row_slot.data<int32_t>();
  const int32_t* slot_row = r.dev_slot_row.data<int32_t>();
  const float* weights = r.dev_weights.data<float>();
  const bool allgather = ep && in.ep_allgather;
  float* dweights = room_f32(s.moe_dw, N * k + (allgather ? X * n * k : 0), 1);
  ops::memset_zero(dweights, size_t(N * k) * sizeof(float), ops::device());
  if (allgather) {
    const int64_t Re = int64_t(r.g_token.size());
    float* dyg = room_f32(s.moe_g, X * n, H);
    ep->all_gather(dy_full + t0 * H, dyg, n * H, DType::F32);
    float* dw_all = dweights + N * k;  // every group rank's slots, reduce-scattered below
    ops::memset_zero(dw_all, size_t(X * n * k) * sizeof(float), ops::device());
    float* dye = room_f32(s.moe_dye, Re, H);
    {
      timers::Scope timer(timers::kMoeCombine);
      ops::combine_rows_backward(dye, dw_all, c.moe_ye.data<float>(), dyg, row_token, row_slot,
                                 weights, Re, H);
    }
    float* dxe = room_f32(s.moe_dxe, Re, H);
    experts_backward(w, gw, d, r.local_rows, c.moe_xe.raw(), c.moe_fc1.raw(), c.moe_act.raw(), dye,
                     room_f32(s.moe_d_fc1, Re, F1), room_f32(s.moe_d_act, Re, F), dxe);
    timers::Scope timer(timers::kMoePermute);
    float* dxg = room_f32(s.moe_g2, X * n, H);
    ops::combine_rows(dxg, dxe, slot_row, nullptr, X * n, k, H, false);
    float* mine = room_f32(s.moe_dx, n, H);
    ep->reduce_scatter(dxg, mine, n * H);
    ops::residual_forward(dx_full + t0 * H, dx_full + t0 * H, mine, n * H);
    ep->reduce_scatter(dw_all, dweights + t0 * k, n * k);
  } else {
    const bool copied = side.copies > 1;  // folding with expert TP > 1
    float* drow = room_f32(s.moe_dy, r.rows(), H);
    {
      timers::Scope timer(timers::kMoeCombine);
      ops::combine_rows_backward(drow, dweights, c.moe_y.data<float>(), dy_full, row_token,
                                 row_slot, weights, r.rows(), H);
    }
    // The rows sent (folding: each permuted row's copies) and their gradients.
    const int64_t V = copied ? int64_t(r.v_row.size()) : r.rows();
    const float* dv = drow;
    if (copied) {
      float* dcopies = room_f32(s.moe_g, V, H);
      ops::gather_rows(dcopies, drow, r.dev_v_row.data<int32_t>(), V, H, DType::F32);
      dv = dcopies;
    }
    const int64_t Re = ep ? r.route.rows_out() : V;
    const void* xe = c.moe_x.raw();
    const float* dye = dv;
    float* dxv = copied ? room_f32(s.moe_g2, V, H) : room_f32(s.moe_dx, V, H);
    float* dxe = dxv;
    if (ep) {
      timers::Scope timer(timers::kMoePermute);
      float* dispatched = room_f32(s.moe_dye, Re, H);
      moe::ep_dispatch(*ep, r.route, dv, dispatched, H, DType::F32);
      dye = dispatched;
      xe = c.moe_xe.raw();
      dxe = room_f32(s.moe_dxe, Re, H);
    }
    experts_backward(w, gw, d, r.local_rows, xe, c.moe_fc1.raw(), c.moe_act.raw(), dye,
                     room_f32(s.moe_d_fc1, Re, F1), room_f32(s.moe_d_act, Re, F), dxe);
    timers::Scope timer(timers::kMoePermute);
    if (ep) moe::ep_combine(*ep, r.route, dxe, dxv, H, DType::F32);
    const float* dx_rows = dxv;
    if (copied) {  // each permuted row's input gradient: the sum of its copies' (ETP-partial)
      float* dxu = room_f32(s.moe_dx, r.rows(), H);
      ops::combine_rows(dxu, dxv, r.dev_v_map.data<int32_t>(), nullptr, r.rows(), side.copies, H,
                        false);
      dx_rows = dxu;
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
