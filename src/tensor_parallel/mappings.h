// Megatron's conjugate communication pairs for tensor parallelism, on row-major activations
// whose outermost dimension is the sequence ([S, B, H]), so a sequence-parallel chunk is a
// contiguous block of rows. Each pair is a forward and the backward of that forward:
//   copy_to_region           fwd identity         bwd all-reduce
//   reduce_from_region       fwd all-reduce       bwd identity
//   gather_from_sp_region    fwd all-gather       bwd reduce-scatter
//   reduce_scatter_to_sp     fwd reduce-scatter   bwd all-gather
//   scatter_to_sp_region     fwd keep own chunk   bwd all-gather
// n_local is the element count of one rank's chunk (rows/TP x B x H); identities need no call.
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "core/timers.h"

namespace mg::tp {

// The TP group as a layer sees it.
struct TPGroup {
  Communicator* comm;
  bool sequence_parallel;
  int size() const { return comm->size(); }
  int rank() const { return comm->rank(); }
};

inline void copy_to_region_backward(const TPGroup& g, float* grad, int64_t n) {
  timers::Scope timer(timers::kTpComm);
  g.comm->all_reduce(grad, n);
}
inline void reduce_from_region_forward(const TPGroup& g, float* x, int64_t n) {
  timers::Scope timer(timers::kTpComm);
  g.comm->all_reduce(x, n);
}
// Gathers the input of a column-parallel GEMM, so it moves that GEMM's dtype (bf16 under --bf16).
inline void gather_from_sp_region_forward(const TPGroup& g, const void* local, void* full,
                                          int64_t n_local, DType dtype = DType::F32) {
  timers::Scope timer(timers::kTpComm);
  g.comm->all_gather(local, full, n_local, dtype);
}
inline void gather_from_sp_region_backward(const TPGroup& g, const float* grad_full,
                                           float* grad_local, int64_t n_local) {
  timers::Scope timer(timers::kTpComm);
  g.comm->reduce_scatter(grad_full, grad_local, n_local);
}
inline void reduce_scatter_to_sp_forward(const TPGroup& g, const float* full, float* local,
                                         int64_t n_local) {
  timers::Scope timer(timers::kTpComm);
  g.comm->reduce_scatter(full, local, n_local);
}
inline void reduce_scatter_to_sp_backward(const TPGroup& g, const float* grad_local,
                                          float* grad_full, int64_t n_local) {
  timers::Scope timer(timers::kTpComm);
  g.comm->all_gather(grad_local, grad_full, n_local);
}
void scatter_to_sp_region_forward(const TPGroup& g, const float* full, float* local,
                                  int64_t n_local);
inline void scatter_to_sp_region_backward(const TPGroup& g, const float* grad_local,
                                          float* grad_full, int64_t n_local) {
  timers::Scope timer(timers::kTpComm);
  g.comm->all_gather(grad_local, grad_full, n_local);
}

}  // namespace mg::tp
