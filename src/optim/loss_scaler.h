// Megatron's loss scaling for --fp16 (core/optimizer/grad_scaler.py). The loss is multiplied
// by scale() before backward; the unscaled main grads are checked for inf/NaN on every rank and
// an overflow skips the step everywhere. Dynamic scaling: an overflow costs one unit of
// hysteresis, and once hysteresis is used up the scale halves (never below the minimum); after
// `window` consecutive clean steps the scale doubles and hysteresis is refilled. A static
// scale (--loss-scale) never changes.
#pragma once
#include <cstdint>

namespace mg {

struct LossScalerConfig {
  double loss_scale = 0.0;                   // --loss-scale: static scale when > 0
  double initial_loss_scale = 4294967296.0;  // --initial-loss-scale (2^32)
  double min_loss_scale = 1.0;               // --min-loss-scale
  int64_t loss_scale_window = 1000;          // --loss-scale-window
  int64_t hysteresis = 2;                    // --hysteresis
  void validate() const;
};

// What a checkpoint keeps of a scaler.
struct LossScalerState {
  double scale = 1.0;
  int64_t growth_tracker = 0, hysteresis_tracker = 0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& cfg);
  double scale() const { return scale_; }
  // After each iteration's inf/NaN check (the same found_inf on every rank).
  void update(bool found_inf);
  LossScalerState state() const { return {scale_, growth_tracker_, hysteresis_tracker_}; }
  void set_state(const LossScalerState& s) {
    scale_ = s.scale, growth_tracker_ = s.growth_tracker,
    hysteresis_tracker_ = s.hysteresis_tracker;
  }

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t growth_tracker_ = 0, hysteresis_tracker_;
};

}  // namespace mg
