// Hugging Face Mixtral (MixtralForCausalLM) conversion against an independent PyTorch reference
// (hf_mixtral_reference.py: a tiny random Mixtral, 2 layers, hidden 32, GQA, 4 experts, top 2):
// f32 and bf16, single-file and sharded, go HF -> checkpoint -> HF bit-identical (tensors,
// config.json, tokenizer files); our model loaded from the checkpoint (also one written for
// TP 2 x PP 2) gives the reference's logits within 1e-4, and trains from it under one rank and
// TP 2 with the same losses. Bad config.json fields stop with exit code 2 naming the field and
// write nothing; models Mixtral cannot express are refused on export naming the flag.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/hf_llama_config.h"
#include "testing/checkpoint_logits.h"
#include "testing/hf_same_files.h"
#include "testing/mpirun.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The reference models, written once for the whole suite.
class HFMixtralConvert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("mg_hf_mixtral");
    const auto py =
        testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                             "/tests/checkpoint/hf_mixtral_reference.py " + dir_->str());
    ASSERT_EQ(py.exit_code, 0) << py.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path ref(const std::string& c) { return *dir_ / c; }
  static testing::RunResult convert(const std::string& args) {
    return testing::run_command(std::string(MG_BINARY) + " convert " + args);
  }
  static testing::TempDir* dir_;
};
testing::TempDir* HFMixtralConvert::dir_ = nullptr;

TEST_F(HFMixtralConvert, RoundTripsExactlyAndMatchesTheLogits) {
  for (const char* dt : {"f32", "bf16"}) {
    SCOPED_TRACE(dt);
    const fs::path c = ref(std::string("mixtral_") + dt);
    for (const char* src : {"hf", "hf_sharded"}) {
      const fs::path ck = c / (std::string("ck_") + src), back = c / (std::string("back_") + src);
      auto r = convert("--direction hf-to-megatron --load " + (c / src).string() + " --save " +
                       ck.string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("4 experts, top-2"), std::string::npos) << r.output;
      r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + back.string() +
                  (std::string(src) == "hf" ? "" : " --max-shard-size 20KB"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(fs::exists(back / "model.safetensors.index.json"), std::string(src) != "hf");
      testing::expect_same_hf(c / src, back);
    }
    const CheckpointMetadata meta =
        read_checkpoint_metadata(latest_checkpoint_dir((c / "ck_hf").string()));
    EXPECT_EQ(dtype_name(meta.precision), std::string(dt));
    EXPECT_EQ(meta.model.num_experts, 4);
    EXPECT_EQ(meta.model.moe_router_topk, 2);
    EXPECT_EQ(meta.model.moe_ffn(), 48);
    EXPECT_EQ(meta.model.query_groups(), 2);
    const double err = testing::checkpoint_logits_error((c / "ck_hf").string(), c, 2, 16);
    std::printf("logits error %s: %.3g\n", dt, err);
    EXPECT_LT(err, 1e-4);
  }
}

// Written as a TP 2 x PP 2 run saves it (experts' fc1 split by TP with SwiGLU stride 2): loads
// at one rank with the reference's logits and goes back to HF bit-identical.
TEST_F(HFMixtralConvert, TargetLayoutTp2Pp2) {
  const fs::path c = ref("mixtral_bf16"), ck = c / "ck_tp2pp2", back = c / "back_tp2pp2";
  auto r =
      convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
              ck.string() + " --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CheckpointMetadata meta = read_checkpoint_metadata(latest_checkpoint_dir(ck.string()));
  EXPECT_EQ(meta.tp, 2);
  EXPECT_EQ(meta.pp, 2);
  r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + back.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::expect_same_hf(c / "hf", back);
  EXPECT_LT(testing::checkpoint_logits_error(ck.string(), c, 2, 16), 1e-4);
}

// A checkpoint without the kept hf/ (a training --save directory) exports as Mixtral from its
// model record alone: the same tensors, and config.json's modelled fields.
TEST_F(HFMixtralConvert, ExportWithoutTheKeptConfigIsMixtral) {
  const fs::path c = ref("mixtral_f32"), ck = c / "ck_bare", out = c / "bare";
  auto r = convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
                   ck.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::remove_all(ck / "hf");
  r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const HfTensorFiles x((c / "hf").string()), y(out.string());
  ASSERT_EQ(x.names(), y.names());
  for (const std::string& n : x.names())
    EXPECT_EQ(std::memcmp(x.get(n).data, y.get(n).data, x.get(n).bytes), 0) << n;
  const json want = json::parse(testing::slurp(c / "hf" / "config.json"));
  const json got = json::parse(testing::slurp(out / "config.json"));
  for (const char* k : {"architectures", "model_type", "num_local_experts", "num_experts_per_tok",
                        "intermediate_size", "num_key_value_heads", "sliding_window",
                        "tie_word_embeddings", "rope_theta", "vocab_size"})
    EXPECT_EQ(got[k], want[k]) << k;
  EXPECT_FALSE(got.contains("router_aux_loss_coef"));  // a training field, not modelled
}

// `train --load` of the converted Mixtral needs no model flags: one rank and TP 2 (the
// vocabulary padded to the same 128 rows) give the same losses.
TEST_F(HFMixtralConvert, TrainLoadOneRankAndTp2Agree) {
  const fs::path c = ref("mixtral_bf16"), ck = c / "ck_train";
  const auto r = convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
                         ck.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string train = std::string(MG_BINARY) +
                            " train --mock-data --seq-length 16 --micro-batch-size 2 "
                            "--global-batch-size 4 --train-iters 3 --lr 1e-4 --log-interval 1 "
                            "--load " +
                            ck.string();
  const auto one = testing::run_command(train);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto tp2 = testing::run_command(testing::mpirun_prefix(2) + train +
                                        " --tensor-model-parallel-size 2 "
                                        "--make-vocab-size-divisible-by 64");
  ASSERT_EQ(tp2.exit_code, 0) << tp2.output;
  const std::vector<double> want = testing::log_values(one.output, "lm loss"),
                            got = testing::log_values(tp2.output, "lm loss");
  ASSERT_EQ(want.size(), 3u) << one.output;
  ASSERT_EQ(got.size(), 3u) << tp2.output;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << i;
}

// Each bad config.json: exit 2, a message naming the field, and no --save directory left behind.
TEST_F(HFMixtralConvert, BadConfigNamesTheFieldAndWritesNothing) {
  testing::TempDir t("mg_hf_mixtral_bad");
  int n = 0;
  auto expect_refused = [&](auto edit, const std::string& needle) {
    const fs::path d = t / ("case" + std::to_string(n++)), out = d.string() + "_out";
    fs::copy(ref("mixtral_f32") / "hf", d, fs::copy_options::recursive);
    json j = json::parse(testing::slurp(d / "config.json"));
    edit(j);
    testing::write_bytes(d / "config.json", j.dump());
    const auto r =
        convert("--direction hf-to-megatron --load " + d.string() + " --save " + out.string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos)
        << "wanted '" << needle << "' in: " << r.output;
    EXPECT_FALSE(fs::exists(out)) << out;
  };
  expect_refused([](json& j) { j.erase("num_local_experts"); }, "num_local_experts");
  expect_refused([](json& j) { j["num_local_experts"] = 0; }, "num_local_experts");
  expect_refused([](json& j) { j["num_experts_per_tok"] = 5; }, "num_experts_per_tok");
  expect_refused([](json& j) { j["num_experts_per_tok"] = "two"; }, "num_experts_per_tok");
  expect_refused([](json& j) { j["sliding_window"] = 4096; }, "sliding_window");
  expect_refused([](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act");
  expect_refused([](json& j) { j["attention_bias"] = j["mlp_bias"] = true; },
                 "MixtralForCausalLM has no biases");
  // Five or three experts in config.json, four in the files: the router's rows disagree.
  expect_refused([](json& j) { j["num_local_experts"] = 5; }, "gate.weight has shape [4, 32]");
  expect_refused([](json& j) { j["num_local_experts"] = 3; }, "gate.weight has shape [4, 32]");
  expect_refused([](json& j) { j["intermediate_size"] = 64; }, "config.json");
}

// What MixtralForCausalLM cannot express is refused on export, naming the flag.
TEST(HFMixtralExport, RefusesWhatMixtralCannotExpress) {
  GPTConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.normalization = "RMSNorm";
  m.position_embedding_type = "rope";
  m.swiglu = true;
  m.add_bias_linear = false;
  m.num_experts = 4;
  m.moe_router_topk = 2;
  EXPECT_EQ(hf_llama_architecture_for(m, "", "--load x"), "MixtralForCausalLM");
  EXPECT_EQ(hf_llama_architecture_for(m, "LlamaForCausalLM", "--load x"), "MixtralForCausalLM");
  const std::pair<void (*)(GPTConfig&), const char*> cases[] = {
      {[](GPTConfig& c) { c.moe_shared_expert_intermediate_size = 64; },
       "--moe-shared-expert-intermediate-size"},
      {[](GPTConfig& c) { c.moe_layer_freq = "2"; }, "--moe-layer-freq 2 (layer 1 is dense"},
      {[](GPTConfig& c) { c.moe_layer_freq = "[1,0]"; }, "--moe-layer-freq [1,0]"},
      {[](GPTConfig& c) { c.moe_router_score_function = "sigmoid"; },
       "--moe-router-score-function sigmoid"},
      {[](GPTConfig& c) { c.moe_router_pre_softmax = true; }, "--moe-router-pre-softmax"},
      {[](GPTConfig& c) { c.moe_router_topk_scaling_factor = 2.5f; },
       "--moe-router-topk-scaling-factor 2.5"},
      {[](GPTConfig& c) { c.add_bias_linear = true; }, "--add-bias-linear"},
      {[](GPTConfig& c) { c.add_qkv_bias = true; }, "--add-qkv-bias"},
      {[](GPTConfig& c) {
         c.moe_router_num_groups = 2;
         c.moe_router_group_topk = 1;
       },
       "--moe-router-num-groups 2 (group-limited routing)"},
  };
  for (const auto& [edit, flag] : cases) {
    GPTConfig c = m;
    edit(c);
    const std::string msg = testing::usage_error_of(
        [&] { hf_llama_architecture_for(c, "MixtralForCausalLM", "--load x"); });
    EXPECT_NE(msg.find(flag), std::string::npos) << "wanted '" << flag << "' in: " << msg;
    EXPECT_NE(msg.find("MixtralForCausalLM cannot represent it"), std::string::npos) << msg;
  }
  // A scaling factor of 1 is no scaling: Mixtral's weights.
  GPTConfig one = m;
  one.moe_router_topk_scaling_factor = 1.f;
  EXPECT_EQ(hf_llama_architecture_for(one, "", "--load x"), "MixtralForCausalLM");
  // The config.json written for a model without a source file.
  const json j = hf_llama_config_json(m, "MixtralForCausalLM", "float32", json());
  EXPECT_EQ(j["model_type"], "mixtral");
  EXPECT_EQ(j["num_local_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["intermediate_size"], m.moe_ffn());
  EXPECT_TRUE(j["sliding_window"].is_null());
}

}  // namespace
}  // namespace mg
