// What Megatron-LM's training_log and evaluate_and_print_results write to TensorBoard, with
// its tag names, from the last rank (the one that holds its SummaryWriter):
//  every --tensorboard-log-interval iterations: learning-rate, batch-size, lm loss, loss-scale,
//    grad-norm (not on a skipped step), and with their flags world-size, num-zeros,
//    params-norm, mem-*; each but mem-* also as "<tag> vs samples" (x = consumed samples);
//  every --log-interval iterations, with --log-timers-to-tensorboard: iteration-time (s),
//    throughput (TFLOP/s per GPU; only with --log-throughput too), and each enabled phase timer as "<name>-time" (the max over
//    ranks, seconds per iteration);
//  at each validation: "lm loss validation" (+ " ppl" with --log-validation-ppl-to-tensorboard),
//    each also "vs samples".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/tensorboard.h"

namespace mg {

struct TensorBoardConfig {
  std::string dir;                  // --tensorboard-dir: where the event file goes ("": none)
  int64_t log_interval = 1;         // --tensorboard-log-interval: iterations between scalars
  int64_t queue_size = 1000;        // --tensorboard-queue-size: scalars buffered before a write
  bool log_timers = false;          // --log-timers-to-tensorboard
  bool log_validation_ppl = false;  // --log-validation-ppl-to-tensorboard
  bool log_memory = false;          // --log-memory-to-tensorboard
  bool log_loss_scale = true;       // off with --no-log-loss-scale-to-tensorboard
  bool log_world_size = false;      // --log-world-size-to-tensorboard
  void validate() const;
};

// The writer on the last rank when --tensorboard-dir is set; nullptr elsewhere.
std::unique_ptr<TensorBoardWriter> open_tensorboard(const TensorBoardConfig& cfg, int world_rank,
                                                    int world_size);

// One iteration's values. num_zeros and params_norm < 0: not computed (their flags are off).
struct TrainingScalars {
  int64_t iteration = 0, consumed_samples = 0, batch_size = 0, world_size = 1;
  double lr = 0, lm_loss = 0, loss_scale = 1, grad_norm = 0;
  bool skipped = false;  // an fp16 overflow skipped the step: no grad-norm
  double num_zeros = -1, params_norm = -1;
  double load_balancing_loss = -1, z_loss = -1;  // MoE (< 0: not written); Megatron's tags
  const char* load_balancing_name = "load_balancing_loss";  // or seq_load_balancing_loss
};
void write_training_scalars(TensorBoardWriter& w, const TensorBoardConfig& cfg,
                            const TrainingScalars& s);

// The log-interval scalars (--log-timers-to-tensorboard). timer_max_ms: (phase name, the max
// over ranks of its ms per iteration) for each enabled phase that ran. tflops_per_gpu: only
// with --log-throughput (upstream writes "throughput" only then).
void write_interval_scalars(TensorBoardWriter& w, int64_t iteration, double seconds_per_iter,
                            std::optional<double> tflops_per_gpu,
                            const std::vector<std::pair<std::string, double>>& timer_max_ms);

void write_validation_scalars(TensorBoardWriter& w, const TensorBoardConfig& cfg, int64_t iteration,
                              int64_t consumed_samples, double lm_loss);

}  // namespace mg
