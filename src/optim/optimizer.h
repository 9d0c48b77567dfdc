// The optimizer over runs of a flat parameter buffer: AdamW (decoupled weight decay,
// torch.optim.AdamW's formula) or SGD with momentum (torch.optim.SGD), with global-norm
// gradient clipping. Weight decay is skipped for biases and 1-D parameters (Megatron's rule),
// so the buffer is walked as runs sharing one decay setting. The runs may cover the whole
// buffer or, with the distributed optimizer, only this rank's shard of it; state (Adam moments
// or momentum) exists only for the runs. For a 16-bit model (--bf16/--fp16) the optimizer also
// keeps fp32 main params for the runs (copied from the model at construction), steps them, and
// writes them back to the model rounded to its dtype.
#pragma once
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "tensor/tensor.h"

namespace mg {

// The optimizers --optimizer names, each with its fp32 state slots per stepped element in the
// order they are stored, named as checkpoints store them (optim/<slot>/<param>). The memory
// estimate, the checkpoint and the planner read this table; nothing else counts slots.
struct OptimizerKind {
  const char* name;
  std::vector<const char*> state_slots;
};
inline constexpr size_t kMaxStateSlots = 2;
const std::vector<OptimizerKind>& optimizer_kinds();
// The kind --optimizer names (UsageError listing the kinds for any other name).
const OptimizerKind& optimizer_kind(const std::string& name);

struct OptimizerConfig {
  std::string kind = "adam";   // --optimizer: adam | sgd
  float weight_decay = 0.01f;  // --weight-decay (the schedule's value when one is set)
  float beta1 = 0.9f;          // --adam-beta1
  float beta2 = 0.999f;        // --adam-beta2
  float eps = 1e-8f;           // --adam-eps
  float sgd_momentum = 0.9f;   // --sgd-momentum
  float clip_grad = 1.0f;      // --clip-grad: max global L2 norm; 0 disables clipping
  void validate() const;
};

// A contiguous range of the flat buffers sharing one weight-decay setting and one learning
// rate (--decoupled-lr's, for the embedding and output layer, or the schedule's).
struct ParamRun {
  int64_t offset, numel;
  bool decay;
  bool decoupled = false;  // the embedding or output layer: steps with the decoupled lr
};
// Runs covering every parameter of the layout (adjacent params with equal decay merged).
std::vector<ParamRun> param_runs(const ParamLayout& layout);

class Optimizer {
 public:
  // model_params: the model's flat buffer in model_dtype (needed when that is 16-bit).
  Optimizer(std::vector<ParamRun> runs, const OptimizerConfig& cfg, DType model_dtype = DType::F32,
            const void* model_params = nullptr);
  Optimizer(const ParamLayout& layout, const OptimizerConfig& cfg, DType model_dtype = DType::F32,
            const void* model_params = nullptr)
      : Optimizer(param_runs(layout), cfg, model_dtype, model_params) {}

  // Clips the runs' grads given the global grad norm (computed over all ranks by the caller; the
  // clip factor is applied as the update reads each grad, the grad buffer is not rewritten),
  // then updates the runs' params (the model's flat buffer, in model_dtype) with learning rate
  // lr (decoupled_lr for decoupled runs; NaN: lr) and weight decay wd.
  void step(void* params, float* grads, float lr, float wd, double grad_norm,
            float decoupled_lr = NAN);
  // Single-rank convenience (AdamW with the configured weight decay): computes the norm of all
  // runs' grads, then steps. Returns the norm.
  double step(float* params, float* grads, float lr);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // checkpoint load
  const std::vector<ParamRun>& runs() const { return runs_; }
  // The state of flat-buffer elements [offset, offset + n), which must lie inside one run:
  // one pointer per state slot of the kind (optimizer_kinds(); Adam: exp_avg, exp_avg_sq; SGD:
  // momentum) and the fp32 main params (null for an f32 model, whose main params are the
  // model's own).
  struct StateSlice {
    std::array<float*, kMaxStateSlots> slot{};
    float* main = nullptr;
  };
  const OptimizerKind& kind() const { return kind_; }
  StateSlice state_of(int64_t offset, int64_t n);
  // A 16-bit model's fp32 main params set from the model's params (a load without optimizer
  // state); nothing for an f32 model.
  void copy_main_from(const void* model_params);
  // Optimizer state: moments, plus the fp32 main params of a 16-bit model.
  size_t state_bytes() const { return state_.allocated_bytes() + main_.allocated_bytes(); }

 private:
  OptimizerConfig cfg_;
  const OptimizerKind& kind_;
  std::vector<ParamRun> runs_;
  int64_t numel_ = 0;
  Tensor state_;  // the kind's slots one after the other, numel_ elements each
  DType dtype_;
  Tensor main_;  // fp32 main params of the runs, packed like state_ (16-bit models only)
  int64_t t_ = 0;
};

}  // namespace mg
