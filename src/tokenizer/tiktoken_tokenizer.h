// TikTokenizer (Megatron's --tokenizer-type TikTokenizer): tiktoken's byte-level BPE over a
// vocabulary in Megatron's JSON format, a list of {"rank": i, "token_bytes": base64,
// "token_str": ...} with rank i == position and ranks 0-255 the single bytes. The merge order is
// the rank of the merged bytes (tiktoken's rule); a piece found whole in the vocabulary is one
// token. Ids: the num_special_tokens special tokens come first (the named ones, default <unk>,
// <s>, </s>, then <SPECIAL_i> fillers), then the vocabulary shifted by num_special_tokens, cut to
// --vocab-size in total (default 2^17). Text is split by Megatron's v1 or v2 pattern; encode()
// is Megatron's tokenize(): tiktoken's encode_ordinary (special-token text is plain text), no
// BOS or EOS. eod() = bos()+1 = the id of </s>.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "text/regex.h"
#include "tokenizer/tokenizer.h"

namespace mg {

// Megatron's PATTERN_TIKTOKEN ("v1") and PATTERN_TIKTOKEN_V2 ("v2"); a UsageError naming
// --tiktoken-pattern for any other name.
const std::string& tiktoken_pattern(const std::string& name);

// Megatron's rules for the tiktoken flags that hold whatever the type: --tiktoken-pattern v1 or
// v2 (when given); --tiktoken-special-tokens distinct and holding <unk>, <s>, </s> (when given);
// --tiktoken-num-special-tokens >= 0.
void validate_tiktoken_flags(const TokenizerConfig& cfg);

class TikTokenizer : public Tokenizer {
 public:
  // cfg: tokenizer_model (the JSON file), tiktoken_pattern, tiktoken_num_special_tokens,
  // tiktoken_special_tokens, vocab_size (0: 2^17). Throws UsageError naming the flag and file.
  explicit TikTokenizer(const TokenizerConfig& cfg);
  std::vector<int32_t> encode(std::string_view text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;
  int32_t bos() const override;
  std::unique_ptr<Tokenizer> clone() const override;

 private:
  struct Vocab;
  std::shared_ptr<const Vocab> vocab_;
  Regex pattern_;
  BpeCache cache_;
  TikTokenizer(std::shared_ptr<const Vocab> vocab, const Regex& pattern)
      : vocab_(std::move(vocab)), pattern_(pattern) {}
};

}  // namespace mg
