// How a parameter is laid out across tensor-parallel ranks: split along one dim (optionally as
// `stride` stacked parts each split on its own, Megatron's partition stride: SwiGLU's fc1 is
// [gate; up] and each rank holds [its gate rows; its up rows]), or replicated (optionally with
// gradients that are partial sums under sequence parallelism), or the last pipeline stage's tied
// copy of the word embedding, or replicated with partial grads. Checkpoints record it, so every tensor reshards to any TP size.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "tensor/tensor.h"

namespace mg {

struct Sharding {
  int split_dim = -1;              // dim split across TP ranks; -1: replicated
  int64_t stride = 1;              // stacked parts along split_dim, each split separately
  bool sequence_parallel = false;  // replicated param whose grads are partial under SP
  bool tp_partial = false;         // replicated param used on TP-split activations (the Q/K
                                   // head norms): its grads are partial on every TP rank
  bool tied_copy = false;          // last stage's copy of the word embedding (PP > 1)
  bool vocab_padded = false;       // rows are the padded vocabulary (their count depends on TP)
  int64_t expert = -1;             // a MoE expert's parameter: its global expert index, held
                                   // by one expert-parallel rank (ShardSpec::holds)
  bool split() const { return split_dim >= 0; }
};

// The local shape of a tensor of global_shape on one of tp_size ranks.
inline Shape local_shape(const Shape& global_shape, const Sharding& s, int64_t tp_size) {
  Shape l = global_shape;
  if (s.split()) l[size_t(s.split_dim)] /= tp_size;
  return l;
}

// Global row-major flat offset of element `local_index` of TP shard tp_rank (of tp_size) of a
// tensor of global_shape whose local shape is `local`.
inline int64_t global_index(const Shape& global_shape, const Shape& local, const Sharding& s,
                            int64_t local_index, int64_t tp_size, int64_t tp_rank) {
  if (!s.split() || tp_size == 1) return local_index;
  // Split the index into (outer, i along split_dim, inner).
  int64_t inner = 1;
  for (size_t d = size_t(s.split_dim) + 1; d < local.size(); ++d) inner *= local[d];
  const int64_t local_dim = local[size_t(s.split_dim)];
  const int64_t global_dim = global_shape[size_t(s.split_dim)];
  const int64_t outer = local_index / (inner * local_dim);
  const int64_t i = local_index / inner % local_dim, rest = local_index % inner;
  // Along the split dim the local rows are `stride` parts of local_dim/stride rows; part k of
  // this rank sits at k * global_dim/stride + tp_rank * local_dim/stride in the global tensor.
  const int64_t part_local = local_dim / s.stride, part_global = global_dim / s.stride;
  const int64_t gi = (i / part_local) * part_global + tp_rank * part_local + i % part_local;
  return (outer * global_dim + gi) * inner + rest;
}

}  // namespace mg
