// The run's metrics: Megatron's iteration and validation log lines, the timers' printout,
// TensorBoard scalars, and the sums they report over each log interval (losses, times, skipped
// and NaN iterations, bytes moved per process group). The trainer hands it each step's result.
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "parallel/process_groups.h"
#include "train/tensorboard.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace mg {

// What one iteration's step produced.
struct StepResult {
  double lr = 0;                  // the scheduled learning rate it used
  double decoupled_lr = NAN;      // --decoupled-lr's schedule (embedding and output layer)
  double loss_scale = 1;          // fp16: the loss scale it used
  double loss = 0;                // lm loss, averaged over DP
  double grad_norm = 0;           // before clipping (0 when skipped)
  bool skipped = false;           // an fp16 overflow skipped the update
  int64_t global_batch_size = 0;  // its samples (--rampup-batch-size: growing)
  double seconds = 0;             // wall time, the step's GPU work included
  double num_zeros = -1;          // --log-num-zeros-in-grad: zero grad elements (-1: not counted)
  double params_norm = -1;        // --log-params-norm: L2 norm of the updated params (-1: not)
  // MoE (-1: not logged): the load-balancing and z losses without their coefficients,
  // averaged over MoE layers, micro-batches and DP; assignments dropped for capacity (summed).
  double load_balancing_loss = -1, z_loss = -1, dropped_tokens = -1;
};

class TrainMetrics {
 public:
  TrainMetrics(const TrainConfig& cfg, ProcessGroups& g) : cfg_(cfg), g_(g) {}
  // Opens --tensorboard-dir's writer on the last rank (and says so), once the run is set up.
  void open_tensorboard();
  // Before a step: every process group's byte counters start from zero.
  void begin_step();
  // After a step: into the run's result and this log interval's sums; TensorBoard's
  // per-iteration scalars every --tensorboard-log-interval.
  void record(int64_t iter, const StepResult& step, int64_t consumed, double loss_scale,
              TrainResult& result);
  // Megatron's iteration line (and --timing-log-level's timers) for the interval ending at
  // iter, then a new interval.
  void log_interval(int64_t iter, const StepResult& step, int64_t consumed, double loss_scale);
  // Megatron's validation line; `set` names the set after training (" on validation set").
  void log_validation(int64_t iter, double loss, const char* set, int64_t consumed);
  // Over every iteration but the first (the only one's when there is one).
  double mean_iteration_seconds(int64_t train_iters) const {
    return train_iters > 1 ? total_seconds_ / double(train_iters - 1) : interval_seconds_;
  }

 private:
  void write_step_scalars(int64_t iter, const StepResult& step, int64_t consumed,
                          double loss_scale);
  // This interval's bytes per iteration over the named groups.
  int64_t bytes_per_iter(std::initializer_list<std::string_view> groups) const;

  const TrainConfig& cfg_;
  ProcessGroups& g_;
  double total_seconds_ = 0;  // of every iteration but the first
  // This log interval's sums.
  double interval_loss_ = 0, interval_seconds_ = 0;
  int64_t interval_iters_ = 0;
  int64_t interval_skipped_ = 0, interval_nan_ = 0;  // Megatron counts these per interval
  std::map<std::string, int64_t, std::less<>> interval_bytes_;  // by process group name
  std::unique_ptr<TensorBoardWriter> tb_;  // --tensorboard-dir, on the last rank only
};

}  // namespace mg
