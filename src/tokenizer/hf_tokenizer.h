// HuggingFaceTokenizer (Megatron's --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR):
// the BPE tokenizers of the Llama family from DIR/tokenizer.json (+ tokenizer_config.json,
// special_tokens_map.json), with the `tokenizers` library's semantics: added tokens split the
// text first (matched whole, longest first, honouring lstrip/rstrip/single_word); each other
// segment is normalized, pre-tokenized and BPE-encoded (ignore_merges: a piece found whole in the
// vocabulary is one token; byte_fallback: <0xNN> tokens for characters without one; unk_token /
// fuse_unk otherwise); the post-processor then adds BOS/EOS. encode() is Megatron's tokenize():
// HF's tokenizer(text).input_ids, special tokens added. vocab_size() is len(tokenizer) (vocabulary
// plus added tokens), eod() the EOS id, bos() the BOS id (-1 when none).
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/tokenizer.h"

namespace mg {

class HuggingFaceTokenizer : public Tokenizer {
 public:
  // Throws UsageError naming --tokenizer-model and the file for a missing, malformed or
  // unsupported tokenizer.
  explicit HuggingFaceTokenizer(const std::string& dir);
  std::vector<int32_t> encode(std::string_view text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;
  int32_t bos() const override;
  std::unique_ptr<Tokenizer> clone() const override;

  // encode() without the post-processor's special tokens (add_special_tokens=False).
  std::vector<int32_t> encode_text(std::string_view text);

  struct Model;  // the loaded files, shared by copies (hf_tokenizer.cpp)

 private:
  std::shared_ptr<const Model> model_;
  // Per instance (they hold match state): the added tokens' pattern and the pre-tokenizer.
  std::vector<Regex> added_pattern_;
  HfPreTokenizer pre_tokenizer_;
  BpeCache cache_;
  std::vector<HfPiece> pieces_;
  std::deque<std::string> arena_;
  std::vector<int32_t> symbols_;

  explicit HuggingFaceTokenizer(std::shared_ptr<const Model> model);
  void encode_segment(std::string_view segment, bool at_text_start, std::vector<int32_t>& out);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);
  void encode_word(std::string_view word, std::vector<int32_t>& out);
};

}  // namespace mg
