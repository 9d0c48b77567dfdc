// The training loop of train/trainer.h in named phases. Trainer's constructor selects the
// device, loads the data, builds the model and optimizer and resumes from --load; run() then
// repeats the step (forward-backward, grad reductions, optimizer), its bookkeeping and log
// line, evaluation, checkpointing and the exit decision, and finish() closes the run. It is
// assembled from components: the optimizer behind ModelOptimizer (replicated or distributed),
// the metrics (log lines, timers, TensorBoard: train/metrics.h), the checkpoint I/O.
#include "train/trainer.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "backend/dispatch.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/params_file.h"
#include "comm/mpi_communicator.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/timers.h"
#include "core/timer.h"
#include "distributed/finalize_grads.h"
#include "distributed/model_optimizer.h"
#include "distributed/model_stats.h"
#include "model/gpt.h"
#include "pipeline/schedule.h"
#include "train/batch_source.h"
#include "train/log_format.h"
#include "train/metrics.h"
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

// The last stage's mean loss, averaged over DP, delivered to every rank (a world reduction
// that is not part of the reported TP/PP/DP volumes).
double report_loss(double local_mean, const ProcessGroups& g) {
  // Every CP rank holds the whole sequences' loss: one of them reports.
  const bool reporter = g.last_stage() && g.coord.tp == 0 && g.coord.cp == 0;
  return all_reduce_sum(*g.world, reporter ? local_mean : 0.0) / double(g.grid.dp);
}

// --calculate-per-token-loss: the loss sum and the token count of the whole global batch (the
// last stage's TP rank 0 of every DP rank reports), delivered to every rank.
std::pair<double, double> global_loss_and_tokens(double local_sum, double local_tokens,
                                                 const ProcessGroups& g) {
  const bool reporter = g.last_stage() && g.coord.tp == 0 && g.coord.cp == 0;
  return {all_reduce_sum(*g.world, reporter ? local_sum : 0.0),
          all_reduce_sum(*g.world, reporter ? local_tokens : 0.0)};
}

// The step's MoE losses (StepResult's fields) from every rank's model chunks: each layer is
// counted once per DP replica (TP rank 0; CP ranks' shares summed), summed over PP stages and DP.
void moe_step_losses(const std::vector<MoeLosses>& chunks, const ProcessGroups& g,
                     const GPTConfig& m, double& load_balancing, double& z, double& dropped) {
  MoeLosses sum;
  for (const MoeLosses& c : chunks) {
    sum.load_balancing += c.load_balancing;
    sum.z += c.z;
    sum.dropped += c.dropped;
    sum.layer_microbatches += c.layer_microbatches;
  }
  // TP ranks hold the same values; CP ranks their shares of the sequence's losses (summed), and
  // each counts the same layers and micro-batches (counted once, on CP rank 0).
  const bool reporter = g.coord.tp == 0;
  auto total = [&](double v) { return all_reduce_sum(*g.world, reporter ? v : 0.0); };
  const double counted = reporter && g.coord.cp == 0 ? sum.layer_microbatches : 0.0;
  const double n = std::max(all_reduce_sum(*g.world, counted), 1.0);
  const bool aux = m.moe_router_load_balancing_type != "none" && m.moe_aux_loss_coeff > 0;
  load_balancing = aux ? total(sum.load_balancing) / n : -1;
  z = m.moe_z_loss_coeff > 0 ? total(sum.z) / n : -1;
  dropped = m.moe_expert_capacity_factor > 0 ? total(sum.dropped) : -1;
}

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
  // --eval-iters batches of `batches` (validation or test), reported as Megatron's validation
  // line; `set` names the set after training (" on validation set", " on test set").
  void evaluate(int64_t iter, BatchSource& batches, int64_t& consumed, const char* set = "");
  // Whether the run validates: --eval-interval and --eval-iters on and a validation split.
  bool validates() const {
    return cfg_.eval_interval > 0 && cfg_.eval_iters > 0 && split_built(cfg_, 1);
  }
  // A checkpoint of the state after iteration iter, under --save.
  void save(int64_t iter);
  // Whether to stop after iter: --exit-interval, SIGTERM (--exit-signal-handler) or
  // --exit-duration-in-mins, decided alike on every rank; saves first if --save is set.
  bool exit_early(int64_t iter);
  // The last checkpoint, the evaluations after training, the closing reports and
  // --dump-final-params.
  void finish();

  CheckpointIO checkpoint_io() {
    return {*store_, optimizer_->state(), g_, ckpt_cfg_, cfg_.use_distributed_optimizer};
  }

  const TrainConfig& cfg_;
  ProcessGroups& g_;
  const int64_t M_;  // micro-batches per iteration on this DP rank
  const CheckpointConfig ckpt_cfg_;
  const LRSchedule sched_;
  BuiltData data_;
  BatchOptions batch_options_;
  std::unique_ptr<ParamStore> store_;              // every parameter of this rank
  std::vector<std::unique_ptr<GPTModel>> chunks_;  // its model chunks (v under interleaving)
  std::vector<GPTModel*> chunk_ptrs_;
  // Loss-mask tokens counted by the chunks since the last call (the last virtual stage's).
  double take_tokens() {
    double t = 0;
    for (auto& c : chunks_) t += c->take_tokens();
    return t;
  }
  // Reduces the grads over DP and steps the params (replicated or distributed).
  std::unique_ptr<ModelOptimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  int64_t built_bytes_ = 0;  // tensor bytes the model, optimizer and reducer allocated
  TrainProgress progress_;   // as loaded, then as last saved
  std::unique_ptr<BatchSource> train_batches_, valid_batches_, test_batches_;

  // Counters of the run.
  TrainResult result_;
  int64_t consumed_ = 0, valid_consumed_ = 0, test_consumed_ = 0;  // samples
  int64_t scheduler_samples_ = 0;  // samples of successful steps: the LR schedule's clock
  int64_t skipped_iters_ = 0;      // over the run, as checkpoints save it
  int64_t ramp_batch_ = 0;         // --rampup-batch-size: the last iteration's global batch
  int64_t last_saved_ = 0;
  Timer run_timer_;       // from the first iteration (--exit-duration-in-mins)
  TrainMetrics metrics_;  // log lines, timers and TensorBoard
};

Trainer::Trainer(const TrainConfig& cfg, ProcessGroups& g)
    : cfg_(cfg), g_(g), M_(cfg.num_micro_batches()), ckpt_cfg_(cfg.checkpoint_config()),
      sched_(cfg.lr_schedule()), metrics_(cfg, g) {
  const bool cuda = cfg.device == "cuda";
  ops::set_device(cuda ? Device::CUDA : Device::CPU, cuda ? local_rank() : 0);
  int32_t eod = 0;
  data_ = load_data(cfg, g, eod);
  batch_options_ = {eod, cfg.eod_mask_loss, cfg.reset_position_ids, cfg.reset_attention_mask};
  const int64_t live_before = tensor_bytes_live();
  build_model_and_optimizer();
  built_bytes_ = tensor_bytes_live() - live_before;
  load_or_init();
  if (cfg.exit_signal_handler) install_sigterm_handler();
  fault::arm(g.world_rank);
  timers::set_level(int(cfg.timing_log_level));
  timers::set_sync(ops::on_cuda() ? &ops::synchronize : nullptr);
  timers::reset();
  log_setup();
  metrics_.open_tensorboard();
}

void Trainer::build_model_and_optimizer() {
  const TrainConfig& cfg = cfg_;
  store_ = std::make_unique<ParamStore>(cfg.model, train_store_spec(cfg, g_.world_rank));
  const std::vector<StageSpec> specs = train_chunk_specs(cfg, g_.world_rank);
  for (int c = 0; c < int(specs.size()); ++c) {
    chunks_.push_back(std::make_unique<GPTModel>(cfg.model, cfg.micro_batch_size, specs[size_t(c)],
                                                 g_.tp.get(), g_.cp.get(), store_.get(), c));
    chunks_.back()->set_per_token_loss(cfg.calculate_per_token_loss);
    if (g_.grid.ep > 1 || g_.grid.folded())
      chunks_.back()->set_expert_parallel(g_.ep.get(), g_.etp_ep.get(),
                                          cfg.parallel.moe_token_dispatcher_type == "allgather");
    chunk_ptrs_.push_back(chunks_.back().get());
  }
  store_->init(cfg.seed);
  sync_tied_embedding_params(*store_, g_);
  const DType grad_reduce_dtype = cfg.parallel.grad_reduce_in_bf16 ? DType::BF16 : DType::F32;
  optimizer_ = make_model_optimizer(*store_, g_, cfg.adam, cfg.use_distributed_optimizer,
                                    {cfg.parallel.overlap_grad_reduce,
                                     cfg.parallel.overlap_param_gather, grad_reduce_dtype});
  if (cfg.fp16) scaler_ = std::make_unique<LossScaler>(cfg.loss_scaler);
}

void Trainer::load_or_init() {
  if (!cfg_.load.empty() && load_checkpoint(checkpoint_io(), progress_) && scaler_ &&
      progress_.has_scaler)
    scaler_->set_state(progress_.scaler);
  train_batches_ =
      std::make_unique<BatchSource>(data_.split[0], cfg_, g_, batch_options_,
                                    /*prefetch=*/true, progress_.consumed_train_samples);
  valid_batches_ = std::make_unique<BatchSource>(data_.split[1], cfg_, g_, batch_options_,
                                                 /*prefetch=*/false);
  test_batches_ = std::make_unique<BatchSource>(data_.split[2], cfg_, g_, batch_options_,
                                                /*prefetch=*/false);
  consumed_ = progress_.consumed_train_samples;
  valid_consumed_ = progress_.consumed_valid_samples;
  skipped_iters_ = progress_.skipped_iterations;
  scheduler_samples_ = progress_.scheduler_samples;
  last_saved_ = progress_.iteration;
}

void Trainer::log_setup() const {
  const ParamStore& model = *store_;
  if (ops::on_cuda()) log_line(str_cat(" > device: ", ops::device_description()));
  log_line(str_cat(" > layout: world ", g_.grid.world(), " = ",
                   cfg_.parallel.layout_string(g_.grid.world()),
                   cfg_.parallel.sequence_parallel ? " (sequence parallel)" : "",
                   "; micro-batches per iteration per DP rank: ", M_,
                   cfg_.parallel.virtual_stages > 1
                       ? str_cat("; interleaved 1F1B, ", cfg_.parallel.virtual_stages,
                                 " model chunks per pipeline rank")
                       : std::string()));
  log_line(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (",
                   g_.coord.tp, ", ", g_.coord.pp, "): ", model.num_params(),
                   " (whole model: ", cfg_.model.num_parameters(), ")"));
  log_line(str_cat(" > model FLOPs per token: ", int64_t(cfg_.model.train_flops_per_token()),
                   " (6 x parameters, an untied model's input embedding lookup",
                   cfg_.model.num_experts > 0 ? " and the experts a token skips" : "",
                   " excluded, + 12 x layers x heads x head dim x seq length; the throughput "
                   "field's numerator)"));
  if (cfg_.model.num_experts > 0) {
    const GPTConfig& m = cfg_.model;
    log_line(str_cat(" > MoE: ", m.layer_kinds(0, m.num_layers).moe, " of ", m.num_layers,
                     " layers, ", m.num_experts, " experts (", m.num_experts / cfg_.parallel.ep(),
                     " per EP rank, each split over ", cfg_.parallel.etp(), " expert-TP rank",
                     cfg_.parallel.etp() > 1 ? "s" : "",
                     g_.grid.folded() ? " (parallel folding)" : "", "), top-", m.moe_router_topk,
                     ", ", m.moe_router_load_balancing_type, ", experts' GEMMs ",
                     m.moe_grouped_gemm ? "grouped (--moe-grouped-gemm)" : "one call per expert"));
  }
  log_line(str_cat(" > precision: params and activations ", dtype_name(model.dtype()),
                   model.dtype() == DType::F32 ? ""
                   : ops::on_cuda()            ? " (GEMMs: cuBLASLt, fp32 accumulation)"
                   : cpu::native_lowp_gemm(model.dtype())
                       ? " (GEMMs: native 16-bit kernels, fp32 accumulation)"
                       : " (GEMMs: no native 16-bit kernel on this CPU, operands widened to fp32)",
                   "; main grads fp32", scaler_ ? "; dynamic loss scaling" : ""));
  // The estimate the start-up check made (train/rank_memory.h) beside what was allocated.
  const RankMemory estimate = rank_memory(cfg_, g_.world_rank);
  log_line(memory_report(model.num_params() * int64_t(dtype_size(model.dtype())),
                         model.num_params() * 4, optimizer_->state_bytes(),
                         size_t(estimate.activations), double(estimate.optimizer)));
  // The allocator's own count of what building the model, optimizer and reducer took, beside
  // the estimate made before (megatron plan prints the same estimate).
  log_line(str_cat(" > tensor bytes of rank ", g_.world_rank, ": ", built_bytes_,
                   " allocated by the model, optimizer and grad reducer (estimated before "
                   "allocation: ",
                   estimate.total(false), " = params ", estimate.params, " + grads ",
                   estimate.grads, " + optimizer ", estimate.optimizer, " + activations ",
                   estimate.activations, ")"),
           /*all_ranks=*/true);
}

TrainResult Trainer::run() {
  run_timer_.reset();
  const bool do_valid = validates();
  for (int64_t iter = progress_.iteration + 1; iter <= cfg_.train_iters; ++iter) {
    StepResult step = train_step(iter);
    if (cfg_.log_params_norm) {
      optimizer_->wait_params();
      step.params_norm = params_l2_norm(*store_, g_);
    }
    const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
    metrics_.record(iter, step, consumed_, loss_scale, result_);
    if (iter % cfg_.log_interval == 0 || iter == cfg_.train_iters)
      metrics_.log_interval(iter, step, consumed_, loss_scale);
    if (do_valid && iter % cfg_.eval_interval == 0)
      evaluate(iter, *valid_batches_, valid_consumed_);
    if (!cfg_.save.empty() && cfg_.save_interval > 0 && iter % cfg_.save_interval == 0) save(iter);
    if (exit_early(iter)) break;
  }
  finish();
  return std::move(result_);
}

StepResult Trainer::train_step(int64_t iter) {
  Timer timer;
  fault::set_iteration(iter);
  metrics_.begin_step();
  StepResult step;
  step.global_batch_size = cfg_.rampup.at(consumed_);
  if (cfg_.rampup.start > 0 && step.global_batch_size != ramp_batch_)  // upstream's lines
    log_line(ramp_batch_ == 0 ? str_cat("setting initial batch size to ", step.global_batch_size)
                              : str_cat("ramping up batch size from ", ramp_batch_, " to ",
                                        step.global_batch_size));
  ramp_batch_ = step.global_batch_size;
  const int64_t M = step.global_batch_size / (cfg_.micro_batch_size * g_.grid.dp);
  step.lr = sched_.at(scheduler_samples_);
  step.decoupled_lr = sched_.decoupled_at(scheduler_samples_);
  store_->zero_grads();
  const double wd = sched_.weight_decay_at(scheduler_samples_);
  step.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  double local_loss = 0;
  for (auto& c : chunks_) c->dropout_on(cfg_.seed, iter);  // training micro-batches only
  {
    timers::Scope timer(timers::kForwardBackward);
    local_loss = forward_backward(
        chunk_ptrs_, *g_.pp, cfg_.schedule_shape(M), train_batches_->at(consumed_),
        [&] { optimizer_->arm(); }, step.loss_scale, cfg_.calculate_per_token_loss);
  }
  for (auto& c : chunks_) c->dropout_off();
  // Megatron's order: the DP reduction first, then the TP (SP) and tied-embedding sums.
  {
    timers::Scope timer(timers::kAllGradsSync);
    optimizer_->reduce_grads();
    finalize_grads(*store_, g_);
  }
  if (cfg_.calculate_per_token_loss) {
    // Megatron's finalize_model_grads: the DP-summed grads of the loss sum over the global
    // token count (ours are DP-averaged, hence the factor DP).
    const auto [sum, tokens] = global_loss_and_tokens(local_loss, take_tokens(), g_);
    step.loss = sum / std::max(tokens, 1.0);
    ops::scale_inplace(store_->grads(), float(double(g_.grid.dp) / std::max(tokens, 1.0)),
                       store_->num_params());
  } else {
    step.loss = report_loss(local_loss / double(M), g_);
  }
  if (cfg_.model.num_experts > 0) {
    std::vector<MoeLosses> moe;
    for (auto& c : chunks_) moe.push_back(c->take_moe_losses());
    moe_step_losses(moe, g_, cfg_.model, step.load_balancing_loss, step.z_loss,
                    step.dropped_tokens);
  }
  inject_grad_overflow(iter);
  optimizer_phase(iter, wd, step);
  consumed_ += step.global_batch_size;
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
    ops::copy(store_->grads(), ops::device(), &inf, Device::CPU, sizeof(float));
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
    ops::scale_inplace(store_->grads(), float(1.0 / step.loss_scale), store_->num_params());
    float found = ops::has_inf_or_nan(store_->grads(), store_->num_params()) ? 1.f : 0.f;
    g_.world->all_reduce(&found, 1, ReduceOp::Max);
    step.skipped = found > 0.f;
    scaler_->update(step.skipped);
  }
  if (!step.skipped) {
    timers::Scope timer(timers::kOptimizerClipMainGrad);
    step.grad_norm = optimizer_->grad_norm();
    if (cfg_.log_num_zeros_in_grad)
      step.num_zeros = double(count_zero_grads(*store_, g_, optimizer_->counted_ranges()));
  }
  // Every rank holds the same loss and norm, so every rank stops here together.
  MG_USER_CHECK(!cfg_.check_for_nan_in_loss_and_grad ||
                    (std::isfinite(step.loss) && std::isfinite(step.grad_norm)),
                "NaN/Inf at iteration ", iter, " on rank ", g_.world_rank, ": lm loss ", step.loss,
                ", grad norm ", step.grad_norm,
                " (lower --lr, check the data, or "
                "pass --no-check-for-nan-in-loss-and-grad to continue)");
  if (step.skipped) {
    ++skipped_iters_;
    log_line(str_cat(" > iteration ", iter,
                     ": inf/NaN in the fp16 grads, step skipped on all "
                     "ranks; loss scale now ",
                     scaler_->scale()));
  } else {
    timers::Scope timer(timers::kOptimizerInnerStep);
    optimizer_->step(float(step.lr), float(wd), step.grad_norm, float(step.decoupled_lr));
    scheduler_samples_ += step.global_batch_size;
  }
}

void Trainer::evaluate(int64_t iter, BatchSource& batches, int64_t& consumed, const char* set) {
  double v = 0, tokens = 0;
  const double per_batch = cfg_.calculate_per_token_loss ? 1.0 : double(M_);
  for (int64_t it = 0; it < cfg_.eval_iters; ++it) {
    v += forward_only(chunk_ptrs_, *g_.pp, M_, batches.at(consumed)) / per_batch;
    tokens += take_tokens();
    consumed += cfg_.global_batch_size;
  }
  for (auto& c : chunks_) c->take_moe_losses();  // the logged router losses are training's
  if (cfg_.calculate_per_token_loss) {
    const auto [sum, count] = global_loss_and_tokens(v, tokens, g_);
    v = sum / std::max(count, 1.0);
  } else {
    v = report_loss(v / double(cfg_.eval_iters), g_);
  }
  (&batches == test_batches_.get() ? result_.test_losses : result_.valid_losses).push_back(v);
  metrics_.log_validation(iter, v, set, consumed_);
}

void Trainer::save(int64_t iter) {
  progress_.iteration = iter;
  progress_.consumed_train_samples = consumed_;
  progress_.consumed_valid_samples = valid_consumed_;
  progress_.scheduler_samples = scheduler_samples_;
  progress_.skipped_iterations = skipped_iters_;
  progress_.has_scaler = scaler_ != nullptr;
  if (scaler_) progress_.scaler = scaler_->state();
  optimizer_->wait_params();
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
  // As Megatron after training (and after its last save): a last validation and the test
  // evaluation (--eval-iters batches each), when their splits exist. The ranks that read no
  // data know it from the same config.
  if (validates() && !result_.exited_early) {
    evaluate(cfg_.train_iters, *valid_batches_, valid_consumed_, " on validation set");
    if (split_built(cfg_, 2))
      evaluate(cfg_.train_iters, *test_batches_, test_consumed_, " on test set");
  }
  result_.mean_iteration_seconds = metrics_.mean_iteration_seconds(cfg_.train_iters);
  optimizer_->wait_params();
  const std::optional<int64_t> early = optimizer_->buckets_launched_early();
  if (early && cfg_.parallel.overlap_grad_reduce)
    log_line(str_cat(" > overlap-grad-reduce: ", *early, " of ",
                     int64_t(store_->layout().buckets().size()) * cfg_.train_iters,
                     " DP buckets started during the backward"));
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  log_line(str_cat(" > peak memory of rank ", g_.world_rank, " (MiB): resident ",
                   double(ru.ru_maxrss) / 1024.0, " | tensors ",
                   double(tensor_bytes_peak()) / (1024.0 * 1024.0),
                   ops::on_cuda()
                       ? str_cat(" | device ", double(ops::device_bytes_peak()) / (1024.0 * 1024.0))
                       : std::string()),
           /*all_ranks=*/true);
  if (!cfg_.dump_final_params.empty()) {
    const std::vector<float> full = gather_full_params(*store_, g_);
    if (g_.world_rank == 0) write_params_file(cfg_.dump_final_params, full, cfg_.model);
  }
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg, ProcessGroups& g) {
  Trainer trainer(cfg, g);
  return trainer.run();
}

}  // namespace mg
