// HuggingFaceTokenizer and TikTokenizer on small hand-made files: the tokenizer.json features the
// Llama files use in ways the parity tests cannot isolate (Metaspace, added-token flags, the
// post-processor, add_bos_token), and bad input refused with one UsageError naming the flag and
// the file.
#include "tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/tiktoken_tokenizer.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// A SentencePiece-style BPE over the letters a, b, ▁ with merges a+b, ▁+ab.
json tiny_tokenizer_json() {
  return json::parse(R"({
    "version": "1.0", "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false,
       "single_word": false, "normalized": false},
      {"id": 1, "content": "<s>", "special": true, "lstrip": false, "rstrip": false,
       "single_word": false, "normalized": false},
      {"id": 2, "content": "</s>", "special": true, "lstrip": false, "rstrip": false,
       "single_word": false, "normalized": false},
      {"id": 8, "content": "[X]", "special": false, "lstrip": true, "rstrip": true,
       "single_word": false, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                      "split": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "\u2581": 5, "ab": 6,
                        "\u2581ab": 7},
              "merges": [["a", "b"], "\u2581 ab"]}})");
}

struct Files {
  testing::TempDir dir{"mg_hftok_unit"};
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  }
};

TEST(HuggingFaceTokenizerFiles, MetaspaceAddedTokensAndTemplate) {
  Files f;
  f.write("tokenizer.json", tiny_tokenizer_json().dump());
  f.write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  HuggingFaceTokenizer tok(f.dir.str());
  EXPECT_EQ(tok.vocab_size(), 9);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eod(), 2);
  // "▁ab" is one piece and merges fully; "b▁a" splits at ▁ (MergedWithNext); the unknown
  // "cc" is one fused <unk>.
  EXPECT_EQ(tok.encode("ab"), (Ids{1, 7, 2}));
  EXPECT_EQ(tok.encode_text("ab ab"), (Ids{7, 7}));
  EXPECT_EQ(tok.encode_text("ccab"), (Ids{5, 0, 6}));
  // "first": only the segment at the start of the text gets the ▁; [X] takes the spaces
  // around it (lstrip/rstrip).
  EXPECT_EQ(tok.encode_text("ab [X]  ab"), (Ids{7, 8, 6}));
  EXPECT_EQ(tok.encode_text("<s>ab</s>"), (Ids{1, 6, 2}));
  EXPECT_EQ(tok.decode({7, 7}), "ab ab");
}

TEST(HuggingFaceTokenizerFiles, AddBosAndEosTokenOverrideTheTemplate) {
  Files f;
  f.write("tokenizer.json", tiny_tokenizer_json().dump());
  f.write("tokenizer_config.json",
          R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false,
              "add_eos_token": true})");
  HuggingFaceTokenizer tok(f.dir.str());
  EXPECT_EQ(tok.encode("ab"), (Ids{7, 2}));
}

// Llama 2's decoder chain; byte_fallback; the EOS from special_tokens_map.json.
TEST(HuggingFaceTokenizerFiles, ByteFallbackAndSpecialTokensMap) {
  Files f;
  json j = tiny_tokenizer_json();
  j["model"]["byte_fallback"] = true;
  int id = 9;  // after the added token [X] (8)
  for (const char* name : {"<0xE2>", "<0x82>", "<0xAC>"}) j["model"]["vocab"][name] = id++;
  j["pre_tokenizer"] = nullptr;
  j["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})");
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  f.write("tokenizer.json", j.dump());
  f.write("special_tokens_map.json", R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>"})");
  HuggingFaceTokenizer tok(f.dir.str());
  EXPECT_EQ(tok.eod(), 2);
  EXPECT_EQ(tok.bos(), 1);
  // "€" has no token but its three bytes do; "c" has neither: <unk>.
  EXPECT_EQ(tok.encode_text("ab \u20ac c"), (Ids{7, 5, 9, 10, 11, 5, 0}));
  EXPECT_EQ(tok.decode({7, 5, 9, 10, 11}), "ab \u20ac");
  // An incomplete UTF-8 sequence of byte tokens: one U+FFFD per token (Hugging Face's rule).
  EXPECT_EQ(tok.decode({7, 9, 10}), "ab\ufffd\ufffd");
}

TEST(HuggingFaceTokenizerFiles, BadInputNamesTheFlagAndFile) {
  Files f;
  auto load = [&] { HuggingFaceTokenizer tok(f.dir.str()); };
  std::string m = testing::usage_error_of(load);
  EXPECT_NE(m.find("--tokenizer-model"), std::string::npos) << m;
  EXPECT_NE(m.find("has no tokenizer.json"), std::string::npos) << m;

  f.write("tokenizer.json", "{\"model\": ");
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("tokenizer.json' is not valid JSON"), std::string::npos) << m;

  for (const char* type : {"WordPiece", "Unigram"}) {
    json j = tiny_tokenizer_json();
    j["model"]["type"] = type;
    f.write("tokenizer.json", j.dump());
    m = testing::usage_error_of(load);
    EXPECT_NE(m.find(f.dir.str("tokenizer.json")), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("model.type ") + type + " is not supported"), std::string::npos)
        << m;
  }
  json j = tiny_tokenizer_json();
  j["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}]})");
  f.write("tokenizer.json", j.dump());
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("normalizer.normalizers[0] type NFKC is not supported"), std::string::npos) << m;

  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("a \u2581ab");
  f.write("tokenizer.json", j.dump());
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("model.merges[2]"), std::string::npos) << m;

  f.write("tokenizer.json", tiny_tokenizer_json().dump());
  f.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("no eos_token"), std::string::npos) << m;
}

// Megatron's format, for the bytes 0-255 then "ab" (rank 256) and "abc" (rank 257).
std::string tiny_tiktoken_vocab() {
  json v = json::array();
  auto b64 = [](const std::string& s) {  // tiny base64 for the test's 1-3 byte tokens
    static const char* kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    uint32_t acc = 0;
    for (size_t i = 0; i < s.size(); ++i) acc |= uint32_t(uint8_t(s[i])) << (16 - 8 * i);
    for (size_t k = 0; k < 4; ++k)
      out += k <= s.size() ? kAlphabet[(acc >> (18 - 6 * k)) & 63] : '=';
    return out;
  };
  for (int i = 0; i < 256; ++i)
    v.push_back({{"rank", i}, {"token_bytes", b64(std::string(1, char(i)))}, {"token_str", ""}});
  v.push_back({{"rank", 256}, {"token_bytes", b64("ab")}, {"token_str", "ab"}});
  v.push_back({{"rank", 257}, {"token_bytes", b64("abc")}, {"token_str", "abc"}});
  return v.dump();
}

// The tiny vocabulary written to f, after 10 special tokens, all of it (268 ids).
TokenizerConfig tiny_tiktoken_config(Files& f, const std::string& pattern) {
  f.write("vocab.json", tiny_tiktoken_vocab());
  TokenizerConfig cfg;
  cfg.tokenizer_model = f.dir.str("vocab.json");
  cfg.tiktoken_pattern = pattern;
  cfg.tiktoken_num_special_tokens = 10;
  cfg.vocab_size = 268;
  return cfg;
}

TEST(TikTokenizerFiles, IdsAfterTheSpecialTokens) {
  Files f;
  TokenizerConfig cfg = tiny_tiktoken_config(f, "v2");
  TikTokenizer tok(cfg);
  EXPECT_EQ(tok.vocab_size(), 268);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eod(), 2);
  // "abc" whole; " ab" is " " + "ab"; special-token text is plain text.
  EXPECT_EQ(tok.encode("abc ab"), (Ids{267, 10 + ' ', 266}));
  EXPECT_EQ(tok.encode("<s>"), (Ids{10 + '<', 10 + 's', 10 + '>'}));
  EXPECT_EQ(tok.decode({1, 267}), "<s>abc");
  // The cap cuts the list: 267 ids drop "abc".
  cfg.vocab_size = 267;
  TikTokenizer capped(cfg);
  EXPECT_EQ(capped.encode("abc"), (Ids{266, 10 + 'c'}));
}

TEST(TikTokenizerFiles, BadInputNamesTheFlagAndFile) {
  Files f;
  TokenizerConfig cfg = tiny_tiktoken_config(f, "v3");
  auto load = [&] { TikTokenizer tok(cfg); };
  std::string m = testing::usage_error_of(load);
  EXPECT_NE(m.find("--tiktoken-pattern 'v3' is not supported; use v1 or v2"), std::string::npos)
      << m;
  cfg.tiktoken_pattern = "v1";
  cfg.vocab_size = 2000;
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("holds 258 tokens"), std::string::npos) << m;
  cfg.vocab_size = 268;
  f.write("vocab.json", R"({"ab": 0})");  // a token -> id map, not Megatron's list
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("--tokenizer-model '" + f.dir.str("vocab.json") + "' is not a TikTokenizer"),
            std::string::npos)
      << m;
  f.write("vocab.json", "IQ== 0\nIg== 1\n");  // tiktoken's own .tiktoken format
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("is not valid JSON"), std::string::npos) << m;
  json bad = json::parse(tiny_tiktoken_vocab());
  bad[0]["token_bytes"] = "AQ==";  // byte 1 at rank 0
  f.write("vocab.json", bad.dump());
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("entry 0: ranks 0-255 must be the single bytes"), std::string::npos) << m;
  f.write("vocab.json", tiny_tiktoken_vocab());
  cfg.vocab_size = 265;
  m = testing::usage_error_of(load);
  EXPECT_NE(m.find("the 256 single bytes need 256"), std::string::npos) << m;
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// The commands refuse bad tokenizer input with exit code 2 and the message, before any work.
TEST(TokenizerFilesCli, BadInputExitsWithUsageError) {
  Files f;
  f.write("docs.jsonl", "{\"text\": \"hello\"}\n");
  f.write("vocab.json", tiny_tiktoken_vocab());
  const std::string preprocess = std::string(MG_BINARY) + " preprocess --input " +
                                 f.dir.str("docs.jsonl") + " --output-prefix " + f.dir.str("out") +
                                 " --tokenizer-type ";
  auto r = testing::run_command(preprocess + "TikTokenizer --tokenizer-model " +
                                f.dir.str("vocab.json") + " --tiktoken-pattern v3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--tiktoken-pattern 'v3' is not supported"), std::string::npos)
      << r.output;
  r = testing::run_command(preprocess + "HuggingFaceTokenizer --tokenizer-model " + f.dir.str());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has no tokenizer.json"), std::string::npos) << r.output;
  r = testing::run_command(preprocess + "TikTokenizer --tokenizer-model " +
                           f.dir.str("vocab.json") + " --tiktoken-pattern v1 " +
                           "--tiktoken-num-special-tokens 10 --vocab-size 268");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace mg
