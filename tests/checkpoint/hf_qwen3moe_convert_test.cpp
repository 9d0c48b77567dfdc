// Hugging Face Qwen3-MoE (Qwen3MoeForCausalLM) and Qwen3 (Qwen3ForCausalLM) conversion against
// an independent PyTorch reference (hf_qwen3moe_reference.py: tiny random models, 3 layers,
// hidden 32, GQA, head_dim 16 != 32 / 4, q/k norms; 4 experts top 2 with norm_topk_prob true
// and a dense layer 0, or false with decoder_sparse_step 2): f32 and bf16, single-file and
// sharded, go HF -> checkpoint -> HF bit-identical (tensors, config.json, tokenizer files); our
// model loaded from the checkpoint (also one written for TP 2) gives the reference's logits
// within 1e-4, and trains from it under one rank and TP 2 with the same losses. Bad config.json
// fields stop with exit code 2 naming the field and write nothing; models Qwen3 cannot express
// are refused on export naming the flag.
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
class HFQwen3MoeConvert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("mg_hf_qwen3moe");
    const auto py =
        testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                             "/tests/checkpoint/hf_qwen3moe_reference.py " + dir_->str());
    ASSERT_EQ(py.exit_code, 0) << py.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path ref(const std::string& c) { return *dir_ / c; }
  static testing::RunResult convert(const std::string& args) {
    return testing::run_command(std::string(MG_BINARY) + " convert " + args);
  }
  static testing::TempDir* dir_;
};
testing::TempDir* HFQwen3MoeConvert::dir_ = nullptr;

TEST_F(HFQwen3MoeConvert, RoundTripsExactlyAndMatchesTheLogits) {
  struct Case {
    const char* name;
    const char* dtype;
    int64_t experts;
    const char* moe_layer_freq;
    bool pre_softmax;
  };
  const Case cases[] = {{"qwen3moe_norm_f32", "f32", 4, "[0,1,1]", false},
                        {"qwen3moe_norm_bf16", "bf16", 4, "[0,1,1]", false},
                        {"qwen3moe_nonorm_f32", "f32", 4, "[0,1,0]", true},
                        {"qwen3_f32", "f32", 0, "1", false}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const fs::path c = ref(k.name);
    for (const char* src : {"hf", "hf_sharded"}) {
      const fs::path ck = c / (std::string("ck_") + src), back = c / (std::string("back_") + src);
      auto r = convert("--direction hf-to-megatron --load " + (c / src).string() + " --save " +
                       ck.string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
      if (k.experts > 0) {
        EXPECT_NE(r.output.find("4 experts, top-2"), std::string::npos) << r.output;
      }
      r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + back.string() +
                  (std::string(src) == "hf" ? "" : " --max-shard-size 20KB"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(fs::exists(back / "model.safetensors.index.json"), std::string(src) != "hf");
      testing::expect_same_hf(c / src, back);
    }
    const CheckpointMetadata meta =
        read_checkpoint_metadata(latest_checkpoint_dir((c / "ck_hf").string()));
    EXPECT_EQ(dtype_name(meta.precision), std::string(k.dtype));
    EXPECT_TRUE(meta.model.qk_layernorm);
    EXPECT_EQ(meta.model.head_dim(), 16);
    EXPECT_EQ(meta.model.query_groups(), 2);
    EXPECT_EQ(meta.model.ffn(), 64);
    EXPECT_EQ(meta.model.num_experts, k.experts);
    if (k.experts > 0) {
      EXPECT_EQ(meta.model.moe_router_topk, 2);
      EXPECT_EQ(meta.model.moe_ffn(), 24);
      EXPECT_EQ(meta.model.moe_layer_freq, k.moe_layer_freq);
      EXPECT_EQ(meta.model.moe_router_pre_softmax, k.pre_softmax);
    }
    const double err = testing::checkpoint_logits_error((c / "ck_hf").string(), c, 2, 16);
    std::printf("logits error %s: %.3g\n", k.name, err);
    EXPECT_LT(err, 1e-4);
  }
}

// Written as a TP 2 run saves it (q/k norms replicated, experts' fc1 split with SwiGLU stride
// 2): loads at one rank with the reference's logits and goes back to HF bit-identical.
TEST_F(HFQwen3MoeConvert, TargetLayoutTp2) {
  const fs::path c = ref("qwen3moe_nonorm_f32"), ck = c / "ck_tp2", back = c / "back_tp2";
  auto r = convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
                   ck.string() + " --target-tensor-parallel-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_checkpoint_metadata(latest_checkpoint_dir(ck.string())).tp, 2);
  r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + back.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::expect_same_hf(c / "hf", back);
  EXPECT_LT(testing::checkpoint_logits_error(ck.string(), c, 2, 16), 1e-4);
}

// A checkpoint without the kept hf/ exports as Qwen3-MoE from its model record alone: the same
// tensors, config.json's modelled fields, and decoder_sparse_step 2 written as the same layers
// (step 1, the dense ones in mlp_only_layers).
TEST_F(HFQwen3MoeConvert, ExportWithoutTheKeptConfigIsQwen3Moe) {
  const fs::path c = ref("qwen3moe_nonorm_f32"), ck = c / "ck_bare", out = c / "bare";
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
  for (const char* k : {"architectures", "model_type", "num_experts", "num_experts_per_tok",
                        "moe_intermediate_size", "intermediate_size", "norm_topk_prob", "head_dim",
                        "num_key_value_heads", "tie_word_embeddings", "rope_theta", "vocab_size"})
    EXPECT_EQ(got[k], want[k]) << k;
  EXPECT_FALSE(got.contains("decoder_sparse_step"));  // transformers' default, 1
  EXPECT_EQ(got["mlp_only_layers"], json::parse("[0, 2]"));
  EXPECT_FALSE(got.contains("router_aux_loss_coef"));  // a training field, not modelled
  // And back: the same layers are MoE.
  const fs::path again = c / "ck_again";
  r = convert("--direction hf-to-megatron --load " + out.string() + " --save " + again.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_checkpoint_metadata(latest_checkpoint_dir(again.string())).model.moe_layer_freq,
            "[0,1,0]");
}

// `train --load` of the converted Qwen3-MoE (q/k norms, a dense layer 0, two MoE layers) needs no
// model flags: one rank and TP 2 (the vocabulary padded to the same 128 rows) give the same
// losses.
TEST_F(HFQwen3MoeConvert, TrainLoadOneRankAndTp2Agree) {
  const fs::path c = ref("qwen3moe_norm_f32"), ck = c / "ck_train";
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
TEST_F(HFQwen3MoeConvert, BadConfigNamesTheFieldAndWritesNothing) {
  testing::TempDir t("mg_hf_qwen3moe_bad");
  int n = 0;
  auto expect_refused = [&](auto edit, const std::string& needle) {
    const fs::path d = t / ("case" + std::to_string(n++)), out = d.string() + "_out";
    fs::copy(ref("qwen3moe_norm_f32") / "hf", d, fs::copy_options::recursive);
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
  expect_refused([](json& j) { j.erase("num_experts"); }, "num_experts");
  expect_refused([](json& j) { j["num_experts"] = 0; }, "num_experts");
  expect_refused([](json& j) { j["num_experts_per_tok"] = 5; }, "num_experts_per_tok");
  expect_refused([](json& j) { j.erase("moe_intermediate_size"); }, "moe_intermediate_size");
  expect_refused([](json& j) { j["norm_topk_prob"] = "yes"; }, "norm_topk_prob");
  expect_refused([](json& j) { j["decoder_sparse_step"] = 0; }, "decoder_sparse_step");
  expect_refused([](json& j) { j["mlp_only_layers"] = {3}; }, "mlp_only_layers");
  expect_refused([](json& j) { j["use_sliding_window"] = true; }, "use_sliding_window");
  expect_refused([](json& j) { j["attention_bias"] = true; }, "attention_bias");
  expect_refused([](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act");
  // The files disagree with config.json: five experts, a head_dim of 8, layer 0 sparse.
  expect_refused([](json& j) { j["num_experts"] = 5; }, "gate.weight has shape [4, 32]");
  expect_refused([](json& j) { j["head_dim"] = 8; }, "q_proj.weight has shape [64, 32]");
  expect_refused([](json& j) { j["mlp_only_layers"] = json::array(); },
                 "model.layers.0.mlp.gate.weight");
}

GPTConfig qk_norm_moe() {
  GPTConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.kv_channels = 16;
  m.normalization = "RMSNorm";
  m.position_embedding_type = "rope";
  m.swiglu = true;
  m.add_bias_linear = false;
  m.qk_layernorm = true;
  m.num_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 24;
  return m;
}

// --qk-layernorm picks Qwen3 (Qwen3-MoE with experts, whatever the source's architecture);
// what Qwen3 cannot express is refused on export, naming the flag.
TEST(HFQwen3MoeExport, PicksQwen3AndRefusesWhatItCannotExpress) {
  const GPTConfig m = qk_norm_moe();
  EXPECT_EQ(hf_llama_architecture_for(m, "", "--load x"), "Qwen3MoeForCausalLM");
  EXPECT_EQ(hf_llama_architecture_for(m, "MixtralForCausalLM", "--load x"), "Qwen3MoeForCausalLM");
  GPTConfig mixtral = m;
  mixtral.qk_layernorm = false;
  EXPECT_EQ(hf_llama_architecture_for(mixtral, "Qwen3MoeForCausalLM", "--load x"),
            "MixtralForCausalLM");
  GPTConfig dense = m;
  dense.num_experts = 0;
  EXPECT_EQ(hf_llama_architecture_for(dense, "LlamaForCausalLM", "--load x"), "Qwen3ForCausalLM");
  dense.add_qkv_bias = true;
  const std::string msg =
      testing::usage_error_of([&] { hf_llama_architecture_for(dense, "", "--load x"); });
  EXPECT_NE(msg.find("--add-qkv-bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Qwen3ForCausalLM cannot represent it"), std::string::npos) << msg;
  const std::pair<void (*)(GPTConfig&), const char*> cases[] = {
      {[](GPTConfig& c) { c.moe_shared_expert_intermediate_size = 64; },
       "--moe-shared-expert-intermediate-size"},
      {[](GPTConfig& c) { c.moe_router_score_function = "sigmoid"; },
       "--moe-router-score-function sigmoid"},
      {[](GPTConfig& c) { c.moe_router_topk_scaling_factor = 2.5f; },
       "--moe-router-topk-scaling-factor 2.5"},
      {[](GPTConfig& c) { c.add_bias_linear = true; }, "--add-bias-linear"},
      {[](GPTConfig& c) { c.normalization = "LayerNorm"; }, "LayerNorm"},
  };
  for (const auto& [edit, flag] : cases) {
    GPTConfig c = m;
    edit(c);
    const std::string e = testing::usage_error_of(
        [&] { hf_llama_architecture_for(c, "Qwen3MoeForCausalLM", "--load x"); });
    EXPECT_NE(e.find(flag), std::string::npos) << "wanted '" << flag << "' in: " << e;
  }
}

// config.json written without a source file: dense layers through mlp_only_layers, the router's
// normalisation through norm_topk_prob (always written: transformers' default is false).
TEST(HFQwen3MoeExport, ConfigJsonOfTheModel) {
  GPTConfig m = qk_norm_moe();
  m.moe_layer_freq = "2";  // layer 0 MoE, layer 1 dense
  m.ffn_hidden_size = 64;
  json j = hf_llama_config_json(m, "Qwen3MoeForCausalLM", "float32", json());
  EXPECT_EQ(j["model_type"], "qwen3_moe");
  EXPECT_EQ(j["num_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["moe_intermediate_size"], 24);
  EXPECT_EQ(j["intermediate_size"], 64);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["norm_topk_prob"], true);
  EXPECT_FALSE(j.contains("decoder_sparse_step"));
  EXPECT_EQ(j["mlp_only_layers"], json::parse("[1]"));
  // The source's decoder_sparse_step stays when it gives the same layers, else is replaced.
  m.moe_layer_freq = "[0,1]";
  m.moe_router_pre_softmax = true;
  j = hf_llama_config_json(m, "Qwen3MoeForCausalLM", "float32",
                           json{{"decoder_sparse_step", 2}, {"mlp_only_layers", json::array()}});
  EXPECT_EQ(j["decoder_sparse_step"], 2);
  EXPECT_EQ(j["mlp_only_layers"], json::array());
  EXPECT_EQ(j["norm_topk_prob"], false);
  m.moe_layer_freq = "1";
  j = hf_llama_config_json(m, "Qwen3MoeForCausalLM", "float32",
                           json{{"decoder_sparse_step", 2}, {"mlp_only_layers", json::array()}});
  EXPECT_EQ(j["decoder_sparse_step"], 1);
  EXPECT_EQ(j["mlp_only_layers"], json::array());
  // Qwen3ForCausalLM's head_dim defaults to 128: any other is written.
  m.num_experts = 0;
  j = hf_llama_config_json(m, "Qwen3ForCausalLM", "float32", json());
  EXPECT_EQ(j["model_type"], "qwen3");
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_FALSE(j.contains("num_experts"));
}

}  // namespace
}  // namespace mg
