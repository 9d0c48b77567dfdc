// Expert parallelism's token exchange: Megatron's MoEAlltoAllTokenDispatcher over the EP group,
// less the permutation (the caller groups its rows by global expert first, and un-permutes
// after combine). E experts split over EP ranks: global expert g lives on EP rank g / (E/EP) as
// local expert g % (E/EP). Dispatch is one all-to-all of the counts (ep_route) and one
// all-to-all-v of the rows, then a local sort by local expert (sort_chunks_by_idxs).
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace mg::moe {

// Who sends how many rows where, on this EP rank (LE = local_experts = E / EP).
struct EpRoute {
  int ep_size = 1, ep_rank = 0;
  int64_t num_experts = 0, local_experts = 0;
  std::vector<int64_t> send_per_expert;        // (E): rows this rank sends to each global expert
  std::vector<int64_t> recv;                   // (EP, LE): rows source rank s sends local expert l
  int64_t rows_in() const;                     // rows this rank dispatches (sum of send_per_expert)
  int64_t rows_out() const;                    // rows this rank's experts receive (sum of recv)
  std::vector<int64_t> send_per_rank() const;  // (EP): rows to each EP rank, this one included
  std::vector<int64_t> recv_per_rank() const;  // (EP): rows from each EP rank
  // (LE): rows each local expert receives, in the dispatched order's expert blocks (the
  // grouped GEMM's sizes).
  std::vector<int64_t> rows_per_local_expert() const;
};

// Exchanges the counts: rows_per_expert (E) is what this rank sends to each global expert.
// One all_to_all of E/EP int64 counts per rank (counted: (EP-1) (E/EP) 8 bytes). Collective.
EpRoute ep_route(Communicator& ep, const std::vector<int64_t>& rows_per_expert);

// rows (rows_in, H), grouped by global expert in expert order -> out (rows_out, H), grouped by
// local expert, within a local expert by source rank, each source's rows in their original
// order. One all_to_all_v of the rows plus a local reorder; any dtype, host or device memory.
// Backward: ep_combine of the f32 gradients.
void ep_dispatch(Communicator& ep, const EpRoute& r, const void* rows, void* out, int64_t H,
                 DType dtype);

// The exact inverse of ep_dispatch: rows (rows_out, H) in the dispatched order -> out
// (rows_in, H), each row back on its source rank at its original place. Backward: ep_dispatch
// of the f32 gradients.
void ep_combine(Communicator& ep, const EpRoute& r, const void* rows, void* out, int64_t H,
                DType dtype);

// Bytes this rank sends in one ep_dispatch (all_to_all_bytes): the rows for experts on other
// ranks x H x the dtype's size. (A combine sends back what the dispatch brought from other ranks.)
int64_t ep_dispatch_bytes(const EpRoute& r, int64_t H, DType dtype);

}  // namespace mg::moe
