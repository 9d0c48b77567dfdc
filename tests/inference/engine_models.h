// The small models the inference tests run (engine_test.cpp on the CPU, cuda_engine_test.cpp
// on the GPU): GPT-2, Llama and Mixtral shapes with logits far from uniform, a token sequence,
// and the training model's full forward as the reference for the engine's logits.
#pragma once
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "inference/inference_model.h"
#include "model/gpt.h"

namespace mg::testing {

inline GPTConfig gpt2() {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 24;
  c.vocab_size = 61;
  c.make_vocab_size_divisible_by = 8;
  c.init_method_std = 0.2f;  // logits far from uniform: differences show
  return c;
}

inline GPTConfig llama() {
  GPTConfig c = gpt2();
  c.normalization = "RMSNorm";
  c.position_embedding_type = "rope";
  c.swiglu = true;
  c.ffn_hidden_size = 48;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.qk_layernorm = true;
  return c;
}

inline GPTConfig mixtral() {
  GPTConfig c = llama();
  c.qk_layernorm = false;
  c.num_experts = 4;
  c.moe_router_topk = 2;
  c.moe_layer_freq = "2";
  return c;
}

inline std::vector<int32_t> sequence(int64_t n, int64_t V, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((seed * 7 + i * 13 + i * i) % V);
  return t;
}

// An inference model of cfg for `rows` step rows with the training model's initial parameters
// (seed 5: full_forward's).
inline std::unique_ptr<InferenceModel> model(const GPTConfig& cfg, int64_t rows) {
  auto m = std::make_unique<InferenceModel>(cfg, DType::F32, rows);
  m->store().init(5);
  m->prepare();
  return m;
}

// The training model's logits (S, V padded) for one sequence of cfg.seq_length tokens.
inline std::vector<float> full_forward(const GPTConfig& cfg, const std::vector<int32_t>& tokens) {
  GPTModel m(cfg, 1);
  m.store().init(5);
  const int64_t S = cfg.seq_length, V = cfg.padded_vocab_size();
  std::vector<int32_t> pos(static_cast<size_t>(S)), labels(static_cast<size_t>(S), 0);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> mask(static_cast<size_t>(S), 1.f);
  m.forward(0, {tokens.data(), pos.data(), labels.data(), mask.data()});
  return std::vector<float>(m.logits(0), m.logits(0) + S * V);
}

}  // namespace mg::testing
