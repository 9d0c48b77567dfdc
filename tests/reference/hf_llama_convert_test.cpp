// Hugging Face Llama-family conversion against an independent PyTorch reference
// (hf_llama_reference.py): random Llama 3.1 (untied, GQA, RoPE scaling), tied Llama, Mistral and
// Qwen2 (q/k/v biases) models in HF's names and layout, f32/bf16/f16, single-file and sharded,
// go HF -> checkpoint -> HF bit-identical (tensors, dtypes, config.json, tokenizer files), and
// our model loaded from the checkpoint (also one written for TP 2 x PP 2) gives the reference
// logits within 1e-4. Bad inputs stop with exit code 2 naming the file, and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_files.h"
#include "testing/checkpoint_logits.h"
#include "testing/hf_same_files.h"
#include "testing/mpirun.h"
#include "train/checkpoint_model.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kFamilies[] = {"llama3", "llama_tied", "mistral", "qwen2"};
const char* const kDtypes[] = {"f32", "bf16", "f16"};

// The reference models, written once for the whole suite.
class HFLlamaConvert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("mg_hf_llama");
    const auto py = testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                                         "/tests/reference/hf_llama_reference.py " + dir_->str());
    ASSERT_EQ(py.exit_code, 0) << py.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path ref(const std::string& c) { return *dir_ / c; }
  static testing::RunResult convert(const std::string& args) {
    return testing::run_command(std::string(MG_BINARY) + " convert " + args);
  }
  static testing::TempDir* dir_;
};
testing::TempDir* HFLlamaConvert::dir_ = nullptr;

// Our logits from checkpoint ck against the reference's for the case at c.
double logits_error(const fs::path& ck, const fs::path& c) {
  return testing::checkpoint_logits_error(ck.string(), c, 2, 16);
}

TEST_F(HFLlamaConvert, EveryFamilyAndDtypeRoundTripsExactlyAndMatchesTheLogits) {
  for (const char* fam : kFamilies)
    for (const char* dt : kDtypes) {
      const std::string name = std::string(fam) + "_" + dt;
      SCOPED_TRACE(name);
      const fs::path c = ref(name);
      for (const char* src : {"hf", "hf_sharded"}) {
        const fs::path ck = c / (std::string("ck_") + src), back = c / (std::string("back_") + src);
        auto r = convert("--direction hf-to-megatron --load " + (c / src).string() + " --save " +
                         ck.string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
        // The sharded source goes back sharded (40 KB shards), the single one as one file.
        r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " +
                    back.string() + (std::string(src) == "hf" ? "" : " --max-shard-size 40KB"));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_EQ(fs::exists(back / "model.safetensors.index.json"), std::string(src) != "hf");
        testing::expect_same_hf(c / src, back);
        const CheckpointMetadata meta =
            read_checkpoint_metadata(latest_checkpoint_dir(ck.string()));
        EXPECT_EQ(dtype_name(meta.precision), std::string(dt));
        EXPECT_FALSE(meta.optimizer_saved);
      }
      EXPECT_LT(logits_error(c / "ck_hf", c), 1e-4);
    }
}

// Written as a TP 2 x PP 2 run saves it (four rank files, TP-split pieces, SwiGLU stride 2,
// the vocabulary padded for TP 2): loads at one rank with the same logits and goes back to HF
// bit-identical.
TEST_F(HFLlamaConvert, TargetLayoutTp2Pp2) {
  for (const char* name : {"llama3_bf16", "qwen2_f32", "llama_tied_f16"}) {
    SCOPED_TRACE(name);
    const fs::path c = ref(name), ck = c / "ck_tp2pp2", back = c / "back_tp2pp2";
    auto r =
        convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
                ck.string() + " --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string it = latest_checkpoint_dir(ck.string());
    const CheckpointMetadata meta = read_checkpoint_metadata(it);
    EXPECT_EQ(meta.tp, 2);
    EXPECT_EQ(meta.pp, 2);
    EXPECT_EQ(meta.ranks.size(), 4u);
    EXPECT_EQ(json::parse(testing::slurp(it + "/metadata.json"))["model"]["padded_vocab_size"],
              256);
    r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + back.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    testing::expect_same_hf(c / "hf", back);
    EXPECT_LT(logits_error(ck, c), 1e-4);
  }
}

// An export that fails after writing some shards (a corrupt shard file of the last stage, read
// late) into a --save directory that existed: the shards it wrote are removed, what was there
// before stays.
TEST_F(HFLlamaConvert, FailedExportLeavesTheDirectoryAsItWas) {
  const fs::path c = ref("llama3_bf16"), ck = c / "ck_corrupt", out = c / "out_existing";
  auto r =
      convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
              ck.string() + " --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string bin = latest_checkpoint_dir(ck.string()) + "/rank_00003.bin";
  std::string bytes = testing::slurp(bin);
  bytes[100] = char(bytes[100] ^ 0xff);
  testing::write_bytes(bin, bytes);
  fs::create_directories(out);
  testing::write_bytes(out / "README.md", "mine\n");
  r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " + out.string() +
              " --max-shard-size 20KB --overwrite");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("rank_00003.bin' is corrupt"), std::string::npos) << r.output;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"README.md"});
}

// A checkpoint without the kept hf/ (a training --save directory): the architecture follows
// from the model (Qwen2 for a QKV bias alone), the tokenizer files and the fields we do not
// model come from --tokenizer-model DIR; a DIR without tokenizer files is refused.
TEST_F(HFLlamaConvert, ExportWithoutTheKeptFilesUsesTokenizerModel) {
  for (const char* name : {"qwen2_bf16", "llama_tied_f32"}) {
    SCOPED_TRACE(name);
    const fs::path c = ref(name), ck = c / "ck_bare";
    ASSERT_EQ(convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
                      ck.string())
                  .exit_code,
              0);
    fs::remove_all(ck / "hf");
    auto r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " +
                     (c / "bare").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json want = json::parse(testing::slurp(c / "hf" / "config.json"));
    const json got = json::parse(testing::slurp(c / "bare" / "config.json"));
    EXPECT_EQ(got["architectures"], want["architectures"]);
    EXPECT_EQ(got["tie_word_embeddings"], want["tie_word_embeddings"]);
    EXPECT_FALSE(got.contains("bos_token_id"));
    EXPECT_FALSE(fs::exists(c / "bare" / "tokenizer.json"));
    r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " +
                (c / "tok").string() + " --tokenizer-model " + (c / "hf").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    testing::expect_same_hf(c / "hf", c / "tok");
    fs::create_directories(c / "empty");
    r = convert("--direction megatron-to-hf --load " + ck.string() + " --save " +
                (c / "none").string() + " --tokenizer-model " + (c / "empty").string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find((c / "empty").string()), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(c / "none"));
  }
}

// Each bad input: exit 2, a message naming the file, and no --save directory left behind.
TEST_F(HFLlamaConvert, BadInputsNameTheFileAndWriteNothing) {
  testing::TempDir t("mg_hf_bad");
  const fs::path good = ref("llama3_bf16") / "hf_sharded";
  auto copy = [&](const std::string& name) {
    const fs::path d = t / name;
    fs::copy(good, d, fs::copy_options::recursive);
    return d;
  };
  auto edit_json = [](const fs::path& p, auto f) {
    json j = json::parse(testing::slurp(p));
    f(j);
    testing::write_bytes(p, j.dump());
  };
  auto expect_refused = [&](const fs::path& d, const std::string& needle) {
    const fs::path out = t / ("out_" + d.filename().string());
    const auto r =
        convert("--direction hf-to-megatron --load " + d.string() + " --save " + out.string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos)
        << "wanted '" << needle << "' in: " << r.output;
    EXPECT_FALSE(fs::exists(out)) << out;
  };
  const std::string shard2 = "model-00002-of-00003.safetensors";
  fs::path d = copy("missing_shard");
  fs::remove(d / shard2);
  expect_refused(d, (d / shard2).string());

  d = copy("index_lies");  // the index maps a tensor to a shard without it
  edit_json(d / "model.safetensors.index.json", [&](json& j) {
    json& m = j["weight_map"]["model.norm.weight"];
    m = m == shard2 ? "model-00001-of-00003.safetensors" : shard2;
  });
  expect_refused(d, "lacks it");

  d = copy("missing_tensor");  // config.json has a third layer the files lack
  edit_json(d / "config.json", [](json& j) { j["num_hidden_layers"] = 3; });
  expect_refused(d, "model.layers.2.");

  d = copy("bad_shape");
  edit_json(d / "config.json", [](json& j) { j["intermediate_size"] = 64; });
  expect_refused(d, (d / "config.json").string());

  d = copy("bad_arch");
  edit_json(d / "config.json", [](json& j) { j["architectures"] = {"FalconForCausalLM"}; });
  expect_refused(d, "architectures");

  d = copy("bad_act");
  edit_json(d / "config.json", [](json& j) { j["hidden_act"] = "gelu"; });
  expect_refused(d, "hidden_act");

  d = copy("bad_rope");
  edit_json(d / "config.json", [](json& j) { j["rope_scaling"]["rope_type"] = "yarn"; });
  expect_refused(d, "rope_scaling");

  d = copy("bad_rope_factor");
  edit_json(d / "config.json", [](json& j) { j["rope_scaling"]["high_freq_factor"] = 2.0; });
  expect_refused(d, "high_freq_factor");

  d = copy("sliding");
  edit_json(d / "config.json", [](json& j) {
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = 4096;
  });
  expect_refused(d, "sliding_window");

  d = copy("half_bias");
  edit_json(d / "config.json", [](json& j) { j["attention_bias"] = true; });
  expect_refused(d, "attention_bias");

  d = copy("extra_tensor");  // the config uses one layer: layer 1's tensors are unused
  edit_json(d / "config.json", [](json& j) { j["num_hidden_layers"] = 1; });
  expect_refused(d, "--allow-unused-tensors");
  const auto r = convert("--direction hf-to-megatron --load " + d.string() + " --save " +
                         (t / "out_allowed").string() + " --allow-unused-tensors");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  d = copy("bad_tp");  // 2 query groups cannot split over TP 4
  const auto tp = convert("--direction hf-to-megatron --load " + d.string() + " --save " +
                          (t / "out_tp").string() + " --target-tensor-parallel-size 4");
  EXPECT_EQ(tp.exit_code, 2) << tp.output;
  EXPECT_NE(tp.output.find("--target-tensor-parallel-size"), std::string::npos) << tp.output;
  EXPECT_FALSE(fs::exists(t / "out_tp"));
}

// `train --load` of a converted checkpoint needs no model flags: one rank, TP 2 x PP 2 (with the
// vocabulary padded to the same 128 rows) and the checkpoint written for TP 2 x PP 2 give the
// same losses; a --bf16 run loads the bf16 weights; generate --load samples from it; a model
// flag that disagrees is refused.
TEST_F(HFLlamaConvert, TrainLoadTakesTheModelFromTheCheckpoint) {
  const fs::path c = ref("llama3_bf16"), ck = c / "ck", ck22 = c / "ck22";
  for (const auto& [dir, extra] :
       {std::pair{ck, std::string()},
        std::pair{ck22, std::string(" --target-tensor-parallel-size 2 "
                                    "--target-pipeline-parallel-size 2")}}) {
    const auto r = convert("--direction hf-to-megatron --load " + (c / "hf").string() + " --save " +
                           dir.string() + extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const std::string train =
      std::string(MG_BINARY) +
      " train --mock-data --seq-length 16 --micro-batch-size 2 "
      "--global-batch-size 4 --train-iters 4 --lr 1e-4 --log-interval 1 --load ";
  const auto one = testing::run_command(train + ck.string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = testing::log_values(one.output, "lm loss");
  ASSERT_EQ(want.size(), 4u) << one.output;
  auto expect_losses = [&](const testing::RunResult& r) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> got = testing::log_values(r.output, "lm loss");
    ASSERT_EQ(got.size(), want.size()) << r.output;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << i;
  };
  expect_losses(testing::run_command(testing::mpirun_prefix(4) + train + ck.string() +
                                     " --tensor-model-parallel-size 2 "
                                     "--pipeline-model-parallel-size 2 "
                                     "--make-vocab-size-divisible-by 64"));
  expect_losses(testing::run_command(train + ck22.string()));
  const auto bf16 = testing::run_command(train + ck.string() + " --bf16");
  EXPECT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_EQ(testing::log_values(bf16.output, "lm loss").size(), 4u) << bf16.output;
  // generate --load rebuilds the model from the record too (a TP 2 x PP 2 checkpoint included).
  const auto gen =
      testing::run_command(std::string(MG_BINARY) + " generate --load " + ck22.string() +
                           " --tokenizer-type NullTokenizer "
                           "--vocab-size 100 --prompt '1 2 3' --max-new-tokens 4");
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_NE(gen.output.find("1 2 3 "), std::string::npos) << gen.output;
  const auto other = testing::run_command(train + ck.string() + " --num-layers 3");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("--num-layers"), std::string::npos) << other.output;
}

// The vocabulary of a model taken from a checkpoint: a tokenizer no larger keeps the
// checkpoint's rows (Qwen2: 151936 rows, 151646 tokens); a larger one is refused.
TEST(TrainVocabSize, CheckpointRowsOrTheTokenizer) {
  TrainConfig cfg;
  cfg.load = "ck";
  cfg.model.vocab_size = 151936;
  EXPECT_EQ(train_vocab_size(cfg, 151646, true, {}), 151936);
  EXPECT_EQ(train_vocab_size(cfg, 151646, true, {"--vocab-size"}), 151646);
  EXPECT_EQ(train_vocab_size(cfg, 151646, false, {}), 151646);
  EXPECT_THROW(train_vocab_size(cfg, 152000, true, {}), UsageError);
}

}  // namespace
}  // namespace mg
