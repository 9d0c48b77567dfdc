#include "tokenizer/hf_pipeline.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/unicode.h"

namespace mg {

namespace {

using json = nlohmann::json;

// GPT-2's pre-tokenizer pattern (the ByteLevel pre-tokenizer's use_regex).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j, const std::string& where, const std::string& field) {
  MG_USER_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where, ": ", field,
                " has no \"type\"");
  return j["type"].get<std::string>();
}

[[noreturn]] void unsupported(const std::string& where, const std::string& field,
                              const std::string& what) {
  throw UsageError(
      str_cat(where, ": ", field, " ", what,
              " is not supported (HuggingFaceTokenizer reads the BPE tokenizers of the "
              "Llama family; see docs/tokenizers.md)"));
}

std::string string_field(const json& j, const char* key, const std::string& where,
                         const std::string& field, const std::string& fallback = "") {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  MG_USER_CHECK(j[key].is_string(), where, ": ", field, ".", key, " must be a string");
  return j[key].get<std::string>();
}

bool bool_field(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

// A pattern {"String": s} (returned as a literal, is_regex false) or {"Regex": r}.
std::string pattern_of(const json& j, const std::string& where, const std::string& field,
                       bool& is_regex) {
  const json& p = j.contains("pattern") ? j["pattern"] : json();
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    is_regex = false;
    return p["String"].get<std::string>();
  }
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    is_regex = true;
    return p["Regex"].get<std::string>();
  }
  throw UsageError(str_cat(where, ": ", field,
                           ".pattern must be {\"String\": ...} or "
                           "{\"Regex\": ...}"));
}

void parse_normalizer(const json& j, const std::string& where, const std::string& field,
                      HfNormalizer& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j, where, field);
  if (type == "Sequence") {
    MG_USER_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), where, ": ", field,
                  ".normalizers must be a list");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      parse_normalizer(j["normalizers"][i], where, str_cat(field, ".normalizers[", i, "]"), out);
  } else if (type == "Prepend") {
    out.steps.push_back(
        {HfNormalizer::Step::kPrepend, string_field(j, "prepend", where, field), ""});
  } else if (type == "Replace") {
    bool is_regex = false;
    const std::string from = pattern_of(j, where, field, is_regex);
    if (is_regex) unsupported(where, field, "Replace with a Regex pattern");
    out.steps.push_back(
        {HfNormalizer::Step::kReplace, from, string_field(j, "content", where, field)});
  } else {
    unsupported(where, field, str_cat("type ", type));
  }
}

void parse_pre_tokenizer(const json& j, const std::string& where, const std::string& field,
                         HfPreTokenizer& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j, where, field);
  using Step = HfPreTokenizer::Step;
  if (type == "Sequence") {
    MG_USER_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), where, ": ", field,
                  ".pretokenizers must be a list");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      parse_pre_tokenizer(j["pretokenizers"][i], where, str_cat(field, ".pretokenizers[", i, "]"),
                          out);
    return;
  }
  // Later stages would see GPT-2's byte alphabet, which this implementation never builds.
  if (out.byte_level) unsupported(where, field, str_cat(type, " after ByteLevel"));
  Step step{};
  if (type == "Split") {
    step.kind = Step::kSplit;
    const std::string behavior = string_field(j, "behavior", where, field);
    if (behavior != "Isolated") unsupported(where, field, str_cat("Split behavior ", behavior));
    if (bool_field(j, "invert", false)) unsupported(where, field, "Split with invert true");
    bool is_regex = false;
    std::string pattern = pattern_of(j, where, field, is_regex);
    if (!is_regex) pattern = Regex::escape(pattern);
    step.regex.emplace_back(pattern, str_cat(where, ": ", field, ".pattern"));
  } else if (type == "ByteLevel") {
    step.kind = Step::kByteLevel;
    step.add_prefix_space = bool_field(j, "add_prefix_space", true);
    if (bool_field(j, "use_regex", true)) step.regex.emplace_back(kGpt2Pattern, "ByteLevel");
    out.byte_level = true;
  } else if (type == "Metaspace") {
    step.kind = Step::kMetaspace;
    step.replacement = string_field(j, "replacement", where, field, "\u2581");
    step.prepend_scheme =
        string_field(j, "prepend_scheme", where, field,
                     bool_field(j, "add_prefix_space", true) ? "always" : "never");
    if (step.prepend_scheme != "always" && step.prepend_scheme != "first" &&
        step.prepend_scheme != "never")
      unsupported(where, field, str_cat("Metaspace prepend_scheme ", step.prepend_scheme));
    step.split = bool_field(j, "split", true);
  } else {
    unsupported(where, field, str_cat("type ", type));
  }
  out.steps.push_back(std::move(step));
}

void parse_decoder(const json& j, const std::string& where, const std::string& field,
                   HfDecoder& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j, where, field);
  using Step = HfDecoder::Step;
  Step step{};
  if (type == "Sequence") {
    MG_USER_CHECK(j.contains("decoders") && j["decoders"].is_array(), where, ": ", field,
                  ".decoders must be a list");
    for (size_t i = 0; i < j["decoders"].size(); ++i)
      parse_decoder(j["decoders"][i], where, str_cat(field, ".decoders[", i, "]"), out);
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Step::kMetaspace;
    step.a = string_field(j, "replacement", where, field, "\u2581");
    step.prepend =
        string_field(j, "prepend_scheme", where, field,
                     bool_field(j, "add_prefix_space", true) ? "always" : "never") != "never";
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    bool is_regex = false;
    step.a = pattern_of(j, where, field, is_regex);
    if (is_regex) unsupported(where, field, "Replace with a Regex pattern");
    step.b = string_field(j, "content", where, field);
  } else if (type == "ByteFallback") {
    step.kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::kFuse;
  } else if (type == "Strip") {
    step.kind = Step::kStrip;
    step.a = string_field(j, "content", where, field, " ");
    MG_USER_CHECK(unicode::decode_utf8(step.a).size() == 1, where, ": ", field,
                  ".content must be one character");
    auto count = [&](const char* key) {
      MG_USER_CHECK(j.contains(key) && j[key].is_number_unsigned(), where, ": ", field, ".", key,
                    " must be a count");
      return j[key].get<size_t>();
    };
    step.start = count("start");
    step.stop = count("stop");
  } else {
    unsupported(where, field, str_cat("type ", type));
  }
  out.steps.push_back(std::move(step));
}

// "<0xNN>" -> NN, or -1.
int byte_fallback_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  size_t pos = s.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4 * (to.size() > from.size() ? to.size() - from.size() : 0));
  size_t last = 0;
  for (; pos != std::string::npos; pos = s.find(from, last)) {
    out.append(s, last, pos - last);
    out += to;
    last = pos + from.size();
  }
  out.append(s, last, std::string::npos);
  s.swap(out);
}

HfNormalizer parse_hf_normalizer(const json& j, const std::string& where) {
  HfNormalizer out;
  parse_normalizer(j, where, "normalizer", out);
  return out;
}

HfPreTokenizer parse_hf_pre_tokenizer(const json& j, const std::string& where) {
  HfPreTokenizer out;
  parse_pre_tokenizer(j, where, "pre_tokenizer", out);
  return out;
}

HfDecoder parse_hf_decoder(const json& j, const std::string& where) {
  HfDecoder out;
  parse_decoder(j, where, "decoder", out);
  return out;
}

std::string HfNormalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps) {
    if (step.kind == Step::kPrepend) {
      if (!s.empty()) s.insert(0, step.a);
    } else {
      replace_all(s, step.a, step.b);
    }
  }
  return s;
}

void HfPreTokenizer::split(HfPiece piece, std::vector<HfPiece>& out,
                           std::deque<std::string>& arena) {
  std::vector<HfPiece> current{piece}, next;
  for (Step& step : steps) {
    next.clear();
    for (HfPiece p : current) {
      if (step.kind == Step::kByteLevel && step.add_prefix_space && !p.text.starts_with(' ')) {
        arena.push_back(" " + std::string(p.text));
        p.text = arena.back();
      }
      if (step.kind == Step::kMetaspace) {
        std::string s(p.text);
        replace_all(s, " ", step.replacement);
        const bool prepend =
            step.prepend_scheme == "always" || (step.prepend_scheme == "first" && p.at_text_start);
        if (prepend && !s.starts_with(step.replacement)) s.insert(0, step.replacement);
        arena.push_back(std::move(s));
        const std::string_view t = arena.back();
        if (!step.split) {
          next.push_back({t, p.at_text_start});
          continue;
        }
        // Each replacement starts a piece (MergedWithNext).
        size_t begin = 0;
        for (size_t pos = t.find(step.replacement, 1); pos != std::string_view::npos;
             pos = t.find(step.replacement, pos + 1)) {
          if (pos > begin)
            next.push_back({t.substr(begin, pos - begin), p.at_text_start && !begin});
          begin = pos;
        }
        if (begin < t.size()) next.push_back({t.substr(begin), p.at_text_start && !begin});
        continue;
      }
      if (step.regex.empty()) {
        next.push_back(p);
        continue;
      }
      // Isolated: each match is a piece, and so is the text between matches.
      size_t last = 0;
      step.regex[0].for_each_match(p.text, [&](size_t begin, size_t end) {
        if (begin > last)
          next.push_back({p.text.substr(last, begin - last), p.at_text_start && !last});
        next.push_back({p.text.substr(begin, end - begin), p.at_text_start && !begin});
        last = end;
      });
      if (last < p.text.size()) next.push_back({p.text.substr(last), p.at_text_start && !last});
    }
    current.swap(next);
  }
  for (const HfPiece& p : current)
    if (!p.text.empty()) out.push_back(p);
}

std::string HfDecoder::apply(std::vector<std::string> tokens) const {
  for (const Step& step : steps) {
    switch (step.kind) {
      case Step::kByteLevel:  // the tokens are raw bytes already
        break;
      case Step::kReplace:
        for (std::string& t : tokens) replace_all(t, step.a, step.b);
        break;
      case Step::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], step.a, " ");
          if (i == 0 && step.prepend && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
        }
        break;
      case Step::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Step::kStrip:
        for (std::string& t : tokens) {
          size_t cut = 0;
          for (size_t k = 0; k < step.start && t.compare(cut, step.a.size(), step.a) == 0; ++k)
            cut += step.a.size();
          t.erase(0, cut);
          for (size_t k = 0; k < step.stop && t.size() >= step.a.size() &&
                             t.compare(t.size() - step.a.size(), step.a.size(), step.a) == 0;
               ++k)
            t.resize(t.size() - step.a.size());
        }
        break;
      case Step::kByteFallback: {
        // A run of <0xNN> tokens becomes its bytes when they are UTF-8, else U+FFFD per token.
        std::vector<std::string> out;
        std::string bytes;
        size_t run = 0;
        auto flush = [&] {
          if (!run) return;
          if (unicode::is_valid_utf8(bytes)) out.push_back(bytes);
          else
            for (size_t k = 0; k < run; ++k) out.push_back("\xef\xbf\xbd");
          bytes.clear();
          run = 0;
        };
        for (std::string& t : tokens) {
          const int b = byte_fallback_value(t);
          if (b < 0) {
            flush();
            out.push_back(std::move(t));
          } else {
            bytes += char(b);
            ++run;
          }
        }
        flush();
        tokens.swap(out);
        break;
      }
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return unicode::to_valid_utf8(text);
}

}  // namespace mg
