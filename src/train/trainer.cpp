#include "train/trainer.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/dispatch.h"
#include "checkpoint/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "core/log.h"
#include "core/timers.h"
#include "core/timer.h"
#include "data/batch.h"
#include "data/dataset_builder.h"
#include "data/loader.h"
#include "distributed/distributed_optimizer.h"
#include "distributed/finalize_grads.h"
#include "distributed/grad_reducer.h"
#include "model/gpt.h"
#include "pipeline/schedule.h"
#include "train/log_format.h"

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

// Megatron's split sizes: train = iters x G; valid = (iters / eval_interval + 1) x eval_iters x G.
DataSpec data_spec(const TrainConfig& cfg) {
  DataSpec d;
  d.mock = cfg.mock_data;
  d.mock_vocab_size = cfg.model.vocab_size;
  d.mock_eod = int32_t(cfg.model.vocab_size - 1);
  d.data_path = cfg.data_path;
  d.split_paths = {cfg.train_data_path, cfg.valid_data_path, cfg.test_data_path};
  d.split = cfg.split;
  d.seq_length = cfg.model.seq_length;
  d.seed = cfg.seed;
  d.num_samples[0] = cfg.train_iters * cfg.global_batch_size;
  if (cfg.eval_interval > 0 && cfg.eval_iters > 0)
    d.num_samples[1] =
        (cfg.train_iters / cfg.eval_interval + 1) * cfg.eval_iters * cfg.global_batch_size;
  d.cache_dir = cfg.data_cache_path;
  return d;
}

// Only the first and last pipeline stages read data (every stage with --reset-attention-mask,
// whose per-token attention starts every stage's attention needs). With --data-cache-path,
// world rank 0 builds and writes the indices first; the other ranks then load them.
BuiltData load_data(const TrainConfig& cfg, const ProcessGroups& g, int32_t& eod) {
  const bool needed = g.first_stage() || g.last_stage() || cfg.reset_attention_mask;
  DataSpec spec = data_spec(cfg);
  eod = cfg.mock_data ? spec.mock_eod : make_tokenizer(cfg.tokenizer)->eod();
  BuiltData data;
  if (!spec.cache_dir.empty()) {
    if (g.world_rank == 0) data = build_datasets(spec);
    g.world->barrier();
    spec.write_cache = false;
    if (g.world_rank != 0 && needed) data = build_datasets(spec);
  } else if (needed) {
    data = build_datasets(spec);
  }
  return data;
}

// Micro-batch m of an iteration: the training loader's next batch, or a validation batch.
class BatchSource {
 public:
  BatchSource(const SampleDataset* ds, const TrainConfig& cfg, const ProcessGroups& g,
              const BatchOptions& opt, bool prefetch, int64_t consumed = 0)
      : ds_(ds), cfg_(cfg), dp_size_(g.grid.dp), dp_rank_(g.coord.dp), opt_(opt) {
    if (ds && prefetch) {
      LoaderSpec spec;
      spec.micro_batch_size = cfg.micro_batch_size;
      spec.seq_length = cfg.model.seq_length;
      spec.global_batch_size = cfg.global_batch_size;
      spec.dp_size = dp_size_;
      spec.dp_rank = dp_rank_;
      spec.consumed_samples = consumed;
      loader_ = std::make_unique<BatchLoader>(*ds, spec, opt);
    }
  }
  BatchFn at(int64_t consumed) {
    return [this, consumed](int64_t m) -> MicroBatch {
      if (!ds_) return {nullptr, nullptr, nullptr, nullptr};  // a middle pipeline stage
      if (loader_) {
        batch_ = loader_->next();
      } else {
        const int64_t start =
            micro_batch_start(consumed, m, cfg_.micro_batch_size, dp_size_, dp_rank_);
        batch_ = make_batch(*ds_, start, cfg_.micro_batch_size, cfg_.model.seq_length, opt_);
      }
      return {batch_.tokens.data(), batch_.position_ids.data(), batch_.labels.data(),
              batch_.loss_mask.data(),
              batch_.attention_start.empty() ? nullptr : batch_.attention_start.data()};
    };
  }

 private:
  const SampleDataset* ds_;
  const TrainConfig& cfg_;
  int64_t dp_size_, dp_rank_;
  BatchOptions opt_;
  std::unique_ptr<BatchLoader> loader_;
  Batch batch_;
};

// The last stage's mean loss, averaged over DP, delivered to every rank (a world reduction
// that is not part of the reported TP/PP/DP volumes).
double report_loss(double local_mean, const ProcessGroups& g) {
  const bool reporter = g.last_stage() && g.coord.tp == 0;
  return all_reduce_sum(*g.world, reporter ? local_mean : 0.0) / double(g.grid.dp);
}

void write_params(const std::string& path, const std::vector<float>& flat, const GPTConfig& mc) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(flat.data()), std::streamsize(flat.size() * 4));
    f.close();
    MG_USER_CHECK(f.good(), "--dump-final-params: cannot write '", tmp, "' (disk full?)");
  }
  MG_USER_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "--dump-final-params: cannot write ",
                path);
  nlohmann::json manifest = nlohmann::json::array();
  const ParamLayout layout = gpt_param_layout(mc);
  for (const ParamSpec& p : layout.params())
    manifest.push_back({{"name", p.name}, {"shape", p.global_shape}, {"offset", p.offset}});
  std::ofstream mf(path + ".json");
  mf << manifest.dump(1) << "\n";
  mf.close();
  MG_USER_CHECK(mf.good(), "--dump-final-params: cannot write '", path, ".json'");
  // The model record, as a checkpoint keeps it: generate --load-params checks its flags with it.
  std::ofstream rf(path + ".model.json");
  rf << model_record(mc).dump(1) << "\n";
  rf.close();
  MG_USER_CHECK(rf.good(), "--dump-final-params: cannot write '", path, ".model.json'");
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg, ProcessGroups& g) {
  const GPTConfig& mc = cfg.model;
  const int64_t S = mc.seq_length, M = cfg.num_micro_batches();
  const int P = g.grid.pp, stage = g.coord.pp;
  const bool cuda = cfg.device == "cuda";
  ops::set_device(cuda ? Device::CUDA : Device::CPU, cuda ? local_rank() : 0);
  const auto [layer_begin, layer_end] = cfg.parallel.stage_layers(mc.num_layers, stage);

  int32_t eod = 0;
  const BuiltData data = load_data(cfg, g, eod);
  const BatchOptions options{eod, cfg.eod_mask_loss, cfg.reset_position_ids,
                             cfg.reset_attention_mask};
  const bool do_valid = cfg.eval_interval > 0 && cfg.eval_iters > 0;

  StageSpec spec;
  spec.shard = {g.grid.tp, g.coord.tp, layer_begin, layer_end, g.first_stage(), g.last_stage()};
  spec.sequence_parallel = cfg.parallel.sequence_parallel;
  spec.num_slots = pipeline_slots(stage, P, M);
  spec.dtype = cfg.model_dtype();
  if (cfg.recompute_granularity == "full") {
    spec.recompute_method = cfg.recompute_method;
    spec.recompute_num_layers = cfg.recompute_num_layers;
  }
  // DP > 1 reduces bucket by bucket in Megatron's buffer layout (padded for the shards of the
  // distributed optimizer).
  if (g.grid.dp > 1 || cfg.use_distributed_optimizer) {
    spec.bucket_dp = cfg.use_distributed_optimizer ? g.grid.dp : 0;
    spec.bucket_size = cfg.parallel.ddp_bucket_size;
  }
  GPTModel model(mc, cfg.micro_batch_size, spec, g.tp.get());
  model.init(cfg.seed);
  sync_tied_embedding_params(model, g);
  std::unique_ptr<Optimizer> optim;
  std::unique_ptr<DistributedOptimizer> dist_optim;
  if (cfg.use_distributed_optimizer)
    dist_optim = std::make_unique<DistributedOptimizer>(model, g, cfg.adam,
                                                        cfg.parallel.overlap_grad_reduce,
                                                        cfg.parallel.overlap_param_gather);
  else
    optim = std::make_unique<Optimizer>(model.layout(), cfg.adam, model.dtype(),
                                        model.param_data());
  std::unique_ptr<LossScaler> scaler;
  if (cfg.fp16) scaler = std::make_unique<LossScaler>(cfg.loss_scaler);
  const size_t state_bytes = optim ? optim->state_bytes() : dist_optim->state_bytes();
  std::unique_ptr<GradReducer> reducer;
  if (g.grid.dp > 1 && !cfg.use_distributed_optimizer)
    reducer = std::make_unique<GradReducer>(model, g, cfg.parallel.overlap_grad_reduce);

  // Checkpoints: resume from --load, continue the data order where it stopped.
  const CheckpointConfig ckpt_cfg = cfg.checkpoint_config();
  const CheckpointIO ckpt{model, optim ? *optim : dist_optim->shard_optimizer(), g, ckpt_cfg,
                          cfg.use_distributed_optimizer};
  TrainProgress progress;
  if (!cfg.load.empty() && load_checkpoint(ckpt, progress) && scaler && progress.has_scaler)
    scaler->set_state(progress.scaler);
  BatchSource train_batches(data.split[0], cfg, g, options, /*prefetch=*/true,
                            progress.consumed_train_samples);
  BatchSource valid_batches(data.split[1], cfg, g, options, /*prefetch=*/false);
  if (cfg.exit_signal_handler) install_sigterm_handler();
  timers::set_level(int(cfg.timing_log_level));
  timers::set_sync(ops::on_cuda() ? &ops::synchronize : nullptr);
  timers::reset();

  const LRSchedule sched = cfg.lr_schedule();
  if (ops::on_cuda()) log_line(str_cat(" > device: ", ops::device_description()));
  log_line(str_cat(" > layout: world ", g.grid.world(), " = TP ", g.grid.tp, " x PP ", P,
                   " x DP ", g.grid.dp, cfg.parallel.sequence_parallel ? " (sequence parallel)" : "",
                   "; micro-batches per iteration per DP rank: ", M));
  log_line(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (",
                   g.coord.tp, ", ", stage, "): ", model.num_params(),
                   " (whole model: ", mc.num_parameters(), ")"));
  // formulas.md: Adam state is 8 bytes per parameter for fp32 models (the model params are the
  // main params) and 12 for 16-bit models (fp32 main params too), over d ranks with the
  // distributed optimizer (SGD: 4 less).
  int64_t local_params = 0;
  for (const ParamSpec& p : model.layout().params()) local_params += p.numel();
  const double per_param_state = ((cfg.optimizer == "adam" ? 8.0 : 4.0) +
                                  (model.dtype() == DType::F32 ? 0.0 : 4.0)) /
                                 (cfg.use_distributed_optimizer ? double(g.grid.dp) : 1.0);
  log_line(str_cat(" > precision: params and activations ", dtype_name(model.dtype()),
                   model.dtype() == DType::F32 ? ""
                   : ops::on_cuda() ? " (GEMMs: cuBLASLt, fp32 accumulation)"
                   : cpu::native_lowp_gemm(model.dtype())
                       ? " (GEMMs: native 16-bit kernels, fp32 accumulation)"
                       : " (GEMMs: no native 16-bit kernel on this CPU, operands widened to fp32)",
                   "; main grads fp32", scaler ? "; dynamic loss scaling" : ""));
  log_line(memory_report(model.num_params() * int64_t(dtype_size(model.dtype())),
                         model.num_params() * 4, state_bytes, model.activation_bytes(),
                         per_param_state * double(local_params)));

  TrainResult result;
  int64_t consumed = progress.consumed_train_samples, valid_consumed = progress.consumed_valid_samples;
  double interval_loss = 0, interval_seconds = 0, total_seconds = 0;
  int64_t interval_iters = 0, nan_iters = 0, skipped_iters = progress.skipped_iterations;
  // Samples of successful steps: the LR schedule's clock.
  int64_t scheduler_samples = progress.scheduler_samples;
  const Timer run_timer;
  int64_t last_saved = progress.iteration;
  auto save = [&](int64_t iter) {
    progress.iteration = iter;
    progress.consumed_train_samples = consumed;
    progress.consumed_valid_samples = valid_consumed;
    progress.scheduler_samples = scheduler_samples;
    progress.skipped_iterations = skipped_iters;
    progress.has_scaler = scaler != nullptr;
    if (scaler) progress.scaler = scaler->state();
    if (dist_optim) dist_optim->wait_params();
    save_checkpoint(ckpt, progress);
    last_saved = iter;
  };
  CommStats interval_comm[4] = {};
  Communicator* groups[4] = {g.tp.get(), g.pp.get(), g.dp.get(), g.embedding.get()};
  const double flops_per_iter = mc.train_flops_per_token() * double(cfg.global_batch_size * S);
  for (int64_t iter = progress.iteration + 1; iter <= cfg.train_iters; ++iter) {
    Timer timer;
    for (Communicator* c : groups)
      if (c) c->reset_stats();
    const double lr = sched.at(scheduler_samples);
    model.zero_grads();
    const double wd = sched.weight_decay_at(scheduler_samples);
    const double loss_scale = scaler ? scaler->scale() : 1.0;
    double local_loss = 0;
    {
      timers::Scope timer(timers::kForwardBackward);
      local_loss = forward_backward(
          model, *g.pp, M, train_batches.at(consumed),
          [&] {
            if (reducer) reducer->arm();
            if (dist_optim) dist_optim->arm();
          },
          loss_scale);
    }
    // Megatron's order: the DP reduction first, then the TP (SP) and tied-embedding sums.
    {
      timers::Scope timer(timers::kAllGradsSync);
      if (dist_optim) dist_optim->reduce_scatter_grads();
      if (reducer) reducer->finish();
      finalize_grads(model, g);
    }
    // --inject-grad-overflow: the last rank's first grad becomes inf once its grads are final
    // (after the reductions, so no bucket still in flight can overwrite it).
    const bool inject_overflow =
        g.world_rank == g.grid.world() - 1 &&
        std::find(cfg.overflow_iters.begin(), cfg.overflow_iters.end(), iter) !=
            cfg.overflow_iters.end();
    if (inject_overflow) {
      const float inf = INFINITY;
      ops::copy(model.grads(), ops::device(), &inf, Device::CPU, sizeof(float));
    }
    // The optimizer phase (Megatron's "optimizer" timer covers all of it).
    bool skipped = false;
    double grad_norm = 0.0;
    const double loss = report_loss(local_loss / double(M), g);
    {
      timers::Scope optimizer_timer(timers::kOptimizer);
      // fp16: unscale the main grads and look for inf/NaN; an overflow on any rank skips the
      // step on every rank (and the LR schedule does not advance).
      if (scaler) {
        timers::Scope timer(timers::kOptimizerUnscaleAndCheckInf);
        ops::scale_inplace(model.grads(), float(1.0 / loss_scale), model.num_params());
        float found = ops::has_inf_or_nan(model.grads(), model.num_params()) ? 1.f : 0.f;
        g.world->all_reduce(&found, 1, ReduceOp::Max);
        skipped = found > 0.f;
        scaler->update(skipped);
      }
      if (!skipped) {
        timers::Scope timer(timers::kOptimizerClipMainGrad);
        grad_norm = dist_optim ? dist_optim->grad_norm() : global_grad_norm(model, g);
      }
      // Every rank holds the same loss and norm, so every rank stops here together.
      MG_USER_CHECK(!cfg.check_for_nan_in_loss_and_grad ||
                        (std::isfinite(loss) && std::isfinite(grad_norm)),
                    "NaN/Inf at iteration ", iter, " on rank ", g.world_rank, ": lm loss ", loss,
                    ", grad norm ", grad_norm, " (lower --lr, check the data, or pass "
                    "--no-check-for-nan-in-loss-and-grad to continue)");
      if (skipped) {
        ++skipped_iters;
        log_line(str_cat(" > iteration ", iter, ": inf/NaN in the fp16 grads, step skipped on all "
                         "ranks; loss scale now ", scaler->scale()));
      } else {
        timers::Scope timer(timers::kOptimizerInnerStep);
        if (dist_optim)
          dist_optim->step(float(lr), float(wd), grad_norm);
        else
          optim->step(model.param_data(), model.grads(), float(lr), float(wd), grad_norm);
        scheduler_samples += cfg.global_batch_size;
      }
    }
    consumed += cfg.global_batch_size;
    ops::synchronize();  // the step's GPU work belongs to its time
    const double secs = timer.seconds();
    for (int k = 0; k < 4; ++k)
      if (groups[k]) {
        const CommStats& st = groups[k]->stats();
        interval_comm[k].p2p_bytes += st.total();
      }
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) ++nan_iters;
    result.losses.push_back(loss);
    result.grad_norms.push_back(grad_norm);
    result.loss_scales.push_back(loss_scale);
    result.skipped.push_back(skipped);
    if (iter > 1) total_seconds += secs;
    interval_loss += loss;
    interval_seconds += secs;
    ++interval_iters;

    if (iter % cfg.log_interval == 0 || iter == cfg.train_iters) {
      IterationLog l;
      l.iteration = iter;
      l.train_iters = cfg.train_iters;
      l.consumed_samples = consumed;
      l.ms_per_iter = 1e3 * interval_seconds / double(interval_iters);
      l.tflops = flops_per_iter / (interval_seconds / double(interval_iters)) / 1e12 /
                 double(g.grid.world());
      l.lr = lr;
      l.global_batch_size = cfg.global_batch_size;
      l.lm_loss = interval_loss / double(interval_iters);
      l.grad_norm = grad_norm;
      l.nan_iterations = nan_iters;
      l.skipped_iterations = skipped_iters;
      l.loss_scale = scaler ? scaler->scale() : 1.0;
      l.tp_bytes = interval_comm[0].p2p_bytes / interval_iters;
      l.pp_bytes = interval_comm[1].p2p_bytes / interval_iters;
      l.dp_bytes = interval_comm[2].p2p_bytes / interval_iters;
      l.embedding_bytes = interval_comm[3].p2p_bytes / interval_iters;
      log_line(format_iteration(l));
      if (timers::enabled_level() > 0) log_timers(g, interval_iters);
      interval_loss = interval_seconds = 0;
      interval_iters = 0;
      for (CommStats& c : interval_comm) c = {};
    }
    if (do_valid && (iter % cfg.eval_interval == 0 || iter == cfg.train_iters)) {
      double v = 0;
      for (int64_t it = 0; it < cfg.eval_iters; ++it) {
        v += forward_only(model, *g.pp, M, valid_batches.at(valid_consumed)) / double(M);
        valid_consumed += cfg.global_batch_size;
      }
      v = report_loss(v / double(cfg.eval_iters), g);
      result.valid_losses.push_back(v);
      log_line(format_validation(iter, v));
    }
      if (!cfg.save.empty() && cfg.save_interval > 0 && iter % cfg.save_interval == 0) save(iter);
    // Graceful exit: every rank takes the same decision (a signal may reach one rank only).
    std::string exit_reason;
    if (cfg.exit_interval > 0 && iter % cfg.exit_interval == 0) exit_reason = "--exit-interval";
    if (cfg.exit_signal_handler || cfg.exit_duration_in_mins > 0) {
      float flags[2] = {sigterm_received() ? 1.f : 0.f,
                        cfg.exit_duration_in_mins > 0 &&
                                run_timer.seconds() / 60.0 > cfg.exit_duration_in_mins
                            ? 1.f
                            : 0.f};
      g.world->all_reduce(flags, 2, ReduceOp::Max);
      if (flags[0] > 0) exit_reason = "SIGTERM (--exit-signal-handler)";
      if (flags[1] > 0) exit_reason = "--exit-duration-in-mins";
    }
    if (!exit_reason.empty() && iter < cfg.train_iters) {
      if (!cfg.save.empty() && last_saved != iter) save(iter);
      log_line(str_cat(" > exiting at iteration ", iter, ": ", exit_reason));
      result.exited_early = true;
      break;
    }
  }
  if (!cfg.save.empty() && !result.exited_early && last_saved != cfg.train_iters &&
      progress.iteration < cfg.train_iters)
    save(cfg.train_iters);
  result.mean_iteration_seconds =
      cfg.train_iters > 1 ? total_seconds / double(cfg.train_iters - 1) : interval_seconds;
  if (dist_optim) dist_optim->wait_params();
  if ((reducer || dist_optim) && cfg.parallel.overlap_grad_reduce)
    log_line(str_cat(" > overlap-grad-reduce: ",
                     reducer ? reducer->buckets_launched_early() : dist_optim->buckets_launched_early(),
                     " of ",
                     int64_t(model.layout().buckets().size()) * cfg.train_iters,
                     " DP buckets started during the backward"));
  {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    log_line(str_cat(" > peak memory of rank ", g.world_rank, " (MiB): resident ",
                     double(ru.ru_maxrss) / 1024.0, " | tensors ",
                     double(tensor_bytes_peak()) / (1024.0 * 1024.0),
                     ops::on_cuda() ? str_cat(" | device ", double(ops::device_bytes_peak()) /
                                                                (1024.0 * 1024.0))
                                    : std::string()),
             /*all_ranks=*/true);
  }
  if (!cfg.dump_final_params.empty()) {
    const std::vector<float> full = gather_full_params(model, g);
    if (g.world_rank == 0) write_params(cfg.dump_final_params, full, mc);
  }
  return result;
}

}  // namespace mg
