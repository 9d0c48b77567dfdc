#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mg {

double LRSchedule::at(int64_t samples) const {
  if (warmup_steps > 0 && samples <= warmup_steps)
    return lr_warmup_init + (lr - lr_warmup_init) * double(samples) / warmup_steps;
  if (style == "constant") return lr;
  if (samples > decay_steps) return min_lr;
  if (style == "inverse-square-root") {
    const double w = std::max(warmup_steps, 1.0);
    return std::max(min_lr, lr * std::sqrt(w) / std::sqrt(double(std::max<int64_t>(samples, 1))));
  }
  const double ratio = (double(samples) - warmup_steps) / (double(decay_steps) - warmup_steps);
  double coeff = 1.0 - ratio;  // linear
  if (style == "cosine") {
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  } else if (style == "WSD") {
    const int64_t anneal_start = decay_steps - wsd_decay_steps;
    if (samples <= anneal_start) {
      coeff = 1.0;
    } else {
      const double r = double(samples - anneal_start) / double(wsd_decay_steps);
      if (wsd_style == "linear") coeff = 1.0 - r;
      else if (wsd_style == "cosine") coeff = 0.5 * (std::cos(M_PI * r) + 1.0);
      else if (wsd_style == "exponential") coeff = 2.0 * std::pow(0.5, r) - 1.0;
      else coeff = 1.0 - std::sqrt(r);  // minus_sqrt
    }
  }
  return min_lr + coeff * (lr - min_lr);
}

double LRSchedule::weight_decay_at(int64_t samples) const {
  if (samples > wd_incr_steps || wd_style == "constant") return end_wd;
  const double ratio = double(samples) / double(wd_incr_steps);
  const double coeff = wd_style == "linear" ? ratio : 0.5 * (std::cos(M_PI * (1 - ratio)) + 1.0);
  return start_wd + coeff * (end_wd - start_wd);
}

double LRSchedule::decoupled_at(int64_t samples) const {
  if (std::isnan(decoupled_lr)) return NAN;
  LRSchedule d = *this;
  d.lr = decoupled_lr;
  if (!std::isnan(decoupled_min_lr)) d.min_lr = decoupled_min_lr;
  return d.at(samples);
}

void LRSchedule::validate() const {
  MG_USER_CHECK(style == "constant" || style == "linear" || style == "cosine" ||
                    style == "inverse-square-root" || style == "WSD",
                "--lr-decay-style must be one of constant, linear, cosine, inverse-square-root, "
                "WSD (got '",
                style, "')");
  MG_USER_CHECK(
      wsd_style == "linear" || wsd_style == "cosine" || wsd_style == "exponential" ||
          wsd_style == "minus_sqrt",
      "--lr-wsd-decay-style must be one of linear, cosine, exponential, minus_sqrt (got '",
      wsd_style, "')");
  MG_USER_CHECK(lr >= 0.0, "--lr must be >= 0 (got ", lr, ")");
  MG_USER_CHECK(std::isnan(decoupled_lr) || decoupled_lr >= 0.0,
                "--decoupled-lr must be >= 0 (got ", decoupled_lr, ")");
  MG_USER_CHECK(std::isnan(decoupled_min_lr) || decoupled_min_lr >= 0.0,
                "--decoupled-min-lr must be >= 0 (got ", decoupled_min_lr, ")");
  MG_USER_CHECK(min_lr >= 0.0 && min_lr <= lr, "--min-lr ", min_lr, " must be in [0, --lr ", lr,
                "]");
  MG_USER_CHECK(warmup_steps >= 0,
                "the warmup (--lr-warmup-iters / -samples / -fraction) must "
                "be >= 0 samples (got ",
                warmup_steps, ")");
  MG_USER_CHECK(style == "constant" || double(decay_steps) > warmup_steps, "the decay horizon (",
                decay_steps, " samples) must be longer than the warmup (", warmup_steps,
                " samples)");
  MG_USER_CHECK(style != "WSD" || (wsd_decay_steps > 0 && wsd_decay_steps <= decay_steps),
                "--lr-decay-style WSD needs --lr-wsd-decay-iters (or -samples) in (0, decay]");
  MG_USER_CHECK(wd_style == "constant" || wd_style == "linear" || wd_style == "cosine",
                "--weight-decay-incr-style must be constant, linear or cosine (got '", wd_style,
                "')");
  MG_USER_CHECK(wd_style != "constant" || start_wd == end_wd,
                "--weight-decay-incr-style constant needs --start-weight-decay == "
                "--end-weight-decay");
  MG_USER_CHECK(start_wd >= 0 && end_wd >= 0,
                "weight decay (--weight-decay, "
                "--start-weight-decay, --end-weight-decay) must be >= 0");
}

}  // namespace mg
