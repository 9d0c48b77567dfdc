// safetensors headers wrong in one field each, against the rules of the format's reference
// implementation (huggingface/safetensors, tensor.rs: sorted by offsets, the tensors tile the
// data from 0 to the end of the file; element counts overflow-checked), and `megatron convert`
// on files the config does not fully use, or onto a full disk. Every rejection is a UsageError
// naming the file, the tensor and the field.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "checkpoint/convert.h"
#include "checkpoint/hf_gpt2.h"
#include "core/error.h"
#include "model/param_layout.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_bytes;

// A file image: the 8-byte length, the header text as given, `data` bytes.
std::string image(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string parse_error(const std::string& file) {
  try {
    parse_safetensors_header(file.data(), file.size(), "m.safetensors");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + "\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape +
         ", \"data_offsets\": [" + std::to_string(begin) + ", " + std::to_string(end) + "]}";
}

// A header object of the given entries.
std::string object(std::initializer_list<std::string> entries) {
  std::string h = "{";
  for (const std::string& e : entries) {
    if (h.size() > 1) h += ", ";
    h += e;
  }
  h += "}";
  return h;
}

TEST(SafetensorsHeader, AValidHeaderIsReadSortedByOffset) {
  // Listed b first, stored a first; a zero-element tensor shares the offset of the next.
  const std::string h =
      object({"\"__metadata__\": {\"format\": \"pt\"}", entry("b", "BF16", "[2, 2]", 8, 16),
              entry("a", "F32", "[2]", 0, 8), entry("z", "I64", "[0, 3]", 8, 8)});
  const std::string file = image(h, std::string(16, '\0'));
  const SafetensorsHeader p = parse_safetensors_header(file.data(), file.size(), "m.safetensors");
  ASSERT_EQ(p.tensors.size(), 3u);
  EXPECT_EQ(p.tensors[0].name, "a");
  EXPECT_EQ(p.tensors[1].name, "z");
  EXPECT_EQ(p.tensors[2].name, "b");
  EXPECT_EQ(p.tensors[2].shape, (Shape{2, 2}));
  EXPECT_EQ(p.tensors[2].dtype, "BF16");
  EXPECT_EQ(p.data_start, 8 + h.size());
  EXPECT_EQ(p.metadata.at("format"), "pt");
}

// Issue 23: overlapping data_offsets were accepted, a tensor silently read from another's bytes.
TEST(SafetensorsHeader, OverlapsGapsAndOutOfOrderOffsetsNameTheTensors) {
  const std::string d12(12, '\0'), d8(8, '\0'), d20(20, '\0');
  auto file = [](std::initializer_list<std::string> entries, const std::string& data) {
    return image(object(entries), data);
  };
  std::string e =
      parse_error(file({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 4, 12)}, d12));
  EXPECT_HAS(e, "m.safetensors': tensor 'b' bytes [4, 12) overlap tensor 'a' bytes [0, 8)");
  e = parse_error(file({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 0, 8)}, d8));
  EXPECT_HAS(e, "overlap tensor 'a'");  // both read the same bytes
  e = parse_error(file({entry("a", "F32", "[2]", 8, 0)}, d8));
  EXPECT_HAS(e, "m.safetensors': tensor 'a': field 'data_offsets' [8, 0] ends before it begins");
  e = parse_error(file({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 12, 20)}, d20));
  EXPECT_HAS(e, "data bytes [8, 12) belong to no tensor (a gap before tensor 'b'");
  e = parse_error(file({entry("a", "F32", "[2]", 4, 12)}, d12));
  EXPECT_HAS(e, "data bytes [0, 4) belong to no tensor");
  e = parse_error(file({entry("a", "F32", "[2]", 0, 8)}, d12));
  EXPECT_HAS(e, "the tensors end at data byte 8 but the file holds 12 data bytes");
  e = parse_error(file({entry("a", "F32", "[2]", 0, 8)}, std::string(4, '\0')));
  EXPECT_HAS(e, "the tensors end at data byte 8 but the file holds 4 data bytes");
}

TEST(SafetensorsHeader, EachBadFieldIsNamed) {
  const std::string d8(8, '\0');
  auto one = [&](const std::string& body) { return parse_error(image(object({body}), d8)); };
  EXPECT_HAS(one(entry("w", "F33", "[2]", 0, 8)), "tensor 'w': field 'dtype' is 'F33'");
  EXPECT_HAS(one(R"("w": {"shape": [2], "data_offsets": [0, 8]})"), "field 'dtype' is missing");
  EXPECT_HAS(one(entry("w", "F32", "[-2]", 0, 8)), "field 'shape' [-2] holds -2");
  EXPECT_HAS(one(entry("w", "F32", "[2.0]", 0, 8)), "field 'shape' [2.0] holds 2.0");
  EXPECT_HAS(one(entry("w", "F32", "3", 0, 8)), "field 'shape' is not a list");
  EXPECT_HAS(one(entry("w", "F32", "[3]", 0, 8)),
             "field 'data_offsets' [0, 8] spans 8 bytes but shape [3] of F32 needs 12");
  EXPECT_HAS(one(R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [0]})"),
             "field 'data_offsets' is [0], not two non-negative integers");
  EXPECT_HAS(one(R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]})"),
             "field 'data_offsets' is [-8,0]");
  EXPECT_HAS(one(entry("w", "F4", "[3]", 0, 8)),
             "3 elements of 4-bit dtype F4 do not fill whole bytes");
  EXPECT_HAS(one(R"("w": [1, 2])"), "tensor 'w' is not an object");
  EXPECT_HAS(one(R"("__metadata__": {"format": 1})"), "__metadata__ entry 'format' is 1");
  EXPECT_HAS(one(R"("__metadata__": [])"), "__metadata__ is not a string -> string map");
  EXPECT_HAS(one(entry("w", "F32", "[2]", 0, 8) + ", " + entry("w", "F32", "[2]", 0, 8)),
             "the header names 'w' twice");
  EXPECT_HAS(parse_error(image("[1, 2]", "")), "the header is a JSON array");
  EXPECT_HAS(parse_error(image("{\"w\": ", "")), "the header is not valid JSON");
  EXPECT_HAS(parse_error(std::string("\x05\0\0", 3)), "m.safetensors' is not a safetensors file");
  std::string long_header = image("{}", "");
  long_header[0] = char(200);  // length 200 > the 2 bytes that follow
  EXPECT_HAS(parse_error(long_header), "header length 200 exceeds the file's 2 bytes");
  EXPECT_EQ(parse_error(image("{}", "")), "(accepted)");  // no tensors, no data: valid
}

// Issue 23: huge shapes overflowed a signed element count (UB) instead of being refused.
TEST(SafetensorsHeader, HugeShapesAreRefusedWithoutOverflow) {
  const std::string d8(8, '\0');
  auto one = [&](const std::string& shape) {
    return parse_error(image(object({entry("w", "F32", shape, 0, 8)}), d8));
  };
  EXPECT_HAS(one("[4294967296, 4294967296]"),
             "field 'shape' [4294967296,4294967296] has more than 2^64");
  EXPECT_HAS(one("[3037000500, 3037000500]"), "more bytes than a file can hold");  // > 2^63
  EXPECT_HAS(one("[1152921504606846976, 4]"), "more bytes than a file can hold");  // x 32 bits
  EXPECT_HAS(one("[18446744073709551615]"), "holds 18446744073709551615, not a non-negative");
  EXPECT_EQ(checked_shape_numel({int64_t(1) << 62, 2}), std::nullopt);
  EXPECT_EQ(checked_shape_numel({int64_t(1) << 31, int64_t(1) << 31}), int64_t(1) << 62);
  EXPECT_EQ(checked_shape_numel({5, -1}), std::nullopt);
}

// Random byte flips and truncations of a valid file: each is accepted with every tensor inside
// the file, or refused with a UsageError; nothing else escapes (libFuzzer runs this longer).
TEST(SafetensorsHeader, RandomCorruptionsAreAcceptedInBoundsOrRefused) {
  const std::string h =
      object({"\"__metadata__\": {\"format\": \"pt\"}", entry("a", "F32", "[2, 3]", 0, 24),
              entry("b", "BF16", "[4]", 24, 32), entry("c", "I64", "[1]", 32, 40)});
  const std::string good = image(h, std::string(40, '\x11'));
  std::mt19937 gen(23);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string f = good;
    for (int k = 1 + int(gen() % 3); k > 0; --k) f[gen() % f.size()] = char(gen());
    if (gen() % 5 == 0) f.resize(gen() % (f.size() + 1));
    try {
      const SafetensorsHeader p = parse_safetensors_header(f.data(), f.size(), "m.safetensors");
      for (const SafetensorsEntry& t : p.tensors) EXPECT_LE(p.data_start + t.end, f.size());
    } catch (const UsageError& e) {
      ++refused;
      EXPECT_HAS(std::string(e.what()), "m.safetensors");
    }
  }
  EXPECT_GT(refused, 1000);
}

// 16-bit tensors at an odd address (a writer that does not pad the header) read correctly.
TEST(SafetensorsReader, MisalignedHalfPrecisionTensorsReadCorrectly) {
  TempDir dir;
  const std::string h = object({entry("w", "BF16", "[3]", 0, 6)}) + " ";  // 8 + 63: odd start
  ASSERT_EQ(h.size() % 2, 1u);
  const uint16_t bf16[3] = {0x3f80, 0xc000, 0x3ec0};  // 1, -2, 0.375
  const std::string data(reinterpret_cast<const char*>(bf16), 6);
  write_bytes(dir / "m.safetensors", image(h, data));
  const SafetensorsReader r((dir / "m.safetensors").string());
  EXPECT_EQ(r.get("w").to_f32(), (std::vector<float>{1.f, -2.f, 0.375f}));
}

// A tiny HF GPT-2 directory written with the config's tensors (random values) plus `extra`.
struct HFDir {
  GPTConfig cfg;
  std::vector<NamedF32> tensors;
};

HFDir write_hf(const fs::path& dir, int64_t layers) {
  fs::create_directories(dir);
  write_bytes(dir / "config.json",
              "{\"n_layer\": " + std::to_string(layers) +
                  ", \"n_embd\": 8, \"n_head\": 2, \"n_positions\": 16, \"vocab_size\": 40}");
  HFDir hf;
  hf.cfg = hf_gpt2_config((dir / "config.json").string(), 8);
  std::vector<float> params(size_t(gpt_param_layout(hf.cfg).total_numel()));
  std::mt19937 gen(static_cast<uint32_t>(layers));
  std::normal_distribution<float> normal;
  for (float& p : params) p = normal(gen);
  hf.tensors = params_to_hf(params, hf.cfg);
  write_safetensors((dir / "model.safetensors").string(), hf.tensors);
  return hf;
}

std::string convert_error(const ConvertConfig& cfg) {
  try {
    convert(cfg);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(converted)";
}

// Issue 23: a 2-layer file with n_layer 1 converted 1 layer without a word.
TEST(HFConvertInputs, TensorsTheConfigDoesNotUseAreAnError) {
  TempDir dir;
  write_hf(dir / "hf", 2);
  write_bytes(dir / "hf/config.json",
              R"({"n_layer": 1, "n_embd": 8, "n_head": 2, "n_positions": 16, "vocab_size": 40})");
  ConvertConfig cfg;
  cfg.direction = "hf-to-megatron";
  cfg.load = (dir / "hf").string();
  cfg.save = (dir / "ck").string();
  const std::string e = convert_error(cfg);
  EXPECT_HAS(e,
             "model.safetensors' holds 12 tensors the config (n_layer 1) does not use: "
             "transformer.h.1.attn.c_attn.bias, transformer.h.1.attn.c_attn.weight");
  EXPECT_HAS(e, "--allow-unused-tensors");
  EXPECT_FALSE(fs::exists(dir / "ck"));
  cfg.allow_unused_tensors = true;
  EXPECT_EQ(convert_error(cfg), "(converted)");
  const auto r =
      testing::run_command(std::string(MG_BINARY) + " convert --direction hf-to-megatron --load " +
                           cfg.load + " --save " + (dir / "ck2").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "transformer.h.1.ln_2.weight, ... (4 more)");
}

// HF's causal-mask buffers are not weights; a tied lm_head copy is fine, an untied one is not.
TEST(HFConvertInputs, MaskBuffersAndTiedHeadAreKnownExtras) {
  TempDir dir;
  HFDir hf = write_hf(dir / "hf", 1);
  const NamedF32 wte = hf.tensors[0];
  ASSERT_EQ(wte.name, "transformer.wte.weight");
  hf.tensors.push_back({"transformer.h.0.attn.bias", {1, 1, 16, 16}, std::vector<float>(256, 1.f)});
  hf.tensors.push_back({"lm_head.weight", wte.shape, wte.values});
  write_safetensors((dir / "hf/model.safetensors").string(), hf.tensors);
  ConvertConfig cfg;
  cfg.direction = "hf-to-megatron";
  cfg.load = (dir / "hf").string();
  cfg.save = (dir / "ck").string();
  EXPECT_EQ(convert_error(cfg), "(converted)");
  hf.tensors.back().values[7] += 1.f;
  write_safetensors((dir / "hf/model.safetensors").string(), hf.tensors);
  cfg.save = (dir / "ck2").string();
  EXPECT_HAS(convert_error(cfg), "lm_head.weight differs from transformer.wte.weight");
}

// Issue 23: a full disk left model.safetensors.tmp behind. The write runs in a child whose
// file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes write() fail with EFBIG mid-file.
TEST(HFConvertInputs, AFullDiskLeavesNoTemporary) {
  TempDir dir;
  write_hf(dir / "hf", 2);
  ConvertConfig cfg;
  cfg.direction = "hf-to-megatron";
  cfg.load = (dir / "hf").string();
  cfg.save = (dir / "ck").string();
  ASSERT_EQ(convert_error(cfg), "(converted)");
  const auto r =
      testing::run_command("bash -c \"trap '' XFSZ; ulimit -f 4; exec " + std::string(MG_BINARY) +
                           " convert --direction megatron-to-hf --load " + (dir / "ck").string() +
                           " --save " + (dir / "out").string() + "\"");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "cannot write '" + (dir / "out/model.safetensors.tmp").string() + "'");
  EXPECT_FALSE(fs::exists(dir / "out/model.safetensors.tmp"));
  EXPECT_FALSE(fs::exists(dir / "out/model.safetensors"));
  // Without the limit the same command writes the file.
  const auto ok =
      testing::run_command(std::string(MG_BINARY) + " convert --direction megatron-to-hf --load " +
                           (dir / "ck").string() + " --save " + (dir / "out").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(dir / "out/model.safetensors"));
}

}  // namespace
}  // namespace mg
