// The NCCL watchdog thread, as PyTorch's ProcessGroupNCCL has one: NCCL work nobody waits for at
// once (the non-blocking calls, e.g. DP buckets started during the backward) can stall the GPU
// stream under a later host synchronization (the loss read), where no poll runs. Every tenth of
// --distributed-timeout-minutes the thread looks at such work; work older than the timeout whose
// event is not complete gets its communicator aborted (ncclCommAbort, which NCCL allows from
// another thread), so the stream and the blocked synchronization go on, and the main thread's
// next NCCL call reports the timeout (check()) instead of using the aborted communicator.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>

#include "comm/watchdog.h"

namespace mg::nccl_watchdog {

// Watches the work queued before ev (op over group, on comm) until forget(id).
uint64_t watch(cudaEvent_t ev, ncclComm_t comm, const char* op, const GroupInfo* group);
void forget(uint64_t id);
// Aborts comm, once whichever thread asks first (a second ncclCommAbort would free it twice).
void abort(ncclComm_t comm);
// On the main thread, before any use of an NCCL communicator: if the thread aborted one,
// reports that timeout (census, MPI_Abort; comm/watchdog.h).
void check();

}  // namespace mg::nccl_watchdog
