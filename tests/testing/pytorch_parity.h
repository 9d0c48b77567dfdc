// PyTorch parity runs (label `reference`): our model writes its initial weights, batches and
// config into a temporary folder; a float64 PyTorch model written for the test
// (tests/reference/<script>) computes the first batch's loss, logits and every parameter
// gradient, and the losses of N AdamW steps; ours must agree within fixed tolerances:
// loss 1e-5 relative, logits 1e-4 max abs, each gradient 1e-4 relative L2, step losses 1e-4.
// Files: config.json {"model": every model field by its Megatron name (model/fields.cpp),
// "batch", "steps", optimizer}, params.bin (f32, flat, our layout) + manifest.json (name,
// shape, offset), batches.bin (i32: steps x [tokens, position ids, labels], each [B, S]),
// masks.bin (f32); back: loss.txt, logits.bin (f64 [B, S, V]), grads.bin (f64, our layout),
// step_losses.txt.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <variant>

#include "model/fields.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "testing/fd_check.h"
#include "testing/subprocess.h"

namespace mg::testing {

struct ParityCase {
  GPTConfig model;
  std::string script;  // file name under tests/reference/
  int64_t batch = 2;
  int64_t steps = 10;
  float lr = 2e-3f;
  OptimizerConfig opt = [] {
    OptimizerConfig o;
    o.weight_decay = 0.1f;
    o.beta1 = 0.9f;
    o.beta2 = 0.95f;
    o.eps = 1e-8f;
    o.clip_grad = 1.0f;
    return o;
  }();
  // Labels are drawn from ids [0, label_vocab) (0: the whole vocabulary); uniformly random
  // labels over few ids leave the 10 steps a distribution to learn even with an untied output.
  int64_t label_vocab = 0;
  // The position id written for sequence index t (RoPE models must ignore them).
  std::function<int32_t(int64_t t)> position_id = [](int64_t t) { return int32_t(t); };
};

template <typename T>
void write_bin(const std::filesystem::path& p, const std::vector<T>& v) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

inline std::vector<double> read_f64(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  std::vector<double> v(size_t(f.tellg()) / sizeof(double));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(double)));
  return v;
}

inline std::vector<double> read_lines(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::vector<double> v;
  for (double x; f >> x;) v.push_back(x);
  return v;
}

// Every model field by its Megatron name, with its exact value (floats as the f32 we use).
inline nlohmann::json model_fields_json(const GPTConfig& c) {
  nlohmann::json j;
  for (const ModelField& f : model_fields()) std::visit([&](auto m) { j[f.key] = c.*m; }, f.member);
  return j;
}

inline void check_pytorch_parity(const ParityCase& pc) {
  namespace fs = std::filesystem;
  const GPTConfig& c = pc.model;
  const int64_t B = pc.batch, S = c.seq_length, N = B * S, V = c.padded_vocab_size();
  const int64_t steps = pc.steps;
  GPTModel model(c, B);
  model.init(1234);
  char tmpl[] = "/tmp/mg_parity_XXXXXX";
  const fs::path dir = mkdtemp(tmpl);

  // Batches: pseudo-random tokens and labels, a few masked labels.
  std::vector<int32_t> batches;
  std::vector<float> masks;
  const double label_scale = pc.label_vocab > 0 ? double(pc.label_vocab) / double(c.vocab_size) : 1;
  for (int64_t s = 0; s < steps; ++s) {
    auto r = random_vec(size_t(2 * N), uint32_t(100 + s), 0.f, float(c.vocab_size) - 0.01f);
    for (int64_t i = 0; i < N; ++i) batches.push_back(int32_t(r[size_t(i)]));
    for (int64_t i = 0; i < N; ++i) batches.push_back(pc.position_id(i % S));
    for (int64_t i = 0; i < N; ++i) batches.push_back(int32_t(r[size_t(N + i)] * label_scale));
    for (int64_t i = 0; i < N; ++i) masks.push_back((i + s) % 7 == 3 ? 0.f : 1.f);
  }
  write_bin(dir / "batches.bin", batches);
  write_bin(dir / "masks.bin", masks);
  write_bin(dir / "params.bin",
            std::vector<float>(model.params(), model.params() + model.num_params()));
  nlohmann::json manifest = nlohmann::json::array();
  for (const ParamSpec& p : model.layout().params())
    manifest.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
  std::ofstream(dir / "manifest.json") << manifest.dump();
  const OptimizerConfig& ac = pc.opt;
  std::ofstream(dir / "config.json") << nlohmann::json{
      {"model", model_fields_json(c)},
      {"batch", B},
      {"steps", steps},
      {"lr", pc.lr},
      {"beta1", ac.beta1},
      {"beta2", ac.beta2},
      {"adam_eps", ac.eps},
      {"weight_decay", ac.weight_decay},
      {"clip_grad", ac.clip_grad}}.dump();
  auto r = run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR + "/tests/reference/" +
                       pc.script + " " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto batch = [&](int64_t s) {
    const int32_t* b = batches.data() + s * 3 * N;
    return MicroBatch{b, b + N, b + 2 * N, masks.data() + s * N};
  };
  // Forward + backward on the first batch.
  model.zero_grads();
  const double loss = model.forward(0, batch(0));
  const double ref_loss = read_lines(dir / "loss.txt").at(0);
  const double loss_err = std::fabs(loss - ref_loss) / std::fabs(ref_loss);
  EXPECT_LT(loss_err, 1e-5) << loss << " vs " << ref_loss;
  const auto ref_logits = read_f64(dir / "logits.bin");
  ASSERT_EQ(ref_logits.size(), size_t(N * V));
  // Our logits are sequence-first (S, B, V); the reference's are (B, S, V).
  double logits_err = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t v = 0; v < V; ++v)
        logits_err = std::max(logits_err, std::fabs(double(model.logits(0)[(t * B + b) * V + v]) -
                                                    ref_logits[size_t((b * S + t) * V + v)]));
  EXPECT_LE(logits_err, 1e-4) << "logits max abs diff";
  model.backward(0, nullptr, 1.0f);
  const auto ref_grads = read_f64(dir / "grads.bin");
  ASSERT_EQ(ref_grads.size(), size_t(model.num_params()));
  double grad_err = 0;
  std::string worst_grad;
  for (const ParamSpec& p : model.layout().params()) {
    std::vector<double> ours(model.grads() + p.offset, model.grads() + p.offset + p.numel());
    std::vector<double> ref(ref_grads.begin() + p.offset, ref_grads.begin() + p.offset + p.numel());
    const double e = rel_l2(ours, ref);
    EXPECT_LT(e, 1e-4) << p.name;
    if (e >= grad_err) grad_err = e, worst_grad = p.name;
  }

  // AdamW steps with the same hyper-parameters.
  model.init(1234);
  Optimizer opt(model.layout(), ac);
  const auto ref_steps = read_lines(dir / "step_losses.txt");
  ASSERT_EQ(ref_steps.size(), size_t(steps));
  double step_err = 0;
  for (int64_t s = 0; s < steps; ++s) {
    model.zero_grads();
    const double l = model.forward(0, batch(s));
    model.backward(0, nullptr, 1.0f);
    opt.step(model.params(), model.grads(), pc.lr);
    const double e = std::fabs(l - ref_steps[size_t(s)]) / ref_steps[size_t(s)];
    EXPECT_LT(e, 1e-4) << "step " << s << ": " << l << " vs " << ref_steps[size_t(s)];
    step_err = std::max(step_err, e);
  }
  EXPECT_LT(ref_steps.back(), ref_steps.front()) << "the reference run should learn something";
  std::cout << "parity vs " << pc.script << ": loss rel " << loss_err << ", logits max abs "
            << logits_err << ", worst grad rel L2 " << grad_err << " (" << worst_grad
            << "), worst step loss rel " << step_err << "\n";
  fs::remove_all(dir);
}

}  // namespace mg::testing
