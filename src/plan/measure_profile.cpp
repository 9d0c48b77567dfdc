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
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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

// FLOP/s of a d x d x d linear layer's forward and backward (the mix of GEMMs training runs:
// the output, the input gradient and the weight gradient) in dtype t, the output stored in t as
// a 16-bit model stores its saved GEMM outputs.
double gemm_rate(int64_t d, DType t) {
  Tensor x({d, d}, t), w({d, d}, t), y({d, d}, t), dy({d, d}), dx({d, d}), dw({d, d});
  const cpu::Mat X(x.raw(), t), W(w.raw(), t);
  return 6.0 * double(d * d * d) / best_seconds([&] {
           ops::linear_forward({y.raw(), t}, X, W, nullptr, d, d, d);
           ops::linear_backward(dx.data<float>(), dw.data<float>(), nullptr, dy.data<float>(), X, W,
                                d, d, d);
         });
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
  // GEMM efficiency: fp32 rates by size (forward + backward); the peak is the best rate seen, the curve
  // max x d / (d + half) fitted to the rest (relative least squares over a grid). Sizes from 64:
  // a layer's GEMMs are rarely smaller, and below that a call's overhead dominates (16 and 32
  // ran at 10% and 45% of peak where 128 and up were flat): fitted in, they bent the curve
  // where training runs, and moved it between runs as the machine's load did.
  const std::vector<int64_t> sizes = {64, 128, 256, 512, 1024};
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
  // 16-bit linear layers (native kernels where the CPU has them, else widened; the backward's
  // rounding included): the peak that the same curve gives their rate at 512.
  const double at512 = p.gemm_max_efficiency * 512.0 / (512.0 + p.gemm_half_dim);
  p.peak_bf16 = gemm_rate(512, DType::BF16) / at512;
  p.peak_fp16 = gemm_rate(512, DType::F16) / at512;
  // The attention core: the causal flash-style kernel (the masked blocks skipped, so efficiency
  // is of the blocks' FLOPs) forward + backward over 512 tokens, 256 channels as heads of 32
  // and of 128; max x HD / (HD + half) through both points. Then heads of 32 again with
  // attention dropout 0.1: the extra time per score element drawn (forward and backward).
  {
    const int64_t S = 512, W = 256;
    auto seconds = [&](int64_t HD, bool dropout) {
      const int64_t NH = W / HD;
      Tensor q({S, W}), k({S, W}), v({S, W}), out({S, W}), lse({NH * S}), dout({S, W}), dq({S, W}),
          dk({S, W}), dv({S, W});
      auto heads = [&](Tensor& t) { return cpu::Heads{t.raw(), DType::F32, W, HD, 1}; };
      cpu::AttentionShape a;
      a.B = 1, a.Sq = S, a.Sk = S, a.NH = NH, a.NKV = NH, a.HD = HD;
      if (dropout) a.dropout.key = {1234u, 5678u, uint32_t(0.1 * 4294967296.0), 1.f / 0.9f};
      return best_seconds([&] {
        ops::attention_forward(out.data<float>(), lse.data<float>(), heads(q), heads(k), heads(v),
                               a);
        ops::attention_backward(heads(dq), heads(dk), heads(dv), dout.data<float>(),
                                out.data<float>(), heads(q), heads(k), heads(v), lse.data<float>(),
                                a);
      });
    };
    p.attention_causal_fraction = 0.5;
    p.attention_causal_block = double(cpu::kAttentionQueryBlock);
    const double flops = 3.0 * 4.0 * double(S * S * W) * p.attention_fraction(S);
    const double s32 = seconds(32, false);
    const double e32 = flops / (s32 * p.peak_fp32);
    const double e128 = flops / (seconds(128, false) * p.peak_fp32), r = e128 / e32;
    // e(HD) = max HD / (HD + half): r = 4 (32 + half) / (128 + half).
    p.attention_half_dim = r > 1 && r < 4 ? 128.0 * (r - 1) / (4 - r) : 0.0;
    p.attention_efficiency = std::min(1.0, e128 * (128.0 + p.attention_half_dim) / 128.0);
    p.attention_fp32 = true;  // the CPU kernel computes in fp32 for every model dtype
    const double drawn = 2.0 * double(S * S * (W / 32)) * p.attention_fraction(S);
    p.attention_dropout_seconds = std::max(0.0, seconds(32, true) - s32) / drawn;
  }
  // Streamed bandwidth: the Adam step over 4M fp32 parameters (param, grad, both moments: 28
  // bytes each), the optimizer's own kernel.
  {
    const int64_t n_params = int64_t(4) << 20;
    Tensor param({n_params}), grad({n_params}), m({n_params}), v({n_params});
    const double s = best_seconds([&] {
      ops::adamw_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                        n_params, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    });
    p.memory_bandwidth = 28.0 * double(n_params) / s;
  }
  // Elementwise work at the rate the CPU's kernels reach (compute-bound ones, GELU's tanh,
  // included): LayerNorm and GELU forward and backward over 2048 x 1024, counted as the 40
  // bytes per element they move nominally, as a share of the streamed bandwidth.
  {
    const int64_t N = 2048, C = 1024;
    Tensor x({N, C}), y({N, C}), dy({N, C}), dx({N, C}), w({C}), b({C}), dw({C}), db({C}),
        mean({N}), rstd({N});
    const double s = best_seconds([&] {
      ops::layernorm_forward(y.data<float>(), mean.data<float>(), rstd.data<float>(),
                             x.data<float>(), w.data<float>(), b.data<float>(), N, C, 1e-5f);
      ops::layernorm_backward(dx.data<float>(), dw.data<float>(), db.data<float>(),
                              dy.data<float>(), x.data<float>(), w.data<float>(),
                              mean.data<float>(), rstd.data<float>(), N, C);
      ops::gelu_forward(y.data<float>(), x.data<float>(), N * C);
      ops::gelu_backward(dx.data<float>(), x.data<float>(), dy.data<float>(), N * C);
    });
    const double rate = 40.0 * double(N * C) / s;
    p.memory_bandwidth = std::max(p.memory_bandwidth, rate);
    p.elementwise_efficiency = rate / p.memory_bandwidth;
  }
  p.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)) / n;
  p.devices_per_node = n;
  // Links: all-reduces over the ranks (one host: both link kinds are this one).
  p.intra_node = {p.memory_bandwidth, 1e-6};
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
  p.description =
      str_cat("measured on ", host, ": ", n, " rank", n > 1 ? "s" : "", " x ", threads.threads,
              " thread", threads.threads > 1 ? "s" : "", " (", threads.cores, " cores)");
  return p;
}

}  // namespace mg
