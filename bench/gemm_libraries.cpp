// Is any installed BLAS faster than oneDNN on the GEMMs of a training step? Times dnnl_sgemm
// against the reference BLAS sgemm_ of OpenBLAS and BLIS (each opened with dlopen from its
// Debian path, skipped when not installed) on GPT-2 124M's fifteen GEMM shapes at micro-batch 4
// x seq 256 (forward, input-gradient and weight-gradient; the per-layer ones weighted x 12), and
// checks every library's result against oneDNN's. Threads: OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS and BLIS_NUM_THREADS (bench/train_throughput.sh's settings: 2).
// Usage: gemm_libraries [rows]   (rows = micro-batch x seq, default 1024)
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {
// Fortran BLAS: column-major, arguments by pointer.
using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                       const float*, const int*, const float*, const int*, const float*, float*,
                       const int*);

struct Library {
  std::string name;
  Sgemm sgemm = nullptr;  // nullptr: oneDNN
  double step_s = 0;
};

struct Shape {
  const char* name;
  bool ta, tb;
  int m, n, k;
  int weight;  // how often the step runs it
};

template <class F>
double best_of_3(F f) {
  f();
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Row-major C[m,n] = op(A) op(B), as column-major C^T = op(B)^T op(A)^T for the Fortran BLAS.
void run(const Library& lib, const Shape& s, const float* a, const float* b, float* c) {
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
  const char ta = s.ta ? 'T' : 'N', tb = s.tb ? 'T' : 'N';
  const float one = 1.f, zero = 0.f;
  if (!lib.sgemm) {
    dnnl_sgemm(ta, tb, s.m, s.n, s.k, one, a, lda, b, ldb, zero, c, ldc);
    return;
  }
  lib.sgemm(&tb, &ta, &s.n, &s.m, &s.k, &one, b, &ldb, a, &lda, &zero, c, &ldc);
}
}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 1024;
  std::vector<Library> libs{{"onednn"}};
  for (auto [name, path] :
       {std::pair{"openblas", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"},
        std::pair{"blis", "/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3"}}) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    auto* f = h ? reinterpret_cast<Sgemm>(dlsym(h, "sgemm_")) : nullptr;
    if (f) libs.push_back({name, f});
    else std::printf("%s: not installed (%s), skipped\n", name, path);
  }
  const int T = rows, V = 50304;
  const Shape shapes[] = {{"qkv_f", 0, 1, T, 2304, 768, 12},  {"qkv_di", 0, 0, T, 768, 2304, 12},
                          {"qkv_dw", 1, 0, 2304, 768, T, 12}, {"fc1_f", 0, 1, T, 3072, 768, 12},
                          {"fc1_di", 0, 0, T, 768, 3072, 12}, {"fc1_dw", 1, 0, 3072, 768, T, 12},
                          {"fc2_f", 0, 1, T, 768, 3072, 12},  {"fc2_di", 0, 0, T, 3072, 768, 12},
                          {"fc2_dw", 1, 0, 768, 3072, T, 12}, {"proj_f", 0, 1, T, 768, 768, 12},
                          {"proj_di", 0, 0, T, 768, 768, 12}, {"proj_dw", 1, 0, 768, 768, T, 12},
                          {"lm_f", 0, 1, T, V, 768, 1},       {"lm_di", 0, 0, T, 768, V, 1},
                          {"lm_dw", 1, 0, V, 768, T, 1}};
  std::printf("%-8s", "shape");
  for (auto& l : libs) std::printf(" %9s GF/s", l.name.c_str());
  std::printf("   max rel err vs onednn\n");
  for (const Shape& s : shapes) {
    std::vector<float> a(size_t(s.m) * s.k), b(size_t(s.k) * s.n), ref(size_t(s.m) * s.n),
        c(ref.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.1f * float(i % 977));
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.07f * float(i % 1013));
    run(libs[0], s, a.data(), b.data(), ref.data());
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    const double flops = 2.0 * s.m * s.n * s.k;
    double worst = 0;
    std::printf("%-8s", s.name);
    for (auto& l : libs) {
      const double t = best_of_3([&] { run(l, s, a.data(), b.data(), c.data()); });
      l.step_s += s.weight * t;
      for (size_t i = 0; i < c.size(); ++i)
        worst = std::max(worst, double(std::fabs(c[i] - ref[i]) / scale));
      std::printf(" %14.1f", flops / t / 1e9);
    }
    std::printf("   %.1e\n", worst);
    if (worst > 1e-4) {
      std::printf("error: %s disagrees with oneDNN (max rel err %.1e)\n", s.name, worst);
      return 1;
    }
  }
  std::printf("step GEMMs (ms):");
  for (auto& l : libs) std::printf(" %s=%.0f", l.name.c_str(), l.step_s * 1e3);
  std::printf("\n");
}
