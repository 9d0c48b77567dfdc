#include "optim/adamw.h"

#include <cmath>

#include "backend/ops.h"

namespace mg {

void AdamWConfig::validate() const {
  MG_USER_CHECK(weight_decay >= 0.f, "--weight-decay must be >= 0 (got ", weight_decay, ")");
  MG_USER_CHECK(beta1 >= 0.f && beta1 < 1.f, "--adam-beta1 must be in [0, 1) (got ", beta1, ")");
  MG_USER_CHECK(beta2 >= 0.f && beta2 < 1.f, "--adam-beta2 must be in [0, 1) (got ", beta2, ")");
  MG_USER_CHECK(eps > 0.f, "--adam-eps must be positive (got ", eps, ")");
  MG_USER_CHECK(clip_grad >= 0.f, "--clip-grad must be >= 0 (got ", clip_grad, ")");
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& cfg)
    : cfg_(cfg), total_(layout.total_numel()), m_({total_}), v_({total_}) {
  for (const ParamSpec& p : layout.params()) {
    if (!runs_.empty() && runs_.back().decay == p.weight_decay &&
        runs_.back().offset + runs_.back().numel == p.offset)
      runs_.back().numel += p.numel();
    else
      runs_.push_back({p.offset, p.numel(), p.weight_decay});
  }
}

double AdamW::step(float* params, float* grads, float lr) {
  const double norm = std::sqrt(cpu::sum_squares(grads, total_));
  step(params, grads, lr, norm);
  return norm;
}

void AdamW::step(float* params, float* grads, float lr, double norm) {
  // Megatron / torch clip_grad_norm_: scale by clip / (norm + 1e-6) only when that is < 1.
  if (cfg_.clip_grad > 0.f) {
    const double coeff = cfg_.clip_grad / (norm + 1e-6);
    if (coeff < 1.0) cpu::scale_inplace(grads, float(coeff), total_);
  }
  ++t_;
  for (const Run& r : runs_)
    cpu::adamw_update(params + r.offset, grads + r.offset, m_.data<float>() + r.offset,
                      v_.data<float>() + r.offset, r.numel, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                      r.decay ? cfg_.weight_decay : 0.f, t_);
}

}  // namespace mg
