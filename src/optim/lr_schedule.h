// Megatron's learning-rate schedule (OptimizerParamScheduler), counted in samples: linear warmup
// from lr_warmup_init to lr over warmup_steps, then decay to min_lr by decay_steps with
// ratio = (step - warmup) / (decay - warmup); min_lr afterwards.
#pragma once
#include <cstdint>
#include <string>

namespace mg {

struct LRSchedule {
  double lr = 0.0;              // --lr: peak learning rate
  double min_lr = 0.0;          // --min-lr: floor
  double lr_warmup_init = 0.0;  // --lr-warmup-init: first warmup value
  int64_t warmup_steps = 0;     // in samples (--lr-warmup-iters x global batch)
  int64_t decay_steps = 0;      // in samples (--lr-decay-iters x global batch)
  std::string style = "linear"; // --lr-decay-style: constant, linear, cosine, inverse-square-root

  // The learning rate after `samples` samples have been consumed.
  double at(int64_t samples) const;
  void validate() const;
};

}  // namespace mg
