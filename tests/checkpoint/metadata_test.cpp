// Checkpoint metadata and shard index parsing (label `unit`): every field's presence, type and
// range is checked with a message naming the file and the field (each defect of issue 23 as
// its exact input), the version-3 checksum catches any edit, the iteration must be the
// directory's, and no input — truncated, bit-flipped or random — ends in anything but a
// UsageError. Also the directory names, the latest file, the --dump-final-params checks and
// the typed reading of an HF config.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/files.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/params_file.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kV2 = fs::path(MG_SOURCE_DIR) / "tests/data/checkpoint_v2/ck/iter_0000004";
const fs::path kV1 = fs::path(MG_SOURCE_DIR) / "tests/data/gpt2_golden/v1_checkpoint/iter_0000004";

std::string read(const fs::path& p) { return ckpt::read_text_file(p.string()); }

// The message parse_checkpoint_metadata throws for text ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    parse_checkpoint_metadata(text, "ck/iter_0000004/metadata.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// The version-2 fixture's metadata (no checksum) with one edit.
std::string v2_with(const std::function<void(json&)>& edit) {
  json j = json::parse(read(kV2 / "metadata.json"));
  edit(j);
  return j.dump(1);
}

const std::string kWhere = "checkpoint metadata 'ck/iter_0000004/metadata.json': ";

TEST(CheckpointMetadata, ReadsVersionOneAndTwo) {
  const CheckpointMetadata v1 = parse_checkpoint_metadata(read(kV1 / "metadata.json"), "v1");
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(v1.iteration, 4);
  EXPECT_EQ(v1.model.num_layers, 2);
  EXPECT_EQ(v1.model.normalization, "LayerNorm");  // absent from version 1: the GPT-2 default
  // Written before dropout existed: those runs trained without it, so no rates means 0 (the
  // 0.1 defaults would switch it on in a resumed run that gives no rates).
  EXPECT_EQ(v1.model.hidden_dropout, 0.f);
  EXPECT_EQ(v1.model.attention_dropout, 0.f);
  EXPECT_FALSE(v1.loss_scaler.has_value());
  const CheckpointMetadata v2 = parse_checkpoint_metadata(read(kV2 / "metadata.json"), "v2");
  EXPECT_EQ(v2.version, 2);
  EXPECT_EQ(v2.optimizer_steps, 4);
  EXPECT_EQ(v2.precision, DType::F16);
  EXPECT_TRUE(v2.model.swiglu);
  EXPECT_EQ(v2.model.num_query_groups, 1);
  EXPECT_EQ(v2.model.hidden_dropout, 0.f);
  // A record that holds the rates gives them back.
  const CheckpointMetadata with = parse_checkpoint_metadata(v2_with([](json& j) {
                                                              j["model"]["hidden_dropout"] = 0.25;
                                                              j["model"]["attention_dropout"] =
                                                                  0.125;
                                                            }),
                                                            "v2 edited");
  EXPECT_EQ(with.model.hidden_dropout, 0.25f);
  EXPECT_EQ(with.model.attention_dropout, 0.125f);
  ASSERT_TRUE(v2.loss_scaler.has_value());
  EXPECT_EQ(v2.loss_scaler->scale, 2048.0);
  ASSERT_EQ(v2.ranks.size(), 1u);
  EXPECT_EQ(v2.ranks[0].bin_bytes, fs::file_size(kV2 / "rank_00000.bin"));
}

TEST(CheckpointMetadata, WrittenTextParsesBackToTheSameValues) {
  CheckpointMetadata m = parse_checkpoint_metadata(read(kV2 / "metadata.json"), "v2");
  m.iteration = 12;
  m.skipped_iterations = 3;
  m.seed = 4000000000u;
  const std::string text = checkpoint_metadata_text(m);
  const CheckpointMetadata back = parse_checkpoint_metadata(text, "x");
  EXPECT_EQ(back.version, kCheckpointVersion);
  EXPECT_EQ(back.iteration, 12);
  EXPECT_EQ(back.skipped_iterations, 3);
  EXPECT_EQ(back.seed, 4000000000u);
  EXPECT_EQ(back.loss_scaler->growth_tracker, m.loss_scaler->growth_tracker);
  EXPECT_EQ(model_record(back.model), model_record(m.model));
  EXPECT_EQ(back.args, m.args);
  EXPECT_EQ(checkpoint_metadata_text(back), text);
}

// Issue 23's inputs, each accepted before; version 2 so that no checksum stands in the way.
TEST(CheckpointMetadata, EveryFieldIsCheckedWithANamedMessage) {
  EXPECT_EQ(error_of(v2_with([](json& j) { j.erase("layout"); })),
            kWhere + "field 'layout' is missing");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["iteration"] = -1; })),
            kWhere + "field 'iteration' must be an integer >= 0, got -1");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["iteration"] = 1e18; })),
            kWhere + "field 'iteration' must be an integer >= 0, got 1e+18");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["iteration"] = 6.5; })),
            kWhere + "field 'iteration' must be an integer >= 0, got 6.5");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["iteration"] = int64_t(1e18); })),
            kWhere +
                "field 'iteration' must be an integer <= 1125899906842624 (2^50), got "
                "1000000000000000000");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["optimizer"]["steps"] = -1; })),
            kWhere + "field 'optimizer.steps' must be an integer >= 0, got -1");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["layout"]["data_parallel_size"] = 0; })),
            kWhere + "field 'layout.data_parallel_size' must be an integer in [1, 1048576], got 0");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["model"]["padded_vocab_size"] = -1; })),
            kWhere +
                "field 'model.padded_vocab_size' must be an integer in [1, 2147483647], got -1");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["model"]["padded_vocab_size"] = 30; })),
            kWhere +
                "field 'model.padded_vocab_size' must be a multiple of "
                "make_vocab_size_divisible_by 4 and >= vocab_size 60, got 30");
  EXPECT_EQ(
      error_of(v2_with([](json& j) { j["model"]["num_attention_heads"] = "2"; })),
      kWhere +
          "field 'model.num_attention_heads' must be an integer in [0, 2147483647], got \"2\"");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["model"]["num_layers"] = 0; })),
            kWhere + "the model record is invalid: --num-layers must be positive (got 0)");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["optimizer"]["kind"] = "lamb"; })),
            kWhere + "field 'optimizer.kind' must be one of \"adam\", \"sgd\", got \"lamb\"");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["precision"] = 7; })),
            kWhere + "field 'precision' must be one of \"f32\", \"bf16\", \"f16\", got 7");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["loss_scaler"]["scale"] = 0; })),
            kWhere + "field 'loss_scaler.scale' must be a number in [1e-300, 1e+300], got 0");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["skipped_iterations"] = 5; })),
            kWhere + "field 'skipped_iterations' must be an integer in [0, 4], got 5");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["rng"]["seed"] = int64_t(1) << 32; })),
            kWhere + "field 'rng.seed' must be an integer in [0, 4294967295], got 4294967296");
  EXPECT_EQ(error_of(v2_with([](json& j) {
              j["args"] = {"--lr", 3};
            })),
            kWhere + "field 'args' must be an array of strings, got an array");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["ranks"][0]["bin"] = "../../etc/passwd"; })),
            kWhere + "field 'ranks[0].bin' must be \"rank_00000.bin\"");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["layout"]["tensor_model_parallel_size"] = 2; })),
            kWhere +
                "field 'ranks' lists 1 ranks but the layout (TP 2 x CP 1 x PP 1 x DP 1) has 2");
  EXPECT_EQ(error_of(v2_with([](json& j) { j["version"] = 4; })),
            kWhere +
                "field 'version' must be an integer in [1, 3], got 4 (this build reads "
                "format versions 1 to 3)");
  EXPECT_EQ(error_of("{\"format\": \"megatron-cpp-checkpoint\", \"vers"),
            kWhere.substr(0, kWhere.size() - 2) + " is not valid JSON (truncated or corrupt?)");
  EXPECT_EQ(error_of("[1, 2]"),
            kWhere.substr(0, kWhere.size() - 2) + " must hold a JSON object, not an array");
}

TEST(CheckpointMetadata, ChecksumCatchesAnyEdit) {
  const CheckpointMetadata m = parse_checkpoint_metadata(read(kV2 / "metadata.json"), "v2");
  const std::string text = checkpoint_metadata_text(m);
  json j = json::parse(text);
  j["optimizer"]["steps"] = 5;  // a valid value, but not the one the checksum covers
  const std::string err = error_of(j.dump(1));
  EXPECT_NE(err.find("is corrupt or was edited: its metadata_crc32 is"), std::string::npos) << err;
  j = json::parse(text);
  j.erase("metadata_crc32");
  EXPECT_EQ(error_of(j.dump()), kWhere + "field 'metadata_crc32' is missing");
  // Formatting is not content: the same document indented differently still verifies.
  EXPECT_EQ(error_of(json::parse(text).dump(4)), "");
}

// The checksum as docs/checkpoint-format.md tells users to recompute it, by Python's json and
// zlib: the same number.
TEST(CheckpointMetadata, ChecksumIsPythonsCanonicalCrc) {
  CheckpointMetadata m = parse_checkpoint_metadata(read(kV2 / "metadata.json"), "v2");
  m.args.push_back("--data-path=/data/caf\u00e9 \"quoted\"");
  char tmpl[] = "/tmp/mg_crc_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  std::ofstream(d / "metadata.json") << checkpoint_metadata_text(m);
  const auto r = testing::run_command(
      std::string(MG_PYTHON) + " -c \"import json, zlib; j = json.load(open('" +
      (d / "metadata.json").string() +
      "')); c = j.pop('metadata_crc32'); print(c, zlib.crc32("
      "json.dumps(j, sort_keys=True, separators=(',', ':'), ensure_ascii=False).encode()))\"");
  fs::remove_all(d);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  uint64_t stored = 0, python = 1;
  in >> stored >> python;
  EXPECT_EQ(stored, python) << r.output;
}

// Any prefix, any flipped byte, any random text: a parse or a UsageError, nothing else (no
// JSON exception, no abort; the libFuzzer target drives the same function much harder).
TEST(CheckpointMetadata, MalformedInputOnlyEverThrowsUsageError) {
  const std::string text = read(kV2 / "metadata.json");
  auto only_usage_errors = [](const std::string& t) {
    try {
      parse_checkpoint_metadata(t, "m");
    } catch (const UsageError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a UsageError: " << e.what() << "\n" << t;
    }
  };
  for (size_t n = 0; n < text.size(); n += 3) only_usage_errors(text.substr(0, n));
  std::mt19937 gen(23);
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string t = text;
    for (int k = 0; k < 1 + int(gen() % 3); ++k) t[gen() % t.size()] = char(gen() % 256);
    only_usage_errors(t);
    try {
      parse_checkpoint_metadata(t, "m");
      ++parsed;  // e.g. a flip inside an "args" string: a version-2 file has no checksum
    } catch (const UsageError&) {
    }
  }
  EXPECT_LT(parsed, 3000);
  EXPECT_EQ(error_of(std::string(100000, '[') + std::string(100000, ']')),
            kWhere.substr(0, kWhere.size() - 2) +
                " nests arrays or objects more than 32 deep (corrupt?)");
  for (const char* t :
       {"", "null", "{}", "{\"format\": \"megatron-cpp-checkpoint\"}", "[[[[[[[[",
        "{\"format\": \"megatron-cpp-checkpoint\", \"version\": 1, \"iteration\": {}}",
        "{\"format\": \"megatron-cpp-checkpoint\", \"version\": 18446744073709551615}"})
    only_usage_errors(t);
}

TEST(CheckpointMetadata, ShardIndexPiecesMustBeSlicesOfTheirTensor) {
  const std::string text = read(kV2 / "rank_00000.json");
  const ShardIndex s = parse_shard_index(text, "i");
  ASSERT_EQ(s.pieces.size(), 32u);
  EXPECT_EQ(s.pieces[0].key, "model/embedding.word_embeddings.weight");
  EXPECT_EQ(s.pieces[0].global_shape, (Shape{60, 16}));
  auto error = [&](const std::function<void(json&)>& edit) -> std::string {
    json j = json::parse(text);
    edit(j["pieces"][0]);
    try {
      parse_shard_index(j.dump(), "ck/i.json");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  const std::string where = "checkpoint index 'ck/i.json': ";
  EXPECT_EQ(error([](json& p) { p["tp_rank"] = 1; }),
            where + "field 'pieces[0].tp_rank' must be an integer in [0, 0], got 1");
  EXPECT_EQ(error([](json& p) { p["numel"] = 961; }),
            where + "field 'pieces[0].numel' must be an integer in [0, 960], got 961");
  EXPECT_EQ(error([](json& p) {
              p["local_shape"] = {30, 16};
            }),
            where +
                "piece model/embedding.word_embeddings.weight has local shape [30, 16] split "
                "along dim -1 with stride 1 over 1 ranks, which is not a shard of [60, 16]");
  EXPECT_EQ(error([](json& p) {
              p["global_shape"] = {1 << 30, 1 << 30};
            }),
            where + "field 'pieces[0].global_shape' has more than 2^40 elements");
  EXPECT_EQ(error([](json& p) { p["dtype"] = "f64"; }),
            where +
                "field 'pieces[0].dtype' must be one of \"f32\", \"bf16\", \"f16\", got \"f64\"");
}

TEST(CheckpointDir, NamesAndTheLatestFile) {
  EXPECT_EQ(checkpoint_dir_name(10), "iter_0000010");
  EXPECT_EQ(iteration_of_dir_name("iter_0000010"), 10);
  EXPECT_EQ(iteration_of_dir_name("iter_12345678"), 12345678);
  for (const char* n : {"iter_000010", "iter_00000010", "iter_0000010.tmp", "iter_0000010.deleting",
                        "iter_-000010", "iter_99999999999999999999", "latest"})
    EXPECT_EQ(iteration_of_dir_name(n), -1) << n;
  char tmpl[] = "/tmp/mg_latest_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  EXPECT_EQ(read_latest_iteration(d.string()), -1);
  for (const auto& [text, want] :
       std::vector<std::pair<std::string, int64_t>>{{"20\n", 20}, {"7", 7}}) {
    std::ofstream(d / "latest_checkpointed_iteration.txt") << text;
    EXPECT_EQ(read_latest_iteration(d.string()), want);
  }
  for (const char* bad : {"", "-1", "release", "1e3", "99999999999999999999"}) {
    std::ofstream(d / "latest_checkpointed_iteration.txt") << bad;
    EXPECT_THROW(read_latest_iteration(d.string()), UsageError) << bad;
  }
  fs::remove_all(d);
}

// A --dump-final-params file records the model (heads included, which change no shape) and a
// checksum, and a mismatch of either stops generate before it samples.
TEST(ParamsFile, RecordsTheModelAndAChecksum) {
  char tmpl[] = "/tmp/mg_params_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  const std::string path = (d / "p.bin").string();
  GPTConfig c;
  c.num_layers = 1, c.hidden_size = 16, c.num_attention_heads = 4, c.seq_length = 8;
  c.vocab_size = 40, c.make_vocab_size_divisible_by = 8;
  const int64_t n = c.num_parameters();
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = float(i % 97) * 0.01f;
  write_params_file(path, values, c);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::vector<float> got(static_cast<size_t>(n), -1.f);
  read_params_file(path, c, got.data());
  EXPECT_EQ(got, values);

  auto error = [&](const GPTConfig& cfg) -> std::string {
    try {
      read_params_file(path, cfg, got.data());
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  GPTConfig heads = c;
  heads.num_attention_heads = 2;  // the same shapes: only the record tells
  EXPECT_EQ(error(heads),
            "--load-params '" + path +
                "' holds another model (num_attention_heads: "
                "checkpoint --num-attention-heads 4, this run --num-attention-heads 2; "
                "kv_channels: checkpoint --kv-channels 4, this run --kv-channels 8; "
                "num_query_groups: checkpoint --num-query-groups 4, this run "
                "--num-query-groups 2); pass the model flags it was trained with");
  {  // one flipped bit in the values
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put(char(0x40));
  }
  EXPECT_EQ(error(c), "--load-params: '" + path + "' is corrupt or does not belong to '" + path +
                          ".json' (CRC-32 mismatch)");
  fs::resize_file(path, 100);
  EXPECT_EQ(error(c), "--load-params: '" + path + "' has 100 bytes but should hold " +
                          std::to_string(n) + " fp32 values (truncated?)");
  std::ofstream(path + ".json")
      << "[{\"name\": \"x\", \"shape\": [1], \"offset\": 0}]";  // version 1
  EXPECT_EQ(error(c), "--load-params: '" + path +
                          ".json' is the bare parameter list of an older "
                          "megatron-cpp, which records neither the model nor a checksum: write the "
                          "file again with train --dump-final-params");
  fs::remove_all(d);
}

// HF config.json fields are typed too: a string or a zero where GPT-2 has a positive integer
// was a JSON type error ("internal error") or an invalid model.
TEST(HfConfig, FieldsAreTypedAndRanged) {
  char tmpl[] = "/tmp/mg_hfcfg_XXXXXX";
  const fs::path d = mkdtemp(tmpl);
  const std::string path = (d / "config.json").string();
  auto error = [&](const std::string& text) -> std::string {
    std::ofstream(path) << text;
    try {
      hf_gpt2_config(path, 128);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  const std::string ok = R"("n_embd": 16, "n_head": 2, "n_positions": 8, "vocab_size": 50)";
  EXPECT_EQ(error("{\"n_layer\": 2, " + ok + "}"), "");
  EXPECT_EQ(error("{\"n_layer\": \"2\", " + ok + "}"),
            "HF config '" + path +
                "': field 'n_layer' must be an integer in [1, 65536], got \"2\"");
  EXPECT_EQ(error("{\"n_layer\": 0, " + ok + "}"),
            "HF config '" + path + "': field 'n_layer' must be an integer in [1, 65536], got 0");
  EXPECT_EQ(error("{\"n_layer\": 2, \"n_inner\": -4, " + ok + "}"),
            "HF config '" + path +
                "': field 'n_inner' must be an integer in [1, 2147483647], got -4");
  EXPECT_EQ(error("{\"n_layer\": 2, \"activation_function\": \"relu\", " + ok + "}"),
            "HF config '" + path +
                "': field 'activation_function' must be one of \"gelu_new\", got \"relu\"");
  EXPECT_EQ(error("{\"n_layer\": 2, " + ok.substr(0, ok.find(", \"vocab_size")) + "}"),
            "HF config '" + path + "' lacks vocab_size (is it a GPT-2 config.json?)");
  EXPECT_EQ(error("{\"n_layer\": 2, \"n_head\": 3, " + ok.substr(ok.find("\"n_positions")) +
                  ", \"n_embd\": 16}"),
            "HF config '" + path +
                "' describes no valid model: --num-attention-heads 3 must divide "
                "--hidden-size 16 (or give the head size with --kv-channels)");
  fs::remove_all(d);
}

}  // namespace
}  // namespace mg
