// GPT-2 did not change in the model redesign: the loss lines (loss, grad norm, validation loss)
// of f32, bf16, fp16, TP2+SP, PP2 with eval, full recompute and --reset-attention-mask runs are
// those the binary before the redesign printed (tests/data/gpt2_golden, recorded by its
// capture.sh with commit 04710e1's binary), and a version-1 checkpoint that binary saved loads
// and continues as it continued there. On a CPU with the recording machine's instruction set
// the lines must be identical (the same bits, to the printed digits); elsewhere other kernels
// round differently, so the values must agree within 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "testing/mpirun.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = fs::path(MG_SOURCE_DIR) / "tests/data/gpt2_golden";

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(l);
  return v;
}

// capture.sh's extraction: per log line with a loss, its iteration, loss and grad norm.
std::vector<std::string> loss_lines(const std::string& log) {
  const std::regex field(R"((iteration +[0-9]+|lm loss( value)?: [^ ]+|grad norm: [^ ]+))");
  std::vector<std::string> out;
  for (const std::string& l : lines(log)) {
    if (l.find("lm loss") == std::string::npos) continue;
    // The evaluations after training (" on validation set", " on test set") came later than
    // the capturing binary; train_e2e_test checks them.
    if (l.find(" set |") != std::string::npos) continue;
    std::string joined;
    for (auto it = std::sregex_iterator(l.begin(), l.end(), field); it != std::sregex_iterator();
         ++it)
      joined += (joined.empty() ? "" : " ") + it->str();
    out.push_back(joined);
  }
  return out;
}

// The numbers of a line, in order.
std::vector<double> numbers(const std::string& line) {
  std::vector<double> v;
  const std::regex num(R"([-+]?[0-9]+\.?[0-9]*(E[-+][0-9]+)?)");
  for (auto it = std::sregex_iterator(line.begin(), line.end(), num); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod(it->str()));
  return v;
}

std::string this_isa() {
  auto r = testing::run_command(
      "grep -o 'avx512[a-z_0-9]*\\|avx2\\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | paste -sd' '");
  return r.output;
}

void expect_golden(const std::string& name, const std::string& log) {
  const std::vector<std::string> want = lines(read(kGolden / (name + ".txt")));
  const std::vector<std::string> got = loss_lines(log);
  ASSERT_FALSE(want.empty()) << name;
  ASSERT_EQ(got.size(), want.size()) << name << "\n" << log;
  const bool same_isa = lines(this_isa()) == lines(read(kGolden / "isa.txt"));
  for (size_t i = 0; i < want.size(); ++i) {
    if (same_isa) {
      EXPECT_EQ(got[i], want[i]) << name;
      continue;
    }
    const std::vector<double> a = numbers(got[i]), b = numbers(want[i]);
    ASSERT_EQ(a.size(), b.size()) << got[i] << " vs " << want[i];
    for (size_t k = 0; k < a.size(); ++k)  // grad norms print 3 decimals
      EXPECT_NEAR(a[k], b[k], std::max(1e-5 * std::fabs(b[k]), 1.5e-3))
          << got[i] << " vs " << want[i];
  }
}

const std::string kModel =
    " train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 2e-3"
    " --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1 --log-interval 1 --seed 7"
    " --attention-dropout 0 --hidden-dropout 0";  // captured before dropout existed

struct Case {
  std::string name;
  int ranks;
  std::string flags;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GPT2Golden : public ::testing::TestWithParam<Case> {};

TEST_P(GPT2Golden, LossLinesUnchanged) {
  const Case& c = GetParam();
  // One thread per rank, as capture.sh ran them (threaded reductions add in another order).
  const auto r = testing::run_command("OMP_NUM_THREADS=1 " + testing::mpirun_prefix(c.ranks) +
                                      MG_BINARY + kModel + " " + c.flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_golden(c.name, r.output);
}

INSTANTIATE_TEST_SUITE_P(
    Runs, GPT2Golden,
    ::testing::Values(
        Case{"f32", 1, ""}, Case{"bf16", 1, "--bf16"}, Case{"fp16", 1, "--fp16"},
        Case{"tp2_sp", 4, "--tensor-model-parallel-size 2 --sequence-parallel"},
        Case{"pp2_eval", 2, "--pipeline-model-parallel-size 2 --eval-interval 5 --eval-iters 2"},
        Case{"recompute", 1,
             "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"},
        Case{"reset_attention_mask", 1,
             "--reset-attention-mask --reset-position-ids --eod-mask-loss"}),
    [](const auto& info) { return info.param.name; });

TEST(GPT2Golden, VersionOneCheckpointLoadsAndContinues) {
  char tmpl[] = "/tmp/mg_v1_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  fs::copy(kGolden / "v1_checkpoint", dir / "ck", fs::copy_options::recursive);
  const auto r = testing::run_command(
      "OMP_NUM_THREADS=1 " + std::string(MG_BINARY) +
      " train --mock-data --num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8"
      " --vocab-size 100 --make-vocab-size-divisible-by 4 --micro-batch-size 2"
      " --global-batch-size 4 --lr 2e-3 --log-interval 1 --seed 7 --train-iters 8"
      " --attention-dropout 0 --hidden-dropout 0 --load " +
      (dir / "ck").string());
  fs::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loaded checkpoint"), std::string::npos) << r.output;
  expect_golden("v1_resume", r.output);
}

}  // namespace
}  // namespace mg
