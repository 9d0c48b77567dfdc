#include "train/log_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mg {

namespace {
std::string fmt(const char* f, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}
}  // namespace

std::string format_iteration(const IterationLog& l) {
  std::string s;
  s += fmt(" iteration %8lld/%8lld |", (long long)l.iteration, (long long)l.train_iters);
  s += fmt(" consumed samples: %12lld |", (long long)l.consumed_samples);
  s += fmt(" elapsed time per iteration (ms): %.1f |", l.ms_per_iter);
  if (l.show_throughput) s += fmt(" throughput per GPU (TFLOP/s/GPU): %.3f |", l.tflops);
  s += fmt(" learning rate: %.6E |", l.lr);
  s += fmt(" global batch size: %5lld |", (long long)l.global_batch_size);
  s += fmt(" lm loss: %.6E |", l.lm_loss);
  if (l.load_balancing_loss >= 0)
    s += fmt(" %s: %.6E |", l.load_balancing_name, l.load_balancing_loss);
  if (l.z_loss >= 0) s += fmt(" z_loss: %.6E |", l.z_loss);
  if (l.dropped_tokens >= 0) s += fmt(" dropped tokens: %.0f |", l.dropped_tokens);
  s += fmt(" loss scale: %.1f |", l.loss_scale);
  s += fmt(" grad norm: %.3f |", l.grad_norm);
  if (l.num_zeros >= 0) s += fmt(" num zeros: %.1f |", l.num_zeros);
  if (l.params_norm >= 0) s += fmt(" params norm: %.3f |", l.params_norm);
  s += fmt(" number of skipped iterations: %3lld |", (long long)l.skipped_iterations);
  s += fmt(" number of nan iterations: %3lld |", (long long)l.nan_iterations);
  s += fmt(" tp comm bytes: %lld |", (long long)l.tp_bytes);
  s += fmt(" pp comm bytes: %lld |", (long long)l.pp_bytes);
  s += fmt(" dp comm bytes: %lld |", (long long)l.dp_bytes);
  s += fmt(" embedding comm bytes: %lld |", (long long)l.embedding_bytes);
  s += fmt(" cp comm bytes: %lld |", (long long)l.cp_bytes);
  if (l.ep_bytes >= 0) s += fmt(" ep comm bytes: %lld |", (long long)l.ep_bytes);
  return s;
}

double validation_ppl(double lm_loss) { return std::exp(std::min(20.0, lm_loss)); }

std::string format_validation(int64_t iteration, double lm_loss, const std::string& set) {
  const std::string body =
      fmt(" validation loss at iteration %lld%s | lm loss value: %.6E | lm loss PPL: %.6E | ",
          (long long)iteration, set.c_str(), lm_loss, validation_ppl(lm_loss));
  const std::string rule(body.size() + 1, '-');
  return rule + "\n" + body + "\n" + rule;
}

std::string memory_report(int64_t param_bytes, int64_t grad_bytes, size_t optimizer_bytes,
                          size_t activation_bytes, double optimizer_formula_bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt(
      " > memory (MiB, rank 0): params %.3f | grads %.3f | optimizer state %.3f (formula %.3f) | "
      "activations + scratch %.3f | total %.3f | optimizer state bytes: %zu",
      param_bytes / kMiB, grad_bytes / kMiB, optimizer_bytes / kMiB, optimizer_formula_bytes / kMiB,
      activation_bytes / kMiB,
      (param_bytes + grad_bytes + optimizer_bytes + activation_bytes) / kMiB, optimizer_bytes);
}

}  // namespace mg
