// Tokenizers, selected by Megatron's --tokenizer-type:
//  - GPT2BPETokenizer (--vocab-file vocab.json/encoder.json, --merge-file merges.txt/vocab.bpe):
//    GPT-2's byte-level BPE (Radford et al. 2019): the pre-tokenization pattern
//    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, bytes mapped to
//    printable characters, then merges applied lowest rank first. <|endoftext|> = 50256 is EOD.
//  - NullTokenizer (--vocab-size V): text is space-separated ids; EOD = V - 1.
//  - SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer (--tokenizer-model
//    tokenizer.model): tokenizer/sentencepiece_tokenizer.h.
//  - HuggingFaceTokenizer (--tokenizer-model DIR with tokenizer.json): tokenizer/hf_tokenizer.h.
//  - TikTokenizer (--tokenizer-model FILE --tiktoken-pattern v1|v2): tokenizer/tiktoken_tokenizer.h.
// An instance caches BPE results and is not thread-safe: use one per thread (copies share the
// vocabulary).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mg {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t eod() const = 0;
  // The beginning-of-sequence id, or -1 when the tokenizer has none.
  virtual int32_t bos() const { return -1; }
  virtual std::unique_ptr<Tokenizer> clone() const = 0;
};

class GPT2BPETokenizer : public Tokenizer {
 public:
  // Throws UsageError naming the file when it is missing or malformed.
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  std::vector<int32_t> encode(std::string_view text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override { return eod_; }
  std::unique_ptr<Tokenizer> clone() const override;

  // The pre-tokenizer alone (the regex's matches, in order), for tests.
  static std::vector<std::string> pretokenize(std::string_view text);

 private:
  struct Vocab;
  GPT2BPETokenizer(std::shared_ptr<const Vocab> v);
  void bpe(const std::string& piece, std::vector<int32_t>& out);

  std::shared_ptr<const Vocab> vocab_;
  int32_t eod_ = 0;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::vector<int32_t> encode(std::string_view text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return int32_t(vocab_size_ - 1); }
  std::unique_ptr<Tokenizer> clone() const override {
    return std::make_unique<NullTokenizer>(vocab_size_);
  }

 private:
  int64_t vocab_size_;
};

// The --tokenizer-type values (help text and the factory's error).
inline constexpr const char* kTokenizerTypesHelp =
    "GPT2BPETokenizer | NullTokenizer | HuggingFaceTokenizer | TikTokenizer"
    " | SentencePieceTokenizer | GPTSentencePieceTokenizer | Llama2Tokenizer";

// The tokenizer flags (Megatron's names), shared by preprocess, train and generate
// (cli/tokenizer_options.h lists them once).
struct TokenizerConfig {
  std::string tokenizer_type;                  // --tokenizer-type
  std::string vocab_file;                      // --vocab-file
  std::string merge_file;                      // --merge-file
  std::string tokenizer_model;                 // --tokenizer-model: a directory or file, by type
  std::string tiktoken_pattern;                // --tiktoken-pattern v1 | v2
  int64_t tiktoken_num_special_tokens = 1000;  // --tiktoken-num-special-tokens
  std::vector<std::string> tiktoken_special_tokens;  // --tiktoken-special-tokens
  int64_t vocab_size = 0;       // --vocab-size (NullTokenizer; TikTokenizer's vocabulary cap)
  int64_t vocab_extra_ids = 0;  // --vocab-extra-ids: SentencePieceTokenizer's <extra_id_N> tokens
  // Refuses values the flags cannot hold, whatever the type (UsageError naming the flag).
  void validate() const;
};

// Throws UsageError naming the flag when the type or its files are missing.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& cfg);

// The vocabulary the tokenizer gives the model (0 without --tokenizer-type; Megatron pads it
// afterwards). The types Megatron builds from args.vocab_size take the model's --vocab-size:
// NullTokenizer always, TikTokenizer as its cap when the flag is given (else its own default).
// Validates cfg and builds the tokenizer (UsageError naming the flag or file).
int64_t tokenizer_vocab_size(TokenizerConfig& cfg, int64_t model_vocab_size, bool vocab_size_given);

}  // namespace mg
