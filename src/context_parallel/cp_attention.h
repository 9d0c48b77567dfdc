// Context-parallel attention (--context-parallel-size N): the sequence is split over the N ranks
// of the CP group, Megatron's load-balanced way (get_batch_on_this_cp_rank): the S positions are
// cut into 2N chunks of c = S/(2N); CP rank r holds chunks r and 2N-1-r, in that order, as its
// S_local = S/N rows-of-B (sequence-first: local row t*B + b). Causal attention over the whole
// sequence then runs either as a ring (p2p: K/V blocks travel around the ring, partial results
// merge by their log-sum-exp) or as Ulysses all-to-alls over heads (a2a). Both give every rank
// its rows' exact out / dq, dk, dv, as one ops::attention_forward/backward over the whole
// sequence would (dropout masks too: they are keyed by positions, core/dropout_mask.h).
//
// Ring (p2p) forward, rank r, step s = 0..N-1: the visiting block is rank (r - s) mod N's K/V;
// each (local query chunk, block chunk) pair not wholly in the causal future runs one
// ops::attention_forward with its chunks' positions as q_pos0 / k_pos0, and its (o_i, lse_i)
// merge into the running result: lse = log sum_i exp(lse_i), o = sum_i o_i exp(lse_i - lse)
// (a row with no visible key in a pair has lse_i = -inf and weighs nothing). Between steps the
// block moves one rank on (batch_isend_irecv to r+1, from r-1). Backward: the block travels
// again with an f32 dK/dV buffer; each pair's ops::attention_backward, given the FINAL merged out
// and lse, yields that pair's exact share of dq (kept here), dk and dv (added into the travelling
// buffer), and one more hop brings every dK/dV buffer home.
//
// Bytes each rank sends per layer (CommStats::p2p_bytes; E = B * S_local * NKV * HD elements of
// one K or V block, e = the dtype's size, f32 4):
//   forward:  (N-1) * 2 * E * e
//   backward: (N-1) * 2 * E * e  (K/V again)  +  N * 2 * E * 4  (dK/dV, the N-th hop home)
// The a2a path (CommStats::all_to_all_bytes, (N-1)/N of what an all-to-all sends; Eq = B *
// S_local * NH * HD): forward q, k, v in and out back: (N-1)/N * (2 Eq + 2 E) * e; backward
// q, k, v, out in the dtype and dout, dq, dk, dv in f32: (N-1)/N * (2 Eq + 2 E) * (e + 4); both
// plus an all-gather of seg_start (all_gather_bytes, (N-1) * B * S_local * 4) when given.
// Exchanges are blocking (batch_isend_irecv, all_to_all), between the blocks' compute.
//
// The ring, its merge and the all-to-all's reordering run on host memory for now (--device cpu).
#pragma once
#include <cstdint>
#include <string>

#include "backend/dispatch.h"
#include "comm/communicator.h"
#include "core/cp_layout.h"

namespace mg::cp {

// Megatron's --cp-comm-type values.
enum class CpCommType { P2P, A2A };
// "p2p" or "a2a"; anything else is a UsageError naming --cp-comm-type.
CpCommType parse_cp_comm_type(const std::string& name);
const char* cp_comm_type_name(CpCommType t);

struct CpAttention {
  Communicator* comm = nullptr;  // the CP group (rank r of size N)
  CpCommType type = CpCommType::P2P;
};

// The load-balanced layout (core/cp_layout.h) of a local sequence of S_local tokens.
CpLayout cp_layout(const CpAttention& cp, int64_t S_local);

// Checks what a CP attention of this shape needs (UsageError naming the flags): an even local
// sequence; under a2a, NH and NKV divisible by N.
void check_cp_attention(const CpAttention& cp, int64_t S_local, int64_t NH, int64_t NKV);

// The attention core over the whole sequence for this rank's rows. a: the local shape (Sq = Sk
// = S_local; its q_pos0 / k_pos0 are ignored, the layout gives the positions; its dropout's
// head0 is this rank's first TP head, as for ops::attention_forward). seg_start (B, S_local):
// global positions, or null. out (S_local*B, NH*HD) in q's dtype. lse holds B*NH*S_local floats:
// p2p (B, NH, S_local) in local order; a2a (B, NH/N, S) of this rank's head slice over the
// natural (position-ordered) sequence: what cp_attention_backward reads back.
void cp_attention_forward(const CpAttention& cp, ops::MatOut out, float* lse, const ops::Heads& q,
                          const ops::Heads& k, const ops::Heads& v, const ops::AttentionShape& a,
                          const int32_t* seg_start);
// dq, dk, dv (f32 views of the local rows) receive the gradients (+=, or = with Set), as
// ops::attention_backward's; out and lse are the forward's.
void cp_attention_backward(const CpAttention& cp, const ops::Heads& dq, const ops::Heads& dk,
                           const ops::Heads& dv, const float* dout, ops::Mat out,
                           const ops::Heads& q, const ops::Heads& k, const ops::Heads& v,
                           const float* lse, const ops::AttentionShape& a, const int32_t* seg_start,
                           ops::GradWrite write);

}  // namespace mg::cp
