// Data files that are wrong in one field each: the .bin/.idx pair (wide int64 ids, odd-sized and
// misaligned index images, inconsistent fields), merge-datasets onto its own input, blend
// weights, the .npy index cache, GPT-2 vocab.json / merges.txt. Each is a UsageError naming
// the file and the field, never a silently wrong value, an internal error or a crash. The pairs
// are written byte by byte from the spec (docs/reference/megatron-reference.md §2.1-2.2), not by our writer.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/npy.h"
#include "data/preprocess.h"
#include "tokenizer/tokenizer.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using testing::slurp;
using testing::TempDir;
using testing::write_bytes;

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// P.idx bytes for sequences of the given lengths (one document each), token dtype `code`.
std::string idx_bytes(uint8_t code, size_t item, const std::vector<int32_t>& lengths) {
  std::string s("MMIDIDX\0\0", 9);
  put<uint64_t>(s, 1);
  put<uint8_t>(s, code);
  put<uint64_t>(s, lengths.size());
  put<uint64_t>(s, lengths.size() + 1);
  for (int32_t l : lengths) put<int32_t>(s, l);
  int64_t at = 0;
  for (int32_t l : lengths) {
    put<int64_t>(s, at);
    at += int64_t(l) * int64_t(item);
  }
  for (size_t d = 0; d <= lengths.size(); ++d) put<int64_t>(s, int64_t(d));
  return s;
}

// A .bin/.idx pair: each sequence stored as `item`-byte little-endian ids.
void write_pair(const fs::path& prefix, uint8_t code, size_t item,
                const std::vector<std::vector<int64_t>>& seqs) {
  std::string bin;
  std::vector<int32_t> lengths;
  for (const auto& s : seqs) {
    for (int64_t id : s) bin.append(reinterpret_cast<const char*>(&id), item);
    lengths.push_back(int32_t(s.size()));
  }
  write_bytes(prefix.string() + ".bin", bin);
  write_bytes(prefix.string() + ".idx", idx_bytes(code, item, lengths));
}

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Issue 23: ids 2^32+7 trained as id 7 and 2^40 as id 0 (cut to 32 bits before any check).
TEST(IndexedDatasetIds, WideInt64IdsAreErrorsNotTruncated) {
  TempDir dir;
  for (const int64_t wide : {(int64_t(1) << 32) + 7, int64_t(1) << 40, int64_t(-1)}) {
    write_pair(dir / "wide", 5, 8, {{1, 2, 3}, {4, wide, 6}});
    for (const int64_t vocab : {0, 512}) {  // 0: no vocabulary given, the int32 range
      IndexedDataset ds((dir / "wide").string(), vocab);
      std::vector<int32_t> out(3);
      ds.get(0, 0, 3, out.data());
      EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3}));
      ds.get(1, 0, 1, out.data());  // the ids before the wide one read fine
      EXPECT_EQ(out[0], 4);
      const std::string e = usage_error([&] { ds.get(1, 0, 3, out.data()); });
      EXPECT_HAS(e, "wide.bin' document 1 (sequence 1, token 1) holds id " + std::to_string(wide));
      EXPECT_HAS(e, vocab ? "vocabulary [0, 512)" : "int32 range");
    }
  }
  // Narrow dtypes are checked against the vocabulary as well.
  write_pair(dir / "u16", 8, 2, {{5, 600}});
  IndexedDataset ds((dir / "u16").string(), 512);
  std::vector<int32_t> out(2);
  EXPECT_HAS(usage_error([&] { ds.get(0, 0, 2, out.data()); }), "holds id 600");
}

// The issue's run: `megatron train` on int64 data holding 2^32+7 exits 2 naming the file and
// the id (before: it trained on id 7 and exited 0).
TEST(IndexedDatasetIds, TrainRefusesWideIds) {
  TempDir dir;
  std::vector<std::vector<int64_t>> seqs;
  for (int s = 0; s < 40; ++s) {
    std::vector<int64_t> ids;
    for (int k = 0; k < 20; ++k) ids.push_back(k == 3 ? (int64_t(1) << 32) + 7 : (s * 7 + k) % 500);
    seqs.push_back(ids);
  }
  write_pair(dir / "wide", 5, 8, seqs);
  const auto r = testing::run_command(
      std::string(MG_BINARY) + " train --data-path " + (dir / "wide").string() +
      " --tokenizer-type NullTokenizer --vocab-size 512 --split 100,0,0 --eval-iters 0"
      " --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16"
      " --micro-batch-size 2 --global-batch-size 2 --train-iters 2 --lr 1e-3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "wide.bin' document");
  EXPECT_HAS(r.output, "holds id 4294967303");
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

// The arrays of an .idx start at byte 34, unaligned. Every prefix of a valid image and the
// image with trailing bytes, each in a buffer of exactly its size at an odd address, is read
// only inside the buffer (ASan/UBSan builds check the loads) and refused with a UsageError.
TEST(IndexedDatasetIdx, OddSizedAndMisalignedImagesAreRefusedInBounds) {
  const std::vector<int32_t> lengths = {3, 0, 5, 2};
  const std::string idx = idx_bytes(8, 2, lengths);
  const uint64_t bin = 2 * 10;
  auto parse = [&](const std::string& image) {
    std::vector<uint8_t> buf(image.size() + 1);  // image at buf + 1: misaligned for i32 / i64
    std::memcpy(buf.data() + 1, image.data(), image.size());
    return parse_idx(buf.data() + 1, image.size(), bin, "odd");
  };
  const IdxLayout L = parse(idx);
  EXPECT_EQ(L.num_sequences, 4);
  EXPECT_EQ(L.num_bounds, 5);
  EXPECT_EQ(L.dtype, TokenDType::U16);
  for (size_t size = 0; size < idx.size(); ++size)
    EXPECT_HAS(usage_error([&] { parse(idx.substr(0, size)); }), "odd.idx") << size;
  for (size_t extra = 1; extra < 8; ++extra)
    EXPECT_HAS(usage_error([&] { parse(idx + std::string(extra, '\0')); }), "odd.idx") << extra;
}

// One field wrong at a time: the message names the file and the field.
TEST(IndexedDatasetIdx, EachCorruptFieldIsNamed) {
  const std::vector<int32_t> lengths = {3, 0, 5, 2};
  const std::string good = idx_bytes(8, 2, lengths);
  const size_t n = lengths.size(), lengths_at = 34, pointers_at = 34 + 4 * n,
               bounds_at = 34 + 12 * n;
  auto with = [&](size_t at, auto v) {
    std::string s = good;
    std::memcpy(s.data() + at, &v, sizeof(v));
    return s;
  };
  auto error = [](const std::string& image, uint64_t bin = 20) {
    return usage_error(
        [&] { parse_idx(reinterpret_cast<const uint8_t*>(image.data()), image.size(), bin, "c"); });
  };
  // A header announcing 2^62 sequences: 12N wraps in 64 bits, so the size check is exact.
  EXPECT_HAS(error(with(18, uint64_t(1) << 62)), "announces 4611686018427387904 sequences");
  EXPECT_HAS(error(with(17, uint8_t(6))), "token dtype code 6");
  EXPECT_HAS(error(with(bounds_at, int64_t(1))), "document boundary 0 is 1");
  EXPECT_HAS(error(with(bounds_at + 16, int64_t(0))), "document boundary 2 is 0 after 1");
  EXPECT_HAS(error(with(bounds_at + 32, int64_t(3))),
             "end at sequence 3, not at the sequence count 4");
  EXPECT_HAS(error(with(bounds_at + 16, int64_t(9))), "document boundary 2 is 9");
  EXPECT_HAS(error(with(lengths_at + 4, int32_t(-1))), "sequence 1 has length -1");
  EXPECT_HAS(error(with(pointers_at + 16, int64_t(8))), "sequence 2 starts at byte 8");
  EXPECT_HAS(error(with(lengths_at, int32_t(INT32_MAX))),
             "c.bin' has 20 bytes but 'c.idx' sequence 0");
  EXPECT_HAS(error(good, 22), "c.bin' has 22 bytes but 'c.idx' describes 20");
  EXPECT_EQ(error(good), "(no UsageError)");
}

// Issue 23: merge-datasets with --output-prefix equal to one of its inputs overwrote it.
TEST(MergeDatasets, RefusesAnOutputThatIsAnInputAndLeavesItIntact) {
  TempDir dir;
  fs::create_directory(dir / "parts");
  write_pair(dir / "parts/a", 8, 2, {{1, 2, 3}, {4}});
  write_pair(dir / "parts/b", 8, 2, {{5, 6}});
  const std::string a_bin = slurp(dir / "parts/a.bin"), a_idx = slurp(dir / "parts/a.idx");
  fs::create_directory_symlink(dir / "parts", dir / "alias");
  fs::create_symlink(dir / "parts/b.idx", dir / "link.idx");  // the output's .idx is b's
  for (const fs::path& out : {dir / "parts/a", dir / "alias/a", dir / "link"}) {
    const std::string e = usage_error([&] {
      run_merge_datasets({(dir / "parts").string(), out.string()});
    });
    EXPECT_HAS(e, "--output-prefix '" + out.string() + "'");
    EXPECT_HAS(e, "is the input");
  }
  const auto r = testing::run_command(std::string(MG_BINARY) + " merge-datasets --input " +
                                      (dir / "parts").string() + " --output-prefix " +
                                      (dir / "parts/a").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(slurp(dir / "parts/a.bin"), a_bin);  // byte for byte
  EXPECT_EQ(slurp(dir / "parts/a.idx"), a_idx);
  EXPECT_FALSE(fs::exists(dir / "parts/a.bin.tmp"));
  // A distinct output next to the inputs is fine and holds both.
  run_merge_datasets({(dir / "parts").string(), (dir / "merged").string()});
  EXPECT_EQ(IndexedDataset((dir / "merged").string()).num_sequences(), 3);
}

TEST(MergeDatasets, AFailedMergeLeavesNothing) {
  TempDir dir;
  fs::create_directory(dir / "parts");
  write_pair(dir / "parts/a", 8, 2, {{1, 2}});
  write_pair(dir / "parts/b", 4, 4, {{3, 4}});  // int32 tokens: not mergeable with uint16
  EXPECT_HAS(usage_error([&] {
               run_merge_datasets({(dir / "parts").string(), (dir / "out").string()});
             }),
             "parts/b' stores tokens of dtype code 4");
  for (const char* f : {"out.bin", "out.idx", "out.bin.tmp", "out.idx.tmp"})
    EXPECT_FALSE(fs::exists(dir / f)) << f;
}

TEST(BlendWeights, NonFiniteOrNonPositiveWeightsNameTheFlag) {
  using V = std::vector<std::string>;
  for (const V& blend : {V{"inf", "a"}, V{"nan", "a", "1", "b"}, V{"1e999", "a"},
                         V{"-1", "a", "1", "b"}, V{"0", "a"}, V{"1e308", "a", "1e308", "b"}})
    EXPECT_HAS(usage_error([&] { parse_blend(blend, "--train-data-path"); }), "--train-data-path");
  EXPECT_DOUBLE_EQ(parse_blend({"1e300", "a", "3e300", "b"}, "--data-path").weights[1], 0.75);
  EXPECT_HAS(usage_error([] { split_ranges("inf,1,1", 10); }), "--split 'inf,1,1'");
}

// A cached index that would read outside a sequence is refused (delete-to-rebuild hint); so
// is an .npy whose shape announces more than the file holds, or values that do not fit.
TEST(IndexCache, CorruptCachesAreRefused) {
  TempDir dir;
  write_pair(dir / "d", 8, 2, {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10}, {11, 12, 13, 14, 15}});
  IndexedDataset src((dir / "d").string());
  GPTDatasetConfig cfg;
  cfg.seq_length = 4;
  cfg.num_samples = 3;
  cfg.cache_dir = (dir / "cache").string();
  cfg.cache_key = "d";
  GPTDataset built(src, 0, 3, cfg);
  const std::string sample_file = built.cache_prefix() + "sample_index.npy";
  const std::string good = slurp(sample_file);
  cfg.write_cache = false;
  std::vector<int32_t> si = built.sample_index();
  si[3] = 6;  // sample 1 ends at offset 6 of a sequence of 4 or 5 tokens
  write_npy(sample_file, "<i4", {int64_t(si.size() / 2), 2}, si.data(), si.size() * 4);
  EXPECT_HAS(usage_error([&] { GPTDataset(src, 0, 3, cfg); }), "does not match the dataset");
  si = built.sample_index();
  std::swap(si[2], si[4]);  // document positions out of order
  std::swap(si[3], si[5]);
  write_npy(sample_file, "<i4", {int64_t(si.size() / 2), 2}, si.data(), si.size() * 4);
  EXPECT_HAS(usage_error([&] { GPTDataset(src, 0, 3, cfg); }), "does not match the dataset");
  const std::vector<int64_t> wide = {int64_t(1) << 33, 0};  // 2^33 cut to int32 would be 0
  write_npy(sample_file, "<i8", {1, 2}, wide.data(), 16);
  EXPECT_HAS(usage_error([&] { GPTDataset(src, 0, 3, cfg); }), "element 0 (8589934592)");
  std::string huge = good;  // shape 2^62 x 4 (x 4 bytes wraps 64 bits), header length kept
  const size_t at = huge.find("'shape': (") + 10, old_len = huge.find(')', at) - at;
  const std::string dims = "4611686018427387904, 4";
  huge.replace(at, old_len, dims);
  huge.erase(huge.find('\n') - (dims.size() - old_len), dims.size() - old_len);
  write_bytes(sample_file, huge);
  EXPECT_HAS(usage_error([&] { GPTDataset(src, 0, 3, cfg); }), "sample_index.npy': shape (");
  write_bytes(sample_file, good);
  EXPECT_TRUE(GPTDataset(src, 0, 3, cfg).loaded_from_cache());
}

// GPT-2's byte -> printable-character map (the published rule), for a synthetic vocabulary.
std::vector<std::string> gpt2_byte_tokens() {
  std::vector<int> cs(256, -1);
  for (int b = 0; b < 256; ++b)
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) cs[b] = b;
  for (int b = 0, n = 0; b < 256; ++b)
    if (cs[b] < 0) cs[b] = 256 + n++;
  std::vector<std::string> out;
  for (int c : cs) {  // UTF-8 of code points < 0x800
    std::string s;
    if (c < 0x80) {
      s += char(c);
    } else {
      s += char(0xc0 | (c >> 6));
      s += char(0x80 | (c & 0x3f));
    }
    out.push_back(s);
  }
  return out;
}

TEST(TokenizerFiles, MalformedVocabAndMergesNameTheFileAndLine) {
  TempDir dir;
  auto vocab = [&](const std::string& extra) {  // the 256 byte tokens, "ab", EOD, extra
    nlohmann::json j;
    const auto bytes = gpt2_byte_tokens();
    for (int b = 0; b < 256; ++b) j[bytes[size_t(b)]] = b;
    j["ab"] = 256;
    j["<|endoftext|>"] = 257;
    if (!extra.empty()) j.merge_patch(nlohmann::json::parse(extra));
    write_bytes(dir / "vocab.json", j.dump());
    return (dir / "vocab.json").string();
  };
  auto merges = [&](const std::string& text) {
    write_bytes(dir / "merges.txt", text);
    return (dir / "merges.txt").string();
  };
  // CRLF line ends read as LF (Python's text mode): "b\r" would otherwise never match.
  EXPECT_EQ(GPT2BPETokenizer(vocab(""), merges("#version: 0.2\r\na b\r\n")).encode("ab"),
            std::vector<int32_t>{256});
  for (const std::string bad : {"a  b", "ab", "a b c", " b"})
    EXPECT_HAS(usage_error([&] { GPT2BPETokenizer(vocab(""), merges("#version: 0.2\n" + bad)); }),
               "merges.txt' line 2: '" + bad + "' is not a 'first second' pair");
  EXPECT_HAS(usage_error([&] { GPT2BPETokenizer(vocab(""), merges("#version: 0.2\na b\na c\n")); }),
             "merges.txt' line 3: the merge gives 'ac', which --vocab-file");
  EXPECT_HAS(usage_error([&] { GPT2BPETokenizer(vocab(R"({"ab": 5})"), merges("a b\n")); }),
             "share id 5");
  EXPECT_HAS(usage_error([&] { GPT2BPETokenizer(vocab(R"({"a": null, "zz": 97})"), merges("")); }),
             "lacks the token of byte 97");
}

}  // namespace
}  // namespace mg
