// The Communicator API: collectives and point-to-point transfers within one process group
// (sums: fp32 or bf16; gathers: any dtype; the rest fp32), with byte counters. Counters record
// what this rank sends under ring algorithms, the convention of docs/reference/formulas.md and nccl-tests' bus
// bandwidth: all-reduce of n elements = 2 (p-1)/p n, reduce-scatter / all-gather of n elements
// in total = (p-1)/p n, all-to-all of n elements sent in total (n_per_rank to each rank, this
// one included) = (p-1)/p n, all-to-all-v = exactly the elements sent to other ranks (uneven
// chunks fit no (p-1)/p formula), send = n, broadcast = n on the root, each element at its
// dtype's size (a bf16 sum moves half the bytes of an fp32 one). Groups of size 1 move nothing
// and count nothing. A bf16 sum (--grad-reduce-in-bf16) adds two bf16 values in fp32 and rounds the
// result to bf16 (nearest even) at every step of the algorithm, as NCCL's ncclBfloat16 sum
// does: a ring's or tree's partial sums are rounded, so over p > 2 ranks the result depends on
// the reduction order and may differ from the exact sum by up to p - 1 bf16 roundings.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace mg {

enum class ReduceOp { Sum, Max };

struct CommStats {
  int64_t all_reduce_bytes = 0, reduce_scatter_bytes = 0, all_gather_bytes = 0, broadcast_bytes = 0,
          p2p_bytes = 0, all_to_all_bytes = 0;
  int64_t total() const {
    return all_reduce_bytes + reduce_scatter_bytes + all_gather_bytes + broadcast_bytes +
           p2p_bytes + all_to_all_bytes;
  }
};

// One point-to-point transfer of a batch (Megatron's batch_isend_irecv).
struct P2POp {
  bool is_send;
  float* data;
  int64_t n;
  int peer;     // rank within this communicator
  int tag = 0;  // MPI matches a send and a receive of the same tag (two streams between one
                // pair of ranks, e.g. activations and gradients when PP = 2, stay apart)
};

// A non-blocking collective in flight.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  // Lets the transfer progress; true once it is complete.
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over n elements of dtype F32, or BF16 with ReduceOp::Sum (the reductions below too).
  virtual void all_reduce(void* data, int64_t n, ReduceOp op = ReduceOp::Sum,
                          DType dtype = DType::F32) = 0;
  // Non-blocking in-place sum; the buffer must stay untouched until wait() returns.
  virtual std::unique_ptr<CommRequest> iall_reduce(void* data, int64_t n,
                                                   DType dtype = DType::F32) = 0;
  // Non-blocking reduce-scatter / all-gather; buffers stay untouched until wait() returns.
  virtual std::unique_ptr<CommRequest> ireduce_scatter(const void* in, void* out, int64_t n_out,
                                                       DType dtype = DType::F32) = 0;
  // Gathers move elements of any dtype (16-bit params and activations under --bf16/--fp16).
  virtual std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n_in,
                                                   DType dtype = DType::F32) = 0;
  // in holds size() chunks of n_out elements; out gets the sum of every rank's chunk rank().
  virtual void reduce_scatter(const void* in, void* out, int64_t n_out,
                              DType dtype = DType::F32) = 0;
  // out gets size() chunks of n_in elements, chunk r from rank r.
  virtual void all_gather(const void* in, void* out, int64_t n_in, DType dtype = DType::F32) = 0;
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  // in holds size() chunks of n_per_rank elements, chunk j for rank j; out gets size() chunks,
  // chunk j from rank j (any dtype; in and out do not overlap).
  virtual void all_to_all(const void* in, void* out, int64_t n_per_rank, DType dtype) = 0;
  // Uneven all-to-all (MPI_Alltoallv; any dtype; in and out do not overlap). send_counts and
  // recv_counts hold size() element counts each: in holds the chunks for rank 0, 1, ... back to
  // back, and out gets rank j's chunk at offset sum(recv_counts[0..j)). This rank's own chunk
  // is a local copy: the counter adds only the elements sent to other ranks.
  virtual void all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                            const int64_t* recv_counts, DType dtype) = 0;
  // All ops are posted, then all are waited for: no ordering deadlocks between pairs.
  virtual void batch_isend_irecv(const std::vector<P2POp>& ops) = 0;
  // All ops are posted; returns once the receives are complete, with a request that completes
  // the sends (their buffers stay untouched until it is waited for). With sends that never
  // block, a pipeline schedule cannot deadlock whatever the order of its exchanges. MPI sends
  // this way; the default (NCCL, host staging) completes everything before returning.
  virtual std::unique_ptr<CommRequest> exchange(const std::vector<P2POp>& ops);
  virtual void barrier() = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

// Checks that a reduction's dtype and op are ones every communicator supports (F32, or BF16 Sum).
void check_reducible(DType dtype, ReduceOp op = ReduceOp::Sum);

// Checks an all_to_all_v's counts (size() each, none negative; this rank's own chunk sent and
// received at the same size) and returns the elements sent to other ranks.
int64_t check_all_to_all_v(const Communicator& comm, const int64_t* send_counts,
                           const int64_t* recv_counts);
// The offsets of chunks of these sizes laid back to back (n counts -> n offsets), checked for
// overflow.
std::vector<int64_t> chunk_offsets(const int64_t* counts, int n);

// Sum of one double over the group, carried as two floats (the value and its rounding
// remainder) so the reduction stays in MPI_FLOAT without losing the double's precision.
double all_reduce_sum(Communicator& comm, double value);

// A communicator of one rank: every collective is the identity (used when a group has size 1
// and for single-process runs).
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace mg
