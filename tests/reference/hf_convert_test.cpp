// Hugging Face GPT-2 conversion against an independent PyTorch reference: a random GPT-2 written
// in HF's layout (GPT2LMHeadModel names, Conv1D [in, out] weights, fused [q|k|v] columns) goes
// HF -> megatron-cpp checkpoint (single-rank, and laid out for TP 2 x PP 2) -> HF with every
// tensor bit-identical, and our model, loaded from the converted checkpoint, gives the
// reference model's logits within 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "checkpoint/safetensors.h"
#include "testing/checkpoint_logits.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

TEST(HFConvert, RoundTripIsExactAndLogitsMatchTheReference) {
  char tmpl[] = "/tmp/mg_hf_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  const auto py = testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                                       "/tests/reference/hf_gpt2_reference.py " + d.string());
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const std::string bin = MG_BINARY;
  // The single-rank layout, and the one a TP 2 x PP 2 run saves (vocabulary padded to 256).
  for (const std::string target : {"",
                                   " --target-tensor-parallel-size 2 "
                                   "--target-pipeline-parallel-size 2"}) {
    SCOPED_TRACE(target);
    fs::remove_all(d / "ck");
    fs::remove_all(d / "hf2");
    auto r = testing::run_command(bin + " convert --direction hf-to-megatron --load " +
                                  (d / "hf").string() + " --save " + (d / "ck").string() + target);
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
    EXPECT_LT(testing::checkpoint_logits_error((d / "ck").string(), d, 2, 16), 1e-4);
  }
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
