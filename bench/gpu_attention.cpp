// Causal attention on the GPU: the f32 CUDA-core kernels against the tensor-core kernels (bf16
// operands) at the attention shapes of the GPU training benchmark, forward and backward, with
// the speed of PyTorch's fused SDPA printed beside them by bench/gpu_attention.sh.
// FLOPs counted as FlashAttention does for a causal mask: forward 2 * 2 * B * NH * S^2 * HD / 2,
// backward 2.5x that. Each timing is the median of 10 runs after 3 warm-ups.
//   gpu_attention [B S NH HD ...]     (default: 8 1024 12 64  4 1024 20 64)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/ops.h"

namespace {

using namespace mg;

template <class F>
double median_ms(F f) {
  for (int i = 0; i < 3; ++i) f();
  cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    cuda::synchronize();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void run(int64_t B, int64_t S, int64_t NH, int64_t HD) {
  const int64_t H = NH * HD, N = B * S;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> host(size_t(N * 3 * H));
  for (float& x : host) x = u(gen);
  // bf16-representable inputs (a 16-bit model's qkv is), so both paths see the same values.
  std::vector<uint16_t> h16(host.size());
  cpu::cast_from_f32(h16.data(), DType::BF16, host.data(), int64_t(host.size()));
  cpu::cast_to_f32(host.data(), h16.data(), DType::BF16, int64_t(host.size()));
  cuda::Buffer qkv(host.size() * 4), qkv16(host.size() * 2), dqkv(host.size() * 4),
      out(size_t(N * H) * 4), dout(size_t(N * H) * 4), lse(size_t(B * NH * S) * 4);
  cuda::copy_to_device(qkv.get(), host.data(), host.size() * 4);
  cuda::copy_to_device(qkv16.get(), h16.data(), h16.size() * 2);
  cuda::copy_to_device(dout.get(), host.data(), size_t(N * H) * 4);
  const double fwd_flops = 2.0 * B * NH * double(S) * double(S) * double(HD);  // causal half
  std::printf("B=%lld S=%lld NH=%lld HD=%lld\n", (long long)B, (long long)S, (long long)NH,
              (long long)HD);
  for (DType t : {DType::F32, DType::BF16}) {
    // f32: the model's f32 qkv and output; bf16: both stored in bf16, as a --bf16 model has.
    const char* name = t == DType::F32 ? "f32 cuda-core" : "bf16 tensor-core";
    const cuda::Mat q{t == DType::F32 ? qkv.get() : qkv16.get(), t};
    const cuda::MatOut o{out.get(), t};
    const double f =
        median_ms([&] { cuda::attention_forward(o, lse.as<float>(), q, B, S, NH, HD, nullptr); });
    const double b = median_ms([&] {
      cuda::attention_backward(dqkv.as<float>(), dout.as<float>(), {o.data, t}, q, lse.as<float>(),
                               B, S, NH, HD, nullptr, cuda::GradWrite::Set);
    });
    std::printf("  %-17s forward %8.3f ms %7.1f TFLOP/s   backward %8.3f ms %7.1f TFLOP/s\n", name,
                f, fwd_flops / f / 1e9, b, 2.5 * fwd_flops / b / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!mg::cuda::available(&why)) {
    std::printf("gpu_attention: no CUDA device: %s\n", why.c_str());
    return 1;
  }
  std::vector<int64_t> a;
  for (int i = 1; i < argc; ++i) a.push_back(std::atoll(argv[i]));
  if (a.empty()) a = {8, 1024, 12, 64, 4, 1024, 20, 64};
  if (a.size() % 4) {
    std::fprintf(stderr, "usage: gpu_attention [B S NH HD ...]\n");
    return 2;
  }
  for (size_t i = 0; i < a.size(); i += 4) run(a[i], a[i + 1], a[i + 2], a[i + 3]);
}
