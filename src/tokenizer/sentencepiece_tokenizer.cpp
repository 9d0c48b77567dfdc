#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <climits>
#include <filesystem>
#include <unordered_map>

#include "core/error.h"

namespace mg {

struct SentencePieceTokenizer::Model {
  sentencepiece::SentencePieceProcessor sp;
  Kind kind = Kind::kSentencePiece;
  int32_t pieces = 0;  // the model's piece count
  int32_t eod = -1, bos = -1, eos = -1;
  int64_t vocab_size = 0;
  bool word_split = false;                                // encode word by word (word_split_safe)
  std::vector<std::pair<std::string, int32_t>> specials;  // kSentencePiece, Megatron's order
  std::unordered_map<int32_t, std::string> special_of_id;
  std::unordered_map<std::string, int32_t> special_ids;

  // The model's piece for `id`, or `fallback` when the id is not a piece (a disabled id is -1).
  std::string piece_or(int id, const char* fallback) const {
    return id >= 0 && id < pieces ? sp.IdToPiece(id) : std::string(fallback);
  }
  // Megatron's _add_special_token: a token keeps the id it already has (a piece's, or an earlier
  // special token's); a new one takes the next id after the vocabulary.
  int32_t add_special(const std::string& t) {
    if (auto it = special_ids.find(t); it != special_ids.end()) return it->second;
    int32_t id = int32_t(vocab_size);
    const int piece = sp.PieceToId(t);  // the unknown id when t is not a piece
    if (piece >= 0 && piece < pieces && sp.IdToPiece(piece) == t) id = piece;
    else ++vocab_size;
    specials.emplace_back(t, id);
    special_ids.emplace(t, id);
    special_of_id.emplace(id, t);
    return id;
  }
  void check_id(int32_t id) const {
    MG_USER_CHECK(id >= 0 && id < vocab_size, "token id ", id,
                  " is outside the SentencePiece vocabulary [0, ", vocab_size, ")");
  }
  std::string decode_pieces(const int32_t* ids, size_t n) const {
    std::string out;
    const auto st = sp.Decode(std::vector<int>(ids, ids + n), &out);
    MG_CHECK(st.ok(), "SentencePiece decode: ", st.ToString());
    return out;
  }
  void encode_pieces(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    const auto st = sp.Encode(text, &ids);
    MG_CHECK(st.ok(), "SentencePiece encode: ", st.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
};

namespace {

constexpr std::string_view kMeta = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space

// The fields of a serialized ModelProto (sentencepiece_model.proto) that decide whether words
// can be encoded apart, read from the protobuf wire format with their proto2 defaults.
struct ModelSpec {
  int64_t model_type = 1;                   // TrainerSpec.model_type (3): 1 unigram, 2 BPE
  bool treat_whitespace_as_suffix = false;  // TrainerSpec (24)
  std::string normalizer;                   // NormalizerSpec.name (1)
  bool has_charsmap = false;                // NormalizerSpec.precompiled_charsmap (2)
  bool add_dummy_prefix = true;             // NormalizerSpec (3)
  bool remove_extra_whitespaces = true;     // NormalizerSpec (4)
  bool escape_whitespaces = true;           // NormalizerSpec (5)
};

// Calls field(number, varint, bytes) for each field of one message; false when malformed.
template <typename F>
bool read_fields(std::string_view msg, F field) {
  size_t at = 0;
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && at < msg.size(); shift += 7) {
      const uint8_t b = uint8_t(msg[at++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (at < msg.size()) {
    uint64_t key = 0, v = 0;
    if (!varint(key)) return false;
    std::string_view bytes;
    switch (key & 7) {
      case 0:
        if (!varint(v)) return false;
        break;
      case 1:
        if (msg.size() - at < 8) return false;
        at += 8;
        break;
      case 5:
        if (msg.size() - at < 4) return false;
        at += 4;
        break;
      case 2:
        if (!varint(v) || v > msg.size() - at) return false;
        bytes = msg.substr(at, size_t(v));
        at += size_t(v);
        break;
      default: return false;
    }
    field(key >> 3, v, bytes);
  }
  return true;
}

ModelSpec read_spec(const std::string& proto) {
  ModelSpec s;
  read_fields(proto, [&](uint64_t f, uint64_t, std::string_view msg) {
    if (f == 2)
      read_fields(msg, [&](uint64_t g, uint64_t v, std::string_view) {
        if (g == 3) s.model_type = int64_t(v);
        if (g == 24) s.treat_whitespace_as_suffix = v != 0;
      });
    if (f == 3)
      read_fields(msg, [&](uint64_t g, uint64_t v, std::string_view b) {
        if (g == 1) s.normalizer = std::string(b);
        if (g == 2) s.has_charsmap = !b.empty();
        if (g == 3) s.add_dummy_prefix = v != 0;
        if (g == 4) s.remove_extra_whitespaces = v != 0;
        if (g == 5) s.escape_whitespaces = v != 0;
      });
  });
  return s;
}

// Word by word encoding gives the model's ids when (1) normalization maps each character alone
// and each space to one U+2581 (identity rules, no whitespace clean-up), with the dummy prefix
// in front, and (2) the model is BPE (merges of adjacent symbols into pieces) and no piece holds
// U+2581 after another character: then no merge joins a character to the U+2581 that follows
// it, so the text between such points is segmented on its own.
bool word_split_safe(const sentencepiece::SentencePieceProcessor& sp, int32_t pieces) {
  const ModelSpec s = read_spec(sp.serialized_model_proto());
  if (s.model_type != 2 || s.treat_whitespace_as_suffix || s.normalizer != "identity" ||
      s.has_charsmap || !s.add_dummy_prefix || s.remove_extra_whitespaces || !s.escape_whitespaces)
    return false;
  for (int32_t id = 0; id < pieces; ++id) {
    std::string_view p = sp.IdToPiece(id);
    while (p.starts_with(kMeta)) p.remove_prefix(kMeta.size());
    if (p.find(kMeta) != std::string_view::npos) return false;
  }
  return true;
}

const char* kind_name(SentencePieceTokenizer::Kind k) {
  switch (k) {
    case SentencePieceTokenizer::Kind::kSentencePiece: return "SentencePieceTokenizer";
    case SentencePieceTokenizer::Kind::kGPTSentencePiece: return "GPTSentencePieceTokenizer";
    case SentencePieceTokenizer::Kind::kLlama2: return "Llama2Tokenizer";
  }
  return "?";
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file, Kind kind,
                                               int64_t vocab_extra_ids) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MG_USER_CHECK(!fs::is_directory(model_file, ec), "--tokenizer-model '", model_file,
                "' is a directory; ", kind_name(kind),
                " needs the SentencePiece model file itself (e.g. tokenizer.model)");
  MG_USER_CHECK(fs::is_regular_file(model_file, ec), "--tokenizer-model '", model_file,
                "' does not exist or is not a file (", kind_name(kind),
                " needs a SentencePiece tokenizer.model)");
  MG_USER_CHECK(vocab_extra_ids >= 0 && vocab_extra_ids <= 1000000,
                "--vocab-extra-ids must be in [0, 1000000] (got ", vocab_extra_ids, ")");
  auto m = std::make_shared<Model>();
  const auto st = m->sp.Load(model_file);
  MG_USER_CHECK(st.ok() && m->sp.GetPieceSize() > 0, "--tokenizer-model '", model_file,
                "' is not a SentencePiece model (", st.ok() ? "no pieces" : st.ToString(), ")");
  m->kind = kind;
  m->pieces = int32_t(m->sp.GetPieceSize());
  m->vocab_size = m->pieces;
  const int sp_bos = m->sp.bos_id(), sp_eos = m->sp.eos_id();
  m->word_split = word_split_safe(m->sp, m->pieces);
  if (kind == Kind::kSentencePiece) {
    m->add_special("<CLS>");
    m->add_special("<SEP>");
    m->eod = m->add_special("<EOD>");
    m->add_special("<MASK>");
    m->add_special(m->piece_or(m->sp.pad_id(), "<PAD>"));
    m->bos = m->add_special(m->piece_or(sp_bos, "<BOS>"));
    m->eos = m->add_special(m->piece_or(sp_eos, "<EOS>"));
    for (int64_t i = 0; i < vocab_extra_ids; ++i) m->add_special(str_cat("<extra_id_", i, ">"));
    MG_USER_CHECK(m->vocab_size <= INT32_MAX, "--vocab-extra-ids ", vocab_extra_ids,
                  " makes the vocabulary exceed int32 ids");
  } else {
    // Megatron takes EOD from the model's eos (and Llama2Tokenizer prepends its bos): a model
    // trained without them would put -1 into the token files.
    MG_USER_CHECK(kind != Kind::kLlama2 || (sp_bos >= 0 && sp_bos < m->pieces),
                  "--tokenizer-model '", model_file,
                  "' has no beginning-of-sentence piece (bos_id ", sp_bos,
                  "), which Llama2Tokenizer puts before every text");
    MG_USER_CHECK(sp_eos >= 0 && sp_eos < m->pieces, "--tokenizer-model '", model_file,
                  "' has no end-of-sentence piece (eos_id ", sp_eos, "), which ", kind_name(kind),
                  " uses as EOD; train it with an eos piece or use SentencePieceTokenizer");
    m->bos = sp_bos >= 0 && sp_bos < m->pieces ? sp_bos : -1;
    m->eos = m->eod = sp_eos;
  }
  m_ = std::move(m);
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) {
  const Model& m = *m_;
  std::vector<int32_t> out;
  if (m.kind == Kind::kLlama2) out.push_back(m.bos);
  if (m.kind != Kind::kSentencePiece) {
    encode_text(text, out);
    return out;
  }
  // Each special token's next occurrence at or after `at` (npos: none left), found again only
  // once the cut has passed it.
  std::vector<size_t> next(m.specials.size(), 0);
  size_t at = 0;
  for (size_t k = 0; k < next.size(); ++k) next[k] = text.find(m.specials[k].first);
  for (;;) {
    size_t best = std::string_view::npos, best_k = 0;
    for (size_t k = 0; k < next.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < at)
        next[k] = text.find(m.specials[k].first, at);
      if (next[k] < best) {
        best = next[k];
        best_k = k;
      }
    }
    if (best == std::string_view::npos) break;
    encode_text(text.substr(at, best - at), out);
    out.push_back(m.specials[best_k].second);
    at = best + m.specials[best_k].first.size();
  }
  encode_text(text.substr(at), out);
  return out;
}

// One Encode call's worth of text (the library adds the dummy-prefix space in front).
void SentencePieceTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) {
  if (!m_->word_split) return m_->encode_pieces(text, out);
  // A word starts at a space that follows a character other than a space (or U+2581, which
  // the model reads as one) and is followed by more than spaces (trailing spaces stay with the
  // last word). Its leading space is dropped: the library's dummy prefix stands in for it.
  size_t start = 0;
  for (size_t i = 1; i < text.size(); ++i) {
    if (text[i] != ' ' || text[i - 1] == ' ' || text.substr(0, i).ends_with(kMeta)) continue;
    size_t j = i;
    while (j < text.size() && text[j] == ' ') ++j;
    if (j == text.size()) break;
    encode_word(text.substr(start, i - start), out);
    start = i + 1;
    i = j - 1;
  }
  encode_word(text.substr(start), out);
}

void SentencePieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) {
  if (auto it = cache_.find(word); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids;
  m_->encode_pieces(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.empty()) cache_.reserve(1u << 16);
  if (cache_.size() < (1u << 20)) cache_.emplace(std::string(word), std::move(ids));
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  const Model& m = *m_;
  for (int32_t id : ids) m.check_id(id);
  if (m.kind != Kind::kSentencePiece) return m.decode_pieces(ids.data(), ids.size());
  // Megatron's rule: the text around a special token is decoded on its own, and the token's
  // text is written with a space on each side.
  std::string out;
  size_t last = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = m.special_of_id.find(ids[i]);
    if (it == m.special_of_id.end()) continue;
    out += m.decode_pieces(ids.data() + last, i - last) + " " + it->second + " ";
    last = i + 1;
  }
  return out + m.decode_pieces(ids.data() + last, ids.size() - last);
}

int64_t SentencePieceTokenizer::vocab_size() const { return m_->vocab_size; }
int32_t SentencePieceTokenizer::eod() const { return m_->eod; }
int32_t SentencePieceTokenizer::bos() const { return m_->bos; }
int32_t SentencePieceTokenizer::eos() const { return m_->eos; }
bool SentencePieceTokenizer::caches_words() const { return m_->word_split; }
const std::vector<std::pair<std::string, int32_t>>& SentencePieceTokenizer::special_tokens() const {
  return m_->specials;
}

std::unique_ptr<Tokenizer> SentencePieceTokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(m_));
}

}  // namespace mg
