// Context parallelism's load-balanced sequence layout (Megatron's get_batch_on_this_cp_rank):
// the S tokens of a sequence are cut into 2 CP chunks of S / (2 CP); CP rank r holds chunks r
// and 2 CP - 1 - r, in that order, so every rank gets the same causal-attention work. The one
// place that maps a rank's local token index to its global position (the data slicing, RoPE
// positions and dropout masks read it). Host/device: the CUDA dropout kernels call it.
#pragma once
#include <cstdint>

#include "core/philox.h"  // MG_HOST_DEVICE

namespace mg {

struct CpLayout {
  int64_t size = 1;  // CP: ranks sharing each sequence
  int64_t rank = 0;  // this rank's index in its CP group
  int64_t S = 0;     // tokens of the whole sequence (needed only when size > 1)

  MG_HOST_DEVICE int64_t chunk() const { return S / (2 * size); }
  MG_HOST_DEVICE int64_t local_length() const { return size == 1 ? S : 2 * chunk(); }
  // The global chunk index of the rank's local chunk `half` (0: rank, 1: 2 CP - 1 - rank).
  MG_HOST_DEVICE int64_t chunk_index(int half) const {
    return half == 0 ? rank : 2 * size - 1 - rank;
  }
  // The global sequence position of the rank's local token t (0 <= t < local_length()).
  MG_HOST_DEVICE int64_t position(int64_t t) const {
    if (size == 1) return t;
    const int64_t c = chunk();
    return t < c ? rank * c + t : (2 * size - 1 - rank) * c + (t - c);
  }
};

}  // namespace mg
