// PyTorch parity (label `reference`): our Llama-family model against the float64 PyTorch model in
// llama_reference.py (written for this test: its own group split of QKV, repeat of K/V heads,
// RoPE, SwiGLU, RMSNorm); the run and its tolerances: testing/pytorch_parity.h.
#include "testing/pytorch_parity.h"

namespace mg {
namespace {

// A tiny Llama: RMSNorm, RoPE, GQA (NH 4, NG 2, HD 16), SwiGLU, no biases, untied output.
testing::ParityCase tiny_llama() {
  testing::ParityCase pc;
  pc.script = "llama_reference.py";
  GPTConfig& c = pc.model;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 96;
  c.seq_length = 32;
  c.vocab_size = 500;  // padded to 512: the padded rows take part in the softmax
  c.normalization = "RMSNorm";
  c.norm_epsilon = 1e-5f;
  c.position_embedding_type = "rope";
  c.rotary_base = 10000.f;
  c.swiglu = true;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  pc.label_vocab = 64;  // something to learn in 10 steps, the output layer being untied
  // RoPE turns by the sequence index, whatever the position ids: give it other ones.
  pc.position_id = [S = c.seq_length](int64_t t) { return int32_t(S - 1 - t); };
  c.validate();
  return pc;
}

TEST(LlamaParity, GroupedQueryAttention) { testing::check_pytorch_parity(tiny_llama()); }

// One K/V head for all queries, half of each head rotated in interleaved pairs, a QKV bias.
TEST(LlamaParity, MultiQueryPartialInterleavedRopeQkvBias) {
  testing::ParityCase pc = tiny_llama();
  pc.model.num_query_groups = 1;
  pc.model.rotary_percent = 0.5f;
  pc.model.rotary_interleaved = true;
  pc.model.add_qkv_bias = true;
  pc.model.validate();
  testing::check_pytorch_parity(pc);
}

// --qk-layernorm: each query and key head RMS-normalized over its channels before RoPE.
TEST(LlamaParity, QkLayernorm) {
  testing::ParityCase pc = tiny_llama();
  pc.model.qk_layernorm = true;
  pc.model.validate();
  testing::check_pytorch_parity(pc);
}

// NG = NH without --group-query-attention, NH * HD != H, every linear bias, the output tied to
// the word embedding, Llama 3.1's RoPE scaling with Llama 3's base.
TEST(LlamaParity, MultiHeadBiasesTiedRopeScaling) {
  testing::ParityCase pc = tiny_llama();
  GPTConfig& c = pc.model;
  c.group_query_attention = false;
  c.kv_channels = 8;
  c.add_bias_linear = true;
  c.untie_embeddings_and_output_weights = false;
  c.rotary_base = 500000.f;
  c.use_rope_scaling = true;
  c.validate();
  testing::check_pytorch_parity(pc);
}

}  // namespace
}  // namespace mg
