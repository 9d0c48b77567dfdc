// Parallel layouts through the real binary under mpirun (label `parallel`): every layout
// reproduces the single-rank run (per-step loss within 1e-5 relative, final parameters within
// 1e-4 relative L2), counted communication equals the analytic volumes, a killed rank ends the
// job with a message instead of a hang, and invalid layouts are refused with their message.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <thread>

#include "testing/fd_check.h"
#include "testing/mpirun.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

// Tiny GPT: 4 layers, hidden 32, 4 heads, seq 16, vocab 500 (padded to 512 for any TP <= 4),
// micro-batch 2, global batch 8, 20 steps.
const std::string kModel =
    " train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 2e-3"
    " --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1 --log-interval 1 --seed 7"
    " --attention-dropout 0 --hidden-dropout 0";
// The same with Megatron's default dropout: layout-independent masks (core/dropout_mask.h).
const std::string kDropout = kModel + " --attention-dropout 0.1 --hidden-dropout 0.1";

struct RunOut {
  std::vector<double> losses;
  std::vector<float> params;
  std::string log;
};

// Tiny Llama: RMSNorm, RoPE, SwiGLU, grouped-query attention with fewer groups than heads (8
// heads in 4 groups, so TP 4 holds one group per rank), no biases, untied output layer.
const std::string kLlama =
    " train --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 8"
    " --group-query-attention --num-query-groups 4 --normalization RMSNorm --swiglu"
    " --ffn-hidden-size 96 --position-embedding-type rope --disable-bias-linear"
    " --untie-embeddings-and-output-weights --seq-length 16"
    " --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 2e-3"
    " --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1 --log-interval 1 --seed 7"
    " --attention-dropout 0 --hidden-dropout 0";

RunOut train(int ranks, const std::string& layout, const std::string& model = kModel) {
  char tmpl[] = "/tmp/mg_layout_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  const std::string dump = (dir / "params.bin").string();
  auto r = testing::run_command(testing::mpirun_prefix(ranks) + MG_BINARY + model + " " + layout +
                                " --dump-final-params " + dump);
  RunOut out;
  out.log = r.output;
  EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.output;
  out.losses = testing::log_values(r.output, "lm loss");
  std::ifstream f(dump, std::ios::binary | std::ios::ate);
  if (f) {
    out.params.resize(size_t(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(out.params.data()), std::streamsize(out.params.size() * 4));
  }
  fs::remove_all(dir);
  return out;
}

struct Layout {
  int ranks;
  std::string flags;
};
void PrintTo(const Layout& l, std::ostream* os) { *os << "np " << l.ranks << " " << l.flags; }

class LayoutParity : public ::testing::TestWithParam<Layout> {};

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  static const char* names[] = {"tp2",     "tp4",       "pp2",       "pp4",    "dp2",
                                "tp2_pp2", "tp2pp2dp2", "tp2dp2_sp", "pp2dp2", "pp3_uneven"};
  return names[info.index];
}

void expect_parity(const Layout& layout, const std::string& model) {
  const RunOut base = train(1, "", model);
  ASSERT_EQ(base.losses.size(), 20u) << base.log;
  const RunOut run = train(layout.ranks, layout.flags, model);
  ASSERT_EQ(run.losses.size(), base.losses.size()) << run.log;
  for (size_t i = 0; i < base.losses.size(); ++i)
    EXPECT_LT(std::fabs(run.losses[i] - base.losses[i]) / base.losses[i], 1e-5)
        << "step " << i + 1 << ": " << run.losses[i] << " vs " << base.losses[i];
  // MoE models: the logged router losses and dropped assignments too (absent elsewhere).
  for (const char* field :
       {"load_balancing_loss", "seq_load_balancing_loss", "z_loss", "dropped tokens"}) {
    const std::vector<double> want = testing::log_values(base.log, field),
                              got = testing::log_values(run.log, field);
    ASSERT_EQ(got.size(), want.size()) << field << "\n" << run.log;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(std::fabs(got[i] - want[i]), 1e-5 * std::fabs(want[i]))
          << field << ", step " << i + 1 << ": " << got[i] << " vs " << want[i];
  }
  ASSERT_EQ(run.params.size(), base.params.size());
  std::vector<double> a(run.params.begin(), run.params.end()),
      b(base.params.begin(), base.params.end());
  EXPECT_LT(testing::rel_l2(a, b), 1e-4);
  EXPECT_LT(base.losses.back(), base.losses.front());  // it trained
}

TEST_P(LayoutParity, MatchesSingleRank) { expect_parity(GetParam(), kModel); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutParity,
    ::testing::Values(Layout{2, "--tensor-model-parallel-size 2"},
                      Layout{4, "--tensor-model-parallel-size 4"},
                      Layout{2, "--pipeline-model-parallel-size 2"},
                      Layout{4, "--pipeline-model-parallel-size 4"}, Layout{2, ""},  // DP 2
                      Layout{4, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"},
                      Layout{8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"},
                      Layout{4, "--tensor-model-parallel-size 2 --sequence-parallel"},
                      Layout{4, "--pipeline-model-parallel-size 2"},
                      Layout{3,
                             "--pipeline-model-parallel-size 3 "
                             "--decoder-first-pipeline-num-layers 2 "
                             "--decoder-last-pipeline-num-layers 1"}),
    layout_name);

// The interleaved schedule: v model chunks per pipeline rank (virtual stage c P + r on rank r),
// wrap-around neighbours, micro-batches in groups; every step as the single rank.
struct ModelLayout {
  const char* name;
  std::string model;
  Layout layout;
};
void PrintTo(const ModelLayout& l, std::ostream* os) { *os << l.name; }
std::string with_layers(const std::string& model, const std::string& layers) {
  std::string m = model;
  return m.replace(m.find("--num-layers 4"), 14, "--num-layers " + layers);
}
class InterleavedParity : public ::testing::TestWithParam<ModelLayout> {};
TEST_P(InterleavedParity, MatchesSingleRank) { expect_parity(GetParam().layout, GetParam().model); }
const std::string kVp2 =
    "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2";
INSTANTIATE_TEST_SUITE_P(
    Layouts, InterleavedParity,
    ::testing::Values(
        ModelLayout{"pp2vp2", kModel, {2, kVp2}},
        ModelLayout{"pp4vp2",
                    with_layers(kModel, "8"),
                    {4,
                     "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1"}},
        // 9 layers: 6 on the first rank, 3 on the last, each rank's in 3 chunks; groups of 4
        ModelLayout{"pp2vp3_uneven_group4",
                    with_layers(kModel, "9"),
                    {2,
                     "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 3 "
                     "--decoder-first-pipeline-num-layers 6 "
                     "--microbatch-group-size-per-virtual-pipeline-stage 4"}},
        ModelLayout{"tp2pp2vp2", kModel, {4, "--tensor-model-parallel-size 2 " + kVp2}},
        ModelLayout{"pp2vp2dp2_distopt_overlap",
                    kModel,
                    {4, kVp2 + " --use-distributed-optimizer --overlap-grad-reduce "
                               "--overlap-param-gather"}},
        ModelLayout{"llama_pp2vp2", kLlama, {2, kVp2}},
        ModelLayout{"llama_tp2pp2vp2_sp",
                    kLlama,
                    {4, "--tensor-model-parallel-size 2 --sequence-parallel " + kVp2}},
        ModelLayout{"dropout_pp2vp2dp2", kDropout, {4, kVp2}}),
    [](const ::testing::TestParamInfo<ModelLayout>& i) { return std::string(i.param.name); });

// Context parallelism: every sequence split over the CP ranks (load-balanced chunks r and
// 2 CP - 1 - r), attention as a K/V ring (p2p) or all-to-all over heads (a2a), gradients summed
// over DP x CP; with every other layout, every step as the single rank.
class ContextParallelParity : public ::testing::TestWithParam<ModelLayout> {};
TEST_P(ContextParallelParity, MatchesSingleRank) {
  expect_parity(GetParam().layout, GetParam().model);
}
// Documents of a few tokens each (the mock corpus's lengths start at 1): attention restarts at
// every EOD inside a sample, so the starts cross the CP chunks.
const std::string kResetMask =
    kModel + " --reset-attention-mask --reset-position-ids --eod-mask-loss --seq-length 32";
INSTANTIATE_TEST_SUITE_P(
    Layouts, ContextParallelParity,
    ::testing::Values(
        ModelLayout{"cp2", kModel, {2, "--context-parallel-size 2"}},
        ModelLayout{"cp4", kModel, {4, "--context-parallel-size 4"}},
        ModelLayout{"cp2_a2a", kModel, {2, "--context-parallel-size 2 --cp-comm-type a2a"}},
        ModelLayout{"cp2tp2_sp",
                    kModel,
                    {4,
                     "--context-parallel-size 2 --tensor-model-parallel-size 2 "
                     "--sequence-parallel"}},
        ModelLayout{
            "cp2pp2", kModel, {4, "--context-parallel-size 2 --pipeline-model-parallel-size 2"}},
        ModelLayout{"cp2pp2vp2", kModel, {4, "--context-parallel-size 2 " + kVp2}},
        ModelLayout{
            "cp2dp2_distopt", kModel, {4, "--context-parallel-size 2 --use-distributed-optimizer"}},
        ModelLayout{"cp2_reset_attention_mask", kResetMask, {2, "--context-parallel-size 2"}},
        ModelLayout{"dropout_cp2", kDropout, {2, "--context-parallel-size 2"}},
        ModelLayout{"llama_cp2", kLlama, {2, "--context-parallel-size 2"}},
        ModelLayout{"llama_cp2tp2_a2a",
                    kLlama,
                    {4,
                     "--context-parallel-size 2 --tensor-model-parallel-size 2 "
                     "--cp-comm-type a2a"}}),
    [](const ::testing::TestParamInfo<ModelLayout>& i) { return std::string(i.param.name); });

// Mixture of experts (expert parallelism 1: every rank holds every expert, TP-split): routing
// runs on each micro-batch's full rows, so every layout routes, balances and drops as the
// single rank does. A Mixtral-like Llama (SwiGLU experts, top-2 of 4, aux and z losses) and a
// GPT with GELU experts, biases, shared experts, MoE every other layer and token dropping.
const std::string kMoe =
    kLlama +
    " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 0.01"
    " --moe-z-loss-coeff 0.001";
const std::string kMoeGelu =
    kModel +
    " --num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64"
    " --moe-layer-freq 2 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01";
// seq_aux_loss: the load-balancing loss per sequence (micro-batches of 2 sequences).
const std::string kMoeSeqAux = kMoe + " --moe-router-load-balancing-type seq_aux_loss";
class MoeLayoutParity : public ::testing::TestWithParam<ModelLayout> {};
TEST_P(MoeLayoutParity, MatchesSingleRank) { expect_parity(GetParam().layout, GetParam().model); }
INSTANTIATE_TEST_SUITE_P(
    Layouts, MoeLayoutParity,
    ::testing::Values(
        ModelLayout{"tp2", kMoe, {2, "--tensor-model-parallel-size 2"}},
        ModelLayout{"tp2_sp", kMoe, {2, "--tensor-model-parallel-size 2 --sequence-parallel"}},
        ModelLayout{"pp2", kMoe, {2, "--pipeline-model-parallel-size 2"}},
        ModelLayout{"dp2_distopt", kMoe, {2, "--use-distributed-optimizer"}},
        ModelLayout{"tp2pp2_sp",
                    kMoe,
                    {4,
                     "--tensor-model-parallel-size 2 --sequence-parallel "
                     "--pipeline-model-parallel-size 2"}},
        ModelLayout{"pp2vp2", kMoe, {2, kVp2}},
        // CP: the routed counts summed over the CP ranks, each rank's aux and z losses its share
        ModelLayout{"cp2", kMoe, {2, "--context-parallel-size 2"}},
        ModelLayout{"gelu_shared_capacity_tp2_sp",
                    kMoeGelu,
                    {2, "--tensor-model-parallel-size 2 --sequence-parallel"}},
        ModelLayout{
            "gelu_shared_capacity_pp2dp2", kMoeGelu, {4, "--pipeline-model-parallel-size 2"}},
        // Expert parallelism: the experts split over the DP x CP ranks, tokens exchanged.
        ModelLayout{"ep2",
                    kMoe,
                    {2,
                     "--expert-model-parallel-size 2 "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"ep2_allgather", kMoe, {2, "--expert-model-parallel-size 2"}},
        ModelLayout{"ep4",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 4 "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"ep2tp2_sp",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
                     "--sequence-parallel --moe-token-dispatcher-type alltoall"}},
        ModelLayout{"ep2pp2",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 2 "
                     "--pipeline-model-parallel-size 2"}},
        ModelLayout{"ep2dp2_distopt",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 2 --use-distributed-optimizer "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"ep2cp2",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 2 --context-parallel-size 2 "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"gelu_shared_capacity_ep2tp2_sp",
                    kMoeGelu,
                    {4,
                     "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
                     "--sequence-parallel"}},
        ModelLayout{"seq_aux_tp2_sp",
                    kMoeSeqAux,
                    {2, "--tensor-model-parallel-size 2 --sequence-parallel"}},
        ModelLayout{"seq_aux_ep2pp2",
                    kMoeSeqAux,
                    {4, "--expert-model-parallel-size 2 --pipeline-model-parallel-size 2"}},
        // DeepSeek-style: sigmoid scores, group-limited top-k, a scaling factor
        ModelLayout{"group_limited_sigmoid_ep2tp2_sp",
                    kMoe + " --moe-router-score-function sigmoid --moe-router-num-groups 2 "
                           "--moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5",
                    {4,
                     "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
                     "--sequence-parallel"}},
        ModelLayout{"seq_aux_cp2tp2_sp",
                    kMoeSeqAux,
                    {4,
                     "--context-parallel-size 2 --tensor-model-parallel-size 2 "
                     "--sequence-parallel"}},
        // Parallel folding (--expert-tensor-parallel-size other than TP): the experts' own
        // grid over the same ranks. ETP 1 under TP 2: whole experts, each TP rank dispatching
        // its sequence chunk (over EP 2 = the TP pair; with EP 1 the pair are expert-DP ranks).
        ModelLayout{"etp1_tp2_sp",
                    kMoe,
                    {2,
                     "--expert-tensor-parallel-size 1 --tensor-model-parallel-size 2 "
                     "--sequence-parallel"}},
        ModelLayout{"ep2_etp1_tp2_sp",
                    kMoe,
                    {2,
                     "--expert-model-parallel-size 2 --expert-tensor-parallel-size 1 "
                     "--tensor-model-parallel-size 2 --sequence-parallel "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"ep2_etp1_tp2_sp_allgather",
                    kMoe,
                    {2,
                     "--expert-model-parallel-size 2 --expert-tensor-parallel-size 1 "
                     "--tensor-model-parallel-size 2 --sequence-parallel"}},
        // ETP 2 under TP 1: each row to both shards of its expert, partial outputs summed.
        ModelLayout{"ep2_etp2",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 2 --expert-tensor-parallel-size 2 "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"ep2_etp2_allgather_distopt",
                    kMoe,
                    {4,
                     "--expert-model-parallel-size 2 --expert-tensor-parallel-size 2 "
                     "--use-distributed-optimizer"}},
        ModelLayout{"etp4_tp2_sp",
                    kMoe,
                    {4,
                     "--expert-tensor-parallel-size 4 --tensor-model-parallel-size 2 "
                     "--sequence-parallel --moe-token-dispatcher-type alltoall"}},
        ModelLayout{"etp1_tp2pp2_sp",
                    kMoe,
                    {4,
                     "--expert-tensor-parallel-size 1 --tensor-model-parallel-size 2 "
                     "--sequence-parallel --pipeline-model-parallel-size 2"}},
        // Biases (the fc2 bias on expert-TP rank 0), shared experts over TP, capacity.
        ModelLayout{"gelu_shared_capacity_ep2_etp1_tp2_sp",
                    kMoeGelu,
                    {2,
                     "--expert-model-parallel-size 2 --expert-tensor-parallel-size 1 "
                     "--tensor-model-parallel-size 2 --sequence-parallel "
                     "--moe-token-dispatcher-type alltoall"}},
        ModelLayout{"gelu_shared_capacity_etp2_dp2",
                    kMoeGelu,
                    {2, "--expert-tensor-parallel-size 2 --moe-token-dispatcher-type alltoall"}}),
    [](const ::testing::TestParamInfo<ModelLayout>& i) { return std::string(i.param.name); });

// The two token dispatchers differ only in what crosses the EP group: the same losses.
TEST(MoeDispatchers, AlltoallEqualsAllgather) {
  const RunOut a2a =
      train(4, "--expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall", kMoeGelu);
  const RunOut ag =
      train(4, "--expert-model-parallel-size 4 --moe-token-dispatcher-type allgather", kMoeGelu);
  ASSERT_EQ(a2a.losses.size(), 20u) << a2a.log;
  ASSERT_EQ(ag.losses.size(), a2a.losses.size()) << ag.log;
  for (size_t i = 0; i < a2a.losses.size(); ++i)
    EXPECT_NEAR(ag.losses[i], a2a.losses[i], 1e-6 * a2a.losses[i]) << "step " << i + 1;
}

// --moe-grouped-gemm runs the same math as the per-expert calls (one grouped op per GEMM over
// a rank's experts): every step's loss and the final parameters agree, f32 (1e-6; the same
// sgemm on the same rows, only the threads' split differs) and bf16 (each expert's rows may be
// cut into pieces whose sums round apart: 2e-3), one rank and EP2 x TP2 (SP, two local experts
// per rank, biases and shared experts in the GELU model).
TEST(MoeGroupedGemm, EqualsThePerExpertCalls) {
  const std::string ep =
      "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
      "--sequence-parallel --moe-token-dispatcher-type alltoall";
  for (const auto& [ranks, flags, model, tol] :
       {std::tuple{1, std::string(), kMoe, 1e-6}, std::tuple{4, ep, kMoeGelu, 1e-6},
        std::tuple{1, std::string("--bf16"), kMoe, 2e-3}}) {
    SCOPED_TRACE(flags + " " + model);
    const RunOut loop = train(ranks, flags, model);
    const RunOut grouped = train(ranks, flags + " --moe-grouped-gemm", model);
    ASSERT_EQ(loop.losses.size(), 20u) << loop.log;
    ASSERT_EQ(grouped.losses.size(), loop.losses.size()) << grouped.log;
    EXPECT_NE(grouped.log.find("experts' GEMMs grouped (--moe-grouped-gemm)"), std::string::npos)
        << grouped.log;
    EXPECT_NE(loop.log.find("experts' GEMMs one call per expert"), std::string::npos) << loop.log;
    for (size_t i = 0; i < loop.losses.size(); ++i)
      EXPECT_NEAR(grouped.losses[i], loop.losses[i], tol * loop.losses[i]) << "step " << i + 1;
    std::vector<double> a(grouped.params.begin(), grouped.params.end()),
        b(loop.params.begin(), loop.params.end());
    EXPECT_LT(testing::rel_l2(a, b), 100 * tol);
  }
}

// A bf16 MoE under EP2 x TP2 (SP) follows the bf16 single-rank run.
TEST(MixedPrecision, MoeBf16Ep2Tp2TracksTheSingleRankRun) {
  const RunOut one = train(1, "--bf16", kMoe);
  const RunOut four = train(4,
                            "--bf16 --tensor-model-parallel-size 2 --sequence-parallel "
                            "--expert-model-parallel-size 2",
                            kMoe);
  ASSERT_EQ(one.losses.size(), 20u) << one.log;
  ASSERT_EQ(four.losses.size(), one.losses.size()) << four.log;
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(four.losses[i], one.losses[i], 2e-3 * one.losses[i]) << "step " << i + 1;
  EXPECT_LT(one.losses.back(), one.losses.front());
}

// With dropout on (0.1 / 0.1) every layout draws the single rank's masks: same losses.
class DropoutLayoutParity : public ::testing::TestWithParam<Layout> {};

std::string dropout_layout_name(const ::testing::TestParamInfo<Layout>& info) {
  static const char* names[] = {"tp2", "tp2_sp", "pp2", "dp2", "tp2pp2dp2", "dp2_mbs1"};
  return names[info.index];
}

TEST_P(DropoutLayoutParity, MatchesSingleRank) { expect_parity(GetParam(), kDropout); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, DropoutLayoutParity,
    ::testing::Values(Layout{2, "--tensor-model-parallel-size 2"},
                      Layout{2, "--tensor-model-parallel-size 2 --sequence-parallel"},
                      Layout{2, "--pipeline-model-parallel-size 2"}, Layout{2, ""},  // DP 2
                      Layout{8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"},
                      Layout{2, "--micro-batch-size 1"}),
    dropout_layout_name);

// Dropout is on: the runs differ from the no-dropout ones (the parity above is not vacuous),
// and evaluation runs without it.
TEST(Dropout, ChangesTrainingLosses) {
  const RunOut off = train(1, "--train-iters 3");
  const RunOut on = train(1, "--train-iters 3", kDropout);
  ASSERT_EQ(on.losses.size(), off.losses.size());
  EXPECT_NE(on.losses, off.losses);
}

class LlamaLayoutParity : public ::testing::TestWithParam<Layout> {};

std::string llama_layout_name(const ::testing::TestParamInfo<Layout>& info) {
  static const char* names[] = {
      "tp2", "tp4_one_group_per_rank", "tp2_sp", "pp2", "pp3_uneven", "dp2_distopt", "tp2pp2dp2"};
  return names[info.index];
}

TEST_P(LlamaLayoutParity, MatchesSingleRank) { expect_parity(GetParam(), kLlama); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, LlamaLayoutParity,
    ::testing::Values(Layout{2, "--tensor-model-parallel-size 2"},
                      Layout{4, "--tensor-model-parallel-size 4"},
                      Layout{2, "--tensor-model-parallel-size 2 --sequence-parallel"},
                      Layout{2, "--pipeline-model-parallel-size 2"},
                      Layout{3,
                             "--pipeline-model-parallel-size 3 "
                             "--decoder-first-pipeline-num-layers 2 "
                             "--decoder-last-pipeline-num-layers 1"},
                      Layout{2, "--use-distributed-optimizer"},
                      Layout{8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"}),
    llama_layout_name);

// --qk-layernorm's head norms are replicated but see only their rank's heads: their grads are
// summed over TP ranks (with and without sequence parallelism).
TEST(LlamaLayoutParity, QkLayernormUnderTensorParallelism) {
  expect_parity({2, "--tensor-model-parallel-size 2"}, kLlama + " --qk-layernorm");
  expect_parity({4, "--tensor-model-parallel-size 4 --sequence-parallel"},
                kLlama + " --qk-layernorm");
}

// --apply-layernorm-1p stores each norm weight as w = gamma - 1 and scales by 1 + w: the plain
// model's maths up to rounding (w + update rounds apart from gamma + update), on one rank and
// under TP2, for RMSNorm (with the --qk-layernorm head norms) and LayerNorm. The final norm
// weights differ from the plain run's by 1 exactly where the model has norm weights, so the
// flag was in force.
TEST(LayerNorm1p, TrainsAsThePlainModelOnOneRankAndTp2) {
  struct Model {
    std::string flags;
    size_t norm_elements;  // 4 layers x (2 H + 2 HD with --qk-layernorm) + H (final norm)
  };
  for (const Model& m : {Model{kLlama + " --qk-layernorm", 4 * (2 * 64 + 2 * 8) + 64},
                         Model{kModel, 4 * 2 * 32 + 32}}) {
    const RunOut plain = train(1, "", m.flags);
    ASSERT_EQ(plain.losses.size(), 20u) << plain.log;
    for (const Layout& l : {Layout{1, ""}, Layout{2, "--tensor-model-parallel-size 2"}}) {
      const RunOut zc = train(l.ranks, l.flags, m.flags + " --apply-layernorm-1p");
      ASSERT_EQ(zc.losses.size(), plain.losses.size()) << zc.log;
      for (size_t i = 0; i < plain.losses.size(); ++i)
        EXPECT_LT(std::fabs(zc.losses[i] - plain.losses[i]) / plain.losses[i], 1e-5)
            << l.flags << " step " << i + 1 << ": " << zc.losses[i] << " vs " << plain.losses[i];
      ASSERT_EQ(zc.params.size(), plain.params.size());
      size_t shifted = 0, same = 0;
      for (size_t i = 0; i < plain.params.size(); ++i) {
        const float d = plain.params[i] - zc.params[i];
        shifted += std::fabs(d - 1.f) < 1e-4f;
        same += std::fabs(d) < 1e-4f;
      }
      EXPECT_EQ(shifted, m.norm_elements) << l.flags;
      EXPECT_EQ(same, plain.params.size() - m.norm_elements) << l.flags;
    }
  }
}

// A Llama in bf16 under TP2 x PP2 follows the bf16 single-rank run.
TEST(MixedPrecision, LlamaBf16Tp2Pp2TracksTheSingleRankRun) {
  const RunOut one = train(1, "--bf16", kLlama);
  const RunOut four = train(4,
                            "--bf16 --tensor-model-parallel-size 2 --sequence-parallel "
                            "--pipeline-model-parallel-size 2",
                            kLlama);
  ASSERT_EQ(one.losses.size(), 20u) << one.log;
  ASSERT_EQ(four.losses.size(), one.losses.size()) << four.log;
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(four.losses[i], one.losses[i], 2e-3 * one.losses[i]) << "step " << i + 1;
  EXPECT_LT(one.losses.back(), one.losses.front());
}

// Megatron's divisibility rules for grouped-query attention, before any allocation.
TEST(LlamaLayout, QueryGroupsMustSplitAcrossTP) {
  auto r = testing::run_command(testing::mpirun_prefix(4) + MG_BINARY + kLlama +
                                " --num-query-groups 2 --tensor-model-parallel-size 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--num-query-groups 2 must be a multiple of "
                          "--tensor-model-parallel-size 4"),
            std::string::npos)
      << r.output;
  r = testing::run_command(std::string(MG_BINARY) + kLlama + " --num-query-groups 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--num-query-groups 3 must divide --num-attention-heads 8"),
            std::string::npos)
      << r.output;
}

// ---- communication volume: rank 0's counted bytes per step vs closed forms ----

int64_t field(const std::string& log, const std::string& name) {
  auto v = testing::log_values(log, name);
  EXPECT_FALSE(v.empty()) << name << "\n" << log;
  return v.empty() ? -1 : int64_t(v.back());
}

// Parameters on one TP shard of one stage holding `layers` layers (ffn = 4h).
int64_t local_params(int64_t h, int64_t t, int64_t layers, bool first, bool last, int64_t V,
                     int64_t S) {
  const int64_t per_layer = 12 * h * h / t + 7 * h / t + 6 * h;
  return layers * per_layer + (first ? V * h / t + S * h : 0) + (last ? 2 * h : 0) +
         (last && !first ? V * h / t : 0);
}

TEST(CommVolume, TensorAndDataParallelMatchFormulas) {
  // (tp, pp, dp) = (2, 1, 2): rank 0 holds the whole depth; M = 8 / (2 x 2) = 2 micro-batches.
  const RunOut r = train(4, "--tensor-model-parallel-size 2");
  const int64_t b = 2, s = 16, h = 32, t = 2, L = 4, V = 512, M = 2, d = 2;
  const int64_t bsh = b * s * h;
  // docs/reference/formulas.md: 8 b s h (t-1)/t elements per layer per micro-batch (2 all-reduces forward, 2
  // backward). Outside the layers: the vocab-parallel embedding's all-reduce, the output
  // layer's input-grad all-reduce, and the cross-entropy's 3 all-reduces of b*s values.
  const int64_t tp_elems = M * (L * 8 * bsh * (t - 1) / t + 2 * bsh * (t - 1) / t +
                                2 * bsh * (t - 1) / t + 3 * 2 * b * s * (t - 1) / t);
  EXPECT_EQ(field(r.log, "tp comm bytes"), 4 * tp_elems);
  EXPECT_EQ(field(r.log, "pp comm bytes"), 0);
  // DP: one all-reduce of all local grads, ring factor 2 (d-1)/d.
  EXPECT_EQ(field(r.log, "dp comm bytes"),
            4 * 2 * (d - 1) * local_params(h, t, L, true, true, V, s) / d);
  EXPECT_EQ(field(r.log, "embedding comm bytes"), 0);
}

TEST(CommVolume, SequenceAndPipelineParallelMatchFormulas) {
  // (tp, pp, dp) = (2, 2, 1) with SP: rank 0 is TP rank 0 of the first stage (2 layers);
  // M = 8 / 2 = 4 micro-batches.
  const RunOut r = train(4,
                         "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                         "--sequence-parallel");
  const int64_t b = 2, s = 16, h = 32, t = 2, L_stage = 2, V = 512, M = 4;
  const int64_t bsh = b * s * h;
  // Layers: all-gather + reduce-scatter pairs, the same 8 b s h (t-1)/t total as the
  // all-reduces they replace, plus, as in Megatron, 2 all-gathers backward of the norm outputs
  // whose rows alone were saved (the column-parallel weight gradients' inputs). Embedding:
  // all-reduce forward, all-gather of the scattered gradient backward. Finalize: SP-partial
  // grads (2 LayerNorms = 4h, 2 row-parallel biases = 2h per layer) all-reduced over TP once
  // per step.
  const int64_t tp_elems =
      M * (L_stage * 10 * bsh * (t - 1) / t + 2 * bsh * (t - 1) / t + bsh * (t - 1) / t) +
      2 * (t - 1) * (6 * h * L_stage) / t;
  EXPECT_EQ(field(r.log, "tp comm bytes"), 4 * tp_elems);
  // docs/reference/formulas.md: b s h / t elements per micro-batch between adjacent stages with SP; the first
  // stage sends activations only.
  EXPECT_EQ(field(r.log, "pp comm bytes"), 4 * M * bsh / t);
  EXPECT_EQ(field(r.log, "dp comm bytes"), 0);
  // Tied embedding: all-reduce of the word-embedding shard (V/t x h) between first and last.
  EXPECT_EQ(field(r.log, "embedding comm bytes"), 4 * 2 * 1 * (V * h / t) / 2);
}

// Interleaving: rank r of P sends, per micro-batch, the activation of each of its v chunks but
// the last virtual stage's and the input gradient of each but the first's: (2 v - [r = 0] -
// [r = P - 1]) b s h elements (docs/reference/formulas.md), v times 1F1B's traffic on the middle ranks.
// Context parallelism: the K/V ring of every layer (context_parallel/cp_attention.h), plus the
// loss-mask count of each micro-batch and the step's loss summed over CP (2 floats each).
TEST(CommVolume, InterleavingAndContextParallelMatchFormulas) {
  const int64_t b = 2, s = 16, h = 32, L = 4, M = 4, bsh = b * s * h;
  for (int v : {1, 2}) {
    const RunOut r = train(2,
                           "--pipeline-model-parallel-size 2 "
                           "--num-virtual-stages-per-pipeline-rank " +
                               std::to_string(v));
    EXPECT_EQ(field(r.log, "pp comm bytes"), 4 * M * bsh * (2 * v - 1)) << "v = " << v;
    EXPECT_EQ(field(r.log, "cp comm bytes"), 0);
  }
  const int64_t NKV = 4, HD = 8;
  for (int N : {2, 4}) {
    const RunOut r = train(N, "--context-parallel-size " + std::to_string(N));
    const int64_t E = b * (s / N) * NKV * HD;  // one K or V block
    const int64_t ring = (N - 1) * 2 * E * 4 + (N - 1) * 2 * E * 4 + N * 2 * E * 4;
    const int64_t sums = (M + 1) * 2 * (N - 1) * 2 * 4 / N;  // all-reduces of 2 floats
    EXPECT_EQ(field(r.log, "cp comm bytes"), M * L * ring + sums) << "CP " << N;
  }
}

// Expert parallelism, allgather dispatcher (routing-independent): per MoE layer and
// micro-batch each rank all-gathers its N = S x B full rows (H x 4 bytes each in f32) and its
// routing (k experts as int32 and k weights as f32 per row) and reduce-scatters the combined
// outputs (N x H f32) forward; backward all-gathers the output gradient and reduce-scatters
// the input gradient (N x H f32 each) and the routing weights' gradients (N x k f32): under
// docs/reference/formulas.md's ring convention (EP - 1) x N x (16 H + 12 k) bytes. (The alltoall
// dispatcher's bytes follow the routed counts: tests/moe/ep_dispatch_test.cpp.) Plus, once per
// step, the experts' share of the grad norm summed over EP: one double as 2 floats all-reduced,
// 2 (EP - 1) / EP x 8 bytes.
TEST(CommVolume, ExpertParallelAllgatherMatchesFormula) {
  const int64_t N = 2 * 16, H = 64, k = 2, L = 4, EP = 2, M = 8 / (2 * 2);
  const RunOut r =
      train(2, "--expert-model-parallel-size 2 --moe-token-dispatcher-type allgather", kMoe);
  EXPECT_EQ(field(r.log, "ep comm bytes"),
            M * L * (EP - 1) * N * (16 * H + 12 * k) + 2 * (EP - 1) * 8 / EP);
  const RunOut plain = train(2, "", kMoe);
  EXPECT_TRUE(testing::log_values(plain.log, "ep comm bytes").empty()) << "EP 1 logs no field";
}

// ---- a rank that dies ----

std::vector<pid_t> pids_with_env(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::string(e->d_name) + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::ifstream c("/proc/" + std::string(e->d_name) + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
    if (env.find(needle) != std::string::npos && cmd.find("megatron") != std::string::npos &&
        cmd.find("mpirun") == std::string::npos)
      out.push_back(pid);
  }
  if (d) closedir(d);
  return out;
}

TEST(RankFailure, KilledRankEndsTheJobWithAMessage) {
  const std::string tag = "MG_KILL_TEST=" + std::to_string(getpid());
  char tmpl[] = "/tmp/mg_kill_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  const std::string log = (dir / "log").string();
  const std::string cmd = "env " + tag + " " + testing::mpirun_prefix(2) + "-x MG_KILL_TEST " +
                          MG_BINARY + kModel +
                          " --train-iters 1000000 --pipeline-model-parallel-size 2 > " + log +
                          " 2>&1; echo $? > " + log + ".rc";
  std::thread job([&] { std::system(cmd.c_str()); });
  // Wait for training to be under way, then SIGKILL the rank with OMPI_COMM_WORLD_RANK=1.
  for (int i = 0; i < 600; ++i) {
    std::ifstream f(log);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (s.find(" iteration ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  pid_t victim = 0;
  for (pid_t p : pids_with_env(tag)) {
    std::ifstream f("/proc/" + std::to_string(p) + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (env.find(std::string("OMPI_COMM_WORLD_RANK=1") + '\0') != std::string::npos) victim = p;
  }
  ASSERT_NE(victim, 0) << "rank 1 not found";
  const auto t0 = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  job.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ifstream rc_file(log + ".rc");
  int rc = -1;
  rc_file >> rc;
  std::ifstream f(log);
  std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_LT(secs, 60.0);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
  fs::remove_all(dir);
}

// ---- invalid layouts through the binary ----

void expect_refused(int ranks, const std::string& flags, const std::string& mention) {
  auto r = testing::run_command(testing::mpirun_prefix(ranks) + MG_BINARY + kModel + " " + flags);
  EXPECT_NE(r.exit_code, 0) << flags << "\n" << r.output;
  EXPECT_NE(r.output.find(mention), std::string::npos) << flags << "\n" << r.output;
  EXPECT_EQ(r.output.find(" iteration "), std::string::npos) << "must fail before training";
}

TEST(InvalidLayouts, RefusedWithTheirMessage) {
  expect_refused(3, "--tensor-model-parallel-size 2", "world size 3 is not divisible");
  expect_refused(2, "--tensor-model-parallel-size 2 --num-attention-heads 3 --hidden-size 33",
                 "--num-attention-heads 3");
  expect_refused(3, "--pipeline-model-parallel-size 3", "--num-layers 4 is not divisible");
  expect_refused(4, "--global-batch-size 4", "--global-batch-size 4 must be a multiple");
  expect_refused(2, "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 4",
                 "cannot be split");
  expect_refused(2, "--num-virtual-stages-per-pipeline-rank 2",
                 "pipeline-model-parallel size should be greater than 1");
  expect_refused(2, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3",
                 "must be divisible by --num-layers-per-virtual-pipeline-stage (3)");
  expect_refused(2,
                 "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                 "--microbatch-group-size-per-virtual-pipeline-stage 3",
                 "The remainder of M (the total micro-batches, 4) divided by N");
}

TEST(InvalidLayouts, SequenceParallelWithoutTPWarns) {
  auto r = testing::run_command(testing::mpirun_prefix(1) + MG_BINARY + kModel +
                                " --train-iters 1 --lr-warmup-iters 0 --sequence-parallel");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: --sequence-parallel has no effect"), std::string::npos);
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// ---- distributed optimizer ----

class DistributedOptimizer : public ::testing::TestWithParam<Layout> {};

TEST_P(DistributedOptimizer, EqualsThePlainOptimizer) {
  const RunOut plain = train(GetParam().ranks, GetParam().flags);
  const RunOut dist = train(GetParam().ranks, GetParam().flags + " --use-distributed-optimizer");
  ASSERT_EQ(dist.losses.size(), plain.losses.size()) << dist.log;
  for (size_t i = 0; i < plain.losses.size(); ++i)
    EXPECT_LT(std::fabs(dist.losses[i] - plain.losses[i]) / plain.losses[i], 1e-6)
        << "step " << i + 1;
  ASSERT_EQ(dist.params.size(), plain.params.size());
  std::vector<double> a(dist.params.begin(), dist.params.end()),
      b(plain.params.begin(), plain.params.end());
  EXPECT_LT(testing::rel_l2(a, b), 1e-6);
  // Optimizer state: Adam's 8 bytes per local parameter over d ranks (fp32 row of the table:
  // 8 + 8/d bytes per parameter in all), within the shard imbalance that bucket padding causes.
  const auto bytes = testing::log_values(dist.log, "optimizer state bytes");
  const std::regex re("optimizer state [0-9.]+ \\(formula ([0-9.]+)\\)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dist.log, m, re)) << dist.log;
  const double formula_mib = std::stod(m[1]);
  std::smatch got;
  ASSERT_TRUE(std::regex_search(dist.log, got, std::regex("optimizer state bytes: ([0-9]+)")));
  EXPECT_NEAR(std::stod(got[1]) / (1024.0 * 1024.0), formula_mib, 0.02 * formula_mib + 0.01);
}

std::string dist_name(const ::testing::TestParamInfo<Layout>& info) {
  static const char* names[] = {"dp2", "dp4", "tp2dp2", "pp2dp2", "dp4_buckets"};
  return names[info.index];
}

INSTANTIATE_TEST_SUITE_P(Layouts, DistributedOptimizer,
                         ::testing::Values(Layout{2, ""}, Layout{4, ""},
                                           Layout{4, "--tensor-model-parallel-size 2"},
                                           Layout{4, "--pipeline-model-parallel-size 2"},
                                           Layout{4, "--ddp-bucket-size 3000"}),
                         dist_name);

TEST(NumericsGuard, NaNStopsTheRunNamingIterationAndRank) {
  auto r = testing::run_command(testing::mpirun_prefix(2) + MG_BINARY + kModel +
                                " --lr 1e25 --lr-warmup-iters 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("NaN/Inf at iteration"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on rank 0"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// ---- overlapped gradient reduction ----

TEST(OverlapGradReduce, BitwiseEqualToTheNonOverlappedRun) {
  for (const std::string& layout :
       {std::string(""), std::string("--pipeline-model-parallel-size 2"),
        std::string("--use-distributed-optimizer"),
        std::string(
            "--use-distributed-optimizer --tensor-model-parallel-size 2 --sequence-parallel")}) {
    const std::string flags = layout + " --ddp-bucket-size 4000";
    const bool dist = layout.find("distributed") != std::string::npos;
    const RunOut plain = train(4, flags);
    const RunOut overlap =
        train(4, flags + " --overlap-grad-reduce" + (dist ? " --overlap-param-gather" : ""));
    EXPECT_EQ(overlap.losses, plain.losses) << layout;
    ASSERT_EQ(overlap.params.size(), plain.params.size());
    EXPECT_EQ(std::memcmp(overlap.params.data(), plain.params.data(), plain.params.size() * 4), 0)
        << layout;
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(overlap.log, m, std::regex("overlap-grad-reduce: ([0-9]+) of ([0-9]+)")))
        << overlap.log;
    EXPECT_GT(std::stoll(m[1]), 0) << "no bucket started during the backward";
  }
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// ---- mixed precision ----

std::vector<double> scales(const std::string& log) {
  return testing::log_values(log, "loss scale");
}

// An inf put into the last rank's grads at iteration 3 (as an fp16 overflow would) is seen by
// every rank: the step is skipped everywhere (rank 0 reports it, and the 4-rank run keeps
// matching the single-rank run that skipped the same step), the scale halves (hysteresis 1)
// and doubles back after a window of 4 clean steps.
TEST(MixedPrecision, Fp16OverflowOnOneRankSkipsTheStepOnAllRanks) {
  const std::string fp16 =
      "--fp16 --initial-loss-scale 1024 --hysteresis 1 --loss-scale-window 4 --train-iters 10";
  const RunOut one = train(1, fp16 + " --inject-grad-overflow 3");
  const RunOut four = train(4, fp16 +
                                   " --inject-grad-overflow 3 --tensor-model-parallel-size 2 "
                                   "--use-distributed-optimizer");
  const RunOut clean = train(1, fp16);
  const std::vector<double> want = {1024, 1024, 512, 512, 512, 512, 1024, 1024, 1024, 1024};
  for (const RunOut* r : {&one, &four}) {
    EXPECT_EQ(scales(r->log), want) << r->log;
    EXPECT_NE(r->log.find("iteration 3: inf/NaN in the fp16 grads, step skipped on all ranks"),
              std::string::npos);
    const auto skipped = testing::log_values(r->log, "number of skipped iterations");
    ASSERT_EQ(skipped.size(), 10u);
    EXPECT_EQ(skipped[1], 0);
    EXPECT_EQ(skipped[2], 1);
    EXPECT_EQ(skipped.back(), 0);  // counted per log interval (here 1 iteration), as Megatron
  }
  ASSERT_EQ(four.losses.size(), one.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(four.losses[i], one.losses[i], 1e-4 * one.losses[i]) << "step " << i + 1;
  // The skipped step really changed nothing: the clean run differs from iteration 4 on.
  EXPECT_EQ(clean.losses[2], one.losses[2]);
  EXPECT_GT(std::fabs(clean.losses[3] - one.losses[3]), 1e-4);
  EXPECT_EQ(scales(clean.log),
            (std::vector<double>{1024, 1024, 1024, 2048, 2048, 2048, 2048, 4096, 4096, 4096}));
}

// bf16 through tensor, sequence and pipeline parallelism (16-bit SP gathers, tied 16-bit
// embeddings) and through the distributed optimizer (16-bit parameter all-gather) follows the
// bf16 single-rank run; bf16 rounding of slightly different fp32 sums keeps it from bitwise.
TEST(MixedPrecision, Bf16LayoutsTrackTheSingleRankRun) {
  const RunOut one = train(1, "--bf16");
  for (const std::string layout :
       {"--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2",
        "--use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce",
        "--tensor-model-parallel-size 2 --use-distributed-optimizer",
        "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
        "--use-distributed-optimizer"}) {
    const RunOut four = train(4, "--bf16 " + layout);
    ASSERT_EQ(four.losses.size(), one.losses.size()) << four.log;
    for (size_t i = 0; i < one.losses.size(); ++i)
      EXPECT_NEAR(four.losses[i], one.losses[i], 2e-3 * one.losses[i])
          << layout << " step " << i + 1;
    std::vector<double> a(four.params.begin(), four.params.end()),
        b(one.params.begin(), one.params.end());
    EXPECT_LT(testing::rel_l2(a, b), 1e-2) << layout;
  }
}

// docs/reference/formulas.md's bytes per parameter for bf16 params with fp32 grads: 18 without the
// distributed optimizer (2 params + 4 grads + 12 of fp32 main params and Adam moments) and
// 6 + 12/d with it, measured from the start-up memory report of each rank 0.
TEST(MixedPrecision, Bf16BytesPerParameterMatchTheTable) {
  // Bytes per local parameter of params, grads (from the MiB figures, 3 decimals) and optimizer
  // state (exact byte count) in rank 0's report.
  auto per_param = [](const RunOut& r, double& params, double& grads, double& state) {
    std::smatch m, n, b;
    ASSERT_TRUE(std::regex_search(r.log, m, std::regex("params ([0-9.]+) \\| grads ([0-9.]+)")))
        << r.log;
    ASSERT_TRUE(std::regex_search(r.log, n, std::regex("parallel rank \\(0, 0\\): ([0-9]+)")));
    ASSERT_TRUE(std::regex_search(r.log, b, std::regex("optimizer state bytes: ([0-9]+)")));
    const double count = std::stod(n[1]);
    params = std::stod(m[1]) * 1024 * 1024 / count;
    grads = std::stod(m[2]) * 1024 * 1024 / count;
    state = std::stod(b[1]) / count;
  };
  double p = 0, g = 0, s = 0;
  per_param(train(1, "--bf16"), p, g, s);
  EXPECT_NEAR(p, 2.0, 0.01);
  EXPECT_NEAR(g, 4.0, 0.02);
  EXPECT_DOUBLE_EQ(s, 12.0);
  for (int d : {2, 4}) {
    const RunOut r = train(d, "--bf16 --use-distributed-optimizer");
    per_param(r, p, g, s);
    EXPECT_NEAR(p, 2.0, 0.01);
    EXPECT_NEAR(g, 4.0, 0.02);
    // Per parameter of the model (the buffer count above includes the padding of bucket ends
    // to lcm(d, 128) and of starts to 64, which holds no state): 12/d, up to the imbalance of
    // which rank's shard holds the padding.
    std::smatch padded, real;
    ASSERT_TRUE(std::regex_search(r.log, padded, std::regex("parallel rank \\(0, 0\\): ([0-9]+)")));
    ASSERT_TRUE(std::regex_search(r.log, real, std::regex("whole model: ([0-9]+)")));
    const double state_per_real = s * std::stod(padded[1]) / std::stod(real[1]);
    EXPECT_NEAR(state_per_real, 12.0 / d, 0.01 * 12.0 / d) << "d = " << d;
  }
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// ---- activation recompute ----

// Full recompute re-runs each layer's forward from its stored input before its backward: the
// same kernels on the same inputs, so losses and final parameters are bitwise those of the run
// that stores every activation, on one rank and under TP + SP + PP; and it stores less.
TEST(Recompute, FullRecomputeIsBitwiseIdenticalAndStoresLess) {
  auto activation_mib = [](const std::string& log) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(log, m, std::regex("activations \\+ scratch ([0-9.]+)"))) << log;
    return m.size() > 1 ? std::stod(m[1]) : 0.0;
  };
  for (const auto& [ranks, layout] :
       {std::pair<int, std::string>{1, ""},
        {4,
         "--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2"}}) {
    const RunOut plain = train(ranks, layout + " --train-iters 8");
    for (const std::string recompute :
         {"--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
          "--recompute-granularity full --recompute-method uniform --recompute-num-layers 3",
          "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
          "--recompute-activations"}) {
      const RunOut r = train(ranks, layout + " --train-iters 8 " + recompute);
      EXPECT_EQ(r.losses, plain.losses) << layout << " " << recompute;
      ASSERT_EQ(r.params.size(), plain.params.size());
      EXPECT_EQ(std::memcmp(r.params.data(), plain.params.data(), plain.params.size() * 4), 0)
          << layout << " " << recompute;
      // Fewer live layer caches than layers on every stage: less memory.
      if (recompute.find("uniform --recompute-num-layers 1") != std::string::npos ||
          recompute.find("block") != std::string::npos) {
        EXPECT_LT(activation_mib(r.log), activation_mib(plain.log)) << layout << " " << recompute;
      }
    }
  }
}

// The recomputed forward regenerates the very dropout masks the first forward drew.
TEST(Recompute, BitwiseIdenticalWithDropout) {
  for (const auto& [ranks, layout] :
       {std::pair<int, std::string>{1, ""},
        {4,
         "--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2"}}) {
    const RunOut plain = train(ranks, layout + " --train-iters 6", kDropout);
    const RunOut r = train(ranks,
                           layout +
                               " --train-iters 6 --recompute-granularity full "
                               "--recompute-method uniform --recompute-num-layers 1",
                           kDropout);
    EXPECT_EQ(r.losses, plain.losses) << layout;
    ASSERT_EQ(r.params.size(), plain.params.size());
    EXPECT_EQ(std::memcmp(r.params.data(), plain.params.data(), plain.params.size() * 4), 0)
        << layout;
  }
}

}  // namespace
}  // namespace mg
