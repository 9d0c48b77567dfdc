// libFuzzer target: the files of HuggingFaceTokenizer (tokenizer.json, tokenizer_config.json) and
// TikTokenizer (Megatron's JSON vocabulary), then encoding and decoding with what they define.
// Input: a mode byte ('h': HuggingFaceTokenizer; 't' / 'T': TikTokenizer with pattern v1 / v2),
// then for 'h' tokenizer.json, NUL, tokenizer_config.json, and for 't'/'T' the vocabulary file;
// then optionally NUL and text to encode (default: a fixed sentence). Bad files must end in a
// UsageError naming the file; accepted ones must encode any text to ids inside the vocabulary.
#include <memory>
#include <nlohmann/json.hpp>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tiktoken_tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  if (size == 0) return 0;
  const char mode = char(data[0]);
  std::string_view in = fuzz::as_text(data + 1, size - 1);
  auto cut = [&in]() {
    const size_t nul = in.find('\0');
    const std::string_view head = in.substr(0, nul);
    in = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
    return head;
  };
  std::unique_ptr<Tokenizer> tok;
  fuzz::expect_usage_errors_only([&] {
    if (mode == 'h') {
      fuzz::write_file(fuzz::scratch_path("tokenizer.json"), cut());
      fuzz::write_file(fuzz::scratch_path("tokenizer_config.json"), cut());
      tok = std::make_unique<HuggingFaceTokenizer>(fuzz::scratch_dir());
    } else if (mode == 't' || mode == 'T') {
      const std::string_view vocab = cut();
      fuzz::write_file(fuzz::scratch_path("vocab.json"), vocab);
      TokenizerConfig cfg;
      cfg.tokenizer_model = fuzz::scratch_path("vocab.json");
      cfg.tiktoken_pattern = mode == 't' ? "v1" : "v2";
      cfg.tiktoken_num_special_tokens = 10;
      // All of the file's entries (the default cap, 2^17, would refuse every small file).
      const nlohmann::json j = nlohmann::json::parse(vocab, nullptr, false);
      cfg.vocab_size = j.is_array() ? int64_t(j.size()) + 10 : 0;
      tok = std::make_unique<TikTokenizer>(cfg);
    }
  });
  if (!tok) return 0;
  const std::string_view text = in.empty() ? std::string_view(
                                                 "Hello world, it's 2024: na\xc3\xafve "
                                                 "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80!")
                                           : in;
  fuzz::expect_usage_errors_only([&] {
    const std::vector<int32_t> ids = tok->encode(text);
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tok->vocab_size(), "id in the vocabulary");
    fuzz::require(tok->eod() >= 0 && tok->eod() < tok->vocab_size(), "EOD in the vocabulary");
    fuzz::keep(tok->decode(ids).size());
  });
  return 0;
}
