// Host-side moves of attention heads and sequence chunks that the CP ring and all-to-all share
// (cp_attention.h): heads of a strided Heads view to and from contiguous (rows, nh, HD) blocks,
// and the N ranks' load-balanced local blocks to and from the natural (position-ordered)
// sequence.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/dispatch.h"
#include "context_parallel/cp_attention.h"

namespace mg::cp {

// A contiguous (rows, nh, HD) block as a Heads view.
inline ops::Heads contiguous_heads(void* p, DType t, int64_t nh, int64_t HD) {
  return {p, t, nh * HD, HD, 1};
}

// Bytes in a float vector (so the block can travel through P2POp's float* in whole floats).
inline std::vector<float> byte_buffer(int64_t bytes) {
  return std::vector<float>(size_t((bytes + 3) / 4));
}

// dst (rows, nh, HD) in src's dtype = heads [h0, h0 + nh) of rows [0, rows) of src.
void copy_heads(void* dst, const ops::Heads& src, int64_t rows, int64_t h0, int64_t nh, int64_t HD);
// The f32 view dst (+)= src (rows, nh, HD) over heads [0, nh).
void write_heads(const ops::Heads& dst, const float* src, int64_t rows, int64_t nh, int64_t HD,
                 ops::GradWrite write);

// Row blocks: `per_rank` holds N blocks of S_local*B rows of `row_bytes` each, block s in rank
// s's local (load-balanced) order; `natural` the S*B rows in position order.
void local_to_natural(void* natural, const void* per_rank, const CpLayout& l, int64_t B,
                      int64_t row_bytes);
void natural_to_local(void* per_rank, const void* natural, const CpLayout& l, int64_t B,
                      int64_t row_bytes);

// One local chunk of a per-query array: dst (B, c) = columns [half*c, half*c + c) of
// src (B, S_local) (per-query values: seg_start, lse rows).
template <typename T>
std::vector<T> half_columns(const T* src, int64_t B, int64_t S_local, int half) {
  const int64_t c = S_local / 2;
  std::vector<T> dst(size_t(B * c));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < c; ++t) dst[size_t(b * c + t)] = src[b * S_local + half * c + t];
  return dst;
}

// Where the CP ring and all-to-all run for now: host memory (UsageError otherwise).
void check_host(const void* p);

}  // namespace mg::cp
