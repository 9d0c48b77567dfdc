// Tokenizer encode throughput alone (no JSON parsing, no writing): the documents of a JSON-lines
// file (key "text") encoded by one tokenizer instance, REPEAT rounds, each with a fresh copy (an
// empty pre-token cache, as a preprocess worker starts); prints the fastest round in MB/s of text.
// Usage: tokenizer_encode --input DOCS.jsonl --tokenizer-type T [its flags] [--vocab-size V]
//        [--repeat R]   (bench/tokenizer_throughput.sh runs it for every type)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/tokenizer_options.h"
#include "core/error.h"

namespace {

struct BenchConfig {
  std::string input;
  mg::TokenizerConfig tokenizer;
  int repeat = 5;
};

int run(const std::vector<std::string>& args) {
  using C = BenchConfig;
  auto table = mg::tokenizer_options<C>([](C & c) -> auto& { return c.tokenizer; });
  table.push_back(mg::valued<C>(
      "--input", "FILE", "JSON lines", [](C & c) -> auto& { return c.input; }));
  table.push_back(mg::valued<C>(
      "--vocab-size", "V", "NullTokenizer / TikTokenizer",
      [](C & c) -> auto& { return c.tokenizer.vocab_size; }));
  table.push_back(mg::valued<C>(
      "--repeat", "R", "rounds", [](C & c) -> auto& { return c.repeat; }));
  const C cfg = mg::parse_args(table, args, "tokenizer_encode");
  std::vector<std::string> docs;
  size_t bytes = 0;
  std::ifstream in(cfg.input);
  MG_USER_CHECK(in.good(), "--input: cannot read '", cfg.input, "'");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) continue;
    docs.push_back(j["text"].get<std::string>());
    bytes += docs.back().size();
  }
  const std::unique_ptr<mg::Tokenizer> tok = mg::make_tokenizer(cfg.tokenizer);
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < std::max(cfg.repeat, 1); ++r) {
    const std::unique_ptr<mg::Tokenizer> fresh = tok->clone();
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& d : docs) tokens += fresh->encode(d).size();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("encode only: %zu documents, %zu tokens, %.2f MB in %.3f s (%.2f MB/s, best of %d)\n",
              docs.size(), tokens, double(bytes) / 1e6, best, double(bytes) / 1e6 / best,
              std::max(cfg.repeat, 1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const mg::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
