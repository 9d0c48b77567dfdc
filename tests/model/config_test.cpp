// The model description: parameter counts of published models from the block declarations,
// the sharding descriptor's global index (partition stride), and the field list's round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "model/fields.h"
#include "model/param_layout.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

GPTConfig llama(int64_t H, int64_t L, int64_t NH, int64_t NG, int64_t F, int64_t V) {
  GPTConfig c;
  c.num_layers = L;
  c.hidden_size = H;
  c.num_attention_heads = NH;
  c.group_query_attention = NG != NH;
  c.num_query_groups = NG;
  c.ffn_hidden_size = F;
  c.vocab_size = V;
  c.normalization = "RMSNorm";
  c.position_embedding_type = "rope";
  c.swiglu = true;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  c.seq_length = 4096;
  c.validate();
  return c;
}

// Meta's published parameter counts (model cards / HF safetensors index totals / 2 bytes).
TEST(ModelConfig, ParameterCountsOfPublishedLlamas) {
  EXPECT_EQ(llama(4096, 32, 32, 32, 11008, 32000).num_parameters(), 6738415616);   // Llama 2 7B
  EXPECT_EQ(llama(4096, 32, 32, 8, 14336, 128256).num_parameters(), 8030261248);   // Llama 3 8B
  EXPECT_EQ(llama(5120, 40, 40, 40, 13824, 32000).num_parameters(), 13015864320);  // Llama 2 13B
}

// Megatron's defaults: --swiglu without --ffn-hidden-size is int(8H/3 / 64) * 64 wide (the
// parameters of a 4H GELU MLP); RoPE with --no-position-embedding keeps RoPE.
TEST(ModelConfig, MegatronDefaultsAndResolvedForm) {
  GPTConfig c;
  c.hidden_size = 4096;
  c.num_attention_heads = 32;
  EXPECT_EQ(c.ffn(), 16384);
  c.swiglu = true;
  EXPECT_EQ(c.ffn(), 10880);
  c.position_embedding_type = "rope";
  c.no_position_embedding = true;
  EXPECT_TRUE(c.rope());
  EXPECT_FALSE(c.learned_positions());
  GPTConfig gpt2;
  gpt2.no_position_embedding = true;
  EXPECT_EQ(gpt2.resolved().position_embedding_type, "none");
  // Inactive settings do not make two configs differ.
  GPTConfig a = gpt2, b = gpt2;
  b.rotary_base = 500000.f;          // no RoPE: unused
  b.num_query_groups = 7;            // no --group-query-attention: unused
  b.max_position_embeddings = 4096;  // no learned table: unused
  EXPECT_EQ(field_text(a.resolved(), model_fields()[0]),
            field_text(b.resolved(), model_fields()[0]));
  for (const ModelField& f : model_fields())
    EXPECT_EQ(field_text(a.resolved(), f), field_text(b.resolved(), f)) << f.key;
  EXPECT_EQ(GPTConfig{}.non_gpt2_features().size(), 0u);
  EXPECT_EQ(c.non_gpt2_features(), (std::vector<std::string>{"position embedding rope", "SwiGLU"}));
}

// Every element of every TP shard maps to a distinct global element, and a strided split puts
// local row i of rank r where Megatron's partition stride does.
TEST(Sharding, StridedSplitCoversTheGlobalTensorOnce) {
  const Shape global{12, 5};
  for (int64_t stride : {1, 2, 3})
    for (int64_t tp : {1, 2}) {
      Sharding s;
      s.split_dim = 0;
      s.stride = stride;
      if (global[0] % (stride * tp)) continue;
      const Shape local = local_shape(global, s, tp);
      std::set<int64_t> seen;
      for (int64_t r = 0; r < tp; ++r)
        for (int64_t j = 0; j < shape_numel(local); ++j) {
          const int64_t g = global_index(global, local, s, j, tp, r);
          EXPECT_TRUE(seen.insert(g).second) << "stride " << stride << " tp " << tp;
          const int64_t i = j / 5, part_rows = local[0] / stride;
          EXPECT_EQ(g / 5, (i / part_rows) * (12 / stride) + r * part_rows + i % part_rows);
          EXPECT_EQ(g % 5, j % 5);
        }
      EXPECT_EQ(int64_t(seen.size()), shape_numel(global));
    }
  Sharding cols;  // a split along dim 1: rows keep their index, columns shift by the rank
  cols.split_dim = 1;
  EXPECT_EQ(global_index({4, 6}, {4, 3}, cols, 4, 2, 1), 1 * 6 + 3 + 1);
}

// SwiGLU's fc1 is split with stride 2 (each rank holds its gate rows then its up rows); the
// grouped QKV by whole groups.
TEST(Sharding, LlamaBlocksDeclareMegatronsSharding) {
  GPTConfig c = llama(64, 1, 8, 4, 96, 500);
  ShardSpec shard;
  shard.tp_size = 2;
  const ParamLayout l = gpt_param_layout(c, shard);
  const ParamSpec& fc1 = l.get("decoder.layers.0.mlp.linear_fc1.weight");
  EXPECT_EQ(fc1.global_shape, (Shape{192, 64}));
  EXPECT_EQ(fc1.shape, (Shape{96, 64}));
  EXPECT_EQ(fc1.sharding.stride, 2);
  const ParamSpec& qkv = l.get("decoder.layers.0.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.global_shape, (Shape{(8 + 2 * 4) * 8, 64}));
  EXPECT_EQ(qkv.sharding.stride, 1);
  EXPECT_FALSE(l.has("decoder.layers.0.input_layernorm.bias"));  // RMSNorm
  EXPECT_FALSE(l.has("embedding.position_embeddings.weight"));   // RoPE
  EXPECT_TRUE(l.has("output_layer.weight"));                     // untied
}

// Each field reads back what it wrote, and every flag is one field's.
TEST(ModelFields, TextRoundTripAndUniqueFlags) {
  GPTConfig c = llama(64, 2, 8, 4, 96, 500);
  c.rotary_percent = 0.5f;
  std::set<std::string> flags;
  for (const ModelField& f : model_fields()) {
    EXPECT_TRUE(flags.insert(f.flag).second) << f.flag;
    GPTConfig d;
    set_field(d, f, field_text(c, f));
    EXPECT_EQ(field_text(d, f), field_text(c, f)) << f.key;
  }
}

// ---- issue 23: sizes counted in checked arithmetic ----

GPTConfig gpt2_shape(int64_t L, int64_t H, int64_t NH, int64_t S, int64_t V) {
  GPTConfig c;
  c.num_layers = L;
  c.hidden_size = H;
  c.num_attention_heads = NH;
  c.seq_length = S;
  c.vocab_size = V;
  return c;
}

// The counting shortcut (one layer's declarations times the layers) against the layout built
// parameter by parameter, on whole models and on TP / pipeline shards.
TEST(ParamCount, EqualsTheLayoutOnEveryShard) {
  const GPTConfig gpt2 = gpt2_shape(4, 64, 4, 32, 1000);
  GPTConfig qk = llama(64, 4, 8, 2, 96, 500);
  qk.qk_layernorm = true;
  for (const GPTConfig& c : {gpt2, llama(64, 4, 8, 2, 96, 500), qk}) {
    for (const ShardSpec& shard :
         {ShardSpec{}, ShardSpec{2, 1, 0, -1, true, true}, ShardSpec{1, 0, 0, 2, true, false},
          ShardSpec{2, 0, 2, 4, false, true}, ShardSpec{1, 0, 1, 3, false, false}}) {
      const ParamLayout l = gpt_param_layout(c, shard);
      const ParamCount n = shard_param_count(c, shard);
      int64_t vectors = 0;
      for (const ParamSpec& p : l.params())
        if (p.shape.size() == 1) vectors += p.numel();
      EXPECT_EQ(n.elements, l.total_numel());
      EXPECT_EQ(n.vector_elements, vectors);
      EXPECT_EQ(n.tensors, int64_t(l.params().size()));
    }
  }
}

// The issue's --num-layers 2147483648: counted exactly (docs/reference/formulas.md's GPT-2 count in 128-bit
// arithmetic) without a 2^31-layer list.
TEST(ParamCount, HugeLayerCountsAreCountedNotBuilt) {
  const GPTConfig c = gpt2_shape(2147483648, 16, 2, 8, 64);
  c.validate();
  const __int128 l = c.num_layers, h = 16, V = c.padded_vocab_size(), s = 8;
  EXPECT_EQ(__int128(c.num_parameters()), 12 * l * h * h + 13 * l * h + V * h + s * h + 2 * h);
}

// The inputs at the config level: refused by validate(), naming the flags.
TEST(ParamCount, OverflowingSizesAreRefusedNamingTheFlags) {
  GPTConfig c = gpt2_shape(1, 16, 2, 8, 64);
  c.max_position_embeddings = INT64_MAX;
  EXPECT_EQ(testing::usage_error_of([&] { c.validate(); }),
            "elements of embedding.position_embeddings.weight (--max-position-embeddings "
            "(default: --seq-length) x --hidden-size): 9223372036854775807 x 16 overflows a "
            "64-bit integer; lower the sizes that drive it");
  c.max_position_embeddings = -1;
  EXPECT_EQ(testing::usage_error_of([&] { c.validate(); }),
            "--max-position-embeddings must be positive (got -1)");
  c.max_position_embeddings = 0;
  c.num_layers = INT64_MAX;
  EXPECT_NE(testing::usage_error_of([&] {
              c.validate();
            }).find("--num-layers x the elements of one layer"),
            std::string::npos);
  c.num_layers = 1;
  c.hidden_size = int64_t(1) << 62;
  c.num_attention_heads = 1;
  EXPECT_NE(testing::usage_error_of([&] { c.validate(); }).find("overflows a 64-bit integer"),
            std::string::npos);
  c.hidden_size = 16;
  c.ffn_hidden_size = INT64_MAX;
  c.swiglu = true;
  EXPECT_EQ(testing::usage_error_of([&] { c.validate(); }),
            "rows of linear_fc1 (2 x --ffn-hidden-size): 2 x 9223372036854775807 overflows a "
            "64-bit integer; lower the sizes that drive it");
  c.ffn_hidden_size = 0;  // Megatron's SwiGLU default int(8H/3/64) x 64 is 0 below H = 24
  EXPECT_EQ(testing::usage_error_of([&] { c.validate(); }),
            "--swiglu's default --ffn-hidden-size, int(8 x --hidden-size / 3 / 64) x 64 "
            "(Megatron's), is 0 for --hidden-size 16: pass --ffn-hidden-size");
  c.swiglu = false;
  c.vocab_size = int64_t(1) << 31;
  EXPECT_EQ(testing::usage_error_of([&] { c.validate(); }),
            "--vocab-size must be in [1, 2147483647] (token ids are int32; got 2147483648)");
  c.vocab_size = 64;
  c.make_vocab_size_divisible_by = INT64_MAX;
  c.vocab_pad_tp = 2;
  EXPECT_NE(testing::usage_error_of([&] { c.padded_vocab_size(); }).find("the padded vocabulary"),
            std::string::npos);
}

}  // namespace
}  // namespace mg
