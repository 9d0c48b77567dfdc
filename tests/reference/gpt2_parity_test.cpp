// PyTorch parity (label `reference`): our GPT-2 writes its initial weights and batches; the
// float64 PyTorch model in gpt2_reference.py (written for this test) computes loss, logits,
// every parameter gradient and 10 AdamW steps; we must agree within the tolerances.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "model/gpt.h"
#include "optim/optimizer.h"
#include "testing/fd_check.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

template <typename T>
void write_bin(const fs::path& p, const std::vector<T>& v) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::vector<double> read_f64(const fs::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  std::vector<double> v(size_t(f.tellg()) / sizeof(double));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), v.size() * sizeof(double));
  return v;
}

std::vector<double> read_lines(const fs::path& p) {
  std::ifstream f(p);
  std::vector<double> v;
  for (double x; f >> x;) v.push_back(x);
  return v;
}

TEST(GPT2Parity, MatchesPyTorch) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = 500;  // padded to 512: the padded rows take part in the softmax, as in Megatron
  const int64_t B = 2, S = c.seq_length, N = B * S, V = c.padded_vocab_size(), steps = 10;
  OptimizerConfig ac;
  ac.weight_decay = 0.1f;
  ac.beta1 = 0.9f;
  ac.beta2 = 0.95f;
  ac.eps = 1e-8f;
  ac.clip_grad = 1.0f;
  const float lr = 2e-3f;

  GPTModel model(c, B);
  model.init(1234);
  char tmpl[] = "/tmp/mg_parity_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);

  // Batches: pseudo-random tokens, positions 0..S-1, a few masked labels.
  std::vector<int32_t> batches;
  std::vector<float> masks;
  for (int64_t s = 0; s < steps; ++s) {
    auto r = testing::random_vec(2 * N, uint32_t(100 + s), 0.f, float(c.vocab_size) - 0.01f);
    for (int64_t i = 0; i < N; ++i) batches.push_back(int32_t(r[i]));
    for (int64_t i = 0; i < N; ++i) batches.push_back(int32_t(i % S));
    for (int64_t i = 0; i < N; ++i) batches.push_back(int32_t(r[N + i]));
    for (int64_t i = 0; i < N; ++i) masks.push_back((i + s) % 7 == 3 ? 0.f : 1.f);
  }
  write_bin(dir / "batches.bin", batches);
  write_bin(dir / "masks.bin", masks);
  write_bin(dir / "params.bin", std::vector<float>(model.params(), model.params() + model.num_params()));
  nlohmann::json manifest = nlohmann::json::array();
  for (const ParamSpec& p : model.layout().params())
    manifest.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
  std::ofstream(dir / "manifest.json") << manifest.dump();
  std::ofstream(dir / "config.json")
      << nlohmann::json{{"num_layers", c.num_layers}, {"hidden_size", c.hidden_size},
                        {"num_heads", c.num_attention_heads}, {"seq_length", S}, {"batch", B},
                        {"eps", c.norm_epsilon}, {"steps", steps}, {"lr", lr},
                        {"beta1", ac.beta1}, {"beta2", ac.beta2}, {"adam_eps", ac.eps},
                        {"weight_decay", ac.weight_decay}, {"clip_grad", ac.clip_grad}}
             .dump();
  auto r = testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                                "/tests/reference/gpt2_reference.py " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto batch = [&](int64_t s) {
    const int32_t* b = batches.data() + s * 3 * N;
    return MicroBatch{b, b + N, b + 2 * N, masks.data() + s * N};
  };
  // Forward + backward on the first batch.
  model.zero_grads();
  const double loss = model.forward(0, batch(0));
  const double ref_loss = read_lines(dir / "loss.txt").at(0);
  EXPECT_LT(std::fabs(loss - ref_loss) / std::fabs(ref_loss), 1e-5) << loss << " vs " << ref_loss;
  const auto ref_logits = read_f64(dir / "logits.bin");
  ASSERT_EQ(ref_logits.size(), size_t(N * V));
  // Our logits are sequence-first (S, B, V); the reference's are (B, S, V).
  double max_diff = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t v = 0; v < V; ++v)
        max_diff = std::max(max_diff, std::fabs(double(model.logits(0)[(t * B + b) * V + v]) -
                                                ref_logits[(b * S + t) * V + v]));
  EXPECT_LE(max_diff, 1e-4) << "logits max abs diff";
  model.backward(0, nullptr, 1.0f);
  const auto ref_grads = read_f64(dir / "grads.bin");
  for (const ParamSpec& p : model.layout().params()) {
    std::vector<double> ours(model.grads() + p.offset, model.grads() + p.offset + p.numel());
    std::vector<double> ref(ref_grads.begin() + p.offset, ref_grads.begin() + p.offset + p.numel());
    EXPECT_LT(testing::rel_l2(ours, ref), 1e-4) << p.name;
  }

  // 10 AdamW steps with the same hyper-parameters.
  model.init(1234);
  Optimizer opt(model.layout(), ac);
  const auto ref_steps = read_lines(dir / "step_losses.txt");
  ASSERT_EQ(ref_steps.size(), size_t(steps));
  for (int64_t s = 0; s < steps; ++s) {
    model.zero_grads();
    const double l = model.forward(0, batch(s));
    model.backward(0, nullptr, 1.0f);
    opt.step(model.params(), model.grads(), lr);
    EXPECT_LT(std::fabs(l - ref_steps[s]) / ref_steps[s], 1e-4) << "step " << s << ": " << l
                                                                 << " vs " << ref_steps[s];
  }
  EXPECT_LT(ref_steps.back(), ref_steps.front()) << "the reference run should learn something";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mg
