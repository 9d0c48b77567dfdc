#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/checked_math.h"
#include "core/error.h"
#include "pipeline/schedule_table.h"
#include "train/run_length.h"

namespace mg {

// Megatron's step counts in samples (get_optimizer_param_scheduler). Iteration-based runs:
// decay = (--lr-decay-iters or --train-iters) x G, warmup = --lr-warmup-fraction x decay or
// --lr-warmup-iters x G, WSD anneal = --lr-wsd-decay-iters x G. Sample-based runs
// (--train-samples): decay = --lr-decay-samples or --train-samples, warmup = the fraction x
// decay or --lr-warmup-samples, WSD anneal = --lr-wsd-decay-samples. A fraction stays
// unrounded, as Megatron's float lr_warmup_steps.
LRSchedule TrainConfig::lr_schedule() const {
  const char* what = "learning-rate schedule samples (iterations x --global-batch-size)";
  const bool by_samples = train_samples > 0;
  LRSchedule s;
  s.lr = std::isnan(lr) ? 0.0 : lr;
  s.min_lr = min_lr;
  s.lr_warmup_init = lr_warmup_init;
  if (by_samples) {
    s.decay_steps = lr_decay_samples > 0 ? lr_decay_samples : train_samples;
    s.wsd_decay_steps = lr_wsd_decay_samples;
    s.wd_incr_steps = train_samples;
  } else {
    s.decay_steps =
        checked_mul(lr_decay_iters > 0 ? lr_decay_iters : train_iters, global_batch_size, what);
    s.wsd_decay_steps = checked_mul(lr_wsd_decay_iters, global_batch_size, what);
    s.wd_incr_steps = checked_mul(train_iters, global_batch_size, what);
  }
  s.warmup_steps = !std::isnan(lr_warmup_fraction) ? lr_warmup_fraction * double(s.decay_steps)
                   : by_samples                    ? double(lr_warmup_samples)
                                : double(checked_mul(lr_warmup_iters, global_batch_size, what));
  s.style = lr_decay_style;
  s.wsd_style = lr_wsd_decay_style;
  s.start_wd = std::isnan(start_weight_decay) ? adam.weight_decay : start_weight_decay;
  s.end_wd = std::isnan(end_weight_decay) ? adam.weight_decay : end_weight_decay;
  s.wd_style = weight_decay_incr_style;
  s.decoupled_lr = decoupled_lr;
  s.decoupled_min_lr = decoupled_min_lr;
  return s;
}

std::array<int64_t, 3> TrainConfig::split_samples() const {
  std::array<int64_t, 3> n = {0, 0, 0};
  // Sample-based: what the iterations consume (a ramp's last batch may pass --train-samples).
  n[0] = train_samples > 0 ? std::max(train_samples, samples_consumed(rampup, train_iters))
                           : checked_mul(train_iters, global_batch_size,
                                         "training samples (--train-iters x --global-batch-size)");
  if (eval_interval > 0 && eval_iters > 0) {
    const char* what =
        "validation samples ((--train-iters / --eval-interval + 1) x "
        "--eval-iters x --global-batch-size)";
    n[1] = checked_product({train_iters / eval_interval + 1, eval_iters, global_batch_size}, what);
    // Megatron's test split: one evaluation of --eval-iters batches after training.
    n[2] = checked_mul(eval_iters, global_batch_size,
                       "test samples (--eval-iters x --global-batch-size)");
  }
  return n;
}

CheckpointConfig TrainConfig::checkpoint_config() const {
  CheckpointConfig c;
  c.save = save;
  c.load = load;
  c.no_save_optim = no_save_optim;
  c.no_load_optim = no_load_optim;
  c.no_load_rng = no_load_rng;
  c.finetune = finetune;
  c.exit_on_missing_checkpoint = exit_on_missing_checkpoint;
  c.ckpt_keep_last = ckpt_keep_last;
  c.optimizer = optimizer;
  c.seed = seed;
  c.argv = argv;
  c.model = model;
  return c;
}

std::string TrainConfig::finalize_and_validate(int world_size) {
  model.validate();
  adam.kind = optimizer;
  adam.sgd_momentum = sgd_momentum;
  adam.validate();
  MG_USER_CHECK(micro_batch_size > 0, "--micro-batch-size must be positive (got ", micro_batch_size,
                ")");
  MG_USER_CHECK(parallel.tp() >= 1, "--tensor-model-parallel-size must be >= 1 (got ",
                parallel.tp(), ")");
  MG_USER_CHECK(parallel.pp() >= 1, "--pipeline-model-parallel-size must be >= 1 (got ",
                parallel.pp(), ")");
  MG_USER_CHECK(parallel.cp() >= 1, "--context-parallel-size must be >= 1 (got ", parallel.cp(),
                ")");
  // Ranks of one data-parallel replica: TP x CP x PP (CP ranks read the same samples).
  const int64_t model_parallel = int64_t(parallel.tp()) * parallel.cp() * parallel.pp();
  if (global_batch_size == 0)  // Megatron's default: one micro-batch per DP rank
    global_batch_size =
        checked_mul(micro_batch_size, std::max<int64_t>(1, world_size / model_parallel),
                    "the default --global-batch-size (--micro-batch-size x data-parallel size)");
  MG_USER_CHECK(global_batch_size > 0, "--global-batch-size must be positive (got ",
                global_batch_size, ")");
  const std::string warning = parallel.validate(world_size, model.layout_dims(parallel.tp()),
                                                micro_batch_size, global_batch_size);
  data_parallel_size = int(world_size / model_parallel);
  const ParallelConfig& p = parallel;
  parallel.virtual_stages =
      mg::virtual_stages({model.num_layers, p.pp(), p.num_layers_per_virtual_pipeline_stage,
                          p.num_virtual_stages_per_pipeline_rank,
                          p.decoder_first_pipeline_num_layers, p.decoder_last_pipeline_num_layers});
  MG_USER_CHECK(p.microbatch_group_size_per_vp_stage >= 0,
                "--microbatch-group-size-per-virtual-pipeline-stage must be positive");
  model.vocab_pad_tp = parallel.tp();
  MG_USER_CHECK(train_iters >= 0, "--train-iters must be positive (got ", train_iters, ")");
  MG_USER_CHECK(device == "cpu" || device == "cuda", "--device '", device,
                "' is not available; use cpu or cuda");
  if (distributed_backend.empty()) distributed_backend = device == "cuda" ? "nccl" : "mpi";
  MG_USER_CHECK(distributed_backend == "nccl" || distributed_backend == "mpi",
                "--distributed-backend '", distributed_backend,
                "' is not available; use nccl or mpi");
  // NCCL's exchanges block until the peer takes them; those of the interleaved schedule pair up
  // across ranks only for micro-batch groups of PP (pipeline/schedule.h). MPI's sends do not block.
  const int64_t group = parallel.microbatch_group_size_per_vp_stage;
  MG_USER_CHECK(parallel.virtual_stages == 1 || group == 0 || group == parallel.pp() ||
                    distributed_backend == "mpi",
                "--microbatch-group-size-per-virtual-pipeline-stage ", group,
                " other than --pipeline-model-parallel-size ", parallel.pp(),
                " needs --distributed-backend mpi (NCCL's blocking exchanges pair up across "
                "ranks only for groups of PP micro-batches)");
  MG_USER_CHECK(distributed_backend == "mpi" || device == "cuda",
                "--distributed-backend nccl "
                "moves GPU memory and needs --device cuda; CPU runs use mpi");
  MG_USER_CHECK(std::isfinite(distributed_timeout_minutes) && distributed_timeout_minutes > 0,
                "--distributed-timeout-minutes must be a positive number of minutes (got ",
                distributed_timeout_minutes, "); fractions are allowed, e.g. 0.05 for 3 s");
  if (device == "cuda") {
    // Refused here rather than by the first forward, after every rank has allocated.
    MG_USER_CHECK(parallel.cp() == 1, "--context-parallel-size ", parallel.cp(),
                  " runs its attention (ring and all-to-all) on the CPU for now: train with "
                  "--device cpu, or --device cuda with --context-parallel-size 1");
    const int64_t head_dim = model.head_dim();
    MG_USER_CHECK(
        head_dim == 32 || head_dim == 64 || head_dim == 128,
        "--device cuda: the CUDA "
        "attention kernels take head dims 32, 64 and 128, but the head dim (--kv-channels, "
        "or --hidden-size ",
        model.hidden_size, " / --num-attention-heads ", model.num_attention_heads, ") is ",
        head_dim, "; change one of them, or train with --device cpu");
    const int64_t heads_local = model.num_attention_heads / parallel.tp();
    MG_USER_CHECK(
        micro_batch_size <= 65535 / heads_local,
        "--device cuda: the attention kernels "
        "launch one grid row per (sample, head) and take at most 65535, but "
        "--micro-batch-size ",
        micro_batch_size, " x ", heads_local,
        " heads per TP rank is more; lower --micro-batch-size or train with --device cpu");
  }
  const int ep = parallel.ep();
  MG_USER_CHECK(ep >= 1, "--expert-model-parallel-size must be positive (got ", ep, ")");
  if (ep > 1) {
    MG_USER_CHECK(model.num_experts > 0, "--expert-model-parallel-size ", ep,
                  " splits the experts of MoE layers; give --num-experts");
    MG_USER_CHECK(model.num_experts % ep == 0, "--num-experts ", model.num_experts,
                  " must be divisible by --expert-model-parallel-size ", ep);
    // Megatron's rule (TransformerConfig): with TP, EP needs sequence parallelism.
    MG_USER_CHECK(parallel.tp() == 1 || parallel.sequence_parallel, "--expert-model-parallel-size ",
                  ep, " with --tensor-model-parallel-size ", parallel.tp(),
                  " needs --sequence-parallel (as Megatron-LM requires)");
  }
  const int etp = parallel.expert_tensor_parallel_size;
  MG_USER_CHECK(etp >= 0,
                "--expert-tensor-parallel-size must be a positive number of ranks "
                "(got ",
                etp, "; 0, or leaving it out, means --tensor-model-parallel-size)");
  MG_USER_CHECK(parallel.etp() == parallel.tp() || model.num_experts > 0,
                "--expert-tensor-parallel-size ", etp,
                " splits the experts of MoE layers; give "
                "--num-experts (or leave it out)");
  // Folded, each TP rank dispatches its sequence-parallel chunk of the tokens (docs/moe.md).
  MG_USER_CHECK(parallel.etp() == parallel.tp() || parallel.tp() == 1 || parallel.sequence_parallel,
                "--expert-tensor-parallel-size ", parallel.etp(),
                " other than "
                "--tensor-model-parallel-size ",
                parallel.tp(),
                " needs --sequence-parallel: each "
                "TP rank dispatches its sequence chunk of the tokens to the experts");
  if (model.num_experts > 0) {
    // The experts' grid (ETP x EP x EDP) covers each pipeline stage's TP x CP x DP ranks.
    const int64_t stage_ranks = int64_t(parallel.tp()) * parallel.cp() * data_parallel_size;
    const int64_t expert_mp = int64_t(parallel.etp()) * ep;
    MG_USER_CHECK(stage_ranks % expert_mp == 0, "--expert-tensor-parallel-size ", parallel.etp(),
                  " x --expert-model-parallel-size ", ep, " = ", expert_mp,
                  " must divide the ranks of a pipeline stage (TP x CP x DP = ", stage_ranks,
                  "): the experts' grid is laid over them (docs/moe.md)");
  }
  MG_USER_CHECK(parallel.moe_token_dispatcher_type == "alltoall" ||
                    parallel.moe_token_dispatcher_type == "allgather",
                "--moe-token-dispatcher-type '", parallel.moe_token_dispatcher_type,
                "' is not known; use alltoall or allgather");
  if (model.num_experts > 0) {
    // The experts are split over expert TP, the shared experts over TP as the MLP is.
    MG_USER_CHECK(model.moe_ffn() % parallel.etp() == 0, "--moe-ffn-hidden-size ", model.moe_ffn(),
                  " must be divisible by the experts' tensor parallelism ", parallel.etp(),
                  " (--expert-tensor-parallel-size, default "
                  "--tensor-model-parallel-size): each expert's MLP is split over it");
    MG_USER_CHECK(model.moe_shared_expert_intermediate_size % parallel.tp() == 0,
                  "--moe-shared-expert-intermediate-size ",
                  model.moe_shared_expert_intermediate_size,
                  " must be divisible by --tensor-model-parallel-size ", parallel.tp(),
                  " (the shared experts' MLP is split over TP)");
    // Routing is per token and the aux and z losses are summed over CP ranks, but capacity
    // ranks each expert's assignments over the micro-batch's tokens, which CP splits.
    MG_USER_CHECK(parallel.cp() == 1 || model.moe_expert_capacity_factor == 0.f,
                  "--context-parallel-size ", parallel.cp(),
                  " with --num-experts: "
                  "--moe-expert-capacity-factor does not yet rank the assignments over the "
                  "whole sequence across CP ranks; drop it or use --context-parallel-size 1");
  }
  MG_USER_CHECK(timing_log_level >= 0 && timing_log_level <= 2,
                "--timing-log-level must be 0, 1 "
                "or 2 (got ",
                timing_log_level, ")");
  MG_USER_CHECK(log_interval > 0, "--log-interval must be positive (got ", log_interval, ")");
  tensorboard.validate();
  MG_USER_CHECK(eval_interval >= 0, "--eval-interval must be >= 0 (got ", eval_interval, ")");
  MG_USER_CHECK(eval_iters >= 0, "--eval-iters must be >= 0 (got ", eval_iters, ")");
  // Each schedule length, named as the user gave it.
  for (const auto& [flag, v] : {std::pair{"--lr-warmup-iters", lr_warmup_iters},
                                std::pair{"--lr-warmup-samples", lr_warmup_samples},
                                std::pair{"--lr-decay-iters", lr_decay_iters},
                                std::pair{"--lr-decay-samples", lr_decay_samples},
                                std::pair{"--lr-wsd-decay-iters", lr_wsd_decay_iters},
                                std::pair{"--lr-wsd-decay-samples", lr_wsd_decay_samples}})
    MG_USER_CHECK(v >= 0, flag, " must be >= 0 (got ", v, ")");
  resolve_run_length(*this);  // --train-iters | --train-samples, --lr
  // The interleaved schedule's micro-batch rules for every global batch the run takes: a
  // --rampup-batch-size ramp's, then --global-batch-size.
  if (parallel.virtual_stages > 1) {
    for (int64_t b = rampup.start; b > 0 && b < global_batch_size; b += rampup.increment)
      validate_schedule(schedule_shape(b / (int64_t(micro_batch_size) * data_parallel_size)));
    validate_schedule(schedule_shape(num_micro_batches()));
  }
  optimizer_kind(optimizer);  // UsageError naming --optimizer
  MG_USER_CHECK(int(lr_warmup_iters > 0) + int(lr_warmup_samples > 0) +
                        int(!std::isnan(lr_warmup_fraction)) <=
                    1,
                "use only one of --lr-warmup-iters, --lr-warmup-samples, --lr-warmup-fraction");
  MG_USER_CHECK(std::isnan(lr_warmup_fraction) ||
                    (lr_warmup_fraction >= 0.0 && lr_warmup_fraction <= 1.0),
                "--lr-warmup-fraction must be in [0, 1] (got ", lr_warmup_fraction, ")");
  MG_USER_CHECK(lr_warmup_init >= 0.0, "--lr-warmup-init must be >= 0 (got ", lr_warmup_init, ")");
  for (const auto& [flag, v] : {std::pair{"--start-weight-decay", start_weight_decay},
                                std::pair{"--end-weight-decay", end_weight_decay}})
    MG_USER_CHECK(std::isnan(v) || v >= 0.0, flag, " must be >= 0 (got ", v, ")");
  const int sources = int(mock_data) + int(!data_path.empty()) + int(!train_data_path.empty());
  MG_USER_CHECK(sources > 0,
                "no training data: pass --data-path PREFIX (a preprocessed "
                "dataset), --train-data-path, or --mock-data");
  MG_USER_CHECK(sources == 1, "pass only one of --mock-data, --data-path, --train-data-path");
  MG_USER_CHECK(mock_data || !tokenizer.tokenizer_type.empty(),
                "--data-path needs --tokenizer-type (its vocabulary sizes the model and gives EOD)",
                // upstream's GPT-3 and SC21 scripts leave it out
                tokenizer.merge_file.empty()
                    ? ""
                    : "; with --vocab-file and --merge-file, "
                      "pass --tokenizer-type GPT2BPETokenizer (Megatron-LM needs it too)");
  MG_USER_CHECK(!parallel.overlap_param_gather || use_distributed_optimizer,
                "--overlap-param-gather needs --use-distributed-optimizer");
  MG_USER_CHECK(!(bf16 && fp16), "pass only one of --bf16 and --fp16");
  if (recompute_activations) {
    MG_USER_CHECK(recompute_granularity.empty() || recompute_granularity == "selective",
                  "--recompute-activations means --recompute-granularity selective");
    recompute_granularity = "selective";
  }
  MG_USER_CHECK(recompute_granularity.empty() || recompute_granularity == "full" ||
                    recompute_granularity == "selective",
                "--recompute-granularity '", recompute_granularity, "': use full or selective");
  MG_USER_CHECK(recompute_num_layers >= 0, "--recompute-num-layers must be >= 0 (got ",
                recompute_num_layers, ")");
  if (recompute_granularity == "full") {
    MG_USER_CHECK(recompute_method == "uniform" || recompute_method == "block",
                  "--recompute-granularity full needs --recompute-method uniform or block (got '",
                  recompute_method, "')");
    MG_USER_CHECK(recompute_num_layers >= 1,
                  "--recompute-granularity full needs "
                  "--recompute-num-layers N >= 1 (got ",
                  recompute_num_layers, ")");
  } else {
    MG_USER_CHECK(recompute_method.empty(),
                  "--recompute-method needs --recompute-granularity full");
  }
  MG_USER_CHECK(save_interval >= 0, "--save-interval must be >= 0 (got ", save_interval, ")");
  MG_USER_CHECK(save_interval == 0 || !save.empty(), "--save-interval needs --save DIR");
  MG_USER_CHECK(ckpt_keep_last >= 0, "--ckpt-keep-last must be >= 0 (got ", ckpt_keep_last, ")");
  MG_USER_CHECK(exit_interval >= 0, "--exit-interval must be >= 0 (got ", exit_interval, ")");
  MG_USER_CHECK(exit_duration_in_mins >= 0, "--exit-duration-in-mins must be >= 0 (got ",
                exit_duration_in_mins, ")");
  loss_scaler.validate();
  overflow_iters.clear();
  MG_USER_CHECK(inject_grad_overflow.empty() || fp16,
                "--inject-grad-overflow tests fp16 loss "
                "scaling (the skipped step); it needs --fp16");
  for (const std::string& s : inject_grad_overflow) {
    size_t used = 0;
    int64_t it = -1;
    try {
      it = std::stoll(s, &used);
    } catch (const std::exception&) {
    }
    MG_USER_CHECK(used == s.size() && it >= 1 && it <= train_iters, "--inject-grad-overflow '", s,
                  "': give step numbers in [1, --train-iters]");
    overflow_iters.push_back(it);
  }
  split_samples();  // throws if a split's sample count overflows
  const LRSchedule sched = lr_schedule();
  // Megatron's rule, named by the flags that set each length.
  const char* decay_flag = lr_decay_iters > 0     ? "--lr-decay-iters"
                           : lr_decay_samples > 0 ? "--lr-decay-samples"
                           : train_samples > 0    ? "--train-samples"
                                                  : "--train-iters";
  const char* warmup_flag = !std::isnan(lr_warmup_fraction) ? "--lr-warmup-fraction"
                            : lr_warmup_samples > 0         ? "--lr-warmup-samples"
                                                            : "--lr-warmup-iters";
  MG_USER_CHECK(sched.style == "constant" || double(sched.decay_steps) > sched.warmup_steps,
                "the decay horizon (", decay_flag, ": ", sched.decay_steps,
                " samples) must be longer than the warmup (", warmup_flag, ": ", sched.warmup_steps,
                " samples)");
  sched.validate();
  return warning;
}

}  // namespace mg
