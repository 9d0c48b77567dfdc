// What one rank of a training run holds, and whether it fits: its stage of the model (the
// pipeline stage and TP shard its place in the rank grid gives it) and the bytes it will
// allocate — params in their dtype, fp32 main grads, optimizer state (this rank's shard under
// the distributed optimizer) and the activations of its in-flight micro-batches — counted in
// exact integer arithmetic before anything is allocated. The trainer builds its model from the
// same stage spec, and its memory report prints the same figures.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "model/gpt.h"
#include "train/train_config.h"

namespace mg {

// Bytes one rank's model, optimizer and data-parallel reducer take from the tensor allocator,
// exactly: the same layouts and declarations they allocate from (bucket padding and the
// allocator's 64-byte rounding included). `megatron train` logs what was allocated beside
// this; `megatron plan` prints it.
struct RankMemory {
  int64_t params = 0;     // flat parameter buffer in the model dtype; under mixed precision
                          // also the f32 copies of 1-D params; the distributed optimizer's
                          // gathered parameter shard
  int64_t grads = 0;      // fp32 main grads (+ the distributed optimizer's reduced shard;
                          // bf16 bucket copies under --grad-reduce-in-bf16)
  int64_t optimizer = 0;  // Adam moments or SGD momentum, + fp32 main params of a 16-bit
      // model: docs/reference/formulas.md's bytes per parameter (over DP when sharded)
  int64_t activations = 0;   // the stage's activation slots, caches, scratch and buffers
  int64_t data = 0;          // host: the sample and shuffle indices of the splits it reads
                             // (12 bytes a sample: data/gpt_dataset.h's int32 indices)
  int64_t final_params = 0;  // host: --dump-final-params gathers the whole model in f32
  // What the compute device holds (params, grads, optimizer, activations); with_host adds the
  // host-side data indices and final-params gather (a CPU run's one memory).
  int64_t total(bool with_host) const;
};

// The model chunks world_rank holds under cfg (finalize_and_validate has run): its pipeline
// stage, or its v virtual stages under the interleaved schedule, each with the activation slots
// the schedule keeps in flight.
std::vector<StageSpec> train_chunk_specs(const TrainConfig& cfg, int world_rank);
// The parameter store holding those chunks.
StoreSpec train_store_spec(const TrainConfig& cfg, int world_rank);

// What world_rank allocates under cfg; an overflow is a UsageError naming the flags.
RankMemory rank_memory(const TrainConfig& cfg, int world_rank);

// Refuses (UsageError) a run whose rank world_rank needs more than `available` bytes:
//   "needs 9.1 TiB on rank 0 (params ..., grads ..., optimizer ..., activations ...: driven by
//   --num-layers 2147483648, --hidden-size 768, ...), only 21.7 GiB available (host ...)"
// available < 0 (unknown) checks nothing. `where` says what `available` is.
void check_rank_memory(const TrainConfig& cfg, int world_rank, int64_t available,
                       const std::string& where);

}  // namespace mg
