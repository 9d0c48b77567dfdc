// A Communicator that lets GPU training use a communicator over the other kind of memory:
// `--distributed-backend mpi` moves host memory, so device buffers are staged through host
// copies (which also lets several ranks share one GPU, for testing); NCCL moves device memory,
// so the host scalars some callers reduce (loss, grad-norm sums, overflow flags) are staged
// through the device. Each call looks where its buffers live (runtime::where) and stages only what
// the inner communicator cannot take. Non-blocking calls copy results back in wait()/test().
// Byte counters are the inner communicator's, counted per call.
#pragma once
#include <memory>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mg {

// inner_memory: where the inner communicator's buffers must live (CPU for MPI, CUDA for NCCL).
std::unique_ptr<Communicator> make_staging_communicator(std::unique_ptr<Communicator> inner,
                                                        Device inner_memory);

}  // namespace mg
