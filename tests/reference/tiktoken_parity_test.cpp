// TikTokenizer parity (label `reference`): on the fortunes corpus plus UTF-8 edge cases, token ids
// identical to js-tiktoken's (run with node) for vocabularies in Megatron's JSON format written
// from tiktoken's cl100k_base (with Megatron's v1 pattern) and o200k_base (v2) ranks. Megatron's
// patterns are neither encoding's own: v1 is cl100k_base's without the contractions and with
// single digits, v2 the same of o200k_base, so the reference is run with Megatron's pattern.
// Ours are shifted by the special tokens; decode(encode(x)) == x.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/tiktoken_tokenizer.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "testing/tokenizer_corpus.h"

namespace mg {
namespace {

std::string node(const std::string& args) {
  return "NODE_PATH=" + std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules node " +
         std::string(MG_SOURCE_DIR) + "/tests/reference/tiktoken_reference.js " + args;
}

void expect_parity(const std::string& encoding, const std::string& pattern, int64_t ranks) {
  testing::TempDir dir("mg_tiktok");
  auto r = testing::run_command(node("vocab " + encoding) + " > " + dir.str("vocab.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> docs = testing::tokenizer_edge_cases();
  for (std::string& d : testing::fortunes_corpus()) docs.push_back(std::move(d));
  testing::write_jsonl(dir / "docs.jsonl", docs);
  r = testing::run_command(node("encode " + encoding + " " + pattern) + " < " +
                           dir.str("docs.jsonl") + " > " + dir.str("ids.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  TokenizerConfig cfg;
  cfg.tokenizer_type = "TikTokenizer";
  cfg.tokenizer_model = dir.str("vocab.json");
  cfg.tiktoken_pattern = pattern;
  cfg.vocab_size = ranks + 1000;  // all ranks after the 1000 special tokens
  TikTokenizer tok(cfg);
  EXPECT_EQ(tok.vocab_size(), ranks + 1000);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eod(), 2);
  std::ifstream ids(dir / "ids.txt");
  std::string line;
  size_t mismatches = 0, tokens = 0;
  for (const std::string& d : docs) {
    ASSERT_TRUE(std::getline(ids, line)) << "reference output ended early";
    std::vector<int32_t> ref;
    std::istringstream ls(line);
    for (int32_t v; ls >> v;) ref.push_back(v + 1000);
    const std::vector<int32_t> ours = tok.encode(d);
    tokens += ours.size();
    if (ours != ref && ++mismatches <= 3)
      ADD_FAILURE() << encoding << " ids differ on: " << d.substr(0, 200);
    if (tok.decode(ours) != d && ++mismatches <= 3)
      ADD_FAILURE() << encoding << " roundtrip: " << d.substr(0, 200);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << docs.size() << " documents";
  EXPECT_GT(tokens, 400000u);
}

TEST(TikTokenizer, Cl100kV1MatchesJsTiktoken) { expect_parity("cl100k_base", "v1", 100256); }
TEST(TikTokenizer, O200kV2MatchesJsTiktoken) { expect_parity("o200k_base", "v2", 199998); }

}  // namespace
}  // namespace mg
