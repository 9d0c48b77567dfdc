// Bad inputs and failed outputs through the real binary (label `checkpoint`), each a defect of
// issue 23 with its exact input: malformed metadata and a copied older iteration are refused
// with exit code 2 and a message naming the file and field; a version-2 checkpoint still loads
// and continues as the binary that wrote it continued; leftovers of crashes are removed by the
// next save; convert refuses to overwrite a training checkpoint or a non-empty directory; a
// failed convert or --dump-final-params leaves nothing half-written; generate --load-params
// detects another model (head count included) and refuses to sample from non-finite logits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/files.h"
#include "testing/mpirun.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::TempDir;

const std::string kBin = MG_BINARY;
const std::string kModel =
    " --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 512 --vocab-size 60";
const std::string kTrain =
    kBin + " train --mock-data" + kModel +
    " --micro-batch-size 1 --global-batch-size 1 --lr 2e-3 --log-interval 1 --seed 3";

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void edit_json(const fs::path& p, const std::function<void(json&)>& edit) {
  json j = json::parse(slurp(p));
  edit(j);
  std::ofstream(p) << j.dump(1);
}

// A user error: exit code 2 and the message, never an internal error.
void expect_usage_error(const testing::RunResult& r, const std::string& message) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << "want: " << message << "\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

// Every file under dir whose name ends in .tmp.
std::vector<std::string> tmp_files(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".tmp") out.push_back(e.path().string());
  return out;
}

const fs::path kV2 = fs::path(MG_SOURCE_DIR) / "tests/data/checkpoint_v2";
const std::string kV2Run =
    kBin +
    " train --mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2"
    " --group-query-attention --num-query-groups 1 --normalization RMSNorm --swiglu"
    " --ffn-hidden-size 32 --position-embedding-type rope --disable-bias-linear --seq-length 8"
    " --vocab-size 60 --make-vocab-size-divisible-by 4 --micro-batch-size 2"
    " --global-batch-size 4 --lr 2e-3 --log-interval 1 --seed 7 --fp16 --initial-loss-scale 1024"
    " --loss-scale-window 3 --train-iters 8"
    " --attention-dropout 0 --hidden-dropout 0";  // recorded before dropout existed

// The checkpoint b4793f0's binary saved (capture.sh) continues as that binary continued it:
// the same losses (1e-5: other CPUs round differently) and the same loss scales.
TEST(CheckpointHardening, VersionTwoCheckpointLoadsAndContinues) {
  TempDir d;
  fs::copy(kV2 / "ck", d.path / "ck", fs::copy_options::recursive);
  const auto r = testing::run_command("OMP_NUM_THREADS=1 " + kV2Run + " --load " + d.str("ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loaded checkpoint"), std::string::npos) << r.output;
  const std::regex line_re(R"(iteration +([0-9]+)/.*lm loss: ([^ ]+) .*loss scale: ([^ ]+) )");
  std::vector<std::string> want;
  std::istringstream in(slurp(kV2 / "resume.txt"));
  for (std::string l; std::getline(in, l);) want.push_back(l);
  std::vector<std::smatch> got;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line_re);
       it != std::sregex_iterator(); ++it)
    got.push_back(*it);
  ASSERT_EQ(got.size(), want.size()) << r.output;
  const std::regex want_re(R"(iteration +([0-9]+)/ lm loss: ([^ ]+) loss scale: ([^ ]+))");
  for (size_t i = 0; i < want.size(); ++i) {
    std::smatch w;
    ASSERT_TRUE(std::regex_match(want[i], w, want_re)) << want[i];
    EXPECT_EQ(got[i][1], w[1]);
    EXPECT_NEAR(std::stod(got[i][2]), std::stod(w[2]), 1e-5 * std::stod(w[2])) << want[i];
    EXPECT_EQ(got[i][3], w[3]) << want[i];
  }
}

// Issue 23: a missing "layout" was undefined behaviour (SIGABRT in the debug build); other
// fields were trusted. Version 2 metadata (no checksum) with the exact edits.
TEST(CheckpointHardening, MalformedMetadataIsAUsageErrorNamingTheField) {
  TempDir d;
  const fs::path meta = d.path / "ck/iter_0000004/metadata.json";
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j.erase("layout"); }, "field 'layout' is missing"},
      {[](json& j) { j["iteration"] = -1; }, "field 'iteration' must be an integer >= 0, got -1"},
      {[](json& j) { j["optimizer"]["steps"] = -1; },
       "field 'optimizer.steps' must be an integer >= 0, got -1"},
  };
  for (const Case& c : cases) {
    fs::remove_all(d.path / "ck");
    fs::copy(kV2 / "ck", d.path / "ck", fs::copy_options::recursive);
    edit_json(meta, c.edit);
    expect_usage_error(testing::run_command(kV2Run + " --load " + d.str("ck")),
                       "checkpoint metadata '" + meta.string() + "': " + c.message);
  }
}

// Issue 23: a whole older iteration copied under a newer name resumed silently from the older.
TEST(CheckpointHardening, OlderIterationUnderANewerNameIsRefused) {
  TempDir d;
  const fs::path ck = d.path / "ck";
  ASSERT_EQ(testing::run_command(kTrain + " --train-iters 3 --save-interval 1 --save " +
                                 ck.string())
                .exit_code,
            0);
  fs::remove_all(ck / "iter_0000003");
  fs::copy(ck / "iter_0000001", ck / "iter_0000003", fs::copy_options::recursive);
  expect_usage_error(testing::run_command(kTrain + " --train-iters 5 --load " + ck.string()),
                     "checkpoint metadata '" + (ck / "iter_0000003/metadata.json").string() +
                         "' records iteration 1 but its directory is named for iteration 3");
  // Edited metadata (here: the iteration made to match) fails its checksum instead.
  edit_json(ck / "iter_0000003/metadata.json", [](json& j) { j["iteration"] = 3; });
  expect_usage_error(testing::run_command(kTrain + " --train-iters 5 --load " + ck.string()),
                     "' is corrupt or was edited: its metadata_crc32 is");
  // The latest file naming a directory that is gone, or one without metadata.json.
  fs::remove_all(ck / "iter_0000003");
  expect_usage_error(testing::run_command(kTrain + " --train-iters 5 --load " + ck.string()),
                     "checkpoint '" + (ck / "iter_0000003").string() +
                         "' has no metadata.json: it does not exist; point " + ck.string() +
                         "/latest_checkpointed_iteration.txt at another complete iter_ directory");
}

// What a crash (of this build or an older one) can leave, removed by the next save: a save's
// .tmp, a removal's .deleting, the latest file's .tmp, and (older builds) a half-deleted
// checkpoint under its final name. Complete checkpoints stay.
TEST(CheckpointHardening, NextSaveRemovesWhatCrashesLeft) {
  TempDir d;
  const fs::path ck = d.path / "ck";
  ASSERT_EQ(testing::run_command(kTrain + " --train-iters 3 --save-interval 1 --save " +
                                 ck.string())
                .exit_code,
            0);
  fs::remove(ck / "iter_0000001/metadata.json");  // half-deleted in place by an older build
  fs::remove(ck / "iter_0000001/rank_00000.bin");
  fs::create_directories(ck / "iter_0000000");  // left empty by an older build
  fs::copy(ck / "iter_0000002", ck / "iter_0000002.deleting", fs::copy_options::recursive);
  fs::create_directories(ck / "iter_0000004.tmp");
  std::ofstream(ck / "latest_checkpointed_iteration.txt.tmp") << "4";
  std::ofstream(ck / "notes.txt") << "the user's";
  const auto r = testing::run_command(kTrain + " --train-iters 4 --load " + ck.string() +
                                      " --save " + ck.string() + " --ckpt-keep-last 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* n : {"iter_0000000", "iter_0000001", "iter_0000002.deleting", "iter_0000004.tmp",
                        "latest_checkpointed_iteration.txt.tmp"})
    EXPECT_NE(r.output.find("removing '" + (ck / n).string() + "', left by an interrupted"),
              std::string::npos)
        << n << "\n"
        << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ck)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_0000002", "iter_0000003", "iter_0000004",
                                             "latest_checkpointed_iteration.txt", "notes.txt"}));
  for (const char* n : {"iter_0000002", "iter_0000003", "iter_0000004"})
    EXPECT_NO_THROW(verify_checkpoint((ck / n).string())) << n;
}

// Issue 23: `convert --save` into a training checkpoint rewound its latest file to 0.
TEST(CheckpointHardening, ConvertRefusesToOverwriteUnlessTold) {
  TempDir d;
  const fs::path ck = d.path / "ck", hf = d.path / "hf";
  ASSERT_EQ(testing::run_command(kTrain + " --train-iters 2 --save " + ck.string()).exit_code, 0);
  const std::string to_hf =
      kBin + " convert --direction megatron-to-hf --load " + ck.string() + " --save ";
  const std::string to_ck =
      kBin + " convert --direction hf-to-megatron --load " + hf.string() + " --save ";
  auto r = testing::run_command(to_hf + hf.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_usage_error(testing::run_command(to_ck + ck.string()),
                     "--save '" + ck.string() + "' holds a training checkpoint");
  EXPECT_EQ(read_latest_iteration(ck.string()), 2);
  expect_usage_error(testing::run_command(to_hf + hf.string()),
                     "--save '" + hf.string() +
                         "' is not empty: choose a new or empty directory, "
                         "or pass --overwrite");
  r = testing::run_command(to_hf + hf.string() + " --overwrite");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(to_ck + ck.string() + " --overwrite");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_latest_iteration(ck.string()), 0);  // asked for: the converted model is latest
  fs::create_directories(d.path / "empty");
  r = testing::run_command(to_ck + d.str("empty"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NO_THROW(verify_checkpoint(d.str("empty/iter_0000000")));
}

// A write that fails half-way (a 16 KiB file size limit, SIGXFSZ ignored: EFBIG) leaves no
// .tmp and no directory that the failed command created.
TEST(CheckpointHardening, FailedOutputsLeaveNothingBehind) {
  TempDir d;
  const fs::path ck = d.path / "ck", hf = d.path / "hf";
  ASSERT_EQ(testing::run_command(kTrain + " --train-iters 2 --save " + ck.string()).exit_code, 0);
  ASSERT_EQ(testing::run_command(kBin + " convert --direction megatron-to-hf --load " +
                                 ck.string() + " --save " + hf.string())
                .exit_code,
            0);
  const std::string limited = "trap '' XFSZ; ulimit -f 16; exec ";
  auto r = testing::run_command(limited + kBin + " convert --direction megatron-to-hf --load " +
                                ck.string() + " --save " + d.str("hf2"));
  expect_usage_error(r, "(disk full?)");
  EXPECT_FALSE(fs::exists(d.path / "hf2"));
  r = testing::run_command(limited + kBin + " convert --direction hf-to-megatron --load " +
                           hf.string() + " --save " + d.str("ck2"));
  expect_usage_error(r, "(disk full?)");
  EXPECT_FALSE(fs::exists(d.path / "ck2"));
  fs::create_directories(d.path / "hf3");  // an existing directory stays, without .tmp files
  r = testing::run_command(limited + kBin + " convert --direction megatron-to-hf --load " +
                           ck.string() + " --save " + d.str("hf3"));
  expect_usage_error(r, "(disk full?)");
  EXPECT_TRUE(fs::is_empty(d.path / "hf3"));
  r = testing::run_command(limited + kTrain + " --train-iters 1 --dump-final-params " +
                           d.str("p.bin"));
  expect_usage_error(r, "(disk full?)");
  EXPECT_EQ(tmp_files(d.path), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(d.path / "p.bin"));
}

// Issue 23: generate --load-params could not tell a model with another head count (the same
// shapes) and sampled from NaN logits.
TEST(CheckpointHardening, GenerateChecksTheParamsFileAndItsLogits) {
  TempDir d;
  const std::string p = d.str("p.bin");
  ASSERT_EQ(testing::run_command(kTrain + " --train-iters 2 --dump-final-params " + p).exit_code,
            0);
  const std::string gen = kBin +
                          " generate --tokenizer-type NullTokenizer --prompt '1 2 3'"
                          " --max-new-tokens 2 --load-params " +
                          p;
  auto r = testing::run_command(gen + kModel);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(gen + kModel + " --num-attention-heads 4");
  expect_usage_error(r, "--load-params '" + p +
                            "' holds another model (num_attention_heads: "
                            "checkpoint --num-attention-heads 2, this run --num-attention-heads 4");
  // NaN parameters under a valid checksum: the logits are NaN and generate stops.
  std::vector<float> values(fs::file_size(p) / 4, std::nanf(""));
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * 4));
  edit_json(p + ".json",
            [&](json& j) { j["crc32"] = ckpt::crc32_of(values.data(), values.size() * 4); });
  r = testing::run_command(gen + kModel);
  expect_usage_error(r, "the model from --load-params '" + p + "' gives non-finite logits (");
  expect_usage_error(r,
                     "for token 0) on --prompt '1 2 3': its parameters are corrupt or diverged; "
                     "refusing to sample");
}

}  // namespace
}  // namespace mg
