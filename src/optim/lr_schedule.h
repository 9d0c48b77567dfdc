// Megatron's OptimizerParamScheduler, counted in samples: linear warmup from lr_warmup_init to
// lr over warmup_steps; then constant, linear, cosine, inverse-square-root or WSD (constant,
// then a final anneal over wsd_decay_steps in linear / cosine / exponential / minus_sqrt shape)
// down to min_lr by decay_steps; min_lr afterwards. Weight decay follows its own schedule from
// start_wd to end_wd (constant, linear or cosine) over wd_incr_steps.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace mg {

struct LRSchedule {
  double lr = 0.0;              // --lr: peak learning rate
  double min_lr = 0.0;          // --min-lr: floor
  double lr_warmup_init = 0.0;  // --lr-warmup-init: first warmup value
  double warmup_steps = 0;      // in samples (--lr-warmup-iters|-samples|-fraction); as
                                // Megatron, a fraction of the decay horizon is kept unrounded
  int64_t decay_steps = 0;      // in samples (--lr-decay-iters|-samples)
  std::string style =
      "linear";  // --lr-decay-style: constant, linear, cosine, inverse-square-root, WSD
  int64_t wsd_decay_steps = 0;            // --lr-wsd-decay-iters|-samples, in samples
  std::string wsd_style = "exponential";  // --lr-wsd-decay-style
  // --decoupled-lr / --decoupled-min-lr (NaN: unset): the embedding and output layer's peak and
  // floor, on the same warmup and decay (Megatron's param-group max_lr / min_lr override; an
  // unset floor is --min-lr).
  double decoupled_lr = NAN, decoupled_min_lr = NAN;

  double start_wd = 0.0, end_wd = 0.0;  // --start-weight-decay / --end-weight-decay
  int64_t wd_incr_steps = 0;            // in samples (the whole run)
  std::string wd_style = "constant";    // --weight-decay-incr-style

  // The learning rate / weight decay after `samples` samples have been consumed.
  double at(int64_t samples) const;
  double weight_decay_at(int64_t samples) const;
  // The decoupled learning rate after `samples` samples (NaN when --decoupled-lr is unset).
  double decoupled_at(int64_t samples) const;
  void validate() const;
};

}  // namespace mg
