#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/tokenizer_files.h"
#include "text/unicode.h"

namespace mg {

namespace {

using json = nlohmann::json;
constexpr const char* kFlag = "--tokenizer-model";
// Past this size a pre-token is a whole document (SentencePiece-style files): not worth caching.
constexpr size_t kMaxCachedPiece = 256;

// tokenizer_config.json's bos_token / eos_token: a string or {"content": ...}; "" when absent.
std::string special_token_name(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

// Whether s[pos - w.size(), pos) == w.
bool follows(std::string_view s, size_t pos, std::string_view w) {
  return pos >= w.size() && s.substr(pos - w.size(), w.size()) == w;
}

// transformers' clean_up_tokenization: spaces before punctuation and English contractions.
std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_all(s, from, to);
  return s;
}

}  // namespace

struct HuggingFaceTokenizer::Model {
  std::string where;        // "--tokenizer-model 'DIR/tokenizer.json'"
  bool byte_level = false;  // vocabulary tokens held as raw bytes
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  int32_t unk = -1, bos = -1, eos = -1;
  int64_t vocab_size = 0;
  std::unordered_map<std::string, int32_t> token_to_id;  // the model's vocabulary
  std::vector<std::string> id_to_token;                  // incl. the added tokens' contents
  std::unordered_map<char32_t, int32_t> char_id;         // the one-character tokens
  // SentencePiece-style vocabularies: when no token holds "▁" after another character, no merge
  // crosses the start of a "▁" run, so a document (one pre-token there) is encoded word by word,
  // and words are cached. Empty when that does not hold.
  std::string word_start;
  BpeMerges merges;
  int32_t byte_symbol[256];  // byte-level: the id of each byte
  int32_t fallback_id[256];  // byte_fallback: the id of <0xNN>, or -1
  HfNormalizer normalizer;
  HfPreTokenizer pre_tokenizer;
  HfDecoder decoder;
  std::vector<Regex> added_pattern;  // capture group k+1 = added_ids[k]
  std::vector<int32_t> added_ids;
  std::vector<int32_t> prefix, suffix;  // the post-processor's special tokens around the text
  bool clean_up_spaces = false;

  int32_t id_of(const std::string& token) const {
    auto it = token_to_id.find(token);
    return it == token_to_id.end() ? -1 : it->second;
  }
};

namespace {

using Model = HuggingFaceTokenizer::Model;

void load_vocab_and_merges(const json& m, Model& model) {
  const std::string& where = model.where;
  MG_USER_CHECK(m.contains("vocab") && m["vocab"].is_object(), where,
                ": model.vocab must be an object of token -> id");
  // Byte-level vocabularies spell bytes with GPT-2's alphabet; held here as the raw bytes.
  std::unordered_map<char32_t, char> byte_of;
  const std::vector<std::string> alphabet = unicode::byte_level_chars();
  for (int b = 0; b < 256; ++b) byte_of[unicode::decode_utf8(alphabet[b])[0]] = char(b);
  auto model_form = [&](const std::string& token) {
    if (!model.byte_level) return token;
    std::string raw;
    for (char32_t c : unicode::decode_utf8(token)) {
      auto it = byte_of.find(c);
      if (it == byte_of.end()) return token;  // not in the alphabet: kept as written
      raw += it->second;
    }
    return raw;
  };
  for (auto& [token, id] : m["vocab"].items()) {
    MG_USER_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                  where, ": model.vocab: bad id for token '", token, "'");
    const int32_t i = id.get<int32_t>();
    if (size_t(i) >= model.id_to_token.size()) model.id_to_token.resize(size_t(i) + 1);
    model.id_to_token[size_t(i)] = model_form(token);
    model.token_to_id.emplace(model.id_to_token[size_t(i)], i);
  }
  for (const auto& [token, id] : model.token_to_id) {
    char32_t cp;
    if (unicode::decode_one(token, 0, cp) == token.size()) model.char_id.emplace(cp, id);
  }
  const std::string space = "\u2581";
  bool words_independent =
      !model.byte_level && !model.ignore_merges && model.token_to_id.count(space);
  for (const auto& [token, id] : model.token_to_id)
    for (size_t pos = token.find(space, 1); words_independent && pos != std::string::npos;
         pos = token.find(space, pos + 1))
      words_independent = follows(token, pos, space);
  if (words_independent) model.word_start = space;
  MG_USER_CHECK(m.contains("merges") && m["merges"].is_array(), where,
                ": model.merges must be a list");
  const json& merges = m["merges"];
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    std::string a, b;
    if (e.is_string()) {  // "a b"
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      MG_USER_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                    where, ": model.merges[", r, "] '", s, "' is not \"first second\"");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      MG_USER_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), where,
                    ": model.merges[", r, "] is neither \"first second\" nor [first, second]");
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    const int32_t ia = model.id_of(model_form(a)), ib = model.id_of(model_form(b)),
                  im = model.id_of(model_form(a + b));
    MG_USER_CHECK(ia >= 0 && ib >= 0 && im >= 0, where, ": model.merges[", r, "] ('", a, "', '", b,
                  "'): the vocabulary lacks '",
                  ia < 0   ? a
                  : ib < 0 ? b
                           : a + b,
                  "'");
    model.merges.add(ia, ib, int32_t(r), im);
  }
  if (model.byte_level)
    for (int c = 0; c < 256; ++c) {
      model.byte_symbol[c] = model.id_of(std::string(1, char(c)));
      MG_USER_CHECK(model.byte_symbol[c] >= 0, where, ": the byte-level vocabulary lacks byte ", c,
                    " ('", alphabet[size_t(c)], "')");
    }
  for (int c = 0; c < 256; ++c) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", c);
    model.fallback_id[c] = model.byte_fallback ? model.id_of(name) : -1;
  }
}

void load_model(const json& j, Model& model) {
  const std::string& where = model.where;
  MG_USER_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where,
                " has no \"model\" object: not a Hugging Face tokenizer.json");
  const json& m = j["model"];
  const std::string type = m.contains("type") && m["type"].is_string()
                               ? m["type"].get<std::string>()
                               : "BPE";  // `tokenizers` reads an untagged vocab + merges as BPE
  MG_USER_CHECK(type == "BPE", where, ": model.type ", type,
                " is not supported; HuggingFaceTokenizer reads BPE tokenizers (Llama 2/3 style)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    MG_USER_CHECK(!m.contains(key) || m[key].is_null() || m[key] == "", where, ": model.", key,
                  " is not supported (only null)");
  MG_USER_CHECK(!m.contains("dropout") || m["dropout"].is_null() || m["dropout"] == 0.0, where,
                ": model.dropout is not supported (only null)");
  auto flag = [&](const char* key) {
    return m.contains(key) && m[key].is_boolean() && m[key].get<bool>();
  };
  model.ignore_merges = flag("ignore_merges");
  model.byte_fallback = flag("byte_fallback");
  model.fuse_unk = flag("fuse_unk");
  model.normalizer = parse_hf_normalizer(j.value("normalizer", json()), where);
  model.pre_tokenizer = parse_hf_pre_tokenizer(j.value("pre_tokenizer", json()), where);
  model.decoder = parse_hf_decoder(j.value("decoder", json()), where);
  model.byte_level = model.pre_tokenizer.byte_level;
  load_vocab_and_merges(m, model);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    model.unk = model.id_of(m["unk_token"].get<std::string>());
    MG_USER_CHECK(model.unk >= 0, where, ": model.unk_token is not in the vocabulary");
  }
}

// The added tokens: split the text before everything else, matched longest first.
void load_added_tokens(const json& j, Model& model) {
  const std::string& where = model.where;
  if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return;
  MG_USER_CHECK(j["added_tokens"].is_array(), where, ": added_tokens must be a list");
  struct Added {
    std::string content, alternative;
    int32_t id;
  };
  std::vector<Added> added;
  for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
    const json& t = j["added_tokens"][i];
    MG_USER_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                      t["id"].get<int64_t>() >= 0 && t["id"].get<int64_t>() < INT32_MAX &&
                      t.contains("content") && t["content"].is_string(),
                  where, ": added_tokens[", i, "] needs an integer id and a string content");
    const std::string content = t["content"].get<std::string>();
    const int32_t id = t["id"].get<int32_t>();
    if (size_t(id) >= model.id_to_token.size()) model.id_to_token.resize(size_t(id) + 1);
    model.id_to_token[size_t(id)] = content;
    if (content.empty()) continue;
    auto on = [&](const char* key) {
      return t.contains(key) && t[key].is_boolean() && t[key].get<bool>();
    };
    // lstrip/rstrip: the token takes the whitespace beside it; single_word: not inside a word.
    std::string alt = str_cat(on("lstrip") ? "\\s*" : "", on("single_word") ? "(?<!\\w)" : "", "(",
                              Regex::escape(content), ")", on("single_word") ? "(?!\\w)" : "",
                              on("rstrip") ? "\\s*" : "");
    added.push_back({content, std::move(alt), id});
  }
  if (added.empty()) return;
  std::stable_sort(added.begin(), added.end(), [](const Added& a, const Added& b) {
    return a.content.size() > b.content.size();
  });
  std::string pattern;
  for (const Added& a : added) {
    if (!pattern.empty()) pattern += '|';
    pattern += a.alternative;
    model.added_ids.push_back(a.id);
  }
  model.added_pattern.emplace_back(pattern, where + ": added_tokens");
}

// The special tokens the post-processor puts around the text (template "single").
void load_post_processor(const json& p, Model& model) {
  const std::string& where = model.where;
  if (p.is_null()) return;
  MG_USER_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(), where,
                ": post_processor has no \"type\"");
  const std::string type = p["type"].get<std::string>();
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    MG_USER_CHECK(p.contains("processors") && p["processors"].is_array(), where,
                  ": post_processor.processors must be a list");
    for (const json& q : p["processors"]) load_post_processor(q, model);
    return;
  }
  MG_USER_CHECK(type == "TemplateProcessing", where, ": post_processor.type ", type,
                " is not supported (TemplateProcessing, ByteLevel, Sequence)");
  MG_USER_CHECK(p.contains("single") && p["single"].is_array(), where,
                ": post_processor.single must be a list");
  bool after_text = false;
  for (const json& item : p["single"]) {
    if (item.contains("Sequence")) {
      after_text = true;
      continue;
    }
    const std::string name = item.contains("SpecialToken") && item["SpecialToken"].contains("id")
                                 ? item["SpecialToken"]["id"].get<std::string>()
                                 : "";
    MG_USER_CHECK(!name.empty() && p.contains("special_tokens") &&
                      p["special_tokens"].contains(name) &&
                      p["special_tokens"][name].contains("ids") &&
                      p["special_tokens"][name]["ids"].is_array(),
                  where, ": post_processor.single item ", item.dump(),
                  " names no entry of post_processor.special_tokens");
    for (const json& id : p["special_tokens"][name]["ids"])
      (after_text ? model.suffix : model.prefix).push_back(id.get<int32_t>());
  }
}

}  // namespace

// (A field of the wrong JSON type throws nlohmann's type_error: refused as a UsageError too.)
HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& dir) try {
  namespace fs = std::filesystem;
  MG_USER_CHECK(!dir.empty(),
                "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model (the "
                "directory with tokenizer.json)");
  const fs::path json_path = fs::path(dir) / "tokenizer.json";
  MG_USER_CHECK(fs::is_regular_file(json_path), kFlag, " '", dir, "' has no tokenizer.json (",
                "HuggingFaceTokenizer reads DIR/tokenizer.json and DIR/tokenizer_config.json)");
  auto model = std::make_shared<Model>();
  model->where = str_cat(kFlag, " '", json_path.string(), "'");
  const json j = read_tokenizer_json(json_path.string(), kFlag);
  load_model(j, *model);
  load_added_tokens(j, *model);
  load_post_processor(j.value("post_processor", json()), *model);

  // tokenizer_config.json (then special_tokens_map.json): BOS/EOS and what encode adds.
  json config = json::object(), special_map = json::object();
  if (fs::exists(fs::path(dir) / "tokenizer_config.json"))
    config = read_tokenizer_json((fs::path(dir) / "tokenizer_config.json").string(), kFlag);
  if (fs::exists(fs::path(dir) / "special_tokens_map.json"))
    special_map = read_tokenizer_json((fs::path(dir) / "special_tokens_map.json").string(), kFlag);
  auto special_id = [&](const char* key) {
    std::string name = special_token_name(config, key);
    if (name.empty()) name = special_token_name(special_map, key);
    if (name.empty()) return -1;
    for (size_t id = 0; id < model->id_to_token.size(); ++id)
      if (model->id_to_token[id] == name) return int32_t(id);
    throw UsageError(str_cat(kFlag, " '", dir, "': the ", key, " '", name,
                             "' is not a token of tokenizer.json"));
  };
  model->bos = special_id("bos_token");
  model->eos = special_id("eos_token");
  MG_USER_CHECK(model->eos >= 0, kFlag, " '", dir, "': no eos_token in tokenizer_config.json or ",
                "special_tokens_map.json (Megatron's EOD is the EOS token)");
  // transformers' Llama tokenizers rebuild the template from add_bos_token / add_eos_token.
  if (config.is_object() &&
      (config.contains("add_bos_token") || config.contains("add_eos_token"))) {
    model->prefix.clear();
    model->suffix.clear();
    if (config.value("add_bos_token", false) && model->bos >= 0) model->prefix = {model->bos};
    if (config.value("add_eos_token", false)) model->suffix = {model->eos};
  }
  model->clean_up_spaces =
      config.is_object() && config.value("clean_up_tokenization_spaces", false);
  std::unordered_set<std::string> distinct;
  for (const std::string& t : model->id_to_token) distinct.insert(t);
  model->vocab_size = int64_t(std::max(distinct.size(), model->id_to_token.size()));
  for (const std::vector<int32_t>* ids : {&model->prefix, &model->suffix})
    for (int32_t id : *ids)
      MG_USER_CHECK(id >= 0 && id < model->vocab_size, model->where,
                    ": post_processor.special_tokens holds id ", id,
                    ", which is no token of the file");
  *this = HuggingFaceTokenizer(std::shared_ptr<const Model>(std::move(model)));
} catch (const json::exception& e) {
  throw UsageError(str_cat(kFlag, " '", dir, "': tokenizer.json or tokenizer_config.json has a ",
                           "field of an unexpected type: ", e.what()));
}

HuggingFaceTokenizer::HuggingFaceTokenizer(std::shared_ptr<const Model> model)
    : model_(std::move(model)), added_pattern_(model_->added_pattern),
      pre_tokenizer_(model_->pre_tokenizer) {}

int64_t HuggingFaceTokenizer::vocab_size() const { return model_->vocab_size; }
int32_t HuggingFaceTokenizer::eod() const { return model_->eos; }
int32_t HuggingFaceTokenizer::bos() const { return model_->bos; }

std::unique_ptr<Tokenizer> HuggingFaceTokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new HuggingFaceTokenizer(model_));
}

std::vector<int32_t> HuggingFaceTokenizer::encode(std::string_view text) {
  std::vector<int32_t> out = model_->prefix;
  const std::vector<int32_t> body = encode_text(text);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), model_->suffix.begin(), model_->suffix.end());
  return out;
}

std::vector<int32_t> HuggingFaceTokenizer::encode_text(std::string_view raw) {
  std::string fixed;
  std::string_view text = raw;
  if (!unicode::is_valid_utf8(raw)) text = fixed = unicode::to_valid_utf8(raw);
  std::vector<int32_t> out;
  if (added_pattern_.empty()) {
    encode_segment(text, true, out);
    return out;
  }
  size_t last = 0;
  added_pattern_[0].for_each_match(text, [&](size_t begin, size_t end) {
    if (begin > last) encode_segment(text.substr(last, begin - last), last == 0, out);
    out.push_back(model_->added_ids[size_t(added_pattern_[0].last_group() - 1)]);
    last = end;
  });
  if (last < text.size()) encode_segment(text.substr(last), last == 0, out);
  return out;
}

void HuggingFaceTokenizer::encode_segment(std::string_view segment, bool at_text_start,
                                          std::vector<int32_t>& out) {
  arena_.clear();
  pieces_.clear();
  std::string_view normalized = segment;
  if (!model_->normalizer.steps.empty()) {
    arena_.push_back(model_->normalizer.apply(segment));
    normalized = arena_.back();
  }
  pre_tokenizer_.split({normalized, at_text_start}, pieces_, arena_);
  for (const HfPiece& p : pieces_) encode_piece(p.text, out);
}

void HuggingFaceTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  const std::string& w = model_->word_start;
  if (w.empty()) return encode_word(piece, out);
  size_t begin = 0;
  for (size_t pos = piece.find(w, 1); pos != std::string_view::npos; pos = piece.find(w, pos + 1))
    if (!follows(piece, pos, w)) {  // a "▁" run starts here
      encode_word(piece.substr(begin, pos - begin), out);
      begin = pos;
    }
  encode_word(piece.substr(begin), out);
}

void HuggingFaceTokenizer::encode_word(std::string_view piece, std::vector<int32_t>& out) {
  const Model& m = *model_;
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable)
    if (const auto* ids = cache_.find(piece)) {
      out.insert(out.end(), ids->begin(), ids->end());
      return;
    }
  symbols_.clear();
  const int32_t whole = m.ignore_merges ? m.id_of(std::string(piece)) : -1;
  if (whole >= 0) {
    symbols_.push_back(whole);
  } else if (m.byte_level) {
    for (unsigned char c : piece) symbols_.push_back(m.byte_symbol[c]);
  } else {
    // One symbol per character; else its <0xNN> byte tokens; else unk (runs fused).
    bool last_unk = false;
    for (size_t i = 0; i < piece.size();) {
      char32_t cp;
      const size_t len = std::max<size_t>(1, unicode::decode_one(piece, i, cp));
      const std::string_view ch = piece.substr(i, len);
      i += len;
      if (auto it = m.char_id.find(cp); it != m.char_id.end()) {
        symbols_.push_back(it->second);
        last_unk = false;
        continue;
      }
      bool all_bytes = m.byte_fallback;
      for (unsigned char c : ch) all_bytes = all_bytes && m.fallback_id[c] >= 0;
      if (all_bytes) {
        for (unsigned char c : ch) symbols_.push_back(m.fallback_id[c]);
        last_unk = false;
        continue;
      }
      MG_USER_CHECK(m.unk >= 0, m.where, ": the text holds '", std::string(ch),
                    "', which has no token, and the model has no unk_token");
      if (!(m.fuse_unk && last_unk)) symbols_.push_back(m.unk);
      last_unk = true;
    }
  }
  m.merges.apply(symbols_);
  out.insert(out.end(), symbols_.begin(), symbols_.end());
  if (cacheable) cache_.insert(piece, symbols_);
}

std::string HuggingFaceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    MG_USER_CHECK(id >= 0 && size_t(id) < model_->id_to_token.size(), "token id ", id,
                  " outside the vocabulary of ", model_->where);
    tokens.push_back(model_->id_to_token[size_t(id)]);
  }
  std::string text = model_->decoder.apply(std::move(tokens));
  return model_->clean_up_spaces ? clean_up_tokenization(std::move(text)) : text;
}

}  // namespace mg
