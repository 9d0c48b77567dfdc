// libFuzzer target: GPT-2 tokenizer files (--vocab-file vocab.json, --merge-file merges.txt),
// then encoding with what they define. Input: vocab.json bytes, a NUL byte, merges.txt bytes,
// optionally a second NUL and text to encode (default: a fixed sentence). Bad files must end in
// a UsageError naming the file; accepted ones must encode any text to ids inside the vocabulary.
#include <memory>

#include "tokenizer/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  std::string_view in = fuzz::as_text(data, size);
  auto cut = [&in]() {
    const size_t nul = in.find('\0');
    const std::string_view head = in.substr(0, nul);
    in = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
    return head;
  };
  const std::string_view vocab = cut(), merges = cut();
  const std::string_view text = in.empty() ? std::string_view(
                                                 "Hello world, it's 2024: na\xc3\xafve "
                                                 "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80!")
                                           : in;
  const std::string vocab_path = fuzz::scratch_path("vocab.json");
  const std::string merges_path = fuzz::scratch_path("merges.txt");
  fuzz::write_file(vocab_path, vocab);
  fuzz::write_file(merges_path, merges);
  fuzz::expect_usage_errors_only([&] {
    GPT2BPETokenizer tok(vocab_path, merges_path);
    for (int32_t id : tok.encode(text))
      fuzz::require(id >= 0 && id < tok.vocab_size(), "id in the vocabulary");
    fuzz::require(tok.eod() >= 0 && tok.eod() < tok.vocab_size(), "EOD in the vocabulary");
    fuzz::keep(tok.decode({tok.eod()}).size());
  });
  return 0;
}
