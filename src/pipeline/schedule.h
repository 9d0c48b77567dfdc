// Forward/backward schedules over the micro-batches of one iteration (Megatron's
// pipeline_parallel/schedules.py): no pipelining when PP = 1, otherwise non-interleaved 1F1B
// (warmup = min(PP - r - 1, M) forwards, steady one-forward-one-backward pairs with combined
// send/recv, cooldown backwards). Each micro-batch's loss is scaled by 1/M, so grads accumulate
// to the mean over micro-batches.
#pragma once
#include <functional>

#include "comm/communicator.h"
#include "model/gpt.h"

namespace mg {

// The micro-batch m of this iteration (pointers valid until the next call).
using BatchFn = std::function<MicroBatch(int64_t m)>;

// Activation slots stage `stage` of `stages` needs for M micro-batches under 1F1B.
int64_t pipeline_slots(int stage, int stages, int64_t M);

// Returns the sum over micro-batches of the per-micro-batch loss on the last stage (0 elsewhere).
// before_last_backward (optional) runs right before the last micro-batch's backward.
// loss_scale multiplies the loss that is backpropagated (fp16 loss scaling); the returned
// loss is unscaled. per_token_loss: the gradient of the loss sum (not of the mean over the M
// micro-batches), for a model set to per-token loss.
double forward_backward(GPTModel& model, Communicator& pp, int64_t M, const BatchFn& batch,
                        const std::function<void()>& before_last_backward = nullptr,
                        double loss_scale = 1.0, bool per_token_loss = false);
// Forward passes only (evaluation), one micro-batch at a time through the stages.
double forward_only(GPTModel& model, Communicator& pp, int64_t M, const BatchFn& batch);

}  // namespace mg
