// `megatron preprocess` flags beyond the basics (Megatron's tools/preprocess_data.py):
// --partitions N merges N separately tokenized slices into the output one partition gives
// (byte for byte: consecutive slices with --keep-sequential-samples, round-robin lines
// otherwise), keeps the per-partition files under Megatron's names; --log-interval prints
// Megatron's progress line; --keep-newlines is accepted and changes nothing (--split-sentences,
// which it modifies, is refused).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "cli/commands.h"
#include "data/preprocess.h"
#include "testing/temp_dir.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using testing::slurp;

// `n` documents of space-separated ids under two keys, multi-sentence ones among them, and
// blank lines between some.
std::vector<std::string> corpus_lines(int n) {
  std::mt19937 gen(7);
  auto sentence = [&] {
    std::string s;
    for (int k = int(gen() % 30); k > 0; --k) s += std::to_string(gen() % 999) + " ";
    return s;
  };
  std::vector<std::string> lines;
  for (int d = 0; d < n; ++d) {
    if (d % 97 == 5) lines.push_back("");  // not a document
    if (d % 7 == 3)
      lines.push_back("{\"text\": [\"" + sentence() + "\", \"\", \"" + sentence() +
                      "\"], \"title\": \"" + sentence() + "\"}");
    else lines.push_back("{\"text\": \"" + sentence() + "\", \"title\": \"" + sentence() + "\"}");
  }
  return lines;
}

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream f(p);
  for (const std::string& l : lines) f << l << "\n";
}

PreprocessConfig config(const fs::path& in, const fs::path& prefix, int workers, int partitions) {
  PreprocessConfig c;
  c.input = in.string();
  c.output_prefix = prefix.string();
  c.json_keys = {"text", "title"};
  c.tokenizer.tokenizer_type = "NullTokenizer";
  c.tokenizer.vocab_size = 1000;
  c.append_eod = true;
  c.workers = workers;
  c.partitions = partitions;
  c.log_interval = 1000000;
  return c;
}

void expect_same_output(const std::string& a, const std::string& b) {
  for (const char* key : {"_text_document", "_title_document"})
    for (const char* ext : {".bin", ".idx"}) {
      const std::string fa = a + key + ext, fb = b + key + ext;
      ASSERT_TRUE(fs::exists(fa) && fs::exists(fb)) << fa << " / " << fb;
      EXPECT_TRUE(slurp(fa) == slurp(fb)) << fa << " differs from " << fb;
    }
}

TEST(PreprocessPartitions, SequentialSlicesGiveTheOnePartitionOutput) {
  testing::TempDir dir("mg_part");
  const auto lines = corpus_lines(2000);
  write_lines(dir / "in.jsonl", lines);
  run_preprocess(config(dir / "in.jsonl", dir / "one", 3, 1));
  PreprocessConfig three = config(dir / "in.jsonl", dir / "three", 3, 3);
  three.keep_sequential_samples = true;
  const PreprocessSummary s = run_preprocess(three);
  expect_same_output(dir.str("one"), dir.str("three"));
  EXPECT_EQ(s.documents, 2000);
  // Megatron's partition outputs stay beside the merged ones.
  for (int p = 0; p < 3; ++p)
    for (const char* f : {"_text_document.bin", "_title_document.idx"})
      EXPECT_TRUE(fs::exists(dir.str("three_" + std::to_string(p) + f))) << p << f;
}

TEST(PreprocessPartitions, RoundRobinEqualsTheDealtInput) {
  testing::TempDir dir("mg_part");
  const auto lines = corpus_lines(1000);
  write_lines(dir / "in.jsonl", lines);
  // Megatron deals line i to partition i % N and concatenates the partitions' outputs.
  std::vector<std::string> dealt;
  for (int p = 0; p < 4; ++p)
    for (size_t i = size_t(p); i < lines.size(); i += 4) dealt.push_back(lines[i]);
  write_lines(dir / "dealt.jsonl", dealt);
  run_preprocess(config(dir / "dealt.jsonl", dir / "one", 1, 1));
  run_preprocess(config(dir / "in.jsonl", dir / "four", 4, 4));
  expect_same_output(dir.str("one"), dir.str("four"));
}

TEST(PreprocessPartitions, ErrorsNameTheFlagOrLine) {
  testing::TempDir dir("mg_part");
  auto lines = corpus_lines(600);
  write_lines(dir / "in.jsonl", lines);
  EXPECT_NE(testing::usage_error_of([&] {
              run_preprocess(config(dir / "in.jsonl", dir / "o", 2, 3));
            }).find("--workers 2 must be a multiple of --partitions 3"),
            std::string::npos);
  EXPECT_NE(testing::usage_error_of([&] {
              run_preprocess(config(dir / "in.jsonl", dir / "o", 1, 0));
            }).find("--partitions must be in [1, 1024]"),
            std::string::npos);
  // A bad line in the second partition: its own line number, and no merged output.
  lines[400] = "{\"text\": oops";
  write_lines(dir / "in.jsonl", lines);
  const std::string m =
      testing::usage_error_of([&] { run_preprocess(config(dir / "in.jsonl", dir / "o", 2, 2)); });
  EXPECT_NE(m.find("line 401: malformed JSON"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir.str("o_text_document.bin")));
}

TEST(PreprocessFlags, LogIntervalPrintsMegatronsProgressLine) {
  testing::TempDir dir("mg_part");
  write_lines(dir / "in.jsonl", corpus_lines(2000));  // 2000 documents + 21 blank lines
  PreprocessConfig c = config(dir / "in.jsonl", dir / "o", 2, 1);
  c.log_interval = 500;
  ::testing::internal::CaptureStderr();
  run_preprocess(c);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::regex line(R"(Processed (\d+) documents \([0-9.]+ docs/s, [0-9.]+ MB/s\)\.)");
  std::vector<std::string> counts;
  for (auto it = std::sregex_iterator(err.begin(), err.end(), line); it != std::sregex_iterator();
       ++it)
    counts.push_back((*it)[1]);
  EXPECT_EQ(counts, (std::vector<std::string>{"500", "1000", "1500", "2000"})) << err;
  c.log_interval = 0;
  EXPECT_NE(testing::usage_error_of([&] { run_preprocess(c); }).find("--log-interval must be"),
            std::string::npos);
}

TEST(PreprocessFlags, KeepNewlinesIsAcceptedAndChangesNothing) {
  testing::TempDir dir("mg_part");
  write_lines(dir / "in.jsonl", corpus_lines(300));
  const PreprocessConfig c =
      parse_args(preprocess_options(),
                 {"--input", dir.str("in.jsonl"), "--output-prefix", dir.str("kept"), "--json-keys",
                  "text", "title", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000",
                  "--append-eod", "--keep-newlines", "--partitions", "1", "--log-interval", "100"},
                 "preprocess");
  EXPECT_TRUE(c.keep_newlines);
  PreprocessConfig split = c;
  split.split_sentences = true;
  EXPECT_NE(testing::usage_error_of([&] {
              run_preprocess(split);
            }).find("--split-sentences is not implemented"),
            std::string::npos);
  EXPECT_EQ(c.log_interval, 100);
  run_preprocess(c);
  run_preprocess(config(dir / "in.jsonl", dir / "plain", 1, 1));
  expect_same_output(dir.str("kept"), dir.str("plain"));
}

}  // namespace
}  // namespace mg
