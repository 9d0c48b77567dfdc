// Context-parallel attention under mpirun (2 and 4 ranks, label `parallel`): every rank builds
// the same random Q/K/V over the whole sequence, computes the single-rank ops::attention_forward
// / backward over it (the reference), takes its load-balanced rows, runs the CP ring (p2p) or
// all-to-all (a2a) and must find the reference's out, lse, dq, dk, dv at its rows; the bytes
// each rank sent equal cp_attention.h's closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/dispatch.h"
#include "comm/mpi_communicator.h"
#include "context_parallel/cp_attention.h"
#include "core/error.h"
#include "testing/mpi_main.h"

namespace mg {
namespace {

constexpr int64_t B = 2, HD = 8;

struct Case {
  cp::CpCommType type;
  int64_t NH, NKV;
  bool seg = false, dropout = false;
  DType dtype = DType::F32;
  double tol = 1e-5;  // normalized error (max |cp - ref| / max |ref|)
};

using Bytes = std::vector<char>;

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

std::vector<float> widen(const void* p, DType t, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  ops::cast_to_f32(x.data(), p, t, n);
  return x;
}

// The rows of `global` (S*B rows of row_bytes, position order) that this rank holds.
Bytes local_rows(const void* global, const CpLayout& l, int64_t row_bytes) {
  Bytes out(size_t(l.local_length() * B * row_bytes));
  for (int64_t t = 0; t < l.local_length(); ++t)
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(out.data() + (t * B + b) * row_bytes,
                  static_cast<const char*>(global) + (l.position(t) * B + b) * row_bytes,
                  size_t(row_bytes));
  return out;
}

// The reference lse (B, NH, S) at this rank's rows: p2p (B, NH, S_local) in local order; a2a
// (B, NH/N, S) of its head slice.
std::vector<float> lse_expected(const std::vector<float>& ref, const CpLayout& l,
                                cp::CpCommType type, int64_t NH) {
  const int64_t S = l.local_length() * l.size;
  std::vector<float> x;
  for (int64_t b = 0; b < B; ++b)
    if (type == cp::CpCommType::P2P) {
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < l.local_length(); ++t)
          x.push_back(ref[size_t((b * NH + h) * S + l.position(t))]);
    } else {
      const int64_t ns = NH / l.size;
      x.insert(x.end(), ref.begin() + (b * NH + l.rank * ns) * S,
               ref.begin() + (b * NH + (l.rank + 1) * ns) * S);
    }
  return x;
}

void run_case(const Case& k) {
  auto world = mpi_world();
  const int N = world->size();
  const cp::CpAttention cpa{world.get(), k.type};
  const int64_t S = 8 * N, S_local = S / N, NH = k.NH, NKV = k.NKV, W = (NH + 2 * NKV) * HD;
  const CpLayout l = cp::cp_layout(cpa, S_local);
  const DType t = k.dtype;
  const int64_t e = int64_t(dtype_size(t));
  // Whole-sequence inputs, the same on every rank: fused QKV rows as the layer holds them.
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> qkv32(size_t(S * B * W)), dout(size_t(S * B * NH * HD));
  for (float& x : qkv32) x = u(rng);
  for (float& x : dout) x = u(rng);
  Bytes qkv(qkv32.size() * size_t(e));
  ops::cast_from_f32(qkv.data(), t, qkv32.data(), int64_t(qkv32.size()));  // f32: a copy
  std::vector<int32_t> seg(size_t(B * S));  // two documents per sample, split differently
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < S; ++p)
      seg[size_t(b * S + p)] = p < S / 3 + 3 * b ? 0 : int32_t(S / 3 + 3 * b);
  ops::AttentionShape a{B, S, S, NH, NKV, HD};
  if (k.dropout) a.dropout = {dropout_key(0.3f, 42, 7, 2, DropoutSite::AttentionProbs), 5, 0};

  // The reference over the whole sequence.
  const ops::FusedQKV f = ops::fused_qkv(qkv.data(), t, B, S, NH, NKV, HD);
  Bytes out_ref(size_t(S * B * NH * HD * e));
  std::vector<float> lse_ref(size_t(B * NH * S)), d_ref(size_t(S * B * W));
  ops::attention_forward(ops::MatOut(out_ref.data(), t), lse_ref.data(), f.q, f.k, f.v, a,
                         k.seg ? seg.data() : nullptr);
  const ops::FusedQKV df = ops::fused_qkv(d_ref.data(), DType::F32, B, S, NH, NKV, HD);
  ops::attention_backward(df.q, df.k, df.v, dout.data(), ops::Mat(out_ref.data(), t), f.q, f.k, f.v,
                          lse_ref.data(), a, k.seg ? seg.data() : nullptr, ops::GradWrite::Set);

  // This rank's rows through the CP attention.
  const Bytes qkv_l = local_rows(qkv.data(), l, W * e);
  const Bytes dout_l = local_rows(dout.data(), l, NH * HD * 4);
  std::vector<int32_t> seg_l(size_t(B * S_local));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S_local; ++s)
      seg_l[size_t(b * S_local + s)] = seg[size_t(b * S + l.position(s))];
  const ops::FusedQKV fl = ops::fused_qkv(qkv_l.data(), t, B, S_local, NH, NKV, HD);
  ops::AttentionShape al = a;
  al.Sq = al.Sk = S_local;
  Bytes out(size_t(S_local * B * NH * HD * e));
  std::vector<float> lse(size_t(B * NH * S_local)), d(size_t(S_local * B * W), 7.f);
  world->reset_stats();
  cp::cp_attention_forward(cpa, ops::MatOut(out.data(), t), lse.data(), fl.q, fl.k, fl.v, al,
                           k.seg ? seg_l.data() : nullptr);
  const CommStats fwd = world->stats();
  const ops::FusedQKV dl = ops::fused_qkv(d.data(), DType::F32, B, S_local, NH, NKV, HD);
  world->reset_stats();
  cp::cp_attention_backward(cpa, dl.q, dl.k, dl.v, reinterpret_cast<const float*>(dout_l.data()),
                            ops::Mat(out.data(), t), fl.q, fl.k, fl.v, lse.data(), al,
                            k.seg ? seg_l.data() : nullptr, ops::GradWrite::Set);
  const CommStats bwd = world->stats();

  const int64_t n_out = S_local * B * NH * HD;
  const Bytes out_exp = local_rows(out_ref.data(), l, NH * HD * e);
  EXPECT_LE(rel_error(widen(out.data(), t, n_out), widen(out_exp.data(), t, n_out)), k.tol);
  EXPECT_LE(rel_error(lse, lse_expected(lse_ref, l, k.type, NH)), k.tol);
  const Bytes d_exp = local_rows(d_ref.data(), l, W * 4);
  const std::vector<float> d_exp_f(reinterpret_cast<const float*>(d_exp.data()),
                                   reinterpret_cast<const float*>(d_exp.data()) + d.size());
  EXPECT_LE(rel_error(d, d_exp_f), k.tol);  // dq, dk, dv: the fused rows hold all three

  // Bytes per rank: cp_attention.h's closed forms.
  const int64_t E = B * S_local * NKV * HD, Eq = B * S_local * NH * HD;
  if (k.type == cp::CpCommType::P2P) {
    EXPECT_EQ(fwd.p2p_bytes, (N - 1) * 2 * E * e);
    EXPECT_EQ(bwd.p2p_bytes, (N - 1) * 2 * E * e + N * 2 * E * 4);
    EXPECT_EQ(fwd.total(), fwd.p2p_bytes);
  } else {
    const int64_t seg_bytes = k.seg ? (N - 1) * B * S_local * 4 : 0;
    EXPECT_EQ(fwd.all_to_all_bytes, (N - 1) * (2 * Eq + 2 * E) * e / N);
    EXPECT_EQ(bwd.all_to_all_bytes, (N - 1) * ((2 * Eq + 2 * E) * e + (2 * Eq + 2 * E) * 4) / N);
    EXPECT_EQ(fwd.all_gather_bytes, seg_bytes);
    EXPECT_EQ(bwd.all_gather_bytes, seg_bytes);
  }
}

class CpAttentionTest : public ::testing::TestWithParam<cp::CpCommType> {};

int cp_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Grouped-query: 8 query heads on 2 K/V heads (ring); a2a needs the K/V heads divisible by N.
TEST_P(CpAttentionTest, GroupedQueryMatchesOneRank) {
  run_case({GetParam(), 8, GetParam() == cp::CpCommType::P2P ? 2 : cp_size()});
}
TEST_P(CpAttentionTest, MultiHeadMatchesOneRank) { run_case({GetParam(), 4, 4}); }
TEST_P(CpAttentionTest, TwoDocumentsPerSampleMatchOneRank) {
  run_case({GetParam(), 4, 4, /*seg=*/true});
}
TEST_P(CpAttentionTest, DropoutMasksMatchOneRank) {
  run_case({GetParam(), 4, 4, /*seg=*/true, /*dropout=*/true});
}
// bf16 q/k/v and out (fp32 accumulation); the ring merges partial outs rounded to bf16.
TEST_P(CpAttentionTest, Bf16MatchesOneRank) {
  run_case({GetParam(), 4, 4, true, false, DType::BF16, 2e-2});
}

INSTANTIATE_TEST_SUITE_P(CommType, CpAttentionTest,
                         ::testing::Values(cp::CpCommType::P2P, cp::CpCommType::A2A),
                         [](const auto& info) { return cp::cp_comm_type_name(info.param); });

TEST(CpAttention, A2aRefusesHeadsNotDivisibleByTheCpSize) {
  auto world = mpi_world();
  const int N = world->size();
  const cp::CpAttention a2a{world.get(), cp::CpCommType::A2A};
  try {
    cp::check_cp_attention(a2a, 8, 4 * N, N + 1);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("--cp-comm-type a2a"), std::string::npos) << err.what();
  }
  EXPECT_THROW(cp::check_cp_attention({world.get(), cp::CpCommType::P2P}, 7, 4, 2), UsageError);
}

}  // namespace
}  // namespace mg

int main(int argc, char** argv) {
  mg::MpiSession mpi(&argc, &argv);
  return mg::testing::run_tests_on_every_rank(&argc, argv, mpi.world_rank());
}
