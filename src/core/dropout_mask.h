// Dropout masks keyed by what an element is, never by where it is computed: the Philox key
// mixes (seed, iteration, layer, site), the counter holds (sample's global index, u, v, w/4)
// and lane w%4 of the 128-bit draw decides element w. Hidden sites use (u, v, w) = (0, token's
// global position in the sample, hidden unit); attention probabilities (global query head,
// query position, key position). So a TP rank holding heads h0.. or an SP rank holding tokens
// t0.., a pipeline stage, a DP rank or a micro-batch of any size draws the very bits a single
// rank draws, and a recomputed forward (or a backward regenerating the mask) draws them again.
// An element is dropped when its 32-bit draw is below p * 2^32; kept ones are scaled by
// 1/(1-p). Host/device: the CUDA kernels call the same functions.
#pragma once
#include <cstdint>

#include "core/cp_layout.h"
#include "core/philox.h"

namespace mg {

// Megatron's three dropout places (spec: embedding output and the two bias-dropout-adds use
// --hidden-dropout, the attention probabilities --attention-dropout).
enum class DropoutSite : uint32_t {
  Embedding = 0,
  AttentionProbs = 1,
  AttentionOut = 2,
  MlpOut = 3
};

struct DropoutKey {
  uint32_t k0 = 0, k1 = 0;  // Philox key from (seed, iteration, layer, site)
  uint32_t threshold = 0;   // dropped when the draw < threshold = round(p 2^32); 0: no dropout
  float scale = 1.f;        // 1 / (1 - p) for kept elements
  MG_HOST_DEVICE bool active() const { return threshold != 0; }
};

namespace dropout_detail {
inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace dropout_detail

// The key of one (seed, iteration, layer, site); p in [0, 1) (p = 0: inactive). Layer is the
// global layer index (the embedding uses 0 with its own site).
inline DropoutKey dropout_key(float p, uint64_t seed, int64_t iteration, int64_t layer,
                              DropoutSite site) {
  using dropout_detail::mix64;
  DropoutKey k;
  if (!(p > 0.f)) return k;
  uint64_t h = mix64(seed ^ 0x64726f706f7574ull);  // "dropout"
  h = mix64(h ^ uint64_t(iteration));
  h = mix64(h ^ (uint64_t(layer) << 8 | uint64_t(site)));
  k.k0 = uint32_t(h);
  k.k1 = uint32_t(h >> 32);
  const double t = double(p) * 4294967296.0;
  k.threshold = t >= 4294967295.0 ? 4294967295u : uint32_t(t + 0.5);
  if (k.threshold == 0) k.threshold = 1;  // a tiny p still drops (about 2^-32 of elements)
  k.scale = 1.f / (1.f - p);
  return k;
}

// The factor (0 or 1/(1-p)) of element (sample, u, v, w) under key.
MG_HOST_DEVICE inline float dropout_factor(const DropoutKey& key, int64_t sample, int64_t u,
                                           int64_t v, int64_t w) {
  const Philox4 r = philox4x32_10({{uint32_t(w >> 2), uint32_t(v), uint32_t(u), uint32_t(sample)}},
                                  key.k0, key.k1);
  return r.v[w & 3] < key.threshold ? 0.f : key.scale;
}

// f[i] = dropout_factor(key, sample, u, v, w0 + i) for i < n, one Philox draw per four units.
MG_HOST_DEVICE inline void dropout_factors(float* f, const DropoutKey& key, int64_t sample,
                                           int64_t u, int64_t v, int64_t w0, int64_t n) {
  for (int64_t i = 0; i < n;) {
    const int64_t w = w0 + i;
    const Philox4 r =
        philox4x32_10({{uint32_t(w >> 2), uint32_t(v), uint32_t(u), uint32_t(sample)}}, key.k0,
                      key.k1);
    for (int64_t lane = w & 3; lane < 4 && i < n; ++lane, ++i)
      f[i] = r.v[lane] < key.threshold ? 0.f : key.scale;
  }
}

// A block of sequence-first rows (row r = (t - t0) * B + b for this rank's tokens t) by C
// columns: element (r, c) is hidden unit col0 + c of the token at global position
// cp.position(t0 + r / B) of sample sample0 + r % B (under context parallelism the rank's
// tokens are two chunks of the sequence; without it, position t0 + r / B).
struct DropoutRows {
  DropoutKey key;
  int64_t sample0 = 0;  // global index of the micro-batch's first sample
  int64_t B = 1;        // samples in the micro-batch
  int64_t t0 = 0;       // this block's first token among the CP rank's (SP: TP rank's first)
  int64_t col0 = 0;     // global index of the first column
  CpLayout cp = {};     // the CP rank's tokens (default: the whole sequence)
  MG_HOST_DEVICE float factor(int64_t r, int64_t c) const {
    return dropout_factor(key, sample0 + r % B, 0, cp.position(t0 + r / B), col0 + c);
  }
  // f[c] = factor(r, c) for c < C.
  MG_HOST_DEVICE void row(float* f, int64_t r, int64_t C) const {
    dropout_factors(f, key, sample0 + r % B, 0, cp.position(t0 + r / B), col0, C);
  }
};

// Attention-probability dropout of one attention call: query head h (local) of sample b at
// query index t against key index j is element (sample0 + b, head0 + h, q_pos0 + t, k_pos0 + j)
// (the positions come from the call's AttentionShape).
struct AttentionDropout {
  DropoutKey key;
  int64_t sample0 = 0;  // global index of the micro-batch's first sample
  int64_t head0 = 0;    // global index of the call's first query head (TP: rank's first)
  MG_HOST_DEVICE bool active() const { return key.active(); }
};

}  // namespace mg
