// Everything `megatron train` is configured with, grouped by concern. Field names follow
// Megatron's flags (field foo_bar <-> flag --foo-bar); see cli/options.cpp for the table.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_config.h"
#include "tokenizer/tokenizer.h"
#include "model/config.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/lr_schedule.h"
#include "parallel/parallel_config.h"
#include "parallel/rank_grid.h"
#include "pipeline/schedule_table.h"
#include "train/run_length.h"
#include "train/tensorboard_log.h"

namespace mg {

struct TrainConfig {
  GPTConfig model;
  OptimizerConfig adam;
  ParallelConfig parallel;

  int64_t micro_batch_size = 1;   // --micro-batch-size: samples per micro-batch
  int64_t global_batch_size = 0;  // --global-batch-size: samples per step; 0 means micro batch
  int64_t train_iters = 0;        // --train-iters: optimizer steps
  // Sample-based training (Megatron's --train-samples). finalize_and_validate
  // derives train_iters = train_samples / global_batch_size, as Megatron's update_train_iters.
  int64_t train_samples = 0;  // --train-samples: samples to train on (0: iteration-based)
  std::vector<std::string> rampup_batch_size;  // --rampup-batch-size START INCREMENT SAMPLES
  BatchRampup rampup;  // derived from it: the global batch of each iteration

  double lr = NAN;                        // --lr: peak learning rate (required, as Megatron's None)
  double min_lr = 0.0;                    // --min-lr
  std::string lr_decay_style = "linear";  // --lr-decay-style
  int64_t lr_warmup_iters = 0;            // --lr-warmup-iters
  int64_t lr_warmup_samples = 0;          // --lr-warmup-samples
  double lr_warmup_fraction = NAN;        // --lr-warmup-fraction of the decay horizon (NaN: unset,
                                          // a value no flag can give)
  int64_t lr_decay_iters = 0;             // --lr-decay-iters; 0 means --train-iters
  int64_t lr_decay_samples = 0;           // --lr-decay-samples
  double lr_warmup_init = 0.0;            // --lr-warmup-init
  std::string lr_wsd_decay_style = "exponential";  // --lr-wsd-decay-style
  int64_t lr_wsd_decay_iters = 0;                  // --lr-wsd-decay-iters
  int64_t lr_wsd_decay_samples = 0;                // --lr-wsd-decay-samples
  double start_weight_decay = NAN;  // --start-weight-decay (NaN, unset: --weight-decay)
  double end_weight_decay = NAN;    // --end-weight-decay (NaN, unset: --weight-decay)
  std::string weight_decay_incr_style = "constant";  // --weight-decay-incr-style
  std::string optimizer = "adam";                    // --optimizer: adam (AdamW) | sgd
  float sgd_momentum = 0.9f;                         // --sgd-momentum
  bool use_distributed_optimizer = false;            // --use-distributed-optimizer (ZeRO-1 over DP)
  bool check_for_nan_in_loss_and_grad = true;        // off with --no-check-for-nan-in-loss-and-grad
  std::string recompute_granularity;                 // --recompute-granularity full|selective
  std::string recompute_method;                      // --recompute-method uniform|block
  int64_t recompute_num_layers = 0;                  // --recompute-num-layers N
  bool recompute_activations = false;                // --recompute-activations (= selective)
  bool bf16 = false;             // --bf16: bf16 params and activations, fp32 main grads/params
  bool fp16 = false;             // --fp16: the same in fp16, with loss scaling
  LossScalerConfig loss_scaler;  // --loss-scale, --initial-loss-scale, ... (fp16)
  std::vector<std::string> inject_grad_overflow;  // --inject-grad-overflow ITER...: testing aid
  std::vector<int64_t> overflow_iters;            // derived: those iterations

  std::string device = "cpu";  // --device cpu|cuda: where params, grads and activations live
  // --distributed-backend nccl|mpi (GPU runs; default nccl there): mpi stages GPU buffers
  // through host memory, which also lets several ranks share one GPU. CPU runs use MPI.
  std::string distributed_backend;
  // --distributed-timeout-minutes X: the longest any collective or pipeline transfer may wait
  // before the job ends with a report of who waits on whom (fractions allowed: 0.05 = 3 s).
  double distributed_timeout_minutes = 10;
  uint32_t seed = 1234;          // --seed: init and data order
  int64_t log_interval = 100;    // --log-interval: iterations per log line
  int64_t timing_log_level = 0;  // --timing-log-level 0|1|2: phase timers in the log
  // Upstream's logging and optimizer switches
  bool log_throughput = false;    // --log-throughput: the TFLOP/s/GPU field in iteration lines
  double decoupled_lr = NAN;      // --decoupled-lr: embedding + output layer peak LR (NaN: --lr)
  double decoupled_min_lr = NAN;  // --decoupled-min-lr: their floor (NaN: --min-lr)
  // --calculate-per-token-loss: the loss (and its gradient) summed over the global batch's
  // tokens and divided by their count, not averaged per micro-batch then over micro-batches
  bool calculate_per_token_loss = false;
  int64_t eval_interval = 0;  // --eval-interval: iterations between evaluations; 0 = never
  int64_t eval_iters = 100;   // --eval-iters: global batches per evaluation

  bool mock_data = false;              // --mock-data: Megatron's synthetic dataset
  std::vector<std::string> data_path;  // --data-path [w1] p1 [w2 p2 ...]: blend, split by --split
  std::vector<std::string> train_data_path;  // --train-data-path: per-split blends instead
  std::vector<std::string> valid_data_path;  // --valid-data-path
  std::vector<std::string> test_data_path;   // --test-data-path
  std::string data_cache_path;               // --data-cache-path: where index caches go
  std::string split = "969,30,1";            // --split: train/valid/test weights
  TokenizerConfig tokenizer;                 // --tokenizer-type, --vocab-file, --merge-file
  bool eod_mask_loss = false;                // --eod-mask-loss
  bool reset_position_ids = false;           // --reset-position-ids
  bool reset_attention_mask = false;         // --reset-attention-mask
  std::string dump_final_params;  // --dump-final-params PATH: write the gathered final params

  // checkpoints (docs/checkpoint-format.md)
  std::string save;                         // --save DIR
  std::string load;                         // --load DIR
  int64_t save_interval = 0;                // --save-interval N (0: only at the end / on exit)
  bool no_save_optim = false;               // --no-save-optim
  bool no_load_optim = false;               // --no-load-optim
  bool no_load_rng = false;                 // --no-load-rng
  bool finetune = false;                    // --finetune: params only, iteration 0
  bool exit_on_missing_checkpoint = false;  // --exit-on-missing-checkpoint
  int64_t ckpt_keep_last = 0;               // --ckpt-keep-last K (0: keep all)
  bool exit_signal_handler = false;         // --exit-signal-handler: SIGTERM -> save, exit 0
  int64_t exit_interval = 0;                // --exit-interval N
  double exit_duration_in_mins = 0;         // --exit-duration-in-mins X
  std::vector<std::string> argv;            // the command line, recorded in checkpoints

  // TensorBoard and the log line's optional statistics.
  TensorBoardConfig tensorboard;       // --tensorboard-dir, --tensorboard-log-interval, ...
  bool log_params_norm = false;        // --log-params-norm: "params norm" (log line, TensorBoard)
  bool log_num_zeros_in_grad = false;  // --log-num-zeros-in-grad: "num zeros" (likewise)

  int data_parallel_size = 1;  // derived: world / (TP x CP x PP)

  // Samples the run draws from each split (train, valid, test) — Megatron's: train = iters x G;
  // valid = (iters / eval_interval + 1) x eval_iters x G — in checked arithmetic.
  std::array<int64_t, 3> split_samples() const;
  // Micro-batches per iteration on each data-parallel rank.
  int64_t num_micro_batches() const {
    return global_batch_size / (micro_batch_size * data_parallel_size);
  }
  // The pipeline schedule's shape for M micro-batches per iteration.
  ScheduleShape schedule_shape(int64_t M) const {
    return {parallel.pp(), parallel.virtual_stages, M, parallel.microbatch_group_size_per_vp_stage};
  }
  LRSchedule lr_schedule() const;
  // Storage of params and activations: F32, BF16 (--bf16) or F16 (--fp16).
  DType model_dtype() const { return bf16 ? DType::BF16 : fp16 ? DType::F16 : DType::F32; }
  // The rank grid of the validated layout (finalize_and_validate derives its DP).
  RankGrid rank_grid() const {
    return {parallel.tp(), parallel.pp(), data_parallel_size,
            parallel.cp(), parallel.ep(), parallel.etp()};
  }
  // What checkpoint saving and loading read of this config.
  CheckpointConfig checkpoint_config() const;
  // Fills derived defaults (global batch, decay iters, DP size) and throws UsageError naming
  // the flag. Returns a warning to print, or "".
  std::string finalize_and_validate(int world_size = 1);
};

}  // namespace mg
