#include "tensor_parallel/vocab_parallel.h"

#include "backend/dispatch.h"
#include "core/timers.h"

namespace mg::tp {

void vocab_parallel_embedding_forward(const TPGroup& g, float* out, const int32_t* tokens,
                                      const int32_t* positions, cpu::Mat word_local,
                                      cpu::Mat position, int64_t vocab_local, int64_t rows,
                                      int64_t H) {
  timers::Scope timer(timers::kEmbedding);
  const int64_t v0 = g.rank() * vocab_local;
  ops::embedding_forward(out, tokens, word_local, v0, v0 + vocab_local, rows, H, false);
  reduce_from_region_forward(g, out, rows * H);
  if (position.data) ops::embedding_forward(out, positions, position, 0, INT32_MAX, rows, H, true);
}

void vocab_parallel_embedding_backward(const TPGroup& g, float* dword_local, float* dposition,
                                       const float* dout, const int32_t* tokens,
                                       const int32_t* positions, int64_t vocab_local, int64_t rows,
                                       int64_t H) {
  timers::Scope timer(timers::kEmbedding);
  const int64_t v0 = g.rank() * vocab_local;
  if (dposition) ops::embedding_backward(dposition, dout, positions, 0, INT32_MAX, rows, H);
  ops::embedding_backward(dword_local, dout, tokens, v0, v0 + vocab_local, rows, H);
}

void vocab_parallel_cross_entropy_forward(const TPGroup& g, float* losses, float* lse,
                                          float* scratch, const float* logits,
                                          const int32_t* targets, int64_t rows,
                                          int64_t vocab_local) {
  timers::Scope timer(timers::kCrossEntropy);
  float* row_max = lse;  // lse is built in place from the global row maximum
  ops::cross_entropy_row_max(row_max, logits, rows, vocab_local);
  g.comm->all_reduce(row_max, rows, ReduceOp::Max);
  ops::cross_entropy_sum_exp(scratch, logits, row_max, rows, vocab_local);
  g.comm->all_reduce(scratch, rows);
  ops::cross_entropy_target_logit(losses, logits, targets, g.rank() * vocab_local, rows,
                                  vocab_local);
  g.comm->all_reduce(losses, rows);
  ops::cross_entropy_combine(losses, lse, row_max, scratch, targets, rows);
}

void vocab_parallel_cross_entropy_backward(const TPGroup& g, float* dlogits, const float* logits,
                                           const float* lse, const int32_t* targets,
                                           const float* dlosses, int64_t rows,
                                           int64_t vocab_local) {
  timers::Scope timer(timers::kCrossEntropy);
  ops::cross_entropy_backward(dlogits, logits, lse, targets, dlosses, g.rank() * vocab_local, rows,
                              vocab_local);
}

}  // namespace mg::tp
