// The text stages of a Hugging Face tokenizer.json around its BPE model, as the `tokenizers`
// library defines them: the normalizer (Prepend, Replace, Sequence), the pre-tokenizer (Split
// with a regex, ByteLevel, Metaspace, Sequence) and the decoder (ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, Sequence). Byte-level tokenizers are run on raw bytes: the vocabulary
// is translated from GPT-2's byte alphabet once on load, so the ByteLevel pre-tokenizer and
// decoder only split and join. Anything else is refused on load, naming the file and the field.
#pragma once
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "text/regex.h"

namespace mg {

struct HfNormalizer {
  struct Step {
    enum Kind { kPrepend, kReplace } kind;
    std::string a, b;  // Prepend: a = the prefix; Replace: a -> b
  };
  std::vector<Step> steps;
  std::string apply(std::string_view text) const;
};

// A piece of text between pre-tokenizer stages.
struct HfPiece {
  std::string_view text;
  bool at_text_start;  // begins at offset 0 of the encoded text (Metaspace's "first")
};

struct HfPreTokenizer {
  struct Step {
    enum Kind { kSplit, kByteLevel, kMetaspace } kind;
    std::vector<Regex> regex;       // Split, ByteLevel with use_regex: the pattern (one)
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace: "▁"
    std::string prepend_scheme;     // Metaspace: always | first | never
    bool split = true;              // Metaspace
  };
  std::vector<Step> steps;
  bool byte_level = false;  // a ByteLevel step: the model works on raw bytes

  // Appends the pieces of `piece` to `out`; changed text is kept in `arena`.
  void split(HfPiece piece, std::vector<HfPiece>& out, std::deque<std::string>& arena);
};

struct HfDecoder {
  struct Step {
    enum Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } kind;
    std::string a, b;            // Replace: a -> b; Metaspace: a = replacement; Strip: a = content
    bool prepend = true;         // Metaspace: drop the first token's leading space
    size_t start = 0, stop = 0;  // Strip
  };
  std::vector<Step> steps;
  // The tokens' strings -> the text (malformed UTF-8 becomes U+FFFD).
  std::string apply(std::vector<std::string> tokens) const;
};

// Every occurrence of `from` replaced, in one pass (replacing in place is quadratic when the
// lengths differ: a document's spaces becoming "▁").
void replace_all(std::string& s, const std::string& from, const std::string& to);

// `where` names the file in error messages.
HfNormalizer parse_hf_normalizer(const nlohmann::json& j, const std::string& where);
HfPreTokenizer parse_hf_pre_tokenizer(const nlohmann::json& j, const std::string& where);
HfDecoder parse_hf_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace mg
