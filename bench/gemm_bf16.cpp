// Does bf16 pay on this CPU? oneDNN's fp32 sgemm against a oneDNN matmul primitive with bf16
// inputs and fp32 output (AVX512_BF16 dot products) on the GEMM shapes of GPT-2 124M at
// micro-batch 4 x seq 256 (1024 rows), same threads, best of 5 after a warm-up. Also checks
// the bf16 result against fp32 (relative error of bf16 rounding, ~3 decimal digits).
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

namespace {

double seconds_of(const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  struct Shape {
    const char* name;
    int64_t M, N, K;
  };
  const Shape shapes[] = {{"qkv", 1024, 2304, 768},
                          {"fc1", 1024, 3072, 768},
                          {"fc2", 1024, 768, 3072},
                          {"logits", 1024, 50304, 768}};
  std::printf("%-8s %6s %6s %6s %12s %12s %8s %10s\n", "gemm", "M", "N", "K", "fp32 GF/s",
              "bf16 GF/s", "speedup", "rel err");
  for (const Shape& s : shapes) {
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N)),
        C16(size_t(s.M * s.N));
    for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.1f * float(i % 977));
    for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.07f * float(i % 1013)) * 0.05f;
    const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
    const double t32 = seconds_of([&] {
      dnnl_sgemm('N', 'N', s.M, s.N, s.K, 1.f, A.data(), s.K, B.data(), s.N, 0.f, C.data(), s.N);
    });
    // bf16 operands (converted once, as stored bf16 weights and activations would be).
    memory::desc a32({s.M, s.K}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc b32({s.K, s.N}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc a16({s.M, s.K}, memory::data_type::bf16, memory::format_tag::ab);
    memory::desc b16({s.K, s.N}, memory::data_type::bf16, memory::format_tag::ab);
    memory::desc c32({s.M, s.N}, memory::data_type::f32, memory::format_tag::ab);
    memory a32m(a32, eng, A.data()), b32m(b32, eng, B.data()), a16m(a16, eng), b16m(b16, eng),
        c16m(c32, eng, C16.data());
    reorder(a32m, a16m).execute(strm, a32m, a16m);
    reorder(b32m, b16m).execute(strm, b32m, b16m);
    matmul mm;
    try {
      mm = matmul(matmul::primitive_desc(matmul::desc(a16, b16, c32), eng));
    } catch (const dnnl::error&) {
      std::printf(
          "%-8s %6lld %6lld %6lld %12.1f  (oneDNN has no bf16 matmul on this CPU: no "
          "AVX512_BF16/AMX)\n",
          s.name, (long long)s.M, (long long)s.N, (long long)s.K, flops / t32 / 1e9);
      continue;
    }
    const double t16 = seconds_of([&] {
      mm.execute(strm, {{DNNL_ARG_SRC, a16m}, {DNNL_ARG_WEIGHTS, b16m}, {DNNL_ARG_DST, c16m}});
      strm.wait();
    });
    double num = 0, den = 0;
    for (size_t i = 0; i < C.size(); ++i) {
      num += (double(C16[i]) - C[i]) * (double(C16[i]) - C[i]);
      den += double(C[i]) * C[i];
    }
    std::printf("%-8s %6lld %6lld %6lld %12.1f %12.1f %7.2fx %10.2e\n", s.name, (long long)s.M,
                (long long)s.N, (long long)s.K, flops / t32 / 1e9, flops / t16 / 1e9, t32 / t16,
                std::sqrt(num / den));
  }
  return 0;
}
