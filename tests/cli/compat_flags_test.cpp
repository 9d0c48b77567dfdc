// The Megatron flag surface (cli/compat_flags.h): every flag of upstream's example scripts is an
// option, a documented no-op, refused as not supported yet, or refused as renamed, each with its
// own message; the tables do not shadow real options; docs/megatron-compat.md holds the tables.
#include <gtest/gtest.h>

#include "testing/temp_dir.h"
#include "testing/upstream_scripts.h"

namespace mg {
namespace {

using testing::FlagClass;

const std::vector<std::string> kTinyTrain = {
    "--mock-data", "--num-layers", "1",   "--hidden-size", "16", "--num-attention-heads",
    "2",           "--seq-length", "8",   "--vocab-size",  "64", "--train-iters",
    "1",           "--lr",         "1e-3"};

// The UsageError's message of `megatron train` with the tiny run plus `extra`, or "" if none.
std::string train_refusal(const std::vector<std::string>& extra) {
  std::vector<std::string> args = kTinyTrain;
  args.insert(args.end(), extra.begin(), extra.end());
  try {
    parse_train_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CompatFlags, EveryScriptFlagIsKnown) {
  for (const auto& s : testing::upstream_scripts()) {
    const auto uses = testing::flag_uses(testing::script_tokens(s));
    EXPECT_GT(uses.size(), 10u) << s.file;
    for (const auto& u : uses)
      EXPECT_NE(testing::classify(s.command, u), FlagClass::Unknown)
          << u.flag << " of " << s.upstream << " is neither an option nor in a compat table";
  }
}

TEST(CompatFlags, TablesDoNotShadowOptionsOrEachOther) {
  for (const char* cmd : {"train", "preprocess"}) {
    std::map<std::string, int> count;
    auto note = [&](const auto& table) {
      for (const auto& o : table) ++count[o.flag];
    };
    if (std::string(cmd) == "train") note(train_options());
    else note(preprocess_options());
    for (const auto& [flag, n] : count) EXPECT_EQ(n, 1) << cmd << ": " << flag << " twice";
  }
}

TEST(CompatFlags, NotYetFlagsSaySo) {
  for (const NotYetFlag& f : compat_tables("train").not_yet) {
    std::vector<std::string> extra = {f.flag};
    if (*f.metavar) extra.push_back("1");
    const std::string msg = train_refusal(extra);
    EXPECT_NE(msg.find(std::string(f.flag) + " is not supported by megatron-cpp yet"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("unknown flag"), std::string::npos) << msg;
  }
  EXPECT_EQ(train_refusal({"--fp8-format", "hybrid"}),
            "--fp8-format is not supported by megatron-cpp yet (fp8 GEMMs (Transformer Engine "
            "recipes)); see docs/megatron-compat.md");
  EXPECT_NE(train_refusal({"--ckpt-format", "torch_dist"}).find("docs/checkpoint-format.md"),
            std::string::npos);
  // An unknown flag keeps its own message.
  EXPECT_NE(train_refusal({"--fp8-formats", "hybrid"}).find("unknown flag --fp8-formats"),
            std::string::npos);
}

TEST(CompatFlags, DefaultLayoutsAcceptedOthersNotYet) {
  for (const DefaultOnlyFlag& f : compat_tables("train").default_only) {
    EXPECT_EQ(train_refusal({f.flag, f.accepted}), "") << f.flag;
    const std::string msg = train_refusal({f.flag, "2"});
    EXPECT_NE(msg.find(std::string(f.flag) + " 2 is not supported by megatron-cpp yet"),
              std::string::npos)
        << msg;
  }
  // Expert parallelism became an option (docs/moe.md).
  EXPECT_EQ(train_refusal({"--expert-model-parallel-size", "2"}), "");
}

TEST(CompatFlags, RenamedFlagsNameTheCurrentOne) {
  EXPECT_EQ(train_refusal({"--activations-checkpoint-method", "uniform"}),
            "--activations-checkpoint-method was removed from Megatron-LM: use "
            "--recompute-granularity full --recompute-num-layers 1 --recompute-method instead "
            "(docs/megatron-compat.md)");
  for (const RenamedFlag& f : compat_tables("train").renamed) {
    std::vector<std::string> extra = {f.flag};
    if (*f.metavar) extra.push_back("1");
    const std::string msg = train_refusal(extra);
    EXPECT_NE(msg.find(std::string("use ") + f.replacement), std::string::npos) << msg;
  }
}

TEST(CompatFlags, NoOpFlagsAcceptedAndTheirValuesChecked) {
  for (const NoOpFlag& f : compat_tables("train").no_op) {
    std::vector<std::string> extra = {f.flag};
    if (*f.metavar) {
      const std::string choices = f.choices;
      extra.push_back(choices.empty() ? "1" : choices.substr(0, choices.find('|')));
    }
    EXPECT_EQ(train_refusal(extra), "") << f.flag;
  }
  EXPECT_EQ(train_refusal({"--attention-backend", "sdpa"}),
            "--attention-backend takes flash|fused|unfused|local|auto, not 'sdpa'");
}

TEST(CompatFlags, RunnableArgsOfTheSc21ScriptUseTheCurrentFlags) {
  const auto& sc21 = testing::upstream_scripts()[3];
  ASSERT_EQ(std::string(sc21.file), "sc21.args");
  const auto args = testing::runnable_args("train", testing::script_tokens(sc21));
  const std::string joined = [&] {
    std::string s;
    for (const auto& a : args) s += a + " ";
    return s;
  }();
  EXPECT_NE(joined.find("--recompute-granularity full --recompute-num-layers 1 "
                        "--recompute-method uniform "),
            std::string::npos)
      << joined;
  EXPECT_EQ(joined.find("--activations-checkpoint-method"), std::string::npos);
  EXPECT_NE(joined.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  EXPECT_NE(joined.find("--DDP-impl local "), std::string::npos) << joined;
}

// docs/megatron-compat.md holds the generated tables verbatim; on a mismatch the expected text
// is written next to the test binary to be pasted in.
TEST(CompatFlags, DocHoldsTheTables) {
  const std::string doc = testing::slurp(std::string(MG_SOURCE_DIR) + "/docs/megatron-compat.md");
  const std::string begin = "<!-- generated by tests/cli/compat_flags_test.cpp: begin -->\n";
  const std::string end = "<!-- generated: end -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  const std::string expected = testing::compat_markdown();
  const std::string actual = doc.substr(b + begin.size(), e - b - begin.size());
  if (actual != expected) {
    std::ofstream("megatron-compat.generated.md") << expected;
    ADD_FAILURE() << "docs/megatron-compat.md's generated part is stale: paste "
                  << std::filesystem::absolute("megatron-compat.generated.md");
  }
  EXPECT_EQ(expected.find("UNKNOWN"), std::string::npos);
}

}  // namespace
}  // namespace mg
