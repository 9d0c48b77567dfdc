#include "tokenizer/tokenizer.h"

#include <charconv>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tiktoken_tokenizer.h"
#include "tokenizer/tokenizer_files.h"
#include "text/unicode.h"

namespace mg {

namespace {

bool is_other(char32_t c) {
  return !unicode::is_space(c) && !unicode::is_letter(c) && !unicode::is_number(c);
}

}  // namespace

struct GPT2BPETokenizer::Vocab {
  std::unordered_map<std::string, int32_t> encoder;
  std::vector<std::string> decoder;                    // id -> token string
  std::unordered_map<std::string, int32_t> bpe_ranks;  // "first second" -> rank
  std::vector<std::string> byte_encoder;               // byte -> string
  std::unordered_map<char32_t, uint8_t> byte_decoder;
};

GPT2BPETokenizer::GPT2BPETokenizer(std::shared_ptr<const Vocab> v) : vocab_(std::move(v)) {
  eod_ = vocab_->encoder.at("<|endoftext|>");
}

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file) {
  auto v = std::make_shared<Vocab>();
  const nlohmann::json j = read_tokenizer_json(vocab_file, "--vocab-file");
  MG_USER_CHECK(j.is_object() && !j.empty(), "--vocab-file '", vocab_file,
                "' must be a JSON object of token -> id (GPT-2's encoder.json / vocab.json)");
  for (auto& [tok, id] : j.items()) {
    MG_USER_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                  "--vocab-file '", vocab_file, "': bad id for token '", tok, "'");
    v->encoder[tok] = id.get<int32_t>();
  }
  v->decoder.resize(v->encoder.size());
  std::vector<bool> seen(v->decoder.size(), false);
  for (auto& [tok, id] : v->encoder) {
    MG_USER_CHECK(size_t(id) < v->decoder.size(), "--vocab-file '", vocab_file, "': token '", tok,
                  "' has id ", id, "; the ", v->decoder.size(), " ids must be 0..N-1");
    MG_USER_CHECK(!seen[size_t(id)], "--vocab-file '", vocab_file, "': tokens '",
                  v->decoder[size_t(id)], "' and '", tok, "' share id ", id);
    seen[size_t(id)] = true;
    v->decoder[size_t(id)] = tok;
  }
  MG_USER_CHECK(v->encoder.count("<|endoftext|>"), "--vocab-file '", vocab_file,
                "' has no <|endoftext|> token");
  v->byte_encoder = unicode::byte_level_chars();
  for (int b = 0; b < 256; ++b) {
    MG_USER_CHECK(v->encoder.count(v->byte_encoder[b]), "--vocab-file '", vocab_file,
                  "' lacks the token of byte ", b, " ('", v->byte_encoder[b],
                  "'): not a GPT-2 byte-level BPE vocabulary");
    v->byte_decoder[unicode::decode_utf8(v->byte_encoder[b])[0]] = uint8_t(b);
  }
  // merges: a "#version" header line, then "first second" per line, in rank order (HF's
  // tokenizer: a pair listed twice keeps its last rank; CRLF line ends read as LF).
  std::istringstream merges(read_tokenizer_file(merge_file, "--merge-file"));
  std::string line;
  int32_t rank = 0;
  for (int64_t line_no = 1; std::getline(merges, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    MG_USER_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                      line.find(' ', space + 1) == std::string::npos,
                  "--merge-file '", merge_file, "' line ", line_no, ": '", line,
                  "' is not a 'first second' pair");
    const std::string merged = line.substr(0, space) + line.substr(space + 1);
    // Every merge result must be a token, or encode() would produce an id-less piece.
    MG_USER_CHECK(v->encoder.count(merged), "--merge-file '", merge_file, "' line ", line_no,
                  ": the merge gives '", merged, "', which --vocab-file '", vocab_file,
                  "' lacks; pass the vocabulary that belongs to these merges");
    v->bpe_ranks[line] = rank++;
  }
  *this = GPT2BPETokenizer(std::shared_ptr<const Vocab>(std::move(v)));
}

int64_t GPT2BPETokenizer::vocab_size() const { return int64_t(vocab_->decoder.size()); }

std::unique_ptr<Tokenizer> GPT2BPETokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new GPT2BPETokenizer(vocab_));
}

std::vector<std::string> GPT2BPETokenizer::pretokenize(std::string_view text) {
  const std::vector<char32_t> cp = unicode::decode_utf8(text);
  const size_t n = cp.size();
  std::vector<std::string> out;
  auto emit = [&](size_t a, size_t b) {
    std::string s;
    for (size_t k = a; k < b; ++k) unicode::append_utf8(s, cp[k]);
    out.push_back(std::move(s));
  };
  // One class run after an optional single ' ' (the ` ?\p{L}+`-style alternatives).
  auto run = [&](size_t i, bool (*in_class)(char32_t)) -> size_t {
    size_t j = i + (cp[i] == U' ' ? 1 : 0);
    if (j >= n || !in_class(cp[j])) return i;
    while (j < n && in_class(cp[j])) ++j;
    return j;
  };
  size_t i = 0;
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
    if (cp[i] == U'\'' && i + 1 < n) {
      const char32_t a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
      size_t len = 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd') len = 2;
      else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l'))
        len = 3;
      if (len) {
        emit(i, i + len);
        i += len;
        continue;
      }
    }
    size_t j;
    if ((j = run(i, unicode::is_letter)) > i || (j = run(i, unicode::is_number)) > i ||
        (j = run(i, is_other)) > i) {
      emit(i, j);
      i = j;
      continue;
    }
    // Whitespace: \s+(?!\S) leaves the last space to prefix a following non-space token;
    // otherwise \s+ takes the run.
    j = i;
    while (j < n && unicode::is_space(cp[j])) ++j;
    if (j < n && j - i > 1) j -= 1;
    emit(i, j);
    i = j;
  }
  return out;
}

void GPT2BPETokenizer::bpe(const std::string& piece, std::vector<int32_t>& out) {
  if (auto it = cache_.find(piece); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const Vocab& v = *vocab_;
  std::vector<std::string> word;
  for (unsigned char c : piece) word.push_back(v.byte_encoder[c]);
  while (word.size() > 1) {
    int32_t best = INT32_MAX;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = v.bpe_ranks.find(word[i] + ' ' + word[i + 1]);
      if (it != v.bpe_ranks.end() && it->second < best) {
        best = it->second;
        best_i = i;
      }
    }
    if (best == INT32_MAX) break;
    const std::string first = word[best_i], second = word[best_i + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word.swap(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& w : word) {
    auto it = v.encoder.find(w);
    MG_CHECK(it != v.encoder.end(), "BPE produced '", w, "', which the vocabulary lacks");
    ids.push_back(it->second);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() < (1u << 20)) cache_.emplace(piece, std::move(ids));
}

std::vector<int32_t> GPT2BPETokenizer::encode(std::string_view text) {
  std::vector<int32_t> out;
  for (const std::string& piece : pretokenize(text)) bpe(piece, out);
  return out;
}

std::string GPT2BPETokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    MG_USER_CHECK(id >= 0 && size_t(id) < vocab_->decoder.size(), "token id ", id,
                  " outside the GPT-2 vocabulary");
    for (char32_t c : unicode::decode_utf8(vocab_->decoder[size_t(id)])) {
      auto it = vocab_->byte_decoder.find(c);
      if (it != vocab_->byte_decoder.end()) out += char(it->second);
    }
  }
  return out;
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    int64_t v = -1;
    auto [p, ec] = std::from_chars(text.data() + i, text.data() + j, v);
    MG_USER_CHECK(ec == std::errc() && p == text.data() + j && v >= 0 && v < vocab_size_,
                  "NullTokenizer: '", std::string(text.substr(i, j - i)),
                  "' is not a token id in [0, --vocab-size ", vocab_size_, ")");
    out.push_back(int32_t(v));
    i = j;
  }
  return out;
}

std::string NullTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

void TokenizerConfig::validate() const {
  validate_tiktoken_flags(*this);
  MG_USER_CHECK(vocab_extra_ids == 0 || tokenizer_type == "SentencePieceTokenizer",
                "--vocab-extra-ids applies to --tokenizer-type SentencePieceTokenizer only");
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& cfg) {
  cfg.validate();
  if (cfg.tokenizer_type == "GPT2BPETokenizer") {
    MG_USER_CHECK(!cfg.vocab_file.empty(), "--tokenizer-type GPT2BPETokenizer needs --vocab-file");
    MG_USER_CHECK(!cfg.merge_file.empty(), "--tokenizer-type GPT2BPETokenizer needs --merge-file");
    return std::make_unique<GPT2BPETokenizer>(cfg.vocab_file, cfg.merge_file);
  }
  if (cfg.tokenizer_type == "NullTokenizer") {
    MG_USER_CHECK(cfg.vocab_size != 0, "--tokenizer-type NullTokenizer needs --vocab-size");
    // Token ids are int32 in batches and in the .bin files.
    MG_USER_CHECK(cfg.vocab_size > 0 && cfg.vocab_size <= INT32_MAX,
                  "--vocab-size must be in [1, 2147483647] (token ids are int32; got ",
                  cfg.vocab_size, ")");
    return std::make_unique<NullTokenizer>(cfg.vocab_size);
  }
  using SP = SentencePieceTokenizer::Kind;
  for (const auto& [name, kind] : {std::pair{"SentencePieceTokenizer", SP::kSentencePiece},
                                   std::pair{"GPTSentencePieceTokenizer", SP::kGPTSentencePiece},
                                   std::pair{"Llama2Tokenizer", SP::kLlama2}}) {
    if (cfg.tokenizer_type != name) continue;
    MG_USER_CHECK(!cfg.tokenizer_model.empty(), "--tokenizer-type ", name,
                  " needs --tokenizer-model (the SentencePiece tokenizer.model file)");
    return std::make_unique<SentencePieceTokenizer>(cfg.tokenizer_model, kind, cfg.vocab_extra_ids);
  }
  if (cfg.tokenizer_type == "HuggingFaceTokenizer")
    return std::make_unique<HuggingFaceTokenizer>(cfg.tokenizer_model);
  if (cfg.tokenizer_type == "TikTokenizer") return std::make_unique<TikTokenizer>(cfg);
  throw UsageError(str_cat("--tokenizer-type '", cfg.tokenizer_type, "' is not supported; use ",
                           kTokenizerTypesHelp));
}

int64_t tokenizer_vocab_size(TokenizerConfig& cfg, int64_t model_vocab_size,
                             bool vocab_size_given) {
  cfg.validate();
  if (cfg.tokenizer_type.empty()) return 0;
  if (cfg.tokenizer_type == "NullTokenizer" ||
      (cfg.tokenizer_type == "TikTokenizer" && vocab_size_given))
    cfg.vocab_size = model_vocab_size;
  return make_tokenizer(cfg)->vocab_size();
}

}  // namespace mg
