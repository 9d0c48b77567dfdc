// SentencePiece tokenizers (Kudo & Richardson 2018), through Debian's libsentencepiece: the model
// file (--tokenizer-model tokenizer.model) does the encoding; this class adds Megatron's rules per
// --tokenizer-type (megatron/training/tokenizer/tokenizer.py):
//  - SentencePieceTokenizer: special tokens <CLS> <SEP> <EOD> <MASK>, the model's pad/bos/eos
//    pieces (or <PAD> <BOS> <EOS> when the model has none) and <extra_id_0..N-1>
//    (--vocab-extra-ids), each reusing the model's id when it is one of its pieces, else appended
//    after the last piece. encode() cuts the text at each special token's text (earliest first,
//    ties to the first listed) and encodes the pieces between separately. EOD = <EOD>.
//  - GPTSentencePieceTokenizer: the model alone; EOD = the model's eos.
//  - Llama2Tokenizer: the model's ids after its BOS; EOD = the model's eos.
// Instances share the loaded model (encoding is const in libsentencepiece): clone() is cheap.
// For BPE models made as Llama 2's (no normalization, whitespace kept, no piece with a space
// inside) the text is encoded word by word with a per-instance cache, as GPT-2's BPE is: such a
// model can never merge across the space that starts a word, so the ids are the same.
#pragma once
#include <memory>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mg {

class SentencePieceTokenizer : public Tokenizer {
 public:
  enum class Kind { kSentencePiece, kGPTSentencePiece, kLlama2 };

  // Throws UsageError naming --tokenizer-model and the file when it is missing or not a
  // SentencePiece model, or lacks the BOS/EOS piece the type needs.
  SentencePieceTokenizer(const std::string& model_file, Kind kind, int64_t vocab_extra_ids = 0);

  std::vector<int32_t> encode(std::string_view text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;
  int32_t bos() const override;
  std::unique_ptr<Tokenizer> clone() const override;

  int32_t eos() const;
  // Whether encode() goes word by word through the cache (the model allows it; for tests).
  bool caches_words() const;
  // SentencePieceTokenizer's special tokens in Megatron's order (empty for the other kinds).
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const;

 private:
  struct Model;
  explicit SentencePieceTokenizer(std::shared_ptr<const Model> m) : m_(std::move(m)) {}
  void encode_text(std::string_view text, std::vector<int32_t>& out);
  void encode_word(std::string_view word, std::vector<int32_t>& out);

  std::shared_ptr<const Model> m_;
  // word -> ids, looked up by string_view (no copy of the word on a hit)
  struct WordHash {
    using is_transparent = void;
    size_t operator()(std::string_view w) const { return std::hash<std::string_view>{}(w); }
  };
  std::unordered_map<std::string, std::vector<int32_t>, WordHash, std::equal_to<>> cache_;
};

}  // namespace mg
