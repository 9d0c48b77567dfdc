// Vocab-parallel embedding and cross-entropy (Megatron's VocabParallelEmbedding and
// vocab_parallel_cross_entropy). TP rank r owns vocab rows [r V/TP, (r+1) V/TP) of the padded
// vocabulary. The embedding looks up only owned ids (others give 0) and sums across TP; the
// loss never gathers logits: an all-reduce MAX of row maxima, then SUM all-reduces of the
// sums of exp and of the target logit (only the owner contributes);
// loss = log(sum exp) + max - target logit. Backward is softmax - onehot on the local shard.
#pragma once
#include <cstdint>

#include "backend/ops.h"
#include "tensor_parallel/mappings.h"

namespace mg::tp {

// out (rows, H) = word[tokens] (summed across TP) + position[positions] (position.data null:
// no position table, as with RoPE; dposition null then).
void vocab_parallel_embedding_forward(const TPGroup& g, float* out, const int32_t* tokens,
                                      const int32_t* positions, cpu::Mat word_local,
                                      cpu::Mat position, int64_t vocab_local, int64_t rows,
                                      int64_t H);
void vocab_parallel_embedding_backward(const TPGroup& g, float* dword_local, float* dposition,
                                       const float* dout, const int32_t* tokens,
                                       const int32_t* positions, int64_t vocab_local, int64_t rows,
                                       int64_t H);

// logits: (rows, V_local). Writes losses (rows) and lse (rows, saved for backward).
void vocab_parallel_cross_entropy_forward(const TPGroup& g, float* losses, float* lse,
                                          float* scratch, const float* logits,
                                          const int32_t* targets, int64_t rows,
                                          int64_t vocab_local);
// dlogits (may alias logits) = dlosses * (softmax - onehot) on the local shard.
void vocab_parallel_cross_entropy_backward(const TPGroup& g, float* dlogits, const float* logits,
                                           const float* lse, const int32_t* targets,
                                           const float* dlosses, int64_t rows, int64_t vocab_local);

}  // namespace mg::tp
