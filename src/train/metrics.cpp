#include "train/metrics.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "backend/dispatch.h"
#include "core/log.h"
#include "core/timers.h"
#include "train/log_format.h"
#include "train/pipeline_bubble.h"
#include "train/tensorboard_log.h"

namespace mg {

namespace {

// Megatron's timer printout: each enabled phase as (min, max) over ranks of its ms per
// iteration in this log interval. Returns each printed phase's max (for TensorBoard).
std::vector<std::pair<std::string, double>> log_timers(const ProcessGroups& g,
                                                       const std::vector<double>& t,
                                                       int64_t iters) {
  std::vector<float> mx(t.size()), neg_mn(t.size());
  for (size_t i = 0; i < t.size(); ++i) mx[i] = neg_mn[i] = float(1e3 * t[i] / double(iters));
  for (float& v : neg_mn) v = -v;
  g.world->all_reduce(mx.data(), int64_t(mx.size()), ReduceOp::Max);
  g.world->all_reduce(neg_mn.data(), int64_t(neg_mn.size()), ReduceOp::Max);
  std::string out = "(min, max) time across ranks (ms):";
  std::vector<std::pair<std::string, double>> max_ms;
  for (int p = 0; p < timers::kNumPhases; ++p) {
    const auto phase = timers::Phase(p);
    if (timers::level(phase) > timers::enabled_level() || mx[size_t(p)] <= 0.f) continue;
    max_ms.emplace_back(timers::name(phase), double(mx[size_t(p)]));
    std::string name = timers::name(phase);
    name += ' ';
    name.resize(48, '.');
    char buf[96];
    std::snprintf(buf, sizeof(buf), ": (%.2f, %.2f)", -neg_mn[size_t(p)], mx[size_t(p)]);
    out += "\n    " + name + buf;
  }
  log_line(out);
  return max_ms;
}

// --timing-log-level 2 under PP: each stage's measured idle fraction (the mean over its ranks)
// beside the analytic bubble. t: this rank's timer totals of the interval.
void log_pipeline_bubble(const ProcessGroups& g, const std::vector<double>& t, int64_t v,
                         int64_t m) {
  std::vector<float> sums(size_t(g.grid.pp), 0.f);  // each rank adds into its stage's slot
  sums[size_t(g.coord.pp)] = float(idle_fraction(t));
  g.world->all_reduce(sums.data(), int64_t(sums.size()), ReduceOp::Sum);
  log_line(bubble_line(std::vector<double>(sums.begin(), sums.end()), g.grid.world() / g.grid.pp,
                       g.grid.pp, v, m));
}

// Megatron's name of the load-balancing loss in the log and TensorBoard.
const char* load_balancing_name(const GPTConfig& m) {
  return m.moe_router_load_balancing_type == "seq_aux_loss" ? "seq_load_balancing_loss"
                                                            : "load_balancing_loss";
}

}  // namespace

void TrainMetrics::open_tensorboard() {
  tb_ = mg::open_tensorboard(cfg_.tensorboard, g_.world_rank, g_.grid.world());
  if (tb_)
    log_line(str_cat(" > tensorboard: rank ", g_.world_rank, " writes ", tb_->path()),
             /*all_ranks=*/true);
}

void TrainMetrics::begin_step() {
  for (const ProcessGroups::Named& n : g_.named()) n.comm->reset_stats();
}

void TrainMetrics::record(int64_t iter, const StepResult& step, int64_t consumed, double loss_scale,
                          TrainResult& result) {
  for (const ProcessGroups::Named& n : g_.named())
    interval_bytes_[std::string(n.name)] += n.comm->stats().total();
  if (!std::isfinite(step.loss) || !std::isfinite(step.grad_norm)) ++interval_nan_;
  if (step.skipped) ++interval_skipped_;
  result.losses.push_back(step.loss);
  result.grad_norms.push_back(step.grad_norm);
  result.loss_scales.push_back(step.loss_scale);
  result.skipped.push_back(step.skipped);
  if (iter > 1) total_seconds_ += step.seconds;
  interval_loss_ += step.loss;
  interval_seconds_ += step.seconds;
  ++interval_iters_;
  if (tb_ && iter % cfg_.tensorboard.log_interval == 0)
    write_step_scalars(iter, step, consumed, loss_scale);
}

int64_t TrainMetrics::bytes_per_iter(std::initializer_list<std::string_view> groups) const {
  int64_t sum = 0;
  for (std::string_view name : groups)
    if (const auto it = interval_bytes_.find(name); it != interval_bytes_.end()) sum += it->second;
  return sum / interval_iters_;
}

void TrainMetrics::log_interval(int64_t iter, const StepResult& step, int64_t consumed,
                                double loss_scale) {
  const double flops_per_iter =
      cfg_.model.train_flops_per_token() * double(step.global_batch_size * cfg_.model.seq_length);
  IterationLog l;
  l.iteration = iter;
  l.train_iters = cfg_.train_iters;
  l.consumed_samples = consumed;
  l.ms_per_iter = 1e3 * interval_seconds_ / double(interval_iters_);
  l.tflops = flops_per_iter / (interval_seconds_ / double(interval_iters_)) / 1e12 /
             double(g_.grid.world());
  l.show_throughput = cfg_.log_throughput;
  l.lr = step.lr;
  l.global_batch_size = step.global_batch_size;
  l.lm_loss = interval_loss_ / double(interval_iters_);
  l.grad_norm = step.grad_norm;
  l.nan_iterations = interval_nan_;  // per log interval, as Megatron
  l.skipped_iterations = interval_skipped_;
  l.loss_scale = loss_scale;
  l.num_zeros = step.num_zeros;
  l.params_norm = step.params_norm;
  l.load_balancing_loss = step.load_balancing_loss;
  l.load_balancing_name = load_balancing_name(cfg_.model);
  l.z_loss = step.z_loss;
  l.dropped_tokens = step.dropped_tokens;
  l.tp_bytes = bytes_per_iter({"tp"});
  l.pp_bytes = bytes_per_iter({"pp"});
  // Expert gradients are data-parallel traffic too (over the expert-DP group).
  l.dp_bytes = bytes_per_iter({"dp_cp", "edp"});
  l.embedding_bytes = bytes_per_iter({"embedding"});
  l.cp_bytes = bytes_per_iter({"cp"});
  if (g_.grid.ep > 1 || g_.grid.folded())  // the experts' token exchange (and their norms' sums)
    l.ep_bytes = bytes_per_iter({"ep", "etp_ep", "expert_mp"});
  log_line(format_iteration(l));
  std::vector<std::pair<std::string, double>> timer_max_ms;
  if (timers::enabled_level() > 0) {
    const std::vector<double> t = timers::totals();
    timers::reset();
    timer_max_ms = log_timers(g_, t, interval_iters_);
    if (timers::enabled_level() >= 2 && g_.grid.pp > 1)
      log_pipeline_bubble(g_, t, cfg_.parallel.virtual_stages,
                          step.global_batch_size / (cfg_.micro_batch_size * g_.grid.dp));
  }
  if (tb_) {
    if (cfg_.tensorboard.log_timers)
      write_interval_scalars(*tb_, iter, l.ms_per_iter / 1e3,
                             cfg_.log_throughput ? std::optional(l.tflops) : std::nullopt,
                             timer_max_ms);
    tb_->flush();  // a killed run loses at most this interval
  }
  interval_loss_ = interval_seconds_ = 0;
  interval_iters_ = interval_skipped_ = interval_nan_ = 0;
  interval_bytes_.clear();
}

void TrainMetrics::write_step_scalars(int64_t iter, const StepResult& step, int64_t consumed,
                                      double loss_scale) {
  TrainingScalars s;
  s.iteration = iter;
  s.consumed_samples = consumed;
  s.batch_size = step.global_batch_size;
  s.world_size = g_.grid.world();
  s.lr = step.lr;
  s.lm_loss = step.loss;
  s.loss_scale = loss_scale;
  s.grad_norm = step.grad_norm;
  s.skipped = step.skipped;
  s.num_zeros = step.num_zeros;
  s.params_norm = step.params_norm;
  s.load_balancing_loss = step.load_balancing_loss;
  s.load_balancing_name = load_balancing_name(cfg_.model);
  s.z_loss = step.z_loss;
  write_training_scalars(*tb_, cfg_.tensorboard, s);
}

void TrainMetrics::log_validation(int64_t iter, double loss, const char* set, int64_t consumed) {
  log_line(format_validation(iter, loss, set));
  if (tb_) {  // after training too, under the same tags, as Megatron writes them
    write_validation_scalars(*tb_, cfg_.tensorboard, iter, consumed, loss);
    tb_->flush();
  }
}

}  // namespace mg
