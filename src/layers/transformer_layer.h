// One transformer layer (pre-norm), tensor-parallel in Megatron's way, built from its spec:
//   x_mid = x + RowParallel_proj(Attn(RoPE?(QKNorm?(ColumnParallel_QKV(Norm1(x))))))  groups
//   split across TP; QKNorm (--qk-layernorm) normalizes each Q and K head over its HD channels
//   y     = x_mid + RowParallel_FC2(Act(ColumnParallel_FC1(Norm2(x_mid))))
// Norm is LayerNorm or RMSNorm; Act is GELU or SwiGLU (fc1 = [gate; up]); attention is
// grouped-query (NG K/V heads shared by NH query heads; GPT-2 is NG = NH) with optional RoPE on Q
// and K; biases are optional. Activations are sequence-first [S, B, H]; with sequence
// parallelism x, x_mid and y hold this rank's S/TP rows and the norm outputs are gathered before
// the column-parallel GEMMs; as in Megatron, only this rank's rows of a norm output are saved
// and backward gathers them again for the weight gradient (into scratch shared by every layer).
// forward() fills a named cache of saved activations; backward() consumes it and ADDS into the
// parameter grads and into the incoming residual gradient.
// Mixed precision (LayerDims::dtype bf16/f16): GEMM weights and the saved GEMM inputs and
// outputs (norm outputs, QKV, attention output, FC1, activation) are stored in 16 bits; GEMMs
// accumulate in fp32; norms, softmax, RoPE, activations and the residual stream compute in fp32
// (the residual stream stays fp32, Megatron's --fp32-residual-connection). An op that produces
// a saved activation rounds it where it stores it, the op that reads one widens it, and forward
// goes on with the rounded value, so backward sees exactly what forward used. Grads are fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dropout_mask.h"
#include "layers/layer_spec.h"
#include "layers/kv_attention.h"
#include "layers/moe_layer.h"
#include "tensor/tensor.h"
#include "tensor_parallel/mappings.h"

namespace mg {

namespace cp {
struct CpAttention;
}

// Pointers into the flat parameter (or gradient) buffer for one layer (local TP shards). The
// GEMM weights are in the layer's dtype for parameters (f32 for grads); the 1-D parameters
// (norms, biases) are always f32 (under mixed precision: the model's f32 copies). Absent
// parameters (RMSNorm's bias, biases under --disable-bias-linear) are null.
struct LayerWeights {
  float *ln1_w, *ln1_b;    // (H)
  void* qkv_w;             // ((NH + 2 NG) HD / TP, H): per group [its q heads, k, v]
  float* qkv_b;            // ((NH + 2 NG) HD / TP)
  void* proj_w;            // (H, NH HD / TP)
  float* proj_b;           // (H)
  float *q_ln_w, *q_ln_b;  // (HD) --qk-layernorm: the norm over each query head
  float *k_ln_w, *k_ln_b;  // (HD) and over each key head
  float *ln2_w, *ln2_b;    // (H)
  void* fc1_w;             // (F / TP, H), SwiGLU (2F / TP, H) = [gate shard; up shard]
  float* fc1_b;            // (F / TP), SwiGLU (2F / TP)
  void* fc2_w;             // (H, F / TP)
  float* fc2_b;            // (H)
  // A MoE layer: its router and experts; the fc1/fc2 fields above are its shared experts
  // (null without them).
  MoeWeights moe;
};

struct LayerDims {
  int64_t B, S, H;  // global sizes
  LayerSpec spec;
  int64_t tp = 1;   // TP size
  bool sp = false;  // sequence parallel
  float eps = 1e-5f;
  int64_t rotary_dim = 0;  // RoPE: channels rotated per head
  bool rotary_interleaved = false;
  DType dtype = DType::F32;               // storage of GEMM weights and saved GEMM inputs/outputs
  Device device = Device::CPU;            // where the activations live (the compute device)
  int64_t rows() const { return S * B; }  // full-sequence rows
  int64_t local_rows() const { return sp ? rows() / tp : rows(); }  // rows of x / y
  int64_t HD() const { return spec.kv_channels; }
  int64_t NH_local() const { return spec.heads / tp; }
  int64_t NG_local() const { return spec.query_groups / tp; }
  int64_t qkv_local() const { return spec.qkv_rows() / tp; }
  int64_t attn_local() const { return NH_local() * HD(); }  // attention output width
  int64_t F_local() const { return spec.ffn / tp; }
  int64_t fc1_local() const { return spec.fc1_rows() / tp; }
  bool low_precision() const { return dtype != DType::F32; }
  // A MoE layer's routed rows (one per token and chosen expert) and expert widths per rank.
  int64_t moe_rows() const { return spec.is_moe() ? rows() * spec.moe.router.topk : 0; }
  int64_t expert_F_local() const { return spec.moe.ffn / expert_tp(); }
  int64_t expert_fc1_local() const {
    return spec.is_moe() ? spec.expert_fc1_rows() / expert_tp() : 0;
  }
  int64_t num_experts() const { return spec.moe.num_experts; }
  int64_t ep = 1;   // expert-parallel ranks (MoE layers; the experts' side buffers)
  int64_t etp = 0;  // the experts' TP (--expert-tensor-parallel-size); 0: TP
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  bool folded() const { return expert_tp() != tp; }  // parallel folding (moe_layer.h)
};

// Dropout of one training micro-batch (Megatron's places: the attention probabilities, and the
// bias-dropout-add after the attention and the MLP blocks; the embedding's is the model's). The
// masks are keyed by (seed, iteration, layer, site) and each element's global sample, token,
// unit or head (core/dropout_mask.h), so every layout draws the same ones.
struct DropoutStep {
  float hidden = 0.f, attention = 0.f;  // --hidden-dropout, --attention-dropout
  uint64_t seed = 0;                    // --seed
  int64_t iteration = 0;
  int64_t sample0 = 0;  // global index of the micro-batch's first sample
  DropoutKey key(float p, int64_t layer, DropoutSite site) const {
    return dropout_key(p, seed, iteration, layer, site);
  }
};

// Per-micro-batch inputs every layer reads (device pointers; null when unused).
struct LayerInputs {
  const int32_t* seg_start = nullptr;    // (B, S): first position each token attends to
  const int32_t* positions = nullptr;    // (S*B): RoPE positions of the rows
  const float* inv_freq = nullptr;       // (rotary_dim / 2): RoPE inverse frequencies
  const DropoutStep* dropout = nullptr;  // training with dropout; null: none (eval, generate)
  int64_t layer = 0;                     // the layer's global index (keys its dropout masks)
  // Context parallelism (--context-parallel-size > 1): the attention core runs over the whole
  // sequence across the CP group (context_parallel/cp_attention.h); the layer's rows are then
  // this rank's load-balanced S/CP positions (LayerDims::S is the local length) and seg_start
  // holds global positions. Null, or a group of one rank: the local ops.
  const cp::CpAttention* cp = nullptr;
  // Expert parallelism (MoE layers): the EP group (null, or one rank: every expert is local)
  // and the token dispatcher (--moe-token-dispatcher-type allgather, else alltoall).
  Communicator* ep = nullptr;
  bool ep_allgather = false;
  // Parallel folding (LayerDims::folded): the experts' ETP x EP group, over which this TP
  // rank's share of the tokens is dispatched (moe_layer.h).
  Communicator* etp_ep = nullptr;
  // Inference over a KV cache (layers/kv_attention.h): the step's rows are new tokens of one
  // or more sequences; their attention runs over each sequence's cached keys. Null in training.
  const KvAttention* kv = nullptr;
  float loss_scale = 1.f;  // backward: what the LM loss's gradient is scaled by
                           // (loss scale / micro-batches); a MoE layer's aux and
                           // z losses enter backward with the same scale
};

// Activations saved by forward for backward ([dtype]: the layer's dtype; others f32).
struct LayerCache {
  Tensor ln1, ln1_mean, ln1_rstd;  // (R, H) [dtype], (R), (R); RMSNorm: no mean
  Tensor qkv;                      // (S*B, (NH + 2 NG) HD / TP) [dtype], Q and K after RoPE
  Tensor q_pre, q_mean, q_rstd;    // --qk-layernorm: (S*B*NH/TP, HD) Q heads before their norm,
  Tensor k_pre, k_mean, k_rstd;    // (S*B*NH/TP), (S*B*NH/TP); the same for the K heads (NG/TP)
  Tensor lse;                      // (B, NH/TP, S) attention log-sum-exp (flash attention;
                                   // under CP what cp_attention_forward saves, the same size)
  Tensor attn;                     // (S*B, NH HD / TP) [dtype] attention output
  Tensor x_mid;                    // (R, H) residual stream after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (R, H) [dtype], (R), (R)
  Tensor fc1;                      // (S*B, F/TP or 2F/TP) [dtype] pre-activation
  Tensor act;                      // (S*B, F/TP) [dtype] GELU / SwiGLU output
  // A MoE layer (M = S*B*topk routed rows, the first routing.rows() used; F_e the expert width):
  Tensor moe_logits;  // (S*B, E) router logits
  Tensor moe_x;       // (M, H) [dtype] the tokens permuted by expert
  Tensor moe_fc1;     // (M, fc1_e/TP) [dtype]
  Tensor moe_act;     // (M, F_e/TP) [dtype]
  Tensor moe_y;       // (M, H) expert outputs (TP-partial), in moe_x's order
  // Expert parallelism (grown as routing needs: a rank's experts may take up to EP x M rows;
  // with EP 1 the experts read moe_x and write moe_y): the rows this rank's experts take
  // [dtype] and their outputs.
  Tensor moe_xe, moe_ye;
  MoeRouting routing;  // the routing, for backward (its index arrays, N x k
                       // int32 and floats, are not in layer_cache_decls: k / H of
                       // the rows' size)
  explicit LayerCache(const LayerDims& d);
};

// The saved activations' shapes and dtypes, as a pure function of the dims: the allocator
// (LayerCache), the memory report and the memory check before allocation read this one list.
using ActivationDecl = TensorDecl<LayerCache>;
std::vector<ActivationDecl> layer_cache_decls(const LayerDims& d);
// Bytes of one layer's cache (checked arithmetic).
int64_t layer_cache_bytes(const LayerDims& d);

// Scratch reused by every layer's forward and backward.
struct LayerScratch {
  Tensor full;           // (S*B, H) row-parallel partial sums / full-sequence grads
  Tensor ln_full;        // (S*B, H) [dtype] a gathered norm output (sequence parallel only)
  Tensor d_ln;           // (R, H)
  Tensor d_qkv;          // (S*B, (NH + 2 NG) HD / TP)
  Tensor d_attn;         // (S*B, NH HD / TP)
  Tensor d_fc1;          // (S*B, fc1 width / TP)
  Tensor d_act;          // (S*B, F/TP)
  Tensor qk_out;         // --qk-layernorm: (S*B*NH/TP, HD) [dtype] normalized heads
  Tensor d_qk_in, d_qk;  // (S*B*NH/TP, HD) their gradients before and after the norm
  // A MoE layer (M routed rows as in LayerCache):
  Tensor moe_full;     // (S*B, H) shared experts' output; input gradient before the reduction
  Tensor moe_dy;       // (M, H) expert output gradients
  Tensor moe_d_fc1;    // (M, fc1_e/TP)
  Tensor moe_d_act;    // (M, F_e/TP)
  Tensor moe_dx;       // (M, H) permuted input gradients
  Tensor moe_dlogits;  // (S*B, E)
  // Expert parallelism (grown as needed): the expert side's output and input gradients;
  // allgather: two (EP x S*B, H) buffers (gathered outputs / gradients) and every EP rank's
  // full rows (EP x S*B, H) [dtype] (forward only).
  Tensor moe_dye, moe_dxe, moe_g, moe_g2, moe_xg;
  Tensor moe_dw;  // the routing weights' gradients (S*B x k; allgather: EP x S*B x k)
  Tensor moe_router_x32, moe_router_w32;  // 16-bit models: the router's input and weight in f32
  explicit LayerScratch(const LayerDims& d);
};
// The scratch's shapes and dtypes (as layer_cache_decls for the cache), and their bytes.
std::vector<TensorDecl<LayerScratch>> layer_scratch_decls(const LayerDims& d);
int64_t layer_scratch_bytes(const LayerDims& d);

// A saved norm output (R, H) as the column-parallel GEMMs read it: under sequence parallelism
// every TP rank's rows, gathered into s.ln_full; otherwise ln itself.
cpu::Mat gathered_norm(const tp::TPGroup& g, const Tensor& ln, LayerScratch& s, const LayerDims& d);

// y (R, H) from x (R, H).
void transformer_layer_forward(const tp::TPGroup& g, float* y, const float* x,
                               const LayerWeights& w, LayerCache& c, LayerScratch& s,
                               const LayerDims& d, const LayerInputs& in);
// On entry d_resid (R, H) holds dL/dy; on exit dL/dx. Param grads are added into gw.
void transformer_layer_backward(const tp::TPGroup& g, float* d_resid, const float* x,
                                const LayerWeights& w, const LayerWeights& gw, const LayerCache& c,
                                LayerScratch& s, const LayerDims& d, const LayerInputs& in);

}  // namespace mg
