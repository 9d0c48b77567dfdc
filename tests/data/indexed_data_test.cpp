// Megatron data formats against independent NumPy implementations written from the spec
// (tests/reference/megatron_data_reference.py): .bin/.idx bytes from `megatron preprocess`,
// GPT document/sample/shuffle indices (via the .npy index cache), blending indices; plus
// reader robustness (random corruptions never crash), preprocess errors and merge-datasets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"
#include "data/npy.h"
#include "data/preprocess.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

using testing::slurp;
using testing::TempDir;

testing::RunResult reference(const std::string& args) {
  return testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                              "/tests/reference/megatron_data_reference.py " + args);
}

// Documents of space-separated ids (NullTokenizer), including multi-sentence documents, an
// empty document and empty sentences.
void write_corpus(const fs::path& path, int docs, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::ofstream f(path);
  for (int d = 0; d < docs; ++d) {
    auto sentence = [&] {
      std::string s;
      const int n = int(gen() % 40);
      for (int k = 0; k < n; ++k) s += std::to_string(gen() % uint32_t(vocab - 1)) + " ";
      return s;
    };
    if (d % 7 == 3) {
      f << "{\"text\": [\"" << sentence() << "\", \"\", \"" << sentence() << "\"]}\n";
    } else if (d == 5) {
      f << "{\"text\": \"\"}\n";
    } else {
      f << "{\"text\": \"" << sentence() << "\", \"other\": 1}\n";
    }
  }
}

PreprocessConfig null_cfg(const fs::path& in, const fs::path& prefix, int64_t vocab, int workers) {
  PreprocessConfig c;
  c.input = in.string();
  c.output_prefix = prefix.string();
  c.tokenizer.tokenizer_type = "NullTokenizer";
  c.tokenizer.vocab_size = vocab;
  c.append_eod = true;
  c.workers = workers;
  return c;
}

TEST(IndexedDataset, PreprocessBytesEqualTheSpecWriter) {
  for (int64_t vocab : {1000, 70000}) {  // uint16 and int32 token files
    TempDir dir;
    write_corpus(dir / "in.jsonl", 300, vocab, uint32_t(vocab));
    run_preprocess(null_cfg(dir / "in.jsonl", dir / "ours", vocab, 3));
    auto r = reference("write-idx " + (dir / "in.jsonl").string() + " " + (dir / "ref").string() +
                       " " + std::to_string(vocab) + " 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(slurp(dir / "ours_text_document.bin"), slurp(dir / "ref.bin")) << vocab;
    EXPECT_EQ(slurp(dir / "ours_text_document.idx"), slurp(dir / "ref.idx")) << vocab;
    IndexedDataset ds((dir / "ours_text_document").string());
    EXPECT_EQ(ds.num_documents(), 300);
    EXPECT_EQ(ds.dtype(), vocab < 65500 ? TokenDType::U16 : TokenDType::I32);
  }
}

TEST(IndexedDataset, MergeEqualsPreprocessingTheConcatenation) {
  TempDir dir;
  write_corpus(dir / "a.jsonl", 50, 500, 1);
  write_corpus(dir / "b.jsonl", 70, 500, 2);
  fs::create_directory(dir / "parts");
  run_preprocess(null_cfg(dir / "a.jsonl", dir / "parts/a", 500, 1));
  run_preprocess(null_cfg(dir / "b.jsonl", dir / "parts/b", 500, 2));
  run_merge_datasets({(dir / "parts").string(), (dir / "merged").string()});
  std::ofstream(dir / "ab.jsonl") << slurp(dir / "a.jsonl") << slurp(dir / "b.jsonl");
  run_preprocess(null_cfg(dir / "ab.jsonl", dir / "whole", 500, 1));
  EXPECT_EQ(slurp(dir / "merged.bin"), slurp(dir / "whole_text_document.bin"));
  EXPECT_EQ(slurp(dir / "merged.idx"), slurp(dir / "whole_text_document.idx"));
}

TEST(IndexedDataset, BadLinesNameTheLineOrAreSkippedAndCounted) {
  TempDir dir;
  std::ofstream(dir / "in.jsonl")
      << "{\"text\": \"1 2\"}\n{\"text\": \"3\"\n{\"text\": \"4\"}\n"
      << "{\"body\": \"5\"}\n{\"text\": \"99\"}\n";  // 99: not in the vocab
  auto cfg = null_cfg(dir / "in.jsonl", dir / "out", 10, 2);
  try {
    run_preprocess(cfg);
    FAIL() << "malformed line accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "out_text_document.bin"));  // nothing half-written
  EXPECT_FALSE(fs::exists(dir / "out_text_document.bin.tmp"));
  cfg.skip_bad_lines = true;
  const PreprocessSummary s = run_preprocess(cfg);
  EXPECT_EQ(s.documents, 2);
  EXPECT_EQ(s.bad_lines, 3);  // malformed JSON, missing key, a token the tokenizer rejects
}

TEST(IndexedDataset, CorruptionsGiveClearErrorsNeverCrashes) {
  TempDir dir;
  write_corpus(dir / "in.jsonl", 40, 1000, 9);
  run_preprocess(null_cfg(dir / "in.jsonl", dir / "good", 1000, 1));
  const std::string idx = slurp(dir / "good_text_document.idx");
  const std::string bin = slurp(dir / "good_text_document.bin");
  auto expect_error = [&](const std::string& i, const std::string& b, const std::string& what) {
    std::ofstream(dir / "bad.idx", std::ios::binary) << i;
    std::ofstream(dir / "bad.bin", std::ios::binary) << b;
    try {
      IndexedDataset ds((dir / "bad").string());
      ADD_FAILURE() << what << ": accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("bad."), std::string::npos) << e.what();
    }
  };
  expect_error(idx.substr(0, 20), bin, "truncated header");
  expect_error("XXIDIDX" + idx.substr(7), bin, "bad magic");
  std::string v = idx;
  v[9] = 2;
  expect_error(v, bin, "version 2");
  expect_error(idx.substr(0, idx.size() - 8), bin, "truncated index");
  expect_error(idx, bin.substr(0, bin.size() - 2), "truncated tokens");
  std::string n = idx;
  n[18] = char(n[18] + 1);  // one more sequence than stored
  expect_error(n, bin, "sequence count");
  // Fuzz: random byte flips and truncations either load cleanly or throw UsageError.
  std::mt19937 gen(1234);
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string i = idx, b = bin;
    std::string& target = gen() % 4 ? i : b;
    const int flips = 1 + int(gen() % 4);
    for (int k = 0; k < flips; ++k) target[gen() % target.size()] = char(gen());
    if (gen() % 5 == 0) target.resize(gen() % (target.size() + 1));
    std::ofstream(dir / "fz.idx", std::ios::binary) << i;
    std::ofstream(dir / "fz.bin", std::ios::binary) << b;
    try {
      IndexedDataset ds((dir / "fz").string());
      std::vector<int32_t> buf;
      for (int64_t s = 0; s < ds.num_sequences(); ++s) {  // every sequence stays readable
        buf.resize(size_t(ds.sequence_length(s)));
        ds.get(s, 0, ds.sequence_length(s), buf.data());
      }
    } catch (const UsageError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

struct IndexCase {
  int64_t begin, end, seq, samples;
};

TEST(GPTDatasetIndices, EqualTheNumpyReference) {
  TempDir dir;
  write_corpus(dir / "in.jsonl", 120, 1000, 5);
  run_preprocess(null_cfg(dir / "in.jsonl", dir / "d", 1000, 1));
  const std::string prefix = (dir / "d_text_document").string();
  IndexedDataset src(prefix);
  // One epoch; several epochs with a thin (separate) last epoch; several full epochs.
  for (const IndexCase& c : {IndexCase{0, 120, 16, 40}, IndexCase{10, 100, 8, 1000},
                             IndexCase{0, 60, 32, 290}, IndexCase{3, 40, 5, 0}}) {
    GPTDatasetConfig cfg;
    cfg.seq_length = c.seq;
    cfg.num_samples = c.samples;
    cfg.seed = 77;
    cfg.cache_dir = (dir / "cache").string();
    cfg.cache_key = prefix + std::to_string(c.end);
    GPTDataset ds(src, c.begin, c.end, cfg);
    const std::string ref = (dir / "ref-").string();
    auto r = reference("gpt-indices " + prefix + " " + std::to_string(c.begin) + " " +
                       std::to_string(c.end) + " " + std::to_string(c.seq) + " " +
                       std::to_string(c.samples) + " 77 " + ref);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* name : {"document_index", "sample_index", "shuffle_index"}) {
      const auto ours = read_npy(ds.cache_prefix() + name + ".npy").as<int64_t>();
      const auto theirs = read_npy(ref + name + ".npy").as<int64_t>();
      EXPECT_EQ(ours, theirs) << name << " for range [" << c.begin << ", " << c.end
                              << ") S=" << c.seq << " samples=" << c.samples;
    }
    // A second construction loads the cache instead of rebuilding.
    cfg.write_cache = false;
    GPTDataset again(src, c.begin, c.end, cfg);
    EXPECT_TRUE(again.loaded_from_cache());
    EXPECT_EQ(again.shuffle_index(), ds.shuffle_index());
  }
}

TEST(Blending, IndicesFollowTheGreedyRule) {
  std::vector<int16_t> di;
  std::vector<int64_t> dsi;
  const std::vector<double> w = {0.5, 0.3, 0.2};
  build_blending_indices(w, 1000, di, dsi);
  auto r = reference("blend 1000 0.5 0.3 0.2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream ref(r.output);
  for (int t = 0; t < 1000; ++t) {
    int i;
    int64_t k;
    ref >> i >> k;
    ASSERT_EQ(di[size_t(t)], i) << t;
    ASSERT_EQ(dsi[size_t(t)], k) << t;
  }
  EXPECT_EQ(blend_part_samples(1000, 0.3), 302);  // ceil(ceil(300) * 1.005)
  const Blend b = parse_blend({"0.2", "a", "0.6", "b"}, "--data-path");
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_DOUBLE_EQ(b.weights[1], 0.75);
  EXPECT_TRUE(parse_blend({"a", "b"}, "--data-path").weights.empty());
  EXPECT_THROW(parse_blend({"-1", "a"}, "--data-path"), UsageError);
}

// Megatron sizes a weighted blend of N samples per split as the sum of ceil(N * w_i) over its
// datasets (upstream's valid blend of 48 at 0.3/0.7 holds 15 + 34 = 49 entries); the blend's
// indices are then the greedy rule's first that-many entries.
TEST(Blending, SizedPerSplitAsMegatron) {
  EXPECT_EQ(blend_size(48, {0.3, 0.7}), 49);
  struct Case {
    int64_t n;
    std::vector<double> w;
  };
  for (const Case& c : {Case{48, {0.3, 0.7}}, Case{1000, {0.5, 0.3, 0.2}}, Case{7, {0.1, 0.9}},
                        Case{96, {1.0 / 3, 1.0 / 3, 1.0 / 3}}, Case{12345, {0.25, 0.75}}}) {
    std::string args = "blend-size " + std::to_string(c.n);
    for (double w : c.w) args += " " + std::to_string(w);
    const std::vector<double> w = parse_blend(
                                      [&] {
                                        std::vector<std::string> t;
                                        for (double x : c.w)
                                          t.insert(t.end(), {std::to_string(x), "p"});
                                        return t;
                                      }(),
                                      "--data-path")
                                      .weights;
    auto r = reference(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(blend_size(c.n, w), std::stoll(r.output)) << args;
    EXPECT_GE(blend_size(c.n, w), c.n) << args;
  }
}

}  // namespace
}  // namespace mg
