#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mg {

double LRSchedule::at(int64_t samples) const {
  if (warmup_steps > 0 && samples <= warmup_steps)
    return lr_warmup_init + (lr - lr_warmup_init) * double(samples) / double(warmup_steps);
  if (style == "constant") return lr;
  if (style == "inverse-square-root") {
    const double w = double(std::max<int64_t>(warmup_steps, 1));
    return std::max(min_lr, lr * std::sqrt(w) / std::sqrt(double(std::max<int64_t>(samples, 1))));
  }
  if (samples > decay_steps) return min_lr;
  const double ratio = double(samples - warmup_steps) / double(decay_steps - warmup_steps);
  const double coeff = style == "cosine" ? 0.5 * (std::cos(M_PI * ratio) + 1.0) : 1.0 - ratio;
  return min_lr + coeff * (lr - min_lr);
}

void LRSchedule::validate() const {
  MG_USER_CHECK(style == "constant" || style == "linear" || style == "cosine" ||
                    style == "inverse-square-root",
                "--lr-decay-style must be one of constant, linear, cosine, inverse-square-root "
                "(got '", style, "')");
  MG_USER_CHECK(lr >= 0.0, "--lr must be >= 0 (got ", lr, ")");
  MG_USER_CHECK(min_lr >= 0.0 && min_lr <= lr, "--min-lr ", min_lr, " must be in [0, --lr ", lr,
                "]");
  MG_USER_CHECK(warmup_steps >= 0, "--lr-warmup-iters must be >= 0");
  MG_USER_CHECK(style == "constant" || style == "inverse-square-root" ||
                    decay_steps > warmup_steps,
                "--lr-decay-iters must be larger than --lr-warmup-iters");
}

}  // namespace mg
