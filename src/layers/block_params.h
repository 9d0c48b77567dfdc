// What each block of the model holds: its parameters (name, global shape, TP sharding, init) as
// pure functions of the layer spec, so the parameter layout, the checkpoint, the parameter
// count and a planner read the same declarations without building a model. Names are
// Megatron-Core's (local spec: input_layernorm / pre_mlp_layernorm hold the norms).
#pragma once
#include <string>
#include <vector>

#include "layers/layer_spec.h"
#include "tensor_parallel/sharding.h"

namespace mg {

enum class InitKind { Normal, Zeros, Ones };

// Where a parameter sits in the model (the pipeline's pre-process, a decoder layer, the
// post-process: final norm and output layer).
enum class ModelPart { Embedding, Layer, Head };

// What the optimizer, the model and the converters treat a parameter by: declared with it by
// the block that owns it, never parsed back from its name.
struct ParamTraits {
  bool weight_decay = true;          // false for biases and norms (Megatron's 1-D rule)
  bool norm_weight = false;          // a norm's scale (stored minus 1 under --apply-layernorm-1p)
  bool embedding_or_output = false;  // Megatron's is_embedding_or_output_parameter: the word
                                     // embedding (every copy) and the untied output layer
                                     // (--decoupled-lr's learning rate)
  ModelPart part = ModelPart::Layer;
  int64_t layer = -1;  // ModelPart::Layer: the global decoder layer index
};

struct ParamDecl {
  std::string name;    // full name, e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape global_shape;  // [out, in] for linear weights, as Megatron stores them
  Sharding sharding;
  InitKind init = InitKind::Zeros;
  float init_std = 0.f;  // for InitKind::Normal
  ParamTraits traits;
};

// Init scales: weights N(0, std), output projections (linear_proj, linear_fc2) N(0, out_std)
// with out_std = std / sqrt(2 L).
struct InitScales {
  float std, out_std;
};

// The word embedding [V, H] (vocab-parallel) and, with learned positions, the position table.
void embedding_params(std::vector<ParamDecl>& out, int64_t V, int64_t H, int64_t max_positions,
                      bool learned_positions, const InitScales& init);
// A LayerNorm (weight, bias) or an RMSNorm (weight) over H: TP-replicated, grads partial under SP.
// The weight starts at gamma = 1: stored as 1, or as 0 when weight_offset is 1 (zero-centred,
// --apply-layernorm-1p). prefix names a norm: it ends in "layernorm".
void norm_params(std::vector<ParamDecl>& out, const std::string& prefix, NormKind kind,
                 float weight_offset, int64_t H);
// Self-attention: linear_qkv [(NH + 2 NG) HD, H] in Megatron's per-group row order (a group's
// NH/NG query heads, then its K head, then its V head), split by whole groups; linear_proj
// [H, NH HD] split by input columns; with qk_layernorm, q_layernorm and k_layernorm over HD.
void attention_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                      int64_t H, const InitScales& init);
// The MLP: linear_fc1 [F, H] (GELU) or [2F, H] = [gate; up] (SwiGLU, partition stride 2),
// linear_fc2 [H, F].
void mlp_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                int64_t H, const InitScales& init);
// A mixture-of-experts MLP (Megatron-Core's MoELayer names): router.weight [E, H] (replicated;
// every TP rank routes the full rows alike), experts.local_experts.<e>.linear_fc1 / linear_fc2
// for each global expert e (TP-split as the MLP's), and with LayerSpec::ffn > 0 the
// shared_experts' linear_fc1 / linear_fc2. The experts' and shared experts' fc2 biases are
// whole-gradient replicated parameters (see layers/moe_layer.h).
void moe_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                int64_t H, const InitScales& init);
// One transformer layer: norm, attention, norm, MLP (or MoE) under "decoder.layers.<i>.".
void transformer_layer_params(std::vector<ParamDecl>& out, int64_t layer, const LayerSpec& s,
                              int64_t H, const InitScales& init);
// The output layer [V, H] of an untied model (vocab-parallel), or the last stage's tied copy of
// the word embedding (zero-initialized, then summed with the first stage's over the embedding
// group: Megatron's scheme).
void output_params(std::vector<ParamDecl>& out, int64_t V, int64_t H, bool tied_copy,
                   const InitScales& init);

}  // namespace mg
