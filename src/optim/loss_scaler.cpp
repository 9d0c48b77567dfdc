#include "optim/loss_scaler.h"

#include <algorithm>

#include "core/error.h"

namespace mg {

void LossScalerConfig::validate() const {
  MG_USER_CHECK(loss_scale >= 0.0, "--loss-scale must be positive (got ", loss_scale, ")");
  MG_USER_CHECK(initial_loss_scale > 0.0, "--initial-loss-scale must be positive (got ",
                initial_loss_scale, ")");
  MG_USER_CHECK(min_loss_scale > 0.0 && min_loss_scale <= initial_loss_scale,
                "--min-loss-scale must be positive and at most --initial-loss-scale (got ",
                min_loss_scale, ")");
  MG_USER_CHECK(loss_scale_window >= 1, "--loss-scale-window must be >= 1 (got ", loss_scale_window,
                ")");
  MG_USER_CHECK(hysteresis >= 1, "--hysteresis must be >= 1 (got ", hysteresis, ")");
}

LossScaler::LossScaler(const LossScalerConfig& cfg)
    : cfg_(cfg), scale_(cfg.loss_scale > 0 ? cfg.loss_scale : cfg.initial_loss_scale),
      hysteresis_tracker_(cfg.hysteresis) {}

void LossScaler::update(bool found_inf) {
  if (cfg_.loss_scale > 0) return;  // static
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5, cfg_.min_loss_scale);
    return;
  }
  if (++growth_tracker_ == cfg_.loss_scale_window) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = cfg_.hysteresis;
    scale_ *= 2.0;
  }
}

}  // namespace mg
