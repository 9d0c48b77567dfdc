// Grouped GEMM for mixture-of-experts (--moe-grouped-gemm) on the CPU: the experts' linear
// layers as one grouped_linear_forward / _backward call against the loop of linear_forward /
// linear_backward per expert (what the MoE layer runs without the flag), same threads, same
// run, best of 15 after a warm-up (the best filters out other jobs on a shared machine).
// Shapes: Mixtral-tiny-like (H 256, expert FFN 512 SwiGLU: fc1 256 -> 1024, fc2 512 -> 256),
// 2048 routed rows split unevenly over 8 experts, and 512 rows over 64 experts (a few rows
// each, some none). Checks the two paths agree before timing.
// Usage: OMP_NUM_THREADS=2 build-dev/grouped_gemm (docs/benchmarks.md has a run)
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <random>
#include <vector>

#include "backend/ops.h"

namespace {

using namespace mg;

double ms_of(const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// rows split over G experts with skewed (exponential) shares; some experts may get none.
std::vector<int64_t> uneven_counts(int64_t G, int64_t rows, uint32_t seed) {
  std::mt19937 gen(seed);
  std::exponential_distribution<double> e(1.0);
  std::vector<double> share(static_cast<size_t>(G));
  double sum = 0;
  for (double& s : share) sum += (s = e(gen) * e(gen));
  std::vector<int64_t> counts(static_cast<size_t>(G));
  int64_t given = 0;
  for (size_t g = 0; g < counts.size(); ++g) given += (counts[g] = int64_t(rows * share[g] / sum));
  counts[0] += rows - given;
  return counts;
}

// Which kernel a 16-bit tile GEMM runs (oneDNN's implementation string).
std::string lowp_impl(int64_t M, int64_t N, int64_t K) {
  using namespace dnnl;
  using dt = memory::data_type;
  engine eng(engine::kind::cpu, 0);
  memory::desc a({M, K}, dt::bf16, memory::dims{K, 1}), b({K, N}, dt::bf16, memory::dims{1, K}),
      c({M, N}, dt::f32, memory::dims{N, 1});
  try {
    matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "none (bf16 widened to f32, sgemm)";
  }
}

void run(const char* name, int64_t G, int64_t rows, int64_t IN, int64_t OUT, DType t) {
  const std::vector<int64_t> counts = uneven_counts(G, rows, 7);
  const int64_t N = rows, es = t == DType::F32 ? 4 : 2;
  std::mt19937 gen(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto randn = [&](int64_t n, float s) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(gen) * s;
    return v;
  };
  const std::vector<float> x32 = randn(N * IN, 1.f), w32 = randn(G * OUT * IN, 0.05f),
                           dy = randn(N * OUT, 1.f);
  std::vector<char> x(size_t(N * IN * es)), w(size_t(G * OUT * IN * es));
  cpu::cast_from_f32(x.data(), t, x32.data(), N * IN);
  cpu::cast_from_f32(w.data(), t, w32.data(), G * OUT * IN);
  std::vector<const void*> wp;
  std::vector<float> dw(size_t(G * OUT * IN)), dx(size_t(N * IN));
  std::vector<float*> dwp;
  for (int64_t g = 0; g < G; ++g) {
    wp.push_back(w.data() + g * OUT * IN * es);
    dwp.push_back(dw.data() + g * OUT * IN);
  }
  std::vector<char> y_loop(size_t(N * OUT * es)), y_grouped(size_t(N * OUT * es));
  const cpu::Mat xm{x.data(), t};
  auto loop_forward = [&] {
    for (int64_t g = 0, r = 0; g < G; r += counts[size_t(g)], ++g)
      if (counts[size_t(g)] > 0)  // the MoE layer skips empty experts
        cpu::linear_forward({y_loop.data() + r * OUT * es, t}, {x.data() + r * IN * es, t},
                            {wp[size_t(g)], t}, nullptr, counts[size_t(g)], IN, OUT);
  };
  auto grouped_forward = [&] {
    cpu::grouped_linear_forward({y_grouped.data(), t}, xm, wp.data(), nullptr, counts.data(), G, IN,
                                OUT);
  };
  auto loop_backward = [&] {
    for (int64_t g = 0, r = 0; g < G; r += counts[size_t(g)], ++g)
      if (counts[size_t(g)] > 0)
        cpu::linear_backward(dx.data() + r * IN, dwp[size_t(g)], nullptr, dy.data() + r * OUT,
                             {x.data() + r * IN * es, t}, {wp[size_t(g)], t}, counts[size_t(g)], IN,
                             OUT, cpu::GradWrite::Set);
  };
  auto grouped_backward = [&] {
    cpu::grouped_linear_backward(dx.data(), dwp.data(), nullptr, dy.data(), xm, wp.data(),
                                 counts.data(), G, IN, OUT, cpu::GradWrite::Set);
  };
  // Validate: forward outputs and dinp of the two paths (dweight accumulates; one pass each).
  loop_forward();
  grouped_forward();
  std::vector<float> a(size_t(N * OUT)), b(size_t(N * OUT));
  cpu::cast_to_f32(a.data(), y_loop.data(), t, N * OUT);
  cpu::cast_to_f32(b.data(), y_grouped.data(), t, N * OUT);
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(a[i])));
  }
  loop_backward();
  const std::vector<float> dx_loop = dx;
  grouped_backward();
  for (size_t i = 0; i < dx.size(); ++i) {
    err = std::max(err, double(std::fabs(dx[i] - dx_loop[i])));
    ref = std::max(ref, double(std::fabs(dx_loop[i])));
  }
  const double lf = ms_of(loop_forward), gf = ms_of(grouped_forward);
  const double lb = ms_of(loop_backward), gb = ms_of(grouped_backward);
  const double flops = 2.0 * double(N) * double(IN) * double(OUT);
  int64_t empty = 0, smallest = N, largest = 0;
  for (int64_t c : counts) {
    empty += c == 0;
    smallest = std::min(smallest, c);
    largest = std::max(largest, c);
  }
  std::printf(
      "%-10s %-4s G=%-3lld rows=%-5lld (%lld..%lld, %lld empty) %4lldx%-5lld "
      "fwd loop %7.3f grouped %7.3f ms (x%.2f) | bwd loop %7.3f grouped %7.3f ms (x%.2f) "
      "| grouped %5.1f GF/s | max rel diff %.1e\n",
      name, dtype_name(t), (long long)G, (long long)N, (long long)smallest, (long long)largest,
      (long long)empty, (long long)IN, (long long)OUT, lf, gf, lf / gf, lb, gb, lb / gb,
      3 * flops / (gf + gb) * 1e-6, ref > 0 ? err / ref : err);
}

}  // namespace

int main() {
  std::printf("threads %d; oneDNN %d.%d.%d; f32 tiles: dnnl_sgemm; bf16 tiles: %s\n",
              omp_get_max_threads(), dnnl_version()->major, dnnl_version()->minor,
              dnnl_version()->patch, lowp_impl(256, 256, 256).c_str());
  for (DType t : {DType::F32, DType::BF16}) {
    run("8e fc1", 8, 2048, 256, 1024, t);
    run("8e fc2", 8, 2048, 512, 256, t);
    run("64e fc1", 64, 512, 256, 1024, t);
    run("64e fc2", 64, 512, 512, 256, t);
  }
}
