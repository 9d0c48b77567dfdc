// The inference engine's speed on the CPU (bench/generate.sh runs it beside the PyTorch
// reference bench/torch_generate.py): BATCH requests of PROMPT random tokens each, greedy, NEW
// tokens each with no stop token, through the engine (inference/engine.h) on a model with the
// training initialisation. Time to first token: the first engine step (every prompt prefilled
// together, each first token sampled); decode: the remaining NEW - 1 steps, one token of each
// request per step. Best of REPEAT runs (the best filters out other jobs on a shared machine).
// Usage: generate_bench gpt2|llama BATCH PROMPT NEW [REPEAT]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "inference/engine.h"

namespace {

using namespace mg;

// GPT-2 124M and the ~125M Llama of bench/train_throughput.sh (gpt2-124m, llama-125m).
GPTConfig shape(const std::string& name) {
  GPTConfig c;
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.seq_length = 1024;
  c.vocab_size = 50304;  // GPT-2's 50257 padded to a multiple of 128, as Megatron pads it
  if (name == "llama") {
    c.vocab_size = 32000;
    c.normalization = "RMSNorm";
    c.position_embedding_type = "rope";
    c.swiglu = true;
    c.ffn_hidden_size = 2048;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
    c.group_query_attention = true;
    c.num_query_groups = 4;
  } else if (name != "gpt2") {
    std::fprintf(stderr, "unknown model '%s' (gpt2 | llama)\n", name.c_str());
    std::exit(2);
  }
  c.validate();
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: generate_bench gpt2|llama BATCH PROMPT NEW [REPEAT]\n");
    return 2;
  }
  const std::string name = argv[1];
  const int64_t B = std::atoll(argv[2]), P = std::atoll(argv[3]), N = std::atoll(argv[4]);
  const int repeat = argc > 5 ? std::atoi(argv[5]) : 3;
  const GPTConfig cfg = shape(name);
  EngineConfig ec;
  ec.max_seq_length = P + N;
  ec.max_requests = B;
  ec.max_step_rows = B * P;  // every prompt prefilled in the first step
  InferenceModel model(cfg, DType::F32, ec.step_rows());
  model.store().init(1234);
  model.prepare();
  Engine engine(model, ec);
  double ttft = 1e30, decode = 1e30;
  for (int r = 0; r < repeat; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      Request q;
      for (int64_t i = 0; i < P; ++i) q.prompt.push_back(int32_t((b * 7919 + i * 104729) % 32000));
      q.sampling.temperature = 0;
      q.sampling.max_new_tokens = N;
      engine.add(std::move(q));
    }
    const auto t0 = std::chrono::steady_clock::now();
    engine.step();  // prefill + each first token
    const double first = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    int64_t generated = 0;
    while (!engine.idle()) {
      engine.step();
      generated += int64_t(engine.generated().size());
    }
    if (generated != B * (N - 1)) {
      std::fprintf(stderr, "decoded %lld tokens, expected %lld\n", (long long)generated,
                   (long long)(B * (N - 1)));
      return 1;
    }
    ttft = std::min(ttft, first);
    decode = std::min(decode, seconds_since(t1));
  }
  std::printf(
      "megatron: model=%s params=%lld batch=%lld prompt=%lld new=%lld ttft_ms=%.1f "
      "decode_tokens_per_s=%.1f\n",
      name.c_str(), (long long)cfg.num_parameters(), (long long)B, (long long)P, (long long)N,
      ttft * 1e3, double(B * (N - 1)) / decode);
  return 0;
}
