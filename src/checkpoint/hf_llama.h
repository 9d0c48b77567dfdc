// Hugging Face Llama-family tensors <-> our parameters (docs/reference/llama-moe-cp.md §3). Each of our
// tensors is HF row blocks stacked, then zero rows (vocabulary padding):
//   word embedding = model.embed_tokens; output_layer = lm_head (untied only);
//   linear_qkv = per query group g: its NH/NG q_proj heads, k_proj head g, v_proj head g
//     (HF's q/k/v rows are already in the rotate-half RoPE order ours use; biases likewise);
//   linear_fc1 = [gate_proj; up_proj]; linear_proj = o_proj; linear_fc2 = down_proj;
//   input_layernorm, post_attention_layernorm (our pre_mlp_layernorm), model.norm;
//   Mixtral's MoE layers: mlp.router = block_sparse_moe.gate, expert e's linear_fc1 =
//     [experts.e.w1; experts.e.w3], its linear_fc2 = experts.e.w2;
//   Qwen3 (and Qwen3-MoE): q_layernorm / k_layernorm = self_attn.q_norm / k_norm; Qwen3-MoE's
//     MoE layers: mlp.router = mlp.gate, expert e's linear_fc1 = [mlp.experts.e.gate_proj;
//     up_proj], its linear_fc2 = mlp.experts.e.down_proj.
// A row is everything after the first dim (one element of a 1-D tensor), so a conversion is a
// copy of row ranges in the file's dtype, bit for bit both ways.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/tensor.h"

namespace mg {

// Rows [row_begin, row_begin + rows) of HF tensor `name` of shape `shape`.
struct HfRows {
  std::string name;
  Shape shape;
  int64_t row_begin = 0, rows = 0;
};

// One of our parameters and the HF rows it stacks (then zero rows up to its padded shape).
struct LlamaTensor {
  std::string ours;  // Megatron-Core name, e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  std::vector<HfRows> parts;
  bool norm_weight =
      false;  // its declared trait: HF stores gamma, so w + 1 under --apply-layernorm-1p
};

// Every parameter of the single-rank model of cfg (Llama family) under the HF names of
// `architecture` (e.g. "MixtralForCausalLM"), in layout order.
std::vector<LlamaTensor> llama_tensors(const GPTConfig& cfg, const std::string& architecture);

// HF tensor names that are buffers, not weights (rotary_emb.inv_freq): skipped on import.
bool is_hf_buffer(const std::string& name);

}  // namespace mg
