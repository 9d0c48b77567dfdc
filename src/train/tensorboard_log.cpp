#include "train/tensorboard_log.h"

#include <cstdio>

#include "core/error.h"
#include "tensor/tensor.h"
#include "train/log_format.h"

namespace mg {

namespace {

// Megatron writes most scalars twice: against the iteration and against consumed samples.
void both(TensorBoardWriter& w, const std::string& tag, double v, const TrainingScalars& s) {
  w.add_scalar(tag, v, s.iteration);
  w.add_scalar(tag + " vs samples", v, s.consumed_samples);
}

// This process's resident set size (bytes), from /proc/self/statm.
int64_t resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? int64_t(resident) * 4096 : 0;
}

}  // namespace

void TensorBoardConfig::validate() const {
  MG_USER_CHECK(log_interval > 0, "--tensorboard-log-interval must be positive (got ", log_interval,
                ")");
  MG_USER_CHECK(queue_size > 0, "--tensorboard-queue-size must be positive (got ", queue_size, ")");
}

std::unique_ptr<TensorBoardWriter> open_tensorboard(const TensorBoardConfig& cfg, int world_rank,
                                                    int world_size) {
  if (cfg.dir.empty() || world_rank != world_size - 1) return nullptr;
  return std::make_unique<TensorBoardWriter>(cfg.dir, cfg.queue_size);
}

void write_training_scalars(TensorBoardWriter& w, const TensorBoardConfig& cfg,
                            const TrainingScalars& s) {
  both(w, "learning-rate", s.lr, s);
  both(w, "batch-size", double(s.batch_size), s);
  both(w, "lm loss", s.lm_loss, s);
  if (cfg.log_loss_scale) both(w, "loss-scale", s.loss_scale, s);
  if (cfg.log_world_size) both(w, "world-size", double(s.world_size), s);
  if (!s.skipped) both(w, "grad-norm", s.grad_norm, s);
  if (s.num_zeros >= 0) both(w, "num-zeros", s.num_zeros, s);
  if (s.params_norm >= 0) both(w, "params-norm", s.params_norm, s);
  if (s.load_balancing_loss >= 0)
    w.add_scalar(s.load_balancing_name, s.load_balancing_loss, s.iteration);
  if (s.z_loss >= 0) w.add_scalar("z_loss", s.z_loss, s.iteration);
  if (cfg.log_memory) {
    // Megatron reads torch.cuda.memory_stats(); here the tensor allocator's own counts and,
    // for "reserved", what the process holds resident.
    w.add_scalar("mem-reserved-bytes", double(resident_bytes()), s.iteration);
    w.add_scalar("mem-allocated-bytes", double(tensor_bytes_live()), s.iteration);
    w.add_scalar("mem-max-allocated-bytes", double(tensor_bytes_peak()), s.iteration);
  }
}

void write_interval_scalars(TensorBoardWriter& w, int64_t iteration, double seconds_per_iter,
                            std::optional<double> tflops_per_gpu,
                            const std::vector<std::pair<std::string, double>>& timer_max_ms) {
  w.add_scalar("iteration-time", seconds_per_iter, iteration);
  if (tflops_per_gpu) w.add_scalar("throughput", *tflops_per_gpu, iteration);
  for (const auto& [name, ms] : timer_max_ms) w.add_scalar(name + "-time", ms / 1e3, iteration);
}

void write_validation_scalars(TensorBoardWriter& w, const TensorBoardConfig& cfg, int64_t iteration,
                              int64_t consumed_samples, double lm_loss) {
  w.add_scalar("lm loss validation", lm_loss, iteration);
  w.add_scalar("lm loss validation vs samples", lm_loss, consumed_samples);
  if (cfg.log_validation_ppl) {
    const double ppl = validation_ppl(lm_loss);
    w.add_scalar("lm loss validation ppl", ppl, iteration);
    w.add_scalar("lm loss validation ppl vs samples", ppl, consumed_samples);
  }
}

}  // namespace mg
