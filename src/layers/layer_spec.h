// What one transformer layer is made of; model/config.h derives it from the model config.
#pragma once
#include <cstdint>

#include "core/checked_math.h"
#include "layers/moe_router.h"

namespace mg {

enum class NormKind { LayerNorm, RMSNorm };
enum class MlpKind { Gelu, SwiGLU };

// A mixture-of-experts MLP (Megatron-Core's MoELayer): a router choosing top-k of E experts per
// token, each expert an MLP of its own width, plus optional shared experts (LayerSpec::ffn wide).
struct MoeSpec {
  int64_t num_experts = 0;        // E; 0: the layer's MLP is dense
  int64_t ffn = 0;                // each expert's width (SwiGLU: each of gate and up)
  MoeRouterConfig router;         // top-k, score function, loss coefficients
  double capacity_factor = 0;     // > 0: an expert takes at most ceil(T k / E x this) of T tokens
  bool drop_by_position = false;  // --moe-token-drop-policy position (else probs)
  bool grouped_gemm = false;      // --moe-grouped-gemm: the experts' GEMMs as grouped ops
};

struct LayerSpec {
  NormKind norm = NormKind::LayerNorm;
  int64_t heads = 1, query_groups = 1, kv_channels = 1;  // NH, NG, HD
  bool rope = false;                                     // rotary embedding on Q and K
  bool qkv_bias = true;
  bool qk_layernorm = false;       // norm (of the layer's kind) over each Q and K head before RoPE
  float norm_weight_offset = 0.f;  // every norm scales by gamma = weight + this: 1 when the
                                   // weights are zero-centred (--apply-layernorm-1p), else 0
  MlpKind mlp = MlpKind::Gelu;
  int64_t ffn = 4;          // F: the MLP's intermediate width (SwiGLU: each of gate and up);
                            // on a MoE layer the shared experts' width (0: none)
  MoeSpec moe;              // experts of a MoE layer (moe.num_experts == 0: dense)
  bool linear_bias = true;  // biases on linear_proj, linear_fc1, linear_fc2
  int64_t qkv_rows() const {
    const char* what =
        "rows of linear_qkv ((--num-attention-heads + 2 x --num-query-groups) x "
        "--kv-channels)";
    return checked_mul(checked_add(heads, checked_mul(2, query_groups, what), what), kv_channels,
                       what);
  }
  int64_t fc1_rows() const {
    return mlp == MlpKind::SwiGLU
               ? checked_mul(2, ffn, "rows of linear_fc1 (2 x --ffn-hidden-size)")
               : ffn;
  }
  bool is_moe() const { return moe.num_experts > 0; }
  // Whether the layer runs a dense MLP of width ffn: a dense layer's, or a MoE layer's shared
  // experts.
  bool has_dense_mlp() const { return !is_moe() || ffn > 0; }
  // Rows of one expert's linear_fc1 (SwiGLU: [gate; up]).
  int64_t expert_fc1_rows() const {
    return mlp == MlpKind::SwiGLU
               ? checked_mul(2, moe.ffn,
                             "rows of an expert's linear_fc1 (2 x --moe-ffn-hidden-size)")
               : moe.ffn;
  }
};

}  // namespace mg
