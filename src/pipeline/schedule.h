// The runner of pipeline schedules (Megatron's pipeline_parallel/schedules.py): it executes the
// ordered steps pipeline/schedule_table.h gives this rank (no pipelining, 1F1B, interleaved
// 1F1B) over the rank's model chunks. Chunk c on pipeline rank r is virtual stage c P + r: it
// receives its input from virtual stage c P + r - 1 and sends its output to c P + r + 1, so rank
// P - 1 feeds rank 0's next chunk (wrap-around neighbours). Before each step (1F1B) or round
// (interleaved: a forward-backward pair) one exchange sends the previous outputs (activations,
// input gradients) and receives this one's inputs; sends complete in the background where the
// communicator allows (MPI), and activations and gradients travel under two MPI tags. Each micro-batch's loss is
// scaled by 1/M, so grads accumulate to the mean over micro-batches.
#pragma once
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt.h"
#include "pipeline/schedule_table.h"

namespace mg {

// The micro-batch m of this iteration (pointers valid until the next call).
using BatchFn = std::function<MicroBatch(int64_t m)>;

// The most micro-batches chunk `chunk` holds at once under the table (its activation slots).
int64_t in_flight(const ScheduleTable& table, int chunk);

// One iteration's forward and backward steps over M = shape.microbatches micro-batches on this
// rank's chunks (chunks.size() = shape.virtual_stages, pp.size() = shape.pp_size). Returns the
// sum over micro-batches of the per-micro-batch loss on the last virtual stage (0 elsewhere).
// before_last_backward (optional) runs right before the first backward that finishes a chunk's
// gradients (the last micro-batch's; from then on each chunk's last backward reports its
// finished parameters to the store's grad-ready hook). loss_scale multiplies the loss that is
// backpropagated (fp16 loss scaling); the returned loss is unscaled. per_token_loss: the
// gradient of the loss sum (not of the mean over the M micro-batches).
double forward_backward(const std::vector<GPTModel*>& chunks, Communicator& pp,
                        const ScheduleShape& shape, const BatchFn& batch,
                        const std::function<void()>& before_last_backward = nullptr,
                        double loss_scale = 1.0, bool per_token_loss = false);
// Forward passes only (evaluation), one micro-batch at a time through the virtual stages.
double forward_only(const std::vector<GPTModel*>& chunks, Communicator& pp, int64_t M,
                    const BatchFn& batch);

}  // namespace mg
