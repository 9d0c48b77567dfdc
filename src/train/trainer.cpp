// The training loop of train/trainer.h in named phases. Trainer's constructor selects the
// device, loads the data, builds the model and optimizer and resumes from --load; run() then
// repeats the step (forward-backward, grad reductions, optimizer), its bookkeeping and log
// line, evaluation, checkpointing and the exit decision, and finish() closes the run.
#include "train/trainer.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "backend/dispatch.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/params_file.h"
#include "comm/mpi_communicator.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/timers.h"
#include "core/timer.h"
#include "distributed/distributed_optimizer.h"
#include "distributed/finalize_grads.h"
#include "distributed/grad_reducer.h"
#include "model/gpt.h"
#include "pipeline/schedule.h"
#include "train/batch_source.h"
#include "train/log_format.h"
#include "train/rank_memory.h"

namespace mg {

namespace {

volatile sig_atomic_t g_sigterm = 0;
void on_sigterm(int) { g_sigterm = 1; }
void install_sigterm_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}
bool sigterm_received() { return g_sigterm != 0; }

// Megatron's timer printout: each enabled phase as (min, max) over ranks of its ms per
// iteration in this log interval.
void log_timers(const ProcessGroups& g, int64_t iters) {
  std::vector<double> t = timers::totals();
  timers::reset();
  std::vector<float> mx(t.size()), neg_mn(t.size());
  for (size_t i = 0; i < t.size(); ++i) mx[i] = neg_mn[i] = float(1e3 * t[i] / double(iters));
  for (float& v : neg_mn) v = -v;
  g.world->all_reduce(mx.data(), int64_t(mx.size()), ReduceOp::Max);
  g.world->all_reduce(neg_mn.data(), int64_t(neg_mn.size()), ReduceOp::Max);
  std::string out = "(min, max) time across ranks (ms):";
  for (int p = 0; p < timers::kNumPhases; ++p) {
    const auto phase = timers::Phase(p);
    if (timers::level(phase) > timers::enabled_level() || mx[size_t(p)] <= 0.f) continue;
    std::string name = timers::name(phase);
    name += ' ';
    name.resize(48, '.');
    char buf[96];
    std::snprintf(buf, sizeof(buf), ": (%.2f, %.2f)", -neg_mn[size_t(p)], mx[size_t(p)]);
    out += "\n    " + name + buf;
  }
  log_line(out);
}

// The last stage's mean loss, averaged over DP, delivered to every rank (a world reduction
// that is not part of the reported TP/PP/DP volumes).
double report_loss(double local_mean, const ProcessGroups& g) {
  const bool reporter = g.last_stage() && g.coord.tp == 0;
  return all_reduce_sum(*g.world, reporter ? local_mean : 0.0) / double(g.grid.dp);
}

// What one iteration's step produced.
struct StepResult {
  double lr = 0;          // the scheduled learning rate it used
  double loss_scale = 1;  // fp16: the loss scale it used
  double loss = 0;        // lm loss, averaged over DP
  double grad_norm = 0;   // before clipping (0 when skipped)
  bool skipped = false;   // an fp16 overflow skipped the update
  double seconds = 0;     // wall time, the step's GPU work included
};

// One rank's training run: its pipeline stage of the model, the optimizer (plain, or
// distributed over DP), the fp16 loss scaler, the DP grad reducer, the data, and the counters
// that checkpoints save and log lines report. Members are declared (so destroyed, in reverse)
// in dependency order: the loaders read the data, the optimizer and reducer hold the model.
class Trainer {
 public:
  // Selects the device, loads the data, builds the model and optimizer, resumes from --load
  // and logs the set-up.
  Trainer(const TrainConfig& cfg, ProcessGroups& g);
  // Trains up to --train-iters (or an early exit), then closes the run.
  TrainResult run();

 private:
  // The model, initialized from --seed, and what updates it: optimizer, scaler, grad reducer.
  void build_model_and_optimizer();
  // --load's checkpoint into model, optimizer and counters (if any); the train loader starts
  // after the samples it consumed.
  void load_or_init();
  // The start-up lines: device, layout, parameter counts, precision, memory estimate.
  void log_setup() const;

  // One iteration: forward-backward over M micro-batches, grad reductions, optimizer.
  StepResult train_step(int64_t iter);
  // --inject-grad-overflow: the last rank's first grad becomes inf once its grads are final.
  void inject_grad_overflow(int64_t iter);
  // fp16 unscale and overflow check, grad norm, NaN guard, then the update (or a skip).
  void optimizer_phase(int64_t iter, double wd, StepResult& step);
  // Adds the step to the result and to this log interval's sums.
  void record(int64_t iter, const StepResult& step);
  // Megatron's iteration line (and --timing-log-level's timers) for the interval ending at iter.
  void log_interval(int64_t iter, const StepResult& step);
  // --eval-iters validation batches, reported as Megatron's validation line.
  void evaluate(int64_t iter);
  // A checkpoint of the state after iteration iter, under --save.
  void save(int64_t iter);
  // Whether to stop after iter: --exit-interval, SIGTERM (--exit-signal-handler) or
  // --exit-duration-in-mins, decided alike on every rank; saves first if --save is set.
  bool exit_early(int64_t iter);
  // The last checkpoint, the closing reports and --dump-final-params.
  void finish();

  CheckpointIO checkpoint_io() {
    return {*model_, optim_ ? *optim_ : dist_optim_->shard_optimizer(), g_, ckpt_cfg_,
            cfg_.use_distributed_optimizer};
  }

  const TrainConfig& cfg_;
  ProcessGroups& g_;
  const int64_t M_;  // micro-batches per iteration on this DP rank
  const CheckpointConfig ckpt_cfg_;
  const LRSchedule sched_;
  BuiltData data_;
  BatchOptions batch_options_;
  std::unique_ptr<GPTModel> model_;
  std::unique_ptr<Optimizer> optim_;
  std::unique_ptr<DistributedOptimizer> dist_optim_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<GradReducer> reducer_;
  size_t state_bytes_ = 0;  // the optimizer's state on this rank
  TrainProgress progress_;  // as loaded, then as last saved
  std::unique_ptr<BatchSource> train_batches_, valid_batches_;
  // The TP, PP, DP and embedding groups, whose bytes each log line reports.
  Communicator* comm_groups_[4] = {};

  // Counters of the run.
  TrainResult result_;
  int64_t consumed_ = 0, valid_consumed_ = 0;  // samples
  int64_t scheduler_samples_ = 0;  // samples of successful steps: the LR schedule's clock
  int64_t nan_iters_ = 0, skipped_iters_ = 0;
  int64_t last_saved_ = 0;
  double total_seconds_ = 0;  // of every iteration but the first
  Timer run_timer_;           // from the first iteration (--exit-duration-in-mins)
  // This log interval's sums.
  double interval_loss_ = 0, interval_seconds_ = 0;
  int64_t interval_iters_ = 0;
  CommStats interval_comm_[4] = {};
};

Trainer::Trainer(const TrainConfig& cfg, ProcessGroups& g)
    : cfg_(cfg),
      g_(g),
      M_(cfg.num_micro_batches()),
      ckpt_cfg_(cfg.checkpoint_config()),
      sched_(cfg.lr_schedule()),
      comm_groups_{g.tp.get(), g.pp.get(), g.dp.get(), g.embedding.get()} {
  const bool cuda = cfg.device == "cuda";
  ops::set_device(cuda ? Device::CUDA : Device::CPU, cuda ? local_rank() : 0);
  int32_t eod = 0;
  data_ = load_data(cfg, g, eod);
  batch_options_ = {eod, cfg.eod_mask_loss, cfg.reset_position_ids, cfg.reset_attention_mask};
  build_model_and_optimizer();
  load_or_init();
  if (cfg.exit_signal_handler) install_sigterm_handler();
  fault::arm(g.world_rank);
  timers::set_level(int(cfg.timing_log_level));
  timers::set_sync(ops::on_cuda() ? &ops::synchronize : nullptr);
  timers::reset();
  log_setup();
}

void Trainer::build_model_and_optimizer() {
  const TrainConfig& cfg = cfg_;
  const StageSpec spec = train_stage_spec(cfg, g_.world_rank);
  model_ = std::make_unique<GPTModel>(cfg.model, cfg.micro_batch_size, spec, g_.tp.get());
  model_->init(cfg.seed);
  sync_tied_embedding_params(*model_, g_);
  if (cfg.use_distributed_optimizer)
    dist_optim_ = std::make_unique<DistributedOptimizer>(*model_, g_, cfg.adam,
                                                         cfg.parallel.overlap_grad_reduce,
                                                         cfg.parallel.overlap_param_gather);
  else
    optim_ = std::make_unique<Optimizer>(model_->layout(), cfg.adam, model_->dtype(),
                                         model_->param_data());
  if (cfg.fp16) scaler_ = std::make_unique<LossScaler>(cfg.loss_scaler);
  state_bytes_ = optim_ ? optim_->state_bytes() : dist_optim_->state_bytes();
  if (g_.grid.dp > 1 && !cfg.use_distributed_optimizer)
    reducer_ = std::make_unique<GradReducer>(*model_, g_, cfg.parallel.overlap_grad_reduce);
}

void Trainer::load_or_init() {
  if (!cfg_.load.empty() && load_checkpoint(checkpoint_io(), progress_) && scaler_ &&
      progress_.has_scaler)
    scaler_->set_state(progress_.scaler);
  train_batches_ = std::make_unique<BatchSource>(data_.split[0], cfg_, g_, batch_options_,
                                                 /*prefetch=*/true,
                                                 progress_.consumed_train_samples);
  valid_batches_ = std::make_unique<BatchSource>(data_.split[1], cfg_, g_, batch_options_,
                                                 /*prefetch=*/false);
  consumed_ = progress_.consumed_train_samples;
  valid_consumed_ = progress_.consumed_valid_samples;
  skipped_iters_ = progress_.skipped_iterations;
  scheduler_samples_ = progress_.scheduler_samples;
  last_saved_ = progress_.iteration;
}

void Trainer::log_setup() const {
  const GPTModel& model = *model_;
  if (ops::on_cuda()) log_line(str_cat(" > device: ", ops::device_description()));
  log_line(str_cat(" > layout: world ", g_.grid.world(), " = TP ", g_.grid.tp, " x PP ",
                   g_.grid.pp, " x DP ", g_.grid.dp,
                   cfg_.parallel.sequence_parallel ? " (sequence parallel)" : "",
                   "; micro-batches per iteration per DP rank: ", M_));
  log_line(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (",
                   g_.coord.tp, ", ", g_.coord.pp, "): ", model.num_params(),
                   " (whole model: ", cfg_.model.num_parameters(), ")"));
  log_line(str_cat(" > model FLOPs per token: ", int64_t(cfg_.model.train_flops_per_token()),
                   " (6 x parameters, an untied model's input embedding lookup excluded, + 12 x "
                   "layers x heads x head dim x seq length; the throughput field's numerator)"));
  log_line(str_cat(" > precision: params and activations ", dtype_name(model.dtype()),
                   model.dtype() == DType::F32 ? ""
                   : ops::on_cuda() ? " (GEMMs: cuBLASLt, fp32 accumulation)"
                   : cpu::native_lowp_gemm(model.dtype())
                       ? " (GEMMs: native 16-bit kernels, fp32 accumulation)"
                       : " (GEMMs: no native 16-bit kernel on this CPU, operands widened to fp32)",
                   "; main grads fp32", scaler_ ? "; dynamic loss scaling" : ""));
  // The estimate the start-up check made (train/rank_memory.h) beside what was allocated.
  const RankMemory estimate = rank_memory(cfg_, g_.world_rank);
  log_line(memory_report(model.num_params() * int64_t(dtype_size(model.dtype())),
                         model.num_params() * 4, state_bytes_, size_t(estimate.activations),
                         double(estimate.optimizer)));
}

TrainResult Trainer::run() {
  run_timer_.reset();
  const bool do_valid = cfg_.eval_interval > 0 && cfg_.eval_iters > 0;
  for (int64_t iter = progress_.iteration + 1; iter <= cfg_.train_iters; ++iter) {
    const StepResult step = train_step(iter);
    record(iter, step);
    if (iter % cfg_.log_interval == 0 || iter == cfg_.train_iters) log_interval(iter, step);
    if (do_valid && (iter % cfg_.eval_interval == 0 || iter == cfg_.train_iters)) evaluate(iter);
    if (!cfg_.save.empty() && cfg_.save_interval > 0 && iter % cfg_.save_interval == 0)
      save(iter);
    if (exit_early(iter)) break;
  }
  finish();
  return std::move(result_);
}

StepResult Trainer::train_step(int64_t iter) {
  Timer timer;
  fault::set_iteration(iter);
  for (Communicator* c : comm_groups_)
    if (c) c->reset_stats();
  StepResult step;
  step.lr = sched_.at(scheduler_samples_);
  model_->zero_grads();
  const double wd = sched_.weight_decay_at(scheduler_samples_);
  step.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  double local_loss = 0;
  model_->dropout_on(cfg_.seed, iter);  // [d25-dropout] training micro-batches only
  {
    timers::Scope timer(timers::kForwardBackward);
    local_loss = forward_backward(
        *model_, *g_.pp, M_, train_batches_->at(consumed_),
        [&] {
          if (reducer_) reducer_->arm();
          if (dist_optim_) dist_optim_->arm();
        },
        step.loss_scale);
  }
  model_->dropout_off();
  // Megatron's order: the DP reduction first, then the TP (SP) and tied-embedding sums.
  {
    timers::Scope timer(timers::kAllGradsSync);
    if (dist_optim_) dist_optim_->reduce_scatter_grads();
    if (reducer_) reducer_->finish();
    finalize_grads(*model_, g_);
  }
  inject_grad_overflow(iter);
  step.loss = report_loss(local_loss / double(M_), g_);
  optimizer_phase(iter, wd, step);
  consumed_ += cfg_.global_batch_size;
  ops::synchronize();  // the step's GPU work belongs to its time
  step.seconds = timer.seconds();
  return step;
}

void Trainer::inject_grad_overflow(int64_t iter) {
  // After the reductions, so no bucket still in flight can overwrite it.
  const bool inject = g_.world_rank == g_.grid.world() - 1 &&
                      std::find(cfg_.overflow_iters.begin(), cfg_.overflow_iters.end(), iter) !=
                          cfg_.overflow_iters.end();
  if (inject) {
    const float inf = INFINITY;
    ops::copy(model_->grads(), ops::device(), &inf, Device::CPU, sizeof(float));
  }
}

void Trainer::optimizer_phase(int64_t iter, double wd, StepResult& step) {
  // Megatron's "optimizer" timer covers all of it.
  timers::Scope optimizer_timer(timers::kOptimizer);
  fault::point(fault::Site::Optimizer);
  // fp16: unscale the main grads and look for inf/NaN; an overflow on any rank skips the
  // step on every rank (and the LR schedule does not advance).
  if (scaler_) {
    timers::Scope timer(timers::kOptimizerUnscaleAndCheckInf);
    ops::scale_inplace(model_->grads(), float(1.0 / step.loss_scale), model_->num_params());
    float found = ops::has_inf_or_nan(model_->grads(), model_->num_params()) ? 1.f : 0.f;
    g_.world->all_reduce(&found, 1, ReduceOp::Max);
    step.skipped = found > 0.f;
    scaler_->update(step.skipped);
  }
  if (!step.skipped) {
    timers::Scope timer(timers::kOptimizerClipMainGrad);
    step.grad_norm = dist_optim_ ? dist_optim_->grad_norm() : global_grad_norm(*model_, g_);
  }
  // Every rank holds the same loss and norm, so every rank stops here together.
  MG_USER_CHECK(!cfg_.check_for_nan_in_loss_and_grad ||
                    (std::isfinite(step.loss) && std::isfinite(step.grad_norm)),
                "NaN/Inf at iteration ", iter, " on rank ", g_.world_rank, ": lm loss ",
                step.loss, ", grad norm ", step.grad_norm, " (lower --lr, check the data, or "
                "pass --no-check-for-nan-in-loss-and-grad to continue)");
  if (step.skipped) {
    ++skipped_iters_;
    log_line(str_cat(" > iteration ", iter, ": inf/NaN in the fp16 grads, step skipped on all "
                     "ranks; loss scale now ", scaler_->scale()));
  } else {
    timers::Scope timer(timers::kOptimizerInnerStep);
    if (dist_optim_)
      dist_optim_->step(float(step.lr), float(wd), step.grad_norm);
    else
      optim_->step(model_->param_data(), model_->grads(), float(step.lr), float(wd),
                   step.grad_norm);
    scheduler_samples_ += cfg_.global_batch_size;
  }
}

void Trainer::record(int64_t iter, const StepResult& step) {
  for (int k = 0; k < 4; ++k)
    if (comm_groups_[k]) interval_comm_[k].p2p_bytes += comm_groups_[k]->stats().total();
  if (!std::isfinite(step.loss) || !std::isfinite(step.grad_norm)) ++nan_iters_;
  result_.losses.push_back(step.loss);
  result_.grad_norms.push_back(step.grad_norm);
  result_.loss_scales.push_back(step.loss_scale);
  result_.skipped.push_back(step.skipped);
  if (iter > 1) total_seconds_ += step.seconds;
  interval_loss_ += step.loss;
  interval_seconds_ += step.seconds;
  ++interval_iters_;
}

void Trainer::log_interval(int64_t iter, const StepResult& step) {
  const double flops_per_iter =
      cfg_.model.train_flops_per_token() * double(cfg_.global_batch_size * cfg_.model.seq_length);
  IterationLog l;
  l.iteration = iter;
  l.train_iters = cfg_.train_iters;
  l.consumed_samples = consumed_;
  l.ms_per_iter = 1e3 * interval_seconds_ / double(interval_iters_);
  l.tflops = flops_per_iter / (interval_seconds_ / double(interval_iters_)) / 1e12 /
             double(g_.grid.world());
  l.lr = step.lr;
  l.global_batch_size = cfg_.global_batch_size;
  l.lm_loss = interval_loss_ / double(interval_iters_);
  l.grad_norm = step.grad_norm;
  l.nan_iterations = nan_iters_;
  l.skipped_iterations = skipped_iters_;
  l.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  l.tp_bytes = interval_comm_[0].p2p_bytes / interval_iters_;
  l.pp_bytes = interval_comm_[1].p2p_bytes / interval_iters_;
  l.dp_bytes = interval_comm_[2].p2p_bytes / interval_iters_;
  l.embedding_bytes = interval_comm_[3].p2p_bytes / interval_iters_;
  log_line(format_iteration(l));
  if (timers::enabled_level() > 0) log_timers(g_, interval_iters_);
  interval_loss_ = interval_seconds_ = 0;
  interval_iters_ = 0;
  for (CommStats& c : interval_comm_) c = {};
}

void Trainer::evaluate(int64_t iter) {
  double v = 0;
  for (int64_t it = 0; it < cfg_.eval_iters; ++it) {
    v += forward_only(*model_, *g_.pp, M_, valid_batches_->at(valid_consumed_)) / double(M_);
    valid_consumed_ += cfg_.global_batch_size;
  }
  v = report_loss(v / double(cfg_.eval_iters), g_);
  result_.valid_losses.push_back(v);
  log_line(format_validation(iter, v));
}

void Trainer::save(int64_t iter) {
  progress_.iteration = iter;
  progress_.consumed_train_samples = consumed_;
  progress_.consumed_valid_samples = valid_consumed_;
  progress_.scheduler_samples = scheduler_samples_;
  progress_.skipped_iterations = skipped_iters_;
  progress_.has_scaler = scaler_ != nullptr;
  if (scaler_) progress_.scaler = scaler_->state();
  if (dist_optim_) dist_optim_->wait_params();
  save_checkpoint(checkpoint_io(), progress_);
  last_saved_ = iter;
}

bool Trainer::exit_early(int64_t iter) {
  // Every rank takes the same decision (a signal may reach one rank only).
  std::string reason;
  if (cfg_.exit_interval > 0 && iter % cfg_.exit_interval == 0) reason = "--exit-interval";
  if (cfg_.exit_signal_handler || cfg_.exit_duration_in_mins > 0) {
    float flags[2] = {sigterm_received() ? 1.f : 0.f,
                      cfg_.exit_duration_in_mins > 0 &&
                              run_timer_.seconds() / 60.0 > cfg_.exit_duration_in_mins
                          ? 1.f
                          : 0.f};
    g_.world->all_reduce(flags, 2, ReduceOp::Max);
    if (flags[0] > 0) reason = "SIGTERM (--exit-signal-handler)";
    if (flags[1] > 0) reason = "--exit-duration-in-mins";
  }
  if (reason.empty() || iter >= cfg_.train_iters) return false;
  if (!cfg_.save.empty() && last_saved_ != iter) save(iter);
  log_line(str_cat(" > exiting at iteration ", iter, ": ", reason));
  result_.exited_early = true;
  return true;
}

void Trainer::finish() {
  if (!cfg_.save.empty() && !result_.exited_early && last_saved_ != cfg_.train_iters &&
      progress_.iteration < cfg_.train_iters)
    save(cfg_.train_iters);
  result_.mean_iteration_seconds =
      cfg_.train_iters > 1 ? total_seconds_ / double(cfg_.train_iters - 1) : interval_seconds_;
  if (dist_optim_) dist_optim_->wait_params();
  if ((reducer_ || dist_optim_) && cfg_.parallel.overlap_grad_reduce)
    log_line(str_cat(" > overlap-grad-reduce: ",
                     reducer_ ? reducer_->buckets_launched_early()
                              : dist_optim_->buckets_launched_early(),
                     " of ", int64_t(model_->layout().buckets().size()) * cfg_.train_iters,
                     " DP buckets started during the backward"));
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  log_line(str_cat(" > peak memory of rank ", g_.world_rank, " (MiB): resident ",
                   double(ru.ru_maxrss) / 1024.0, " | tensors ",
                   double(tensor_bytes_peak()) / (1024.0 * 1024.0),
                   ops::on_cuda() ? str_cat(" | device ", double(ops::device_bytes_peak()) /
                                                              (1024.0 * 1024.0))
                                  : std::string()),
           /*all_ranks=*/true);
  if (!cfg_.dump_final_params.empty()) {
    const std::vector<float> full = gather_full_params(*model_, g_);
    if (g_.world_rank == 0) write_params_file(cfg_.dump_final_params, full, cfg_.model);
  }
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg, ProcessGroups& g) {
  Trainer trainer(cfg, g);
  return trainer.run();
}

}  // namespace mg
