// Grouped linear layers (grouped_linear_forward / _backward) against a double-precision loop
// written here and against linear_forward / linear_backward run group by group: f32 and bf16,
// counts with empty groups, one group, odd sizes (row pieces of every power of two, ragged
// column blocks, dweight rows both through oneDNN and widened), null biases; on two threads, so
// the tiles of one region run side by side (which caught oneDNN's shared scratchpad).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "backend/ops.h"
#include "testing/fd_check.h"

namespace mg {
namespace {

using Vec = std::vector<float>;
using cpu::GradWrite;

struct Case {
  std::vector<int64_t> counts;
  int64_t IN, OUT;
  bool bias;  // biases on every other group (null entries between), or a null biases array
};

// Operands of one case in a dtype: f32 values (for bf16: already rounded to bf16, so the double
// loop reads exactly what the kernels read) and their storage.
struct Operand {
  Vec f;
  std::vector<uint16_t> h;
  DType t;
  Operand(Vec v, DType dtype) : f(std::move(v)), t(dtype) {
    if (t == DType::F32) return;
    h.resize(f.size());
    cpu::cast_from_f32(h.data(), t, f.data(), int64_t(f.size()));
    cpu::cast_to_f32(f.data(), h.data(), t, int64_t(f.size()));
  }
  cpu::Mat mat(int64_t offset = 0) const {
    return t == DType::F32 ? cpu::Mat(f.data() + offset) : cpu::Mat(h.data() + offset, t);
  }
};

float rounded(float x, DType t) {
  if (t == DType::F32) return x;
  uint16_t h;
  cpu::cast_from_f32(&h, t, &x, 1);
  cpu::cast_to_f32(&x, &h, t, 1);
  return x;
}

// Two floats within `ulps` units in the last place of a bf16 (8 significant bits).
bool within_bf16_ulps(float a, float b, int ulps) {
  const double big = std::max(std::fabs(double(a)), std::fabs(double(b)));
  return a == b || std::fabs(double(a) - double(b)) <= ulps * std::ldexp(1.0, std::ilogb(big) - 7);
}

class GroupedLinear : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { omp_set_num_threads(2); }
  void TearDown() override { omp_set_num_threads(1); }
  void run(const Case& c);
};

void GroupedLinear::run(const Case& c) {
  const DType t = GetParam();
  const int64_t G = int64_t(c.counts.size()), IN = c.IN, OUT = c.OUT;
  const int64_t N = std::accumulate(c.counts.begin(), c.counts.end(), int64_t(0));
  const Operand x(testing::random_vec(N * IN, 1), t),
      w(testing::random_vec(G * OUT * IN, 2, -0.1f, 0.1f), t);
  const Vec bias = testing::random_vec(G * OUT, 3), dout = testing::random_vec(N * OUT, 4);
  std::vector<const void*> wp;
  std::vector<const float*> bp;
  for (int64_t g = 0; g < G; ++g) {
    wp.push_back(t == DType::F32 ? static_cast<const void*>(w.f.data() + g * OUT * IN)
                                 : static_cast<const void*>(w.h.data() + g * OUT * IN));
    bp.push_back(g % 2 == 0 ? bias.data() + g * OUT : nullptr);
  }
  const float* const* biases = c.bias ? bp.data() : nullptr;
  auto bias_of = [&](int64_t g) { return c.bias ? bp[size_t(g)] : nullptr; };

  // The double-precision loop (d: dout as the GEMMs read it, rounded to the operands' dtype).
  std::vector<double> y_ref(size_t(N * OUT)), dx_ref(size_t(N * IN)), dw_ref(size_t(G * OUT * IN)),
      db_ref(size_t(G * OUT));
  for (int64_t g = 0, r0 = 0; g < G; r0 += c.counts[size_t(g)], ++g) {
    const float* W = w.f.data() + g * OUT * IN;
    for (int64_t n = r0; n < r0 + c.counts[size_t(g)]; ++n)
      for (int64_t o = 0; o < OUT; ++o) {
        double s = bias_of(g) ? double(rounded(bias_of(g)[o], t)) : 0.0;
        for (int64_t k = 0; k < IN; ++k) s += double(x.f[size_t(n * IN + k)]) * W[o * IN + k];
        y_ref[size_t(n * OUT + o)] = s;
        const double d = rounded(dout[size_t(n * OUT + o)], t);
        for (int64_t k = 0; k < IN; ++k) {
          dx_ref[size_t(n * IN + k)] += d * W[o * IN + k];
          dw_ref[size_t(g * OUT * IN + o * IN + k)] += d * x.f[size_t(n * IN + k)];
        }
        db_ref[size_t(g * OUT + o)] += dout[size_t(n * OUT + o)];
      }
  }

  // Forward, out in the operands' dtype; and the per-group loop of linear_forward.
  std::vector<uint16_t> y16(size_t(N * OUT)), y16_loop(size_t(N * OUT));
  Vec y(size_t(N * OUT), NAN), y_loop(size_t(N * OUT));
  const cpu::MatOut out = t == DType::F32 ? cpu::MatOut(y.data()) : cpu::MatOut(y16.data(), t);
  cpu::grouped_linear_forward(out, x.mat(), wp.data(), biases, c.counts.data(), G, IN, OUT);
  for (int64_t g = 0, r0 = 0; g < G; r0 += c.counts[size_t(g)], ++g) {
    const cpu::MatOut o = t == DType::F32 ? cpu::MatOut(y_loop.data() + r0 * OUT)
                                          : cpu::MatOut(y16_loop.data() + r0 * OUT, t);
    cpu::linear_forward(o, x.mat(r0 * IN), {wp[size_t(g)], t}, bias_of(g), c.counts[size_t(g)], IN,
                        OUT);
  }
  if (t != DType::F32) {
    cpu::cast_to_f32(y.data(), y16.data(), t, N * OUT);
    cpu::cast_to_f32(y_loop.data(), y16_loop.data(), t, N * OUT);
  }
  const double tol = t == DType::F32 ? 1e-4 : 1e-2;  // relative to max(1, |ref|)
  for (int64_t i = 0; i < N * OUT; ++i) {
    const double ref = y_ref[size_t(i)];
    ASSERT_NEAR(y[size_t(i)], ref, tol * std::max(1.0, std::fabs(ref))) << "y " << i;
    if (t == DType::F32)
      ASSERT_NEAR(y[size_t(i)], y_loop[size_t(i)], 1e-5 * std::max(1.0, std::fabs(ref))) << i;
    else
      ASSERT_TRUE(within_bf16_ulps(y[size_t(i)], y_loop[size_t(i)], 1))
          << "y " << i << ": " << y[size_t(i)] << " vs per-group " << y_loop[size_t(i)];
  }

  // Backward: dinp added and stored, dweight and dbias accumulated, against the double loop and
  // the per-group linear_backward.
  for (GradWrite write : {GradWrite::Add, GradWrite::Set}) {
    const float dx0 = write == GradWrite::Add ? 0.5f : NAN;
    Vec dx(size_t(N * IN), dx0), dw(size_t(G * OUT * IN), 0.25f), db(size_t(G * OUT), 1.f);
    Vec dx_loop(dx.size(), write == GradWrite::Add ? 0.5f : 0.f), dw_loop = dw, db_loop = db;
    std::vector<float*> dwp, dbp, dbp_loop, dwp_loop;
    for (int64_t g = 0; g < G; ++g) {
      dwp.push_back(dw.data() + g * OUT * IN);
      dwp_loop.push_back(dw_loop.data() + g * OUT * IN);
      dbp.push_back(c.bias && g % 2 == 0 ? db.data() + g * OUT : nullptr);
    }
    cpu::grouped_linear_backward(dx.data(), dwp.data(), c.bias ? dbp.data() : nullptr, dout.data(),
                                 x.mat(), wp.data(), c.counts.data(), G, IN, OUT, write);
    for (int64_t g = 0, r0 = 0; g < G; r0 += c.counts[size_t(g)], ++g)
      if (c.counts[size_t(g)] > 0)  // as the MoE layer (oneDNN's bf16 matmul fails on K = 0)
        cpu::linear_backward(dx_loop.data() + r0 * IN, dwp_loop[size_t(g)],
                             dbp[size_t(g)] ? db_loop.data() + g * OUT : nullptr,
                             dout.data() + r0 * OUT, x.mat(r0 * IN), {wp[size_t(g)], t},
                             c.counts[size_t(g)], IN, OUT, write);
    for (int64_t i = 0; i < N * IN; ++i) {
      const double ref = dx_ref[size_t(i)] + (write == GradWrite::Add ? 0.5 : 0.0);
      ASSERT_NEAR(dx[size_t(i)], ref, 1e-4 * std::max(1.0, std::fabs(ref))) << "dinp " << i;
      ASSERT_NEAR(dx[size_t(i)], dx_loop[size_t(i)], 1e-5 * std::max(1.0, std::fabs(ref))) << i;
    }
    for (int64_t i = 0; i < G * OUT * IN; ++i) {
      const double ref = dw_ref[size_t(i)] + 0.25;
      ASSERT_NEAR(dw[size_t(i)], ref, 1e-4 * std::max(1.0, std::fabs(ref))) << "dweight " << i;
      ASSERT_NEAR(dw[size_t(i)], dw_loop[size_t(i)], 1e-5 * std::max(1.0, std::fabs(ref))) << i;
    }
    for (int64_t g = 0; g < G; ++g)
      for (int64_t o = 0; o < OUT; ++o) {
        const size_t i = size_t(g * OUT + o);
        const double ref = dbp[size_t(g)] ? db_ref[i] + 1.0 : 1.0;  // untouched without a bias
        ASSERT_NEAR(db[i], ref, 1e-5 * std::max(1.0, std::fabs(ref))) << "dbias " << i;
        ASSERT_EQ(db[i], db_loop[i]) << "dbias " << i;  // the same double sum, row by row
      }
  }
}

TEST_P(GroupedLinear, UnevenCountsWithEmptyGroupsAndTails) {
  run({{0, 131, 1, 0, 260, 5}, 150, 130, true});
}
TEST_P(GroupedLinear, NullBiases) { run({{3, 0, 129}, 129, 257, false}); }
TEST_P(GroupedLinear, OneGroup) { run({{7}, 33, 17, true}); }
TEST_P(GroupedLinear, ManySmallGroups) {
  run({{2, 1, 0, 3, 1, 1, 2, 0, 4, 1, 1, 2, 3, 1, 0, 2}, 64, 96, true});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GroupedLinear, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace mg
