// `megatron train` flags: Megatron-LM's names and meanings.
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#include "cli/commands.h"
#include "cli/compat_flags.h"
#include "cli/model_options.h"
#include "cli/tokenizer_options.h"

namespace mg {

#define MG_FIELD(expr) [](TrainConfig& c) -> auto& { return c.expr; }

const std::vector<Option<TrainConfig>>& train_options() {
  using C = TrainConfig;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = model_options<C>(MG_FIELD(model));
    std::vector<Option<C>> rest = {
      // batch and run length
      valued<C>("--micro-batch-size", "B", "samples per micro-batch", MG_FIELD(micro_batch_size)),
      valued<C>("--global-batch-size", "G",
                "samples per optimizer step over all DP ranks (0: B x DP)",
                MG_FIELD(global_batch_size)),
      valued<C>("--train-iters", "N", "optimizer steps to run", MG_FIELD(train_iters)),
      // sample-based training
      valued<C>("--train-samples", "N",
                "samples to train on, instead of --train-iters (iterations: N / "
                "--global-batch-size; schedules then take --lr-*-samples)",
                MG_FIELD(train_samples)),
      valued<C>("--rampup-batch-size", "START INCREMENT SAMPLES...",
                "with --train-samples: the global batch starts at START and grows by INCREMENT "
                "evenly over SAMPLES samples up to --global-batch-size",
                MG_FIELD(rampup_batch_size)),
      // optimizer and schedule
      valued<C>("--optimizer", "NAME", "adam (AdamW) | sgd", MG_FIELD(optimizer)),
      valued<C>("--sgd-momentum", "X", "SGD momentum", MG_FIELD(sgd_momentum)),
      on_off<C>("--use-distributed-optimizer",
                "shard fp32 main params and optimizer state over data-parallel ranks (ZeRO-1)",
                MG_FIELD(use_distributed_optimizer)),
      valued<C>("--lr", "X", "peak learning rate (required)", MG_FIELD(lr)),
      valued<C>("--min-lr", "X", "learning-rate floor", MG_FIELD(min_lr)),
      valued<C>("--lr-decay-style", "NAME", "constant | linear | cosine | inverse-square-root | WSD",
                MG_FIELD(lr_decay_style)),
      valued<C>("--lr-warmup-iters", "N", "linear warmup iterations", MG_FIELD(lr_warmup_iters)),
      valued<C>("--lr-warmup-samples", "N", "linear warmup samples", MG_FIELD(lr_warmup_samples)),
      valued<C>("--lr-warmup-fraction", "X", "warmup as a fraction of the decay horizon",
                MG_FIELD(lr_warmup_fraction)),
      valued<C>("--lr-warmup-init", "X", "learning rate at the start of warmup",
                MG_FIELD(lr_warmup_init)),
      valued<C>("--lr-decay-iters", "N", "decay horizon in iterations (0: --train-iters)",
                MG_FIELD(lr_decay_iters)),
      valued<C>("--lr-decay-samples", "N", "decay horizon in samples", MG_FIELD(lr_decay_samples)),
      valued<C>("--lr-wsd-decay-style", "NAME", "WSD anneal: linear | cosine | exponential | minus_sqrt",
                MG_FIELD(lr_wsd_decay_style)),
      valued<C>("--lr-wsd-decay-iters", "N", "WSD anneal length in iterations",
                MG_FIELD(lr_wsd_decay_iters)),
      valued<C>("--lr-wsd-decay-samples", "N", "WSD anneal length in samples",
                MG_FIELD(lr_wsd_decay_samples)),
      valued<C>("--start-weight-decay", "X", "weight decay at the start (schedule)",
                MG_FIELD(start_weight_decay)),
      valued<C>("--end-weight-decay", "X", "weight decay at the end (schedule)",
                MG_FIELD(end_weight_decay)),
      valued<C>("--weight-decay-incr-style", "NAME", "constant | linear | cosine",
                MG_FIELD(weight_decay_incr_style)),
      valued<C>("--weight-decay", "X", "decoupled weight decay (not on biases / 1-D params)",
                MG_FIELD(adam.weight_decay)),
      valued<C>("--clip-grad", "X", "global grad-norm clip (0: off)", MG_FIELD(adam.clip_grad)),
      valued<C>("--adam-beta1", "X", "Adam beta1", MG_FIELD(adam.beta1)),
      valued<C>("--adam-beta2", "X", "Adam beta2", MG_FIELD(adam.beta2)),
      valued<C>("--adam-eps", "X", "Adam epsilon", MG_FIELD(adam.eps)),
      valued<C>("--seed", "N", "random seed for init and data order", MG_FIELD(seed)),
      // parallelism (data-parallel size = world / (TP x CP x PP))
      valued<C>("--tensor-model-parallel-size", "TP", "tensor-parallel ranks (adjacent ranks)",
                MG_FIELD(parallel.tensor_model_parallel_size)),
      valued<C>("--pipeline-model-parallel-size", "PP", "pipeline stages",
                MG_FIELD(parallel.pipeline_model_parallel_size)),
      valued<C>("--context-parallel-size", "CP",
                "context-parallel ranks: each sequence split in 2 x CP chunks, rank r holding "
                "chunks r and 2 CP - 1 - r (gradients reduced over DP x CP)",
                MG_FIELD(parallel.context_parallel_size)),
      valued<C>("--expert-model-parallel-size", "EP",
                "expert-parallel ranks: each MoE layer's experts split over EP ranks of the "
                "experts' grid (TP x DP x CP / expert TP), tokens exchanged by all-to-all or "
                "all-gather (docs/moe.md)",
                MG_FIELD(parallel.expert_model_parallel_size)),
      valued<C>("--expert-tensor-parallel-size", "N",
                "ETP: each expert's MLP split over ETP ranks, independent of "
                "--tensor-model-parallel-size (Megatron's parallel folding; 0: the same as TP)",
                MG_FIELD(parallel.expert_tensor_parallel_size)),
      valued<C>("--moe-token-dispatcher-type", "NAME",
                "how tokens reach their experts' EP ranks: alltoall | allgather",
                MG_FIELD(parallel.moe_token_dispatcher_type)),
      valued<C>("--cp-comm-type", "NAME",
                "context-parallel attention: p2p (ring exchanging K/V blocks) | a2a (all-to-all "
                "over heads; heads / TP divisible by CP)",
                MG_FIELD(parallel.cp_comm_type)),
      on_off<C>("--sequence-parallel",
                "split LayerNorm/residual activations along the sequence across TP ranks",
                MG_FIELD(parallel.sequence_parallel)),
      valued<C>("--decoder-first-pipeline-num-layers", "N",
                "layers on the first pipeline stage (0: even split)",
                MG_FIELD(parallel.decoder_first_pipeline_num_layers)),
      valued<C>("--decoder-last-pipeline-num-layers", "N",
                "layers on the last pipeline stage (0: even split)",
                MG_FIELD(parallel.decoder_last_pipeline_num_layers)),
      valued<C>("--num-layers-per-virtual-pipeline-stage", "N",
                "interleaved 1F1B: layers per virtual pipeline stage (v = layers / (PP x N))",
                MG_FIELD(parallel.num_layers_per_virtual_pipeline_stage)),
      valued<C>("--num-virtual-stages-per-pipeline-rank", "V",
                "interleaved 1F1B: model chunks per pipeline rank",
                MG_FIELD(parallel.num_virtual_stages_per_pipeline_rank)),
      valued<C>("--microbatch-group-size-per-virtual-pipeline-stage", "N",
                "interleaved 1F1B: micro-batches a virtual stage runs in a row (default PP)",
                MG_FIELD(parallel.microbatch_group_size_per_vp_stage)),
      valued<C>("--ddp-bucket-size", "N", "gradient elements per data-parallel all-reduce "
                "(0: Megatron's max(40M, 1M x data-parallel size))",
                MG_FIELD(parallel.ddp_bucket_size)),
      on_off<C>("--overlap-grad-reduce",
                "start each bucket's DP all-reduce during the last backward, once its grads are final",
                MG_FIELD(parallel.overlap_grad_reduce)),
      on_off<C>("--overlap-param-gather",
                "with the distributed optimizer, wait for each bucket's parameter all-gather only "
                "when the next forward reaches it",
                MG_FIELD(parallel.overlap_param_gather)),
      on_off<C>("--grad-reduce-in-bf16",
                "reduce data-parallel gradients in bf16 (half the bytes; accumulation stays fp32)",
                MG_FIELD(parallel.grad_reduce_in_bf16)),
      // data
      on_off<C>("--mock-data", "train on Megatron's synthetic mock dataset", MG_FIELD(mock_data)),
      valued<C>("--data-path", "[W] PREFIX...",
                "preprocessed datasets (PREFIX.bin/.idx), optionally weighted: W1 P1 W2 P2 ...",
                MG_FIELD(data_path)),
      valued<C>("--train-data-path", "[W] PREFIX...", "training blend (instead of --split)",
                MG_FIELD(train_data_path)),
      valued<C>("--valid-data-path", "[W] PREFIX...", "validation blend",
                MG_FIELD(valid_data_path)),
      valued<C>("--test-data-path", "[W] PREFIX...", "test blend", MG_FIELD(test_data_path)),
      valued<C>("--data-cache-path", "DIR",
                "index cache directory (default, as Megatron: <prefix>/cache/GPTDataset_indices, "
                "a directory named after each dataset's prefix)",
                MG_FIELD(data_cache_path)),
      valued<C>("--split", "A,B,C", "train/valid/test weights", MG_FIELD(split)),
      on_off<C>("--eod-mask-loss", "exclude positions whose input is EOD from the loss",
                MG_FIELD(eod_mask_loss)),
      on_off<C>("--reset-position-ids", "restart position ids after each EOD",
                MG_FIELD(reset_position_ids)),
      on_off<C>("--reset-attention-mask", "tokens after an EOD do not attend to tokens before it",
                MG_FIELD(reset_attention_mask)),
      // activation recompute
      on_off<C>("--recompute-activations",
                "selective recompute of the attention core (flash attention always does this)",
                MG_FIELD(recompute_activations)),
      valued<C>("--recompute-granularity", "NAME",
                "full (recompute whole layers in backward) | selective", MG_FIELD(recompute_granularity)),
      valued<C>("--recompute-method", "NAME",
                "full recompute: uniform (all layers, in chunks of N) | block (the first N layers "
                "of each stage)", MG_FIELD(recompute_method)),
      valued<C>("--recompute-num-layers", "N", "layers per recompute chunk (uniform) or "
                "recomputed layers per stage (block)", MG_FIELD(recompute_num_layers)),
      // numerics
      on_off<C>("--bf16", "bf16 params and activations; fp32 GEMM accumulation, main grads and "
                "optimizer main params", MG_FIELD(bf16)),
      on_off<C>("--fp16", "fp16 params and activations with loss scaling; fp32 main grads and "
                "optimizer main params", MG_FIELD(fp16)),
      valued<C>("--loss-scale", "X", "fp16: static loss scale (unset: dynamic scaling)",
                MG_FIELD(loss_scaler.loss_scale)),
      valued<C>("--initial-loss-scale", "X", "fp16: initial dynamic loss scale",
                MG_FIELD(loss_scaler.initial_loss_scale)),
      valued<C>("--min-loss-scale", "X", "fp16: floor of the dynamic loss scale",
                MG_FIELD(loss_scaler.min_loss_scale)),
      valued<C>("--loss-scale-window", "N",
                "fp16: clean iterations before the dynamic loss scale doubles",
                MG_FIELD(loss_scaler.loss_scale_window)),
      valued<C>("--hysteresis", "N", "fp16: overflows tolerated before the loss scale halves",
                MG_FIELD(loss_scaler.hysteresis)),
      valued<C>("--inject-grad-overflow", "ITER...",
                "testing aid: put an inf into the last rank's grads at these iterations",
                MG_FIELD(inject_grad_overflow)),
      {"--no-check-for-nan-in-loss-and-grad", "", "do not stop on a NaN/Inf loss or grad norm",
       [](C& c, const std::vector<std::string>&) { c.check_for_nan_in_loss_and_grad = false; },
       [](const C&) { return std::string(); }},
      // checkpoints
      valued<C>("--save", "DIR", "save checkpoints to DIR (DIR/iter_%07d, atomically)",
                MG_FIELD(save)),
      valued<C>("--load", "DIR", "resume from DIR's latest checkpoint (none there: start fresh)",
                MG_FIELD(load)),
      valued<C>("--save-interval", "N", "iterations between checkpoints (0: only at the end)",
                MG_FIELD(save_interval)),
      on_off<C>("--no-save-optim", "save model weights only", MG_FIELD(no_save_optim)),
      on_off<C>("--no-load-optim", "load model weights only; the optimizer starts afresh",
                MG_FIELD(no_load_optim)),
      on_off<C>("--no-load-rng", "do not restore the checkpoint's random state",
                MG_FIELD(no_load_rng)),
      on_off<C>("--finetune", "load weights only and start at iteration 0", MG_FIELD(finetune)),
      on_off<C>("--exit-on-missing-checkpoint", "fail when --load holds no checkpoint",
                MG_FIELD(exit_on_missing_checkpoint)),
      valued<C>("--ckpt-keep-last", "K",
                "keep the K newest complete checkpoints (0: all); older ones are removed only "
                "after a newer one is complete",
                MG_FIELD(ckpt_keep_last)),
      on_off<C>("--exit-signal-handler",
                "on SIGTERM: finish the iteration, save (with --save) and exit 0",
                MG_FIELD(exit_signal_handler)),
      valued<C>("--exit-interval", "N", "exit (after saving) when the iteration is a multiple of N",
                MG_FIELD(exit_interval)),
      valued<C>("--exit-duration-in-mins", "X", "exit (after saving) once training ran X minutes",
                MG_FIELD(exit_duration_in_mins)),
      // logging and evaluation
      valued<C>("--log-interval", "N", "iterations per log line", MG_FIELD(log_interval)),
      valued<C>("--device", "cpu|cuda",
                "where params, grads, optimizer state and activations live and the ops run "
                "(cuda: one GPU per rank, by node-local rank; needs the CUDA backend)",
                MG_FIELD(device)),
      valued<C>("--distributed-backend", "nccl|mpi",
                "GPU runs: nccl (default) or mpi (GPU buffers staged through host memory; "
                "several ranks may share one GPU); CPU runs always use mpi",
                MG_FIELD(distributed_backend)),
      valued<C>("--distributed-timeout-minutes", "X",
                "end the job when a collective or pipeline transfer waits longer than X minutes "
                "(a stopped or stuck rank), naming who waits on whom; fractions allowed",
                MG_FIELD(distributed_timeout_minutes)),
      valued<C>("--timing-log-level", "N",
                "phase timers after each log line: 0 off, 1 step phases, 2 also communication, "
                "optimizer parts, compute by kind of op and (PP > 1) the pipeline bubble per stage",
                MG_FIELD(timing_log_level)),
      valued<C>("--eval-interval", "N", "iterations between validations (0: never)",
                MG_FIELD(eval_interval)),
      valued<C>("--eval-iters", "N", "global batches per validation", MG_FIELD(eval_iters)),
      // TensorBoard: Megatron's flags, train/tensorboard_log.h
      valued<C>("--tensorboard-dir", "DIR",
                "write a TensorBoard event file to DIR (from the last rank, as Megatron does)",
                MG_FIELD(tensorboard.dir)),
      valued<C>("--tensorboard-log-interval", "N", "iterations between TensorBoard scalars",
                MG_FIELD(tensorboard.log_interval)),
      valued<C>("--tensorboard-queue-size", "N",
                "TensorBoard scalars buffered before they are written (also written at every "
                "log interval)",
                MG_FIELD(tensorboard.queue_size)),
      on_off<C>("--log-timers-to-tensorboard",
                "write iteration-time, throughput and the --timing-log-level timers to TensorBoard",
                MG_FIELD(tensorboard.log_timers)),
      on_off<C>("--log-validation-ppl-to-tensorboard",
                "also write the validation perplexity to TensorBoard",
                MG_FIELD(tensorboard.log_validation_ppl)),
      on_off<C>("--log-memory-to-tensorboard", "write memory use (mem-*) to TensorBoard",
                MG_FIELD(tensorboard.log_memory)),
      {"--no-log-loss-scale-to-tensorboard", "", "do not write loss-scale to TensorBoard",
       [](C& c, const std::vector<std::string>&) { c.tensorboard.log_loss_scale = false; },
       [](const C&) { return std::string(); }},
      on_off<C>("--log-world-size-to-tensorboard", "write world-size to TensorBoard",
                MG_FIELD(tensorboard.log_world_size)),
      on_off<C>("--log-params-norm",
                "compute the parameters' L2 norm each iteration: \"params norm\" in the log "
                "line and params-norm in TensorBoard",
                MG_FIELD(log_params_norm)),
      on_off<C>("--log-num-zeros-in-grad",
                "count the zero gradient elements each iteration: \"num zeros\" in the log line "
                "and num-zeros in TensorBoard",
                MG_FIELD(log_num_zeros_in_grad)),
      // Megatron's switch for the throughput field
      on_off<C>("--log-throughput",
                "add 'throughput per GPU (TFLOP/s/GPU)' to each iteration line (as upstream, "
                "only when given)",
                MG_FIELD(log_throughput)),
      valued<C>("--decoupled-lr", "X",
                "peak learning rate of the word embeddings and output layer (same warmup and "
                "decay)", MG_FIELD(decoupled_lr)),
      on_off<C>("--calculate-per-token-loss",
                "loss = sum over the global batch's unmasked tokens / their count (not the mean "
                "of per-micro-batch means)", MG_FIELD(calculate_per_token_loss)),
      valued<C>("--decoupled-min-lr", "X", "their learning-rate floor (unset: --min-lr)",
                MG_FIELD(decoupled_min_lr)),
      valued<C>("--dump-final-params", "PATH",
                "after training, write all parameters in the single-rank layout (raw fp32 to "
                "PATH, names/shapes/offsets to PATH.json)",
                MG_FIELD(dump_final_params)),
    };
    t.insert(t.end(), rest.begin(), rest.end());
    const auto tok = tokenizer_options<C>(MG_FIELD(tokenizer));
    t.insert(t.end(), tok.begin(), tok.end());
    // The rest of Megatron's flags, as data
    // (cli/compat_flags.cpp: no-op, not yet, default only, renamed).
    const auto compat = compat_options<C>("train");
    t.insert(t.end(), compat.begin(), compat.end());
    return t;
  }();
  return table;
}

#undef MG_FIELD

}  // namespace mg
// clang-format on
