// Measures the machine's fp32 and bf16 peaks: every OpenMP thread runs independent chains of
// fused multiply-adds on the widest unit the CPU has. fp32: AVX-512 where present, else AVX2 +
// FMA. bf16 (products of bf16 pairs, fp32 sums): AMX tiles (TDPBF16PS, 16 x 16 x 32 per
// instruction) where present and permitted, else AVX512_BF16 (VDPBF16PS), else none: bf16 GEMMs
// are then widened to fp32 (oneDNN's choice in that order), so the bf16 peak is the fp32 one.
// The training benchmarks divide achieved model FLOP/s by the peak of their precision (MFU).
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>

namespace {

// Independent accumulator chains: enough to hide FMA latency x ports, few enough that they and
// the two operands stay in registers (AVX-512 has 32 vector registers, AVX2 only 16; spilling
// them measured half the AVX2 peak).
constexpr int kChains512 = 16, kChains256 = 12;
constexpr long kIters = 384'000'000;  // FMAs per thread per repetition (a multiple of both)

// The sum of every lane of every chain: a value the compiler cannot drop.
__attribute__((target("avx512f"))) float sum_chains512(const __m512* acc) {
  __m512 s = acc[0];
  for (int c = 1; c < kChains512; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sink = 0;
  for (float v : lanes) sink += v;
  return sink;
}

// One repetition of one thread; returns a value that depends on every chain.
__attribute__((target("avx512f,fma"))) float chains512() {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(float(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < kIters / kChains512; ++i)
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  return sum_chains512(acc);
}

__attribute__((target("avx2,fma"))) float chains256() {
  __m256 acc[kChains256];
  for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_set1_ps(float(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < kIters / kChains256; ++i)
    for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < kChains256; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float sink = 0;
  for (float v : lanes) sink += v;
  return sink;
}

// VDPBF16PS: per lane two bf16 products added to an fp32 accumulator (32 FMAs per instruction).
constexpr long kDotIters = 192'000'000;  // instructions per thread per repetition

__attribute__((target("avx512f,avx512bf16"))) float chains512_bf16() {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(float(c) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
  for (long i = 0; i < kDotIters / kChains512; ++i)
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  return sum_chains512(acc);
}

// AMX: tiles 0-5 accumulate (16 x 16 fp32 each), tile 6 is A (16 x 32 bf16), tile 7 is B
// (16 pairs x 16 columns). Six independent accumulators cover TDPBF16PS's latency at one
// instruction per 16 cycles. Each instruction is 16 x 16 x 32 = 8192 FMAs.
constexpr long kTileIters = 12'000'000;  // instructions per thread per repetition (a multiple of 6)
constexpr int kTileFmas = 16 * 16 * 32;

struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Linux hands out the AMX tile state only on request (once per process).
bool amx_permitted() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

__attribute__((target("amx-tile,amx-bf16"))) float chains_amx() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) a[i] = 0x3f00, b[i] = 0x3580;  // bf16 0.5 and 2^-20
  alignas(64) float c[16 * 16];
  _tile_loadd(6, a, 64);
  _tile_loadd(7, b, 64);
  // The tile intrinsics are statement macros (inline asm on fixed tile numbers).
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  for (long i = 0; i < kTileIters / 6; ++i) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, c, 64);
  float sink = c[0];
  _tile_stored(5, c, 64);
  sink += c[255];
  _tile_release();
  return sink;
}

// GFLOP/s of `chains` on every thread, the best of 8 repetitions (noise only slows a run down);
// `flops_per_thread` is what one call computes.
double peak_gflops(const std::function<float()>& chains, double flops_per_thread) {
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    float sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    int threads = 1;
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
      threads = omp_get_num_threads();
      sink += chains();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (double(threads) * flops_per_thread / secs > best) best = threads * flops_per_thread / secs;
    if (sink == 12345.f) std::printf(" ");  // keep the result alive
  }
  return best / 1e9;
}

}  // namespace

int main() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "fma_peak: this CPU has neither AVX-512 nor AVX2+FMA\n");
    return 1;
  }
  const double fp32 = avx512 ? peak_gflops(chains512, double(kIters) * 16 * 2)
                             : peak_gflops(chains256, double(kIters) * 8 * 2);
  const bool amx = __builtin_cpu_supports("amx-bf16") && amx_permitted();
  const bool dot = avx512 && __builtin_cpu_supports("avx512bf16");
  const double bf16 = amx   ? peak_gflops(chains_amx, double(kTileIters) * kTileFmas * 2)
                      : dot ? peak_gflops(chains512_bf16, double(kDotIters) * 16 * 2 * 2)
                            : fp32;
  std::printf("fp32_peak_gflops=%.1f threads=%d simd=%s bf16_peak_gflops=%.1f bf16_unit=%s\n", fp32,
              omp_get_max_threads(), avx512 ? "avx512" : "avx2", bf16,
              amx   ? "amx"
              : dot ? "avx512_bf16"
                    : "none(fp32)");
  return 0;
}
