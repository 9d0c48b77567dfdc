// Hugging Face config.json of the Llama family (LlamaForCausalLM: Llama 2, 3, 3.1, 3.2;
// MistralForCausalLM; Qwen2ForCausalLM; Qwen3ForCausalLM; MixtralForCausalLM;
// Qwen3MoeForCausalLM) <-> our GPTConfig (docs/reference/llama-moe-cp.md §3):
// RMSNorm, RoPE (rotate-half; Llama 3.1's "llama3" scaling), SwiGLU, grouped-query attention,
// no linear biases (Qwen2: a QKV bias), tied or untied output; Qwen3: --qk-layernorm; Mixtral:
// every layer's MLP a mixture of experts (--num-experts, --moe-router-topk); Qwen3-MoE: some or
// all layers' (--moe-layer-freq). What our model cannot represent is refused naming
// config.json and the field.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace mg {

// The architectures `megatron convert` reads, for its messages.
extern const char* const kHfArchitecturesRead;
// The architectures the Llama-family conversion reads and writes.
bool is_hf_llama_family(const std::string& architecture);
// config.json's single "architectures" entry (a UsageError naming the file if absent or several).
std::string hf_architecture(const nlohmann::json& config, const std::string& path);

// config.json (already parsed; `path` names it) as our model. seq_length is
// min(max_position_embeddings, 4096): it sizes no parameter.
GPTConfig hf_llama_config(const nlohmann::json& config, const std::string& path,
                          int64_t make_vocab_size_divisible_by);
// The architecture a checkpoint's model exports as: `preferred` (the source's, or "") when it
// represents the model, else Qwen3 (Qwen3-MoE with experts) for --qk-layernorm, Mixtral for
// experts, Qwen2 for a QKV bias alone, else Llama. A model no Llama-family architecture
// represents is a UsageError naming `what` and the flags.
std::string hf_llama_architecture_for(const GPTConfig& model, const std::string& preferred,
                                      const std::string& what);
// config.json for `model` as `architecture` with weights of `torch_dtype` ("bfloat16", ...):
// `original` (the source's config.json, or null) keeps the fields we do not model (bos/eos ids,
// ...); the fields we model are written from `model`.
nlohmann::json hf_llama_config_json(const GPTConfig& model, const std::string& architecture,
                                    const std::string& torch_dtype, const nlohmann::json& original);

}  // namespace mg
