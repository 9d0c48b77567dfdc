// One GPT-2 transformer layer (pre-LayerNorm):
//   x_mid = x + Proj(Attn(QKV(LN1(x))));  y = x_mid + FC2(GELU(FC1(LN2(x_mid))))
// forward() fills a named cache of saved activations; backward() consumes it and ADDS into the
// parameter grads and into the incoming residual gradient.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace mg {

// Pointers into the flat parameter (or gradient) buffer for one layer.
struct LayerWeights {
  float *ln1_w, *ln1_b;    // (H)
  float *qkv_w, *qkv_b;    // (3H, H), (3H): rows interleaved per head [q, k, v]
  float *proj_w, *proj_b;  // (H, H), (H)
  float *ln2_w, *ln2_b;    // (H)
  float *fc1_w, *fc1_b;    // (F, H), (F)
  float *fc2_w, *fc2_b;    // (H, F), (H)
};

struct LayerDims {
  int64_t B, S, H, NH, F;
  float eps;
  int64_t N() const { return B * S; }
};

// Activations saved by forward for backward (N = B*S rows).
struct LayerCache {
  Tensor ln1, ln1_mean, ln1_rstd;  // (N, H), (N), (N)
  Tensor qkv;                      // (N, 3H)
  Tensor probs;                    // (B, NH, S, S) attention probabilities
  Tensor attn;                     // (N, H) attention output before the projection
  Tensor x_mid;                    // (N, H) residual stream after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (N, H), (N), (N)
  Tensor fc1;                      // (N, F) pre-activation
  Tensor gelu;                     // (N, F)
  explicit LayerCache(const LayerDims& d);
};

// Scratch reused by every layer's forward and backward.
struct LayerScratch {
  Tensor branch_out;      // (N, H) projection / fc2 output before the residual add
  Tensor d_ln;            // (N, H)
  Tensor d_qkv;           // (N, 3H)
  Tensor d_attn;          // (N, H)
  Tensor d_fc1, d_gelu;   // (N, F)
  Tensor d_probs;         // attention backward scratch
  explicit LayerScratch(const LayerDims& d);
};

// y (N, H) from x (N, H).
void transformer_layer_forward(float* y, const float* x, const LayerWeights& w, LayerCache& c,
                               LayerScratch& s, const LayerDims& d);
// On entry d_resid holds dL/dy; on exit dL/dx. Param grads are added into g.
void transformer_layer_backward(float* d_resid, const float* x, const LayerWeights& w,
                                const LayerWeights& g, const LayerCache& c, LayerScratch& s,
                                const LayerDims& d);

}  // namespace mg
