#include "optim/optimizer.h"

#include <cmath>

#include "backend/dispatch.h"

namespace mg {

const std::vector<OptimizerKind>& optimizer_kinds() {
  static const std::vector<OptimizerKind> kinds = {
      {"adam", {"exp_avg", "exp_avg_sq"}},  // AdamW's first and second moments
      {"sgd", {"momentum"}},                // SGD's momentum buffer
  };
  return kinds;
}

const OptimizerKind& optimizer_kind(const std::string& name) {
  std::string names;
  for (const OptimizerKind& k : optimizer_kinds()) {
    if (name == k.name) return k;
    names += (names.empty() ? "" : " or ") + std::string(k.name);
  }
  throw UsageError(str_cat("--optimizer '", name, "' is not available; use ", names));
}

void OptimizerConfig::validate() const {
  optimizer_kind(kind);
  MG_USER_CHECK(weight_decay >= 0.f, "--weight-decay must be >= 0 (got ", weight_decay, ")");
  MG_USER_CHECK(beta1 >= 0.f && beta1 < 1.f, "--adam-beta1 must be in [0, 1) (got ", beta1, ")");
  MG_USER_CHECK(beta2 >= 0.f && beta2 < 1.f, "--adam-beta2 must be in [0, 1) (got ", beta2, ")");
  MG_USER_CHECK(eps > 0.f, "--adam-eps must be positive (got ", eps, ")");
  MG_USER_CHECK(sgd_momentum >= 0.f && sgd_momentum < 1.f, "--sgd-momentum must be in [0, 1)");
  MG_USER_CHECK(clip_grad >= 0.f, "--clip-grad must be >= 0 (got ", clip_grad, ")");
}

std::vector<ParamRun> param_runs(const ParamLayout& layout) {
  std::vector<ParamRun> runs;
  for (const ParamSpec& p : layout.params()) {
    const bool decoupled = p.traits.embedding_or_output;
    if (!runs.empty() && runs.back().decay == p.traits.weight_decay &&
        runs.back().decoupled == decoupled && runs.back().offset + runs.back().numel == p.offset)
      runs.back().numel += p.numel();
    else runs.push_back({p.offset, p.numel(), p.traits.weight_decay, decoupled});
  }
  return runs;
}

Optimizer::Optimizer(std::vector<ParamRun> runs, const OptimizerConfig& cfg, DType model_dtype,
                     const void* model_params)
    : cfg_(cfg), kind_(optimizer_kind(cfg.kind)), runs_(std::move(runs)), dtype_(model_dtype) {
  for (const ParamRun& r : runs_) numel_ += r.numel;
  state_ = Tensor({int64_t(kind_.state_slots.size()) * numel_}, DType::F32, ops::device());
  if (dtype_ == DType::F32) return;
  MG_CHECK(model_params, "a 16-bit model needs its params to seed the fp32 main params");
  main_ = Tensor({numel_}, DType::F32, ops::device());
  copy_main_from(model_params);
}

void Optimizer::copy_main_from(const void* model_params) {
  if (main_.empty()) return;
  const int64_t esize = int64_t(dtype_size(dtype_));
  int64_t s = 0;
  for (const ParamRun& r : runs_) {
    const char* src = static_cast<const char*>(model_params) + r.offset * esize;
    ops::cast_to_f32(main_.data<float>() + s, src, dtype_, r.numel);
    s += r.numel;
  }
}

double Optimizer::step(float* params, float* grads, float lr) {
  std::vector<ops::Range> ranges;
  for (const ParamRun& r : runs_) ranges.push_back({r.offset, r.numel});
  const double norm =
      std::sqrt(ops::sum_squares_ranges(grads, ranges.data(), int64_t(ranges.size())));
  step(params, grads, lr, cfg_.weight_decay, norm);
  return norm;
}

Optimizer::StateSlice Optimizer::state_of(int64_t offset, int64_t n) {
  int64_t s = 0;
  for (const ParamRun& r : runs_) {
    if (offset >= r.offset && offset + n <= r.offset + r.numel) {
      const int64_t i = s + offset - r.offset;
      StateSlice out;
      for (size_t k = 0; k < kind_.state_slots.size(); ++k)
        out.slot[k] = state_.data<float>() + int64_t(k) * numel_ + i;
      out.main = main_.empty() ? nullptr : main_.data<float>() + i;
      return out;
    }
    s += r.numel;
  }
  MG_CHECK(false, "elements [", offset, ", ", offset + n, ") are not in one optimizer run");
  return {};
}

void Optimizer::step(void* model_params, float* grads, float lr_default, float wd, double norm,
                     float decoupled_lr) {
  // Megatron / torch clip_grad_norm_: scale by clip / (norm + 1e-6) only when that is < 1.
  const double coeff = cfg_.clip_grad > 0.f ? cfg_.clip_grad / (norm + 1e-6) : 1.0;
  ++t_;
  const int64_t esize = int64_t(dtype_size(dtype_));
  float* state = state_.data<float>();
  int64_t s = 0;  // state offset of the current run
  for (const ParamRun& r : runs_) {
    const float* g = grads + r.offset;
    const float clip = coeff < 1.0 ? float(coeff) : 1.0f;  // applied as the update reads g
    const float decay = r.decay ? wd : 0.f;
    const float lr = r.decoupled && !std::isnan(decoupled_lr) ? decoupled_lr : lr_default;
    float* p =
        main_.empty() ? static_cast<float*>(model_params) + r.offset : main_.data<float>() + s;
    if (cfg_.kind == "adam")
      ops::adamw_update(p, g, state + s, state + numel_ + s, r.numel, lr, cfg_.beta1, cfg_.beta2,
                        cfg_.eps, decay, t_, clip);
    else ops::sgd_update(p, g, state + s, r.numel, lr, cfg_.sgd_momentum, decay, t_, clip);
    if (!main_.empty())  // copy the main params back to the model, rounded
      ops::cast_from_f32(static_cast<char*>(model_params) + r.offset * esize, dtype_, p, r.numel);
    s += r.numel;
  }
}

}  // namespace mg
