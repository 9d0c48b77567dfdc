// Hugging Face export of an --apply-layernorm-1p checkpoint: HF's norm weights are gamma, so the
// export writes w + 1. A 1p checkpoint holding w = gamma - 1 exports to the same files, bit for
// bit, as the plain checkpoint holding gamma: a GPT-2 (LayerNorm, the GPT-2 converter) in f32
// and a Llama (RMSNorm, the Llama-family converter) in f32 and bf16.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/ops.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/convert.h"
#include "checkpoint/hf_files.h"
#include "model/param_layout.h"
#include "testing/fd_check.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

GPTConfig tiny(bool llama) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  if (llama) {
    c.normalization = "RMSNorm";
    c.swiglu = true;
    c.ffn_hidden_size = 24;
    c.position_embedding_type = "rope";
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
    c.group_query_attention = true;
    c.num_query_groups = 2;
  }
  return c;
}

// Writes a weights-only checkpoint of model c in dtype whose values are `global` (f32, in c's
// single-rank layout), with every norm weight less `norm_shift`; exports it to HF in `hf`.
void write_and_export(const std::string& ck, const std::string& hf, const GPTConfig& c,
                      const std::vector<float>& global, float norm_shift, DType dtype) {
  CheckpointWriter out(ck, c, 1, 1, dtype, {"test"});
  for (const ParamSpec& p : out.global_layout().params()) {
    std::vector<float> v(global.begin() + p.offset, global.begin() + p.offset + p.numel());
    if (p.traits.norm_weight)
      for (float& x : v) x -= norm_shift;
    std::vector<char> bytes(size_t(p.numel()) * dtype_size(dtype));
    cpu::cast_from_f32(bytes.data(), dtype, v.data(), p.numel());
    out.add(p.name, bytes.data());
  }
  out.finish();
  ConvertConfig cc;
  cc.direction = "megatron-to-hf";
  cc.load = ck;
  cc.save = hf;
  convert(cc);
}

void expect_export_adds_one(bool llama, DType dtype) {
  const GPTConfig plain = tiny(llama);
  GPTConfig zc = plain;
  zc.apply_layernorm_1p = true;
  const ParamLayout layout = gpt_param_layout(plain);
  // gamma in [0.8, 1.2]: gamma - 1 and w + 1 are exact there (Sterbenz), also in bf16.
  std::vector<float> v = testing::random_vec(size_t(layout.total_numel()), 5, -0.2f, 0.2f);
  int64_t norms = 0;
  for (const ParamSpec& p : layout.params())
    if (p.traits.norm_weight) {
      ++norms;
      for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) v[size_t(i)] += 1.f;
    }
  EXPECT_EQ(norms, 2 * plain.num_layers + 1);
  {  // the values as the dtype holds them, so that gamma - 1 is exact in it too
    std::vector<char> bytes(v.size() * dtype_size(dtype));
    cpu::cast_from_f32(bytes.data(), dtype, v.data(), int64_t(v.size()));
    cpu::cast_to_f32(v.data(), bytes.data(), dtype, int64_t(v.size()));
  }
  testing::TempDir dir("mg_hf_1p");
  write_and_export(dir.str("ck_plain"), dir.str("hf_plain"), plain, v, 0.f, dtype);
  write_and_export(dir.str("ck_1p"), dir.str("hf_1p"), zc, v, 1.f, dtype);
  const HfTensorFiles a(dir.str("hf_plain")), b(dir.str("hf_1p"));
  ASSERT_EQ(a.names(), b.names());
  int64_t hf_norms = 0;
  for (const std::string& n : a.names()) {
    const SafeTensor &s = a.get(n), &t = b.get(n);
    EXPECT_EQ(s.dtype, t.dtype) << n;
    ASSERT_EQ(s.shape, t.shape) << n;
    EXPECT_EQ(std::memcmp(s.data, t.data, s.bytes), 0) << n << " differs";
    const bool norm = n.find("norm") != std::string::npos || n.find("ln_") != std::string::npos;
    if (norm && n.ends_with(".weight")) {
      ++hf_norms;
      const std::vector<float> g = t.to_f32();
      for (float x : g) ASSERT_GT(x, 0.75f) << n << ": not gamma = w + 1";
    }
  }
  EXPECT_EQ(hf_norms, norms);
}

TEST(HFExport1p, Gpt2WritesGammaAsWPlusOne) { expect_export_adds_one(false, DType::F32); }
TEST(HFExport1p, LlamaWritesGammaAsWPlusOne) {
  expect_export_adds_one(true, DType::F32);
  expect_export_adds_one(true, DType::BF16);
}

}  // namespace
}  // namespace mg
