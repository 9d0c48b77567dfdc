// Hugging Face GPT-2 conversion against an independent PyTorch reference: a random GPT-2 written
// in HF's layout (GPT2LMHeadModel names, Conv1D [in, out] weights, fused [q|k|v] columns) goes
// HF -> megatron-cpp checkpoint -> HF with every tensor bit-identical, and our model, loaded
// from the converted checkpoint, gives the reference model's logits within 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "checkpoint/safetensors.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::vector<T> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  std::vector<T> v(size_t(f.tellg()) / sizeof(T));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  return v;
}

TEST(HFConvert, RoundTripIsExactAndLogitsMatchTheReference) {
  char tmpl[] = "/tmp/mg_hf_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  const auto py = testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                                       "/tests/reference/hf_gpt2_reference.py " + d.string());
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const std::string bin = MG_BINARY;
  auto r = testing::run_command(bin + " convert --direction hf-to-megatron --load " +
                                (d / "hf").string() + " --save " + (d / "ck").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(bin + " convert --direction megatron-to-hf --load " +
                           (d / "ck").string() + " --save " + (d / "hf2").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const SafetensorsReader a((d / "hf" / "model.safetensors").string());
  const SafetensorsReader b((d / "hf2" / "model.safetensors").string());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& [name, t] : a.tensors()) {
    ASSERT_TRUE(b.has(name)) << name;
    const SafeTensor& u = b.get(name);
    EXPECT_EQ(u.shape, t.shape) << name;
    EXPECT_EQ(u.to_f32(), t.to_f32()) << name;
  }

  // Our model on the reference batch, loaded from the converted checkpoint.
  GPTConfig c = checkpoint_model_config((d / "ck").string());
  const int64_t B = 2, S = 16, V = c.vocab_size;
  c.seq_length = S;
  GPTModel model(c, B);
  CheckpointConfig cc;
  cc.model = c;
  cc.load = (d / "ck").string();
  cc.no_load_optim = true;
  Optimizer opt(model.layout(), OptimizerConfig{});
  ProcessGroups g = make_single_process_groups();
  TrainProgress progress;
  ASSERT_TRUE(load_checkpoint({model, opt, g, cc, false}, progress));
  const auto tokens = read_all<int32_t>(d / "tokens.bin");
  const auto want = read_all<double>(d / "logits.bin");
  ASSERT_EQ(tokens.size(), size_t(B * S));
  std::vector<int32_t> pos(B * S), labels(B * S, 0);
  std::vector<float> mask(B * S, 1.f);
  for (int64_t i = 0; i < B * S; ++i) pos[size_t(i)] = int32_t(i % S);
  model.forward(0, {tokens.data(), pos.data(), labels.data(), mask.data()});
  const int64_t Vp = c.padded_vocab_size();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t v = 0; v < V; ++v) {
        const double ours = model.logits(0)[(s * B + b) * Vp + v];  // [S, B, V] rows
        worst = std::max(worst, std::fabs(ours - want[size_t((b * S + s) * V + v)]));
      }
  EXPECT_LT(worst, 1e-4);
  fs::remove_all(d);
}

TEST(HFConvert, BadInputsNameTheFile) {
  char tmpl[] = "/tmp/mg_hf_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  const std::string bin = MG_BINARY;
  auto r = testing::run_command(bin + " convert --direction hf-to-megatron --load " + d.string() +
                                " --save " + (d / "ck").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(d.string() + "/config.json"), std::string::npos) << r.output;
  r = testing::run_command(bin + " convert --direction sideways --load a --save b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--direction"), std::string::npos) << r.output;
  fs::remove_all(d);
}

}  // namespace
}  // namespace mg
