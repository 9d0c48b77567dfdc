#include "plan/step_time.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/gpt.h"
#include "parallel/rank_grid.h"
#include "pipeline/schedule_table.h"
#include "train/rank_memory.h"

namespace mg {

namespace {

// One micro-batch through one model chunk of one rank.
struct ChunkTime {
  double forward = 0, backward = 0;  // seconds, exposed communication included
  StepParts parts;                   // the same seconds by cause (forward + backward)
};

// Seconds of collectives over n ranks moving `bytes` per rank, on `link`.
double ring_all_reduce(double bytes, int64_t n, const LinkProfile& link) {
  if (n <= 1) return 0;
  return 2.0 * double(n - 1) / double(n) * bytes / link.bandwidth +
         2.0 * double(n - 1) * link.latency;
}
double ring_gather_or_scatter(double bytes, int64_t n, const LinkProfile& link) {
  return n <= 1 ? 0 : ring_all_reduce(bytes, n, link) / 2;
}

// The link a group of `span` consecutive ranks uses (stride x size ranks apart at most).
const LinkProfile& link_for(const DeviceProfile& p, int64_t span) {
  return span <= p.devices_per_node ? p.intra_node : p.inter_node;
}

ChunkTime chunk_time(const TrainConfig& cfg, const StageSpec& spec, const DeviceProfile& p) {
  const GPTConfig& m = cfg.model;
  const RankGrid grid = cfg.rank_grid();
  const LayerDims sd = stage_dims(m, cfg.micro_batch_size, spec);
  const DType dt = spec.dtype;
  const double act = double(dtype_size(dt)), bw = p.memory_bandwidth * p.elementwise_efficiency;
  const int64_t begin = spec.shard.layer_begin,
                end = spec.shard.layer_end < 0 ? m.num_layers : spec.shard.layer_end;
  const int64_t layers = end - begin;
  int64_t recomputed = 0;
  if (spec.recompute_method == "uniform") recomputed = layers;
  if (spec.recompute_method == "block") recomputed = std::min(layers, spec.recompute_num_layers);
  ChunkTime t;
  const LinkProfile& tp_link = link_for(p, grid.tp);
  const LinkProfile& cp_link = link_for(p, int64_t(grid.tp) * grid.cp);
  const LinkProfile& ep_link = link_for(p, int64_t(grid.tp) * grid.cp * grid.dp);
  for (int64_t l = begin; l < end; ++l) {
    const LayerDims d = layer_dims(m, sd, l);
    const int64_t N = d.rows(), H = d.H;
    // GEMMs: QKV and the output projection, then the dense MLP or the experts.
    double gemm =
        p.gemm_seconds(N, d.qkv_local(), H, dt) + p.gemm_seconds(N, H, d.attn_local(), dt);
    double ep_bytes = 0;
    if (d.spec.is_moe()) {
      // Balanced routing: the EP group's N x topk routed rows spread over its E experts, so
      // each of this rank's E / EP experts sees N x topk x EP / E of them.
      const int64_t E = d.num_experts(), topk = d.spec.moe.router.topk;
      const int64_t rows = std::max<int64_t>(1, N * topk * d.ep / E), local = E / d.ep;
      gemm += p.gemm_seconds(N, E, H, DType::F32);  // the router
      gemm += double(local) * (p.gemm_seconds(rows, d.expert_fc1_local(), H, dt) +
                               p.gemm_seconds(rows, H, d.expert_F_local(), dt));
      if (d.ep > 1) ep_bytes = 2.0 * double(N * topk * H) * act * double(d.ep - 1) / double(d.ep);
    }
    if (d.spec.has_dense_mlp())  // the dense MLP, or a MoE layer's shared experts
      gemm += p.gemm_seconds(N, d.fc1_local(), H, dt) + p.gemm_seconds(N, H, d.F_local(), dt);
    // The attention core: queries of this rank's S x B rows against the whole sequence's keys
    // (under CP, S is the local length of the CP share).
    const double S_keys = double(d.S) * double(spec.cp_size);
    const double attn_flops = 4.0 * double(d.B) * double(d.S) * S_keys * double(d.NH_local()) *
                              double(d.HD()) * p.attention_fraction(int64_t(S_keys));
    const double hd = double(d.HD());
    const double attention =
        attn_flops / (p.peak(p.attention_fp32 ? DType::F32 : dt) * p.attention_efficiency * hd /
                      (hd + p.attention_half_dim));
    // Attention dropout: its mask drawn over the computed scores forward and again backward.
    const double dropout =
        m.attention_dropout > 0.f ? attn_flops / (4.0 * hd) * p.attention_dropout_seconds : 0.0;
    // Elementwise passes over the rows: norms, residual adds, bias/activation, RoPE, dropout
    // (f32 residual stream, the GEMM inputs in the model dtype).
    // (the residual-stream ones on this rank's rows: a TP share under SP).
    const double elementwise =
        (double(d.local_rows()) * 40.0 * double(H) +
         double(N) * act * (3.0 * double(d.fc1_local()) + 2.0 * double(d.qkv_local()))) /
        bw;
    // TP: 2 all-reduces (or all-gather + reduce-scatter under SP) forward, 2 backward; under SP
    // backward also gathers the 2 saved norm outputs again (their rows alone are kept).
    const double tp = 2.0 * ring_all_reduce(double(N * H) * act, grid.tp, tp_link);
    const double tp_bwd =
        tp + (sd.sp ? 2.0 * ring_gather_or_scatter(double(N * H) * act, grid.tp, tp_link) : 0.0);
    // CP (p2p ring): K and V of each other rank's share pass by once forward, twice backward.
    const double cp =
        spec.cp_size > 1
            ? double(spec.cp_size - 1) *
                  (2.0 * double(d.B * d.S * d.NG_local() * d.HD()) * act / cp_link.bandwidth +
                   cp_link.latency)
            : 0;
    const double ep = d.ep > 1 ? ep_bytes / ep_link.bandwidth + 2.0 * ep_link.latency : 0;
    const double x = p.exposed_comm_fraction;
    const double compute = gemm + attention + elementwise;
    const double fwd = compute + dropout + x * (tp + cp + ep);
    // Backward: twice the forward's GEMM and attention work (input and weight gradients), the
    // same collectives again (CP: twice), and the recomputed forward when full recompute is on.
    const bool again = l - begin < recomputed;
    const double bwd = 2.0 * compute + dropout + x * (tp_bwd + 2.0 * cp + ep) + (again ? fwd : 0.0);
    t.forward += fwd;
    t.backward += bwd;
    const double k = again ? 4.0 : 3.0;
    t.parts.gemm += k * gemm;
    t.parts.attention += k * attention + (k - 1.0) * dropout;
    t.parts.elementwise += k * elementwise;
    t.parts.tp_comm += x * ((again ? 2.0 : 1.0) * tp + tp_bwd);
    t.parts.cp_comm += (again ? 4.0 : 3.0) * x * cp;
    t.parts.ep_comm += (again ? 3.0 : 2.0) * x * ep;
  }
  const int64_t N = sd.rows(), H = sd.H;
  if (spec.shard.first_stage) {  // the embedding lookup and its gradient
    const double e = 3.0 * double(N * H) * 4.0 / bw;
    t.forward += e;
    t.backward += e;
    t.parts.elementwise += 2 * e;
  }
  if (spec.shard.last_stage) {  // final norm, the output layer's GEMM, vocab-parallel loss
    const int64_t V = m.padded_vocab_size() / grid.tp;
    const double gemm = p.gemm_seconds(N, V, H, dt);
    const double loss = double(N) * (8.0 * double(H) + 12.0 * double(V)) / bw;
    const double tp = 2.0 * ring_all_reduce(double(N) * 8.0, grid.tp, tp_link) +
                      (sd.sp ? ring_gather_or_scatter(double(N * H) * act, grid.tp, tp_link) : 0);
    t.forward += gemm + loss + tp;
    t.backward += 2 * gemm + loss + tp;
    t.parts.gemm += 3 * gemm;
    t.parts.elementwise += 2 * loss;
    t.parts.tp_comm += 2 * tp;
  }
  return t;
}

}  // namespace

std::vector<std::pair<std::string, double>> StepParts::named() const {
  return {{"GEMMs", gemm},         {"attention", attention},    {"elementwise", elementwise},
          {"TP/SP comm", tp_comm}, {"CP comm", cp_comm},        {"EP comm", ep_comm},
          {"PP p2p", pp_p2p},      {"pipeline bubble", bubble}, {"DP grad reduce", dp_comm},
          {"optimizer", optimizer}};
}

void StepParts::add_compute(const StepParts& o, double scale) {
  gemm += scale * o.gemm;
  attention += scale * o.attention;
  elementwise += scale * o.elementwise;
  tp_comm += scale * o.tp_comm;
  cp_comm += scale * o.cp_comm;
  ep_comm += scale * o.ep_comm;
}

PipelineRun simulate_pipeline(const ScheduleShape& shape,
                              const std::vector<std::vector<std::pair<double, double>>>& times,
                              double p2p) {
  const int P = shape.pp_size, v = shape.virtual_stages;
  const int64_t M = shape.microbatches, stages = int64_t(P) * v;
  std::vector<ScheduleTable> tables;
  for (int r = 0; r < P; ++r) tables.push_back(schedule_table(shape, r));
  // Finish time of (virtual stage, micro-batch) forward and backward; < 0: not yet run.
  std::vector<double> fwd_done(size_t(stages * M), -1), bwd_done(size_t(stages * M), -1);
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> clock(size_t(P), 0);
  PipelineRun run;
  run.busy.assign(size_t(P), 0);
  size_t remaining = 0;
  for (const ScheduleTable& t : tables) remaining += t.steps.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      const std::vector<ScheduleStep>& steps = tables[size_t(r)].steps;
      while (next[size_t(r)] < steps.size()) {
        const ScheduleStep& s = steps[next[size_t(r)]];
        const int64_t vs = int64_t(s.chunk) * P + r, i = vs * M + s.microbatch;
        double ready = 0;
        if (s.forward && vs > 0) {
          const double dep = fwd_done[size_t(i - M)];
          if (dep < 0) break;
          ready = dep + p2p;
        } else if (!s.forward) {
          const double own = fwd_done[size_t(i)];
          const double dep = vs + 1 < stages ? bwd_done[size_t(i + M)] : own;
          if (own < 0 || dep < 0) break;
          ready = vs + 1 < stages ? dep + p2p : own;
        }
        const auto [tf, tb] = times[size_t(r)][size_t(s.chunk)];
        // The rank sends its output to the next (previous) virtual stage and waits for the
        // transfer (the p2p exchange is paired, as Megatron's batched isend/irecv).
        const bool sends = s.forward ? vs + 1 < stages : vs > 0;
        const double d = (s.forward ? tf : tb) + (sends ? p2p : 0.0);
        const double start = std::max(clock[size_t(r)], ready);
        (s.forward ? fwd_done : bwd_done)[size_t(i)] = start + (s.forward ? tf : tb);
        clock[size_t(r)] = start + d;
        run.busy[size_t(r)] += d;
        ++next[size_t(r)];
        --remaining;
        progressed = true;
      }
    }
    MG_CHECK(progressed, "the pipeline schedule deadlocked in the planner's simulation");
  }
  run.seconds = *std::max_element(clock.begin(), clock.end());
  return run;
}

namespace {
// simulate_pipeline for any M in bounded time: beyond capped_microbatches the steady state
// repeats per group of micro-batches, so two capped runs extrapolate exactly.
PipelineRun simulate_capped(const ScheduleShape& shape,
                            const std::vector<std::vector<std::pair<double, double>>>& times,
                            double p2p) {
  const int64_t cap = capped_microbatches(shape);
  if (shape.microbatches <= cap) return simulate_pipeline(shape, times, p2p);
  ScheduleShape a = shape, b = shape;
  a.microbatches = cap;
  b.microbatches = cap + shape.group();
  const PipelineRun ra = simulate_pipeline(a, times, p2p), rb = simulate_pipeline(b, times, p2p);
  const double groups = double(shape.microbatches - cap) / double(shape.group());
  PipelineRun r = ra;
  r.seconds += groups * (rb.seconds - ra.seconds);
  for (size_t i = 0; i < r.busy.size(); ++i) r.busy[i] += groups * (rb.busy[i] - ra.busy[i]);
  return r;
}
}  // namespace

StepEstimate estimate_step(const TrainConfig& cfg, const DeviceProfile& p) {
  const RankGrid grid = cfg.rank_grid();
  const int64_t M = cfg.num_micro_batches();
  const ScheduleShape shape = cfg.schedule_shape(M);
  const DType dt = cfg.model_dtype();
  std::vector<std::vector<std::pair<double, double>>> times(size_t(grid.pp));
  std::vector<StepParts> per_rank(size_t(grid.pp));
  std::vector<double> last_backward(size_t(grid.pp), 0), first_forward(size_t(grid.pp), 0);
  for (int r = 0; r < grid.pp; ++r) {
    RankGrid::Coord c{};
    c.pp = r;
    for (const StageSpec& spec : train_chunk_specs(cfg, grid.rank_of(c))) {
      const ChunkTime t = chunk_time(cfg, spec, p);
      times[size_t(r)].push_back({t.forward, t.backward});
      per_rank[size_t(r)].add_compute(t.parts, double(M));
      last_backward[size_t(r)] += t.backward;
      first_forward[size_t(r)] += t.forward;
    }
  }
  // Stages pass the f32 residual rows of a micro-batch (a TP rank's share under SP).
  const LayerDims sd = stage_dims(cfg.model, cfg.micro_batch_size, train_chunk_specs(cfg, 0)[0]);
  const LinkProfile& pp_link = grid.world() <= p.devices_per_node ? p.intra_node : p.inter_node;
  const double p2p =
      grid.pp > 1 ? double(sd.local_rows() * sd.H) * 4.0 / pp_link.bandwidth + pp_link.latency : 0;
  const PipelineRun run = simulate_capped(shape, times, p2p);
  // The critical rank: the busiest.
  const size_t crit = size_t(std::max_element(run.busy.begin(), run.busy.end()) - run.busy.begin());
  StepEstimate e;
  e.parts = per_rank[crit];
  // Its sends: one per forward and backward step but the model's two ends.
  const double transfers = p2p * double(2 * M * cfg.parallel.virtual_stages - (crit == 0 ? M : 0) -
                                        (crit + 1 == size_t(grid.pp) ? M : 0));
  e.parts.pp_p2p = transfers;
  e.parts.bubble = run.seconds - run.busy[crit];
  e.bubble_fraction = e.parts.bubble / run.seconds;
  // Data parallelism: the gradients reduced over DP x CP (reduce-scatter + all-gather of the
  // params under the distributed optimizer), exposed past the last micro-batch's backward when
  // overlapped; then the optimizer streams its state once.
  RankGrid::Coord c0{};
  c0.pp = int(crit);
  const StoreSpec store = train_store_spec(cfg, grid.rank_of(c0));
  const ParamLayout layout = store_layout(cfg.model, store);
  const double n_params = double(layout.total_numel());
  const int64_t dp = int64_t(grid.dp) * grid.cp;
  const LinkProfile& dp_link = link_for(p, int64_t(grid.tp) * grid.cp * grid.dp);
  const double grad_bytes = n_params * (cfg.parallel.grad_reduce_in_bf16 ? 2.0 : 4.0);
  const double buckets = std::max<double>(1, double(layout.buckets().size()));
  double dp_time = 0;
  if (cfg.use_distributed_optimizer) {
    const double rs = ring_gather_or_scatter(grad_bytes, dp, dp_link);
    const double ag = ring_gather_or_scatter(n_params * double(dtype_size(dt)), dp, dp_link);
    dp_time +=
        cfg.parallel.overlap_grad_reduce ? std::max(rs / buckets, rs - last_backward[crit]) : rs;
    dp_time +=
        cfg.parallel.overlap_param_gather ? std::max(ag / buckets, ag - first_forward[crit]) : ag;
  } else {
    const double ar = ring_all_reduce(grad_bytes, dp, dp_link);
    dp_time =
        cfg.parallel.overlap_grad_reduce ? std::max(ar / buckets, ar - last_backward[crit]) : ar;
  }
  e.parts.dp_comm = dp_time * p.dp_exposed_fraction;
  const double stepped = cfg.use_distributed_optimizer ? n_params / double(dp) : n_params;
  // Per stepped element: its fp32 grad read, the param read and written, each fp32 state slot
  // (optimizer_kinds()) read and written, and a 16-bit model's fp32 main param too.
  const double slots = double(optimizer_kind(cfg.optimizer).state_slots.size());
  const double state_bytes =
      4.0 + 2.0 * double(dtype_size(dt)) + 8.0 * slots + (dt == DType::F32 ? 0 : 8);
  e.parts.optimizer = stepped * state_bytes / p.memory_bandwidth;
  e.iteration_seconds = run.seconds + e.parts.dp_comm + e.parts.optimizer;
  const double tokens = double(cfg.global_batch_size) * double(cfg.model.seq_length);
  e.tokens_per_second = tokens / e.iteration_seconds;
  const double flops = cfg.model.train_flops_per_token() * tokens;
  e.model_tflops_per_gpu = flops / e.iteration_seconds / double(grid.world()) / 1e12;
  e.mfu = e.model_tflops_per_gpu * 1e12 / p.peak(dt);
  return e;
}

}  // namespace mg
