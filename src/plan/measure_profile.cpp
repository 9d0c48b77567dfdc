#include "plan/measure_profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "backend/dispatch.h"
#include "comm/rank_threads.h"
#include "core/log.h"
#include "tensor/tensor.h"

namespace mg {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The best of 3 timings of fn, each repeated until it has run 30 ms.
template <typename Fn>
double best_seconds(Fn fn) {
  fn();  // warm-up (packing buffers, page faults)
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    int n = 0;
    const double t0 = now();
    double t = t0;
    do {
      fn();
      ++n;
      t = now();
    } while (t - t0 < 0.03);
    best = std::min(best, (t - t0) / n);
  }
  return best;
}

// FLOP/s of a d x d x d linear layer (the GEMM the layers run) in dtype t.
double gemm_rate(int64_t d, DType t) {
  Tensor x({d, d}, t), w({d, d}, t), y({d, d});
  return 2.0 * double(d * d * d) /
         best_seconds([&] { ops::linear_forward(y.data<float>(), cpu::Mat(x.raw(), t), cpu::Mat(w.raw(), t),
                                                nullptr, d, d, d); });
}

}  // namespace

DeviceProfile measure_cpu_profile(const MpiSession& mpi) {
  const RankThreads threads = set_rank_threads();
  std::unique_ptr<Communicator> world = mpi.active() ? mpi_world() : nullptr;
  const int n = world ? world->size() : 1;
  DeviceProfile p;
  p.name = "cpu";
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  // GEMM efficiency: fp32 rates by size; the peak is the best rate seen, the curve
  // max x d / (d + half) fitted to the rest (relative least squares over a grid).
  const std::vector<int64_t> sizes = {16, 32, 64, 128, 256, 512, 1024};
  std::vector<double> rates;
  for (int64_t d : sizes) rates.push_back(gemm_rate(d, DType::F32));
  p.peak_fp32 = *std::max_element(rates.begin(), rates.end());
  double best = 1e30;
  for (double max = 0.5; max <= 1.0001; max += 0.01)
    for (double half = 0; half <= 512; half += 2) {
      double err = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const double d = double(sizes[i]);
        const double model = max * d / (d + half);
        err += std::pow(model / (rates[i] / p.peak_fp32) - 1, 2);
      }
      if (err < best) {
        best = err;
        p.gemm_max_efficiency = std::min(1.0, max);
        p.gemm_half_dim = half;
      }
    }
  // 16-bit GEMMs (native kernels where the CPU has them, else widened): the peak that the
  // same curve gives their rate at 512.
  const double at512 = p.gemm_max_efficiency * 512.0 / (512.0 + p.gemm_half_dim);
  p.peak_bf16 = gemm_rate(512, DType::BF16) / at512;
  p.peak_fp16 = gemm_rate(512, DType::F16) / at512;
  // The attention core is taken at the GEMM efficiency of a 64-wide head, all s^2 work done.
  p.attention_efficiency = p.gemm_max_efficiency * 64.0 / (64.0 + p.gemm_half_dim);
  p.attention_causal_fraction = 1.0;
  // Memory bandwidth: y = a x + y over 64 MiB arrays (3 x 4 bytes moved per element).
  {
    const int64_t len = int64_t(16) << 20;
    std::vector<float> xs(size_t(len), 1.f), ys(size_t(len), 2.f);
    const double s = best_seconds([&] {
      float* x = xs.data();
      float* y = ys.data();
#pragma omp parallel for
      for (int64_t i = 0; i < len; ++i) y[i] = 0.5f * x[i] + y[i];
    });
    p.memory_bandwidth = 12.0 * double(len) / s;
  }
  p.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)) / n;
  p.devices_per_node = n;
  // Links: all-reduces over the ranks (one host: both link kinds are this one).
  p.intra_node = {p.memory_bandwidth / 4, 1e-6};
  if (world && n > 1) {
    // Collectives run a fixed number of times on every rank (a count chosen by each rank's own
    // clock could differ between ranks and leave one waiting).
    auto collective_seconds = [&](int reps, auto fn) {
      double best = 1e30;
      for (int round = 0; round < 3; ++round) {
        world->barrier();
        const double t0 = now();
        for (int i = 0; i < reps; ++i) fn();
        best = std::min(best, (now() - t0) / reps);
      }
      return best;
    };
    const int64_t big = int64_t(4) << 20;
    Tensor buf({big});
    const double t_big = collective_seconds(10, [&] { world->all_reduce(buf.raw(), big); });
    const double t_small = collective_seconds(200, [&] { world->all_reduce(buf.raw(), 1); });
    // Ring all-reduce: 2 (n-1)/n of the bytes per rank, 2 (n-1) steps.
    p.intra_node.latency = t_small / (2.0 * (n - 1));
    p.intra_node.bandwidth =
        2.0 * double(n - 1) / n * double(big) * 4.0 / std::max(1e-9, t_big - t_small);
    // Every rank's figures are its own; rank 0's are written.
  }
  p.inter_node = p.intra_node;
  p.exposed_comm_fraction = 1.0;  // the CPU's collectives block the rank
  p.dp_exposed_fraction = 1.0;
  p.description = str_cat("measured on ", host, ": ", n, " rank", n > 1 ? "s" : "", " x ",
                          threads.threads, " thread", threads.threads > 1 ? "s" : "", " (",
                          threads.cores, " cores)");
  return p;
}

}  // namespace mg
