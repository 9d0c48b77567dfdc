#include "tokenizer/tiktoken_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/tokenizer_files.h"
#include "text/unicode.h"

namespace mg {

namespace {

constexpr const char* kFlag = "--tokenizer-model";
constexpr int64_t kDefaultVocabSize = int64_t(1) << 17;  // Megatron's fallback

// Standard base64 (RFC 4648, '=' padding); false on any other character.
bool base64_decode(const std::string& in, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  size_t end = in.size();
  while (end > 0 && in[end - 1] == '=') --end;
  if (in.size() % 4 != 0 || in.size() - end > 2) return false;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < end; ++i) {
    const int v = value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return true;
}

}  // namespace

const std::string& tiktoken_pattern(const std::string& name) {
  // Megatron's PATTERN_TIKTOKEN and PATTERN_TIKTOKEN_V2, verbatim.
  static const std::string v1 =
      R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
  static const std::string v2 =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|)"
      R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (name == "v1") return v1;
  if (name == "v2") return v2;
  throw UsageError(str_cat("--tiktoken-pattern '", name, "' is not supported; use v1 or v2",
                           name.empty() ? " (--tokenizer-type TikTokenizer needs it)" : ""));
}

void validate_tiktoken_flags(const TokenizerConfig& cfg) {
  if (!cfg.tiktoken_pattern.empty()) tiktoken_pattern(cfg.tiktoken_pattern);
  const std::vector<std::string>& named = cfg.tiktoken_special_tokens;
  if (!named.empty()) {
    for (const char* required : {"<unk>", "<s>", "</s>"})
      MG_USER_CHECK(std::count(named.begin(), named.end(), required) == 1,
                    "--tiktoken-special-tokens must hold ", required, " exactly once");
    MG_USER_CHECK(std::unordered_set<std::string>(named.begin(), named.end()).size() ==
                      named.size(),
                  "--tiktoken-special-tokens: the special tokens must differ");
  }
  MG_USER_CHECK(cfg.tiktoken_num_special_tokens >= 0, "--tiktoken-num-special-tokens must be >= 0");
}

struct TikTokenizer::Vocab {
  int64_t vocab_size = 0;
  int32_t num_special = 0, unk = 0, bos = 0, eos = 0;
  std::vector<std::string> id_to_bytes;                  // specials: their names
  std::unordered_map<std::string, int32_t> bytes_to_id;  // the vocabulary (shifted ids)
  int32_t byte_id[256] = {};
  BpeMerges merges;
};

TikTokenizer::TikTokenizer(const TokenizerConfig& cfg) try
    : pattern_(tiktoken_pattern(cfg.tiktoken_pattern), "--tiktoken-pattern") {
  validate_tiktoken_flags(cfg);
  const std::string& path = cfg.tokenizer_model;
  MG_USER_CHECK(!path.empty(),
                "--tokenizer-type TikTokenizer needs --tokenizer-model (the "
                "vocabulary JSON file)");
  auto v = std::make_shared<Vocab>();
  v->vocab_size = cfg.vocab_size > 0 ? cfg.vocab_size : kDefaultVocabSize;
  MG_USER_CHECK(v->vocab_size <= INT32_MAX, "--vocab-size ", v->vocab_size,
                " is past the int32 token ids");
  // The special tokens: the named ones, then fillers up to --tiktoken-num-special-tokens.
  std::vector<std::string> special = cfg.tiktoken_special_tokens;
  if (special.empty()) special = {"<unk>", "<s>", "</s>"};
  const int64_t num_special = cfg.tiktoken_num_special_tokens;
  MG_USER_CHECK(int64_t(special.size()) <= num_special && num_special < v->vocab_size,
                "TikTokenizer needs (number of --tiktoken-special-tokens = ", special.size(),
                ") <= --tiktoken-num-special-tokens (", num_special, ") < --vocab-size (",
                v->vocab_size, ")");
  for (int64_t i = int64_t(special.size()); i < num_special; ++i)
    special.push_back(str_cat("<SPECIAL_", i, ">"));
  MG_USER_CHECK(std::unordered_set<std::string>(special.begin(), special.end()).size() ==
                    special.size(),
                "--tiktoken-special-tokens: a named token is also a <SPECIAL_i> filler");
  v->num_special = int32_t(num_special);
  v->id_to_bytes = special;
  auto index_of = [&](const char* t) {
    return int32_t(std::find(special.begin(), special.end(), t) - special.begin());
  };
  v->unk = index_of("<unk>");
  v->bos = index_of("<s>");
  v->eos = index_of("</s>");

  // The vocabulary, cut to vocab_size - num_special entries.
  const nlohmann::json j = read_tokenizer_json(path, kFlag);
  const std::string where = str_cat(kFlag, " '", path, "'");
  MG_USER_CHECK(j.is_array(), where,
                " is not a TikTokenizer vocabulary: Megatron's format is a "
                "JSON list of {\"rank\", \"token_bytes\", \"token_str\"}");
  const int64_t inner = v->vocab_size - num_special;
  // (Megatron allows fewer, and then fails on the first text holding a byte without a token.)
  MG_USER_CHECK(inner >= 256, "--vocab-size ", v->vocab_size, " leaves ", inner, " ids after the ",
                num_special, " special tokens; the 256 single bytes need 256");
  MG_USER_CHECK(int64_t(j.size()) >= inner, where, " holds ", j.size(), " tokens; --vocab-size ",
                v->vocab_size, " with ", num_special, " special tokens needs ", inner,
                ": pass --vocab-size ", int64_t(j.size()) + num_special, " or less");
  v->id_to_bytes.reserve(size_t(v->vocab_size));
  std::string bytes;
  for (int64_t i = 0; i < inner; ++i) {
    const nlohmann::json& e = j[size_t(i)];
    MG_USER_CHECK(e.is_object() && e.size() == 3 && e.contains("rank") &&
                      e.contains("token_bytes") && e.contains("token_str"),
                  where, " entry ", i, " is not {\"rank\", \"token_bytes\", \"token_str\"}");
    MG_USER_CHECK(e["rank"].is_number_integer() && e["rank"].get<int64_t>() == i, where, " entry ",
                  i, " has rank ", e["rank"].dump(), "; ranks must be 0, 1, 2, ...");
    MG_USER_CHECK(e["token_bytes"].is_string() &&
                      base64_decode(e["token_bytes"].get<std::string>(), bytes) && !bytes.empty(),
                  where, " entry ", i, ": token_bytes is not base64 of a non-empty byte string");
    MG_USER_CHECK(i >= 256 || bytes == std::string(1, char(i)), where, " entry ", i,
                  ": ranks 0-255 must be the single bytes 0-255 in order");
    const int32_t id = int32_t(i + num_special);
    MG_USER_CHECK(v->bytes_to_id.emplace(bytes, id).second, where, " entry ", i,
                  ": the same bytes as an earlier entry");
    v->id_to_bytes.push_back(bytes);
  }
  for (int b = 0; b < 256; ++b) v->byte_id[b] = int32_t(b + num_special);
  // tiktoken merges two adjacent parts when their concatenation is a token, lowest rank first:
  // every split of a token into two tokens is a pair with the token's rank.
  for (int64_t id = num_special + 256; id < v->vocab_size; ++id) {
    const std::string& t = v->id_to_bytes[size_t(id)];
    for (size_t k = 1; k < t.size(); ++k) {
      auto l = v->bytes_to_id.find(t.substr(0, k));
      if (l == v->bytes_to_id.end()) continue;
      auto r = v->bytes_to_id.find(t.substr(k));
      if (r != v->bytes_to_id.end()) v->merges.add(l->second, r->second, int32_t(id), int32_t(id));
    }
  }
  vocab_ = std::move(v);
} catch (const nlohmann::json::exception& e) {
  throw UsageError(str_cat(kFlag, " '", cfg.tokenizer_model, "': unexpected JSON: ", e.what()));
}

int64_t TikTokenizer::vocab_size() const { return vocab_->vocab_size; }
int32_t TikTokenizer::eod() const { return vocab_->eos; }
int32_t TikTokenizer::bos() const { return vocab_->bos; }

std::unique_ptr<Tokenizer> TikTokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new TikTokenizer(vocab_, pattern_));
}

std::vector<int32_t> TikTokenizer::encode(std::string_view raw) {
  // Python strings are valid Unicode: malformed input reads as U+FFFD, as a decoder would.
  std::string fixed;
  std::string_view text = raw;
  if (!unicode::is_valid_utf8(raw)) text = fixed = unicode::to_valid_utf8(raw);
  const Vocab& v = *vocab_;
  std::vector<int32_t> out, symbols;
  pattern_.for_each_match(text, [&](size_t begin, size_t end) {
    const std::string_view piece = text.substr(begin, end - begin);
    if (const auto* ids = cache_.find(piece)) {
      out.insert(out.end(), ids->begin(), ids->end());
      return;
    }
    if (auto it = v.bytes_to_id.find(std::string(piece)); it != v.bytes_to_id.end()) {
      symbols.assign(1, it->second);
    } else {
      symbols.clear();
      for (unsigned char c : piece) symbols.push_back(v.byte_id[c]);
      v.merges.apply(symbols);
    }
    out.insert(out.end(), symbols.begin(), symbols.end());
    cache_.insert(piece, symbols);
  });
  return out;
}

std::string TikTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    MG_USER_CHECK(id >= 0 && id < vocab_->vocab_size, "token id ", id,
                  " outside the TikTokenizer vocabulary [0, ", vocab_->vocab_size, ")");
    bytes += vocab_->id_to_bytes[size_t(id)];
  }
  return unicode::to_valid_utf8(bytes);
}

}  // namespace mg
