// SentencePiece tokenizers (label `reference`): models trained inside the test by Debian's
// spm_train on the fortunes corpus (BPE and unigram, 2000 pieces), then every corpus line and
// UTF-8 edge cases encoded by us and by spm_encode --output_format=id: the ids must match for
// each --tokenizer-type under Megatron's rules (Llama2Tokenizer: spm_encode's bos option;
// SentencePieceTokenizer: special tokens cut the text). Decoding is compared with spm_decode,
// and decode(encode(x)) == x where SentencePiece promises it (identity normalization, byte
// fallback: Llama 2's settings). Also bad model files, and `preprocess` with Llama2Tokenizer
// read back from the .bin/.idx.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "text/unicode.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using Kind = SentencePieceTokenizer::Kind;

const std::vector<std::string> kEdgeCases = {
    "Hello world! It's 2026, naïve café — 日本語のテキスト 中文 한국어",
    "emoji 👍🏽👨‍👩‍👧 flags 🇩🇪 and e\u0301 combining ñ, Å, ä\u0308",
    "  leading spaces, trailing   \ttabs\t\t and  ",
    "digits 1234567890 3.14159 1,000,000 ٣٤٥ ½ Ⅻ ①",
    "punctuation !!!??? ... --- ((())) {{}} [[]] @#$%^&*_+=|\\/<>~`",
    "\u00a0nbsp\u2003em space\u3000ideographic space",
    "Ελληνικά, русский язык, עברית, العربية, हिन्दी, ไทย",
    "ﬁ ligature, ＦＵＬＬＷＩＤＴＨ, ㌀ squared, Ⓐ circled",
    std::string(300, 'a') + " " + std::string(200, '-') + " x",
    " ",
    // Word boundaries of the word-by-word path: runs of spaces, trailing spaces, tabs beside
    // spaces, and U+2581 (which the models read as a space) written out.
    "a  b   c    d \t e\t f ",
    "\u2581x \u2581\u2581 y\u2581 z \u2581",
    "trailing   ",
};
// Megatron's SentencePieceTokenizer cuts this at its special tokens and encodes the pieces
// between on their own (the pieces are corpus lines too, so spm_encode gives their ids).
const std::string kSpecialText = "special <CLS> tokens <EOD> in <s> text </s> end<extra_id_10>";
const std::vector<std::string> kSpecialPieces = {"special ", " tokens ", " in ", " text ", " end"};

// The corpus's lines (spm_encode encodes line by line): every non-empty line of the fortunes
// files as valid UTF-8, then the edge cases.
std::vector<std::string> corpus_lines() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> lines;
  for (const fs::path& p : files) {
    std::string text;
    for (char32_t c : unicode::decode_utf8(testing::slurp(p))) unicode::append_utf8(text, c);
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line.find('\r') == std::string::npos) lines.push_back(line);
  }
  lines.insert(lines.end(), kEdgeCases.begin(), kEdgeCases.end());
  // Random runs of words, spaces, tabs and U+2581 (seeded): the word boundaries again.
  std::mt19937 gen(11);
  const char* parts[] = {"the", "a", "b", "ing", " ", "  ", "   ", "\t", "\u2581", "é", "42"};
  for (int k = 0; k < 2000; ++k) {
    std::string line;
    for (int n = 1 + int(gen() % 12); n > 0; --n) line += parts[gen() % std::size(parts)];
    lines.push_back(line);
  }
  lines.push_back(kSpecialText);
  lines.insert(lines.end(), kSpecialPieces.begin(), kSpecialPieces.end());
  return lines;
}

std::vector<Ids> read_ids(const fs::path& p) {
  std::vector<Ids> out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);) {
    Ids ids;
    std::istringstream ls(line);
    for (int32_t v; ls >> v;) ids.push_back(v);
    out.push_back(std::move(ids));
  }
  return out;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

void run(const std::string& cmd) {
  const auto r = testing::run_command(cmd);
  MG_CHECK(r.exit_code == 0, cmd, "\n", r.output);
}

// The models and the reference encodings, each made when a test first needs it (ctest runs
// every test in its own process: each pays only for its own models).
class Fixture {
 public:
  testing::TempDir dir{"mg_spm"};
  const std::vector<std::string> lines = corpus_lines();

  Fixture() {
    std::ofstream all(dir / "corpus.txt"), small(dir / "small.txt"), tiny(dir / "tiny.txt");
    size_t bytes = 0;
    for (const std::string& l : lines) {
      all << l << "\n";
      bytes += l.size();
      if (bytes < 500000) small << l << "\n";
      if (bytes < 250000) tiny << l << "\n";
    }
  }
  // spm_train's model `name` (see kModels).
  std::string model(const std::string& name) {
    static const std::map<std::string, std::string> kModels = {
        {"bpe", "small.txt --model_type=bpe --vocab_size=2000"},
        // Llama 2's settings: no normalization, whitespace kept, digits split, byte fallback.
        {"llama",
         "small.txt --model_type=bpe --vocab_size=2000 --byte_fallback=true "
         "--normalization_rule_name=identity --remove_extra_whitespaces=false "
         "--split_digits=true --allow_whitespace_only_pieces=true"},
        {"unigram", "tiny.txt --model_type=unigram --vocab_size=2000"},
        {"nobos", "tiny.txt --model_type=bpe --vocab_size=300 --bos_id=-1 --eos_id=-1"},
    };
    const std::string path = dir.str(name + ".model");
    if (!fs::exists(path))
      run(str_cat("spm_train --minloglevel=2 --model_prefix=", dir.str(name),
                  " --input=", dir.str(kModels.at(name))));
    return path;
  }
  // spm_encode's ids of every corpus line with model `name` (`options`: --extra_options).
  std::vector<Ids> ids(const std::string& name, const std::string& options = "") {
    const fs::path out = dir / (name + options + ".ids");
    if (!fs::exists(out))
      run(str_cat("spm_encode --output_format=id --model=", model(name),
                  options.empty() ? "" : " --extra_options=" + options, " < ",
                  dir.str("corpus.txt"), " > ", out.string()));
    return read_ids(out);
  }
  // spm_decode's text of those ids.
  std::vector<std::string> decoded(const std::string& name) {
    ids(name);
    const fs::path out = dir / (name + ".decoded");
    if (!fs::exists(out))
      run(str_cat("spm_decode --input_format=id --model=", model(name), " < ",
                  dir.str(name + ".ids"), " > ", out.string()));
    return read_lines(out);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Our ids for every corpus line equal `ref`'s, line by line.
void expect_same_ids(SentencePieceTokenizer& tok, const std::vector<Ids>& ref) {
  const auto& lines = fixture().lines;
  ASSERT_EQ(ref.size(), lines.size()) << "the reference encoded another number of lines";
  size_t mismatches = 0, tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Ids ours = tok.encode(lines[i]);
    tokens += ours.size();
    if (ours != ref[i] && ++mismatches <= 3) ADD_FAILURE() << "ids differ on: " << lines[i];
  }
  EXPECT_EQ(mismatches, 0u) << "of " << lines.size() << " lines";
  EXPECT_GT(tokens, 500000u);
}

size_t line_of(const std::string& text) {
  const auto& lines = fixture().lines;
  return size_t(std::find(lines.begin(), lines.end(), text) - lines.begin());
}

TEST(SentencePiece, GPTSentencePieceMatchesSpmEncode) {
  Fixture& f = fixture();
  SentencePieceTokenizer tok(f.model("bpe"), Kind::kGPTSentencePiece);
  EXPECT_FALSE(tok.caches_words());  // NFKC normalization: the library encodes whole texts
  // No special tokens (the special-token line too is encoded as plain text), no BOS.
  expect_same_ids(tok, f.ids("bpe"));
  // The vocabulary is the model's; EOD is its eos (spm_train's defaults: <s> = 1, </s> = 2).
  EXPECT_EQ(tok.vocab_size(), 2000);
  EXPECT_EQ(tok.eod(), 2);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(SentencePiece, Llama2PrependsBosAndRoundTrips) {
  Fixture& f = fixture();
  SentencePieceTokenizer tok(f.model("llama"), Kind::kLlama2);
  EXPECT_TRUE(tok.caches_words());  // Llama 2's settings: word by word through the cache
  expect_same_ids(tok, f.ids("llama", "bos"));  // spm_encode --extra_options=bos
  EXPECT_EQ(tok.vocab_size(), 2000);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eod(), 2);
  EXPECT_EQ(tok.encode(""), Ids{1});
  // Identity normalization and byte fallback: decoding gives back the text exactly (except
  // U+2581 written out, which SentencePiece decodes as the space it stands for).
  size_t bad = 0;
  for (const std::string& line : f.lines) {
    if (line.find("\u2581") != std::string::npos) continue;
    if (tok.decode(tok.encode(line)) != line && ++bad <= 3) ADD_FAILURE() << "roundtrip: " << line;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(tok.decode({1, 2}), "");  // control pieces decode to nothing
}

TEST(SentencePiece, SentencePieceTokenizerSpecialTokens) {
  Fixture& f = fixture();
  SentencePieceTokenizer tok(f.model("unigram"), Kind::kSentencePiece, 11);
  // <CLS> <SEP> <EOD> <MASK> and <PAD> (the model has no pad piece) are appended; <s> and </s>
  // are the model's bos/eos pieces and keep their ids; then <extra_id_0..10>.
  using P = std::pair<std::string, int32_t>;
  std::vector<P> want = {{"<CLS>", 2000}, {"<SEP>", 2001}, {"<EOD>", 2002}, {"<MASK>", 2003},
                         {"<PAD>", 2004}, {"<s>", 1},      {"</s>", 2}};
  for (int i = 0; i <= 10; ++i) want.emplace_back(str_cat("<extra_id_", i, ">"), 2005 + i);
  EXPECT_EQ(tok.special_tokens(), want);
  EXPECT_EQ(tok.vocab_size(), 2016);
  EXPECT_EQ(tok.eod(), 2002);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);

  // Lines without special-token text: spm_encode's ids, and spm_decode's text back.
  const std::vector<Ids> ref = f.ids("unigram");
  const std::vector<std::string> decoded = f.decoded("unigram");
  ASSERT_EQ(decoded.size(), f.lines.size());
  size_t bad = 0, plain = 0;
  for (size_t i = 0; i < f.lines.size(); ++i) {
    bool special = false;
    for (const auto& [t, id] : want) special |= f.lines[i].find(t) != std::string::npos;
    if (special) continue;
    ++plain;
    const Ids ours = tok.encode(f.lines[i]);
    if (ours != ref[i] && ++bad <= 3) ADD_FAILURE() << "ids differ on: " << f.lines[i];
    if (tok.decode(ours) != decoded[i] && ++bad <= 3) ADD_FAILURE() << "decode: " << f.lines[i];
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(plain, f.lines.size() - 10);

  // The cut at special tokens (<extra_id_1> is not a prefix of "<extra_id_10>": it needs its '>').
  auto piece = [&](size_t k) -> const Ids& { return ref[line_of(kSpecialPieces[k])]; };
  Ids want_ids;
  for (auto [k, special] :
       std::vector<std::pair<size_t, int32_t>>{{0, 2000}, {1, 2002}, {2, 1}, {3, 2}, {4, 2015}}) {
    want_ids.insert(want_ids.end(), piece(k).begin(), piece(k).end());
    want_ids.push_back(special);
  }
  const Ids ours = tok.encode(kSpecialText);
  EXPECT_EQ(ours, want_ids);
  // Decoding writes each special token between spaces.
  auto text = [&](size_t k) { return decoded[line_of(kSpecialPieces[k])]; };
  EXPECT_EQ(tok.decode(ours), text(0) + " <CLS> " + text(1) + " <EOD> " + text(2) + " <s> " +
                                  text(3) + " </s> " + text(4) + " <extra_id_10> ");
}

TEST(SentencePiece, ModelsWithoutBosOrEos) {
  Fixture& f = fixture();
  // SentencePieceTokenizer adds <BOS> and <EOS> itself...
  SentencePieceTokenizer sp(f.model("nobos"), Kind::kSentencePiece);
  EXPECT_EQ(sp.vocab_size(), 307);
  EXPECT_EQ(sp.bos(), 305);
  EXPECT_EQ(sp.eos(), 306);
  EXPECT_EQ(sp.eod(), 302);
  // ...the others take BOS / EOD from the model and refuse one that lacks them.
  const std::string llama =
      testing::usage_error_of([&] { SentencePieceTokenizer(f.model("nobos"), Kind::kLlama2); });
  EXPECT_NE(llama.find("--tokenizer-model '" + f.model("nobos") + "' has no beginning-of-sentence"),
            std::string::npos)
      << llama;
  const std::string gpt = testing::usage_error_of(
      [&] { SentencePieceTokenizer(f.model("nobos"), Kind::kGPTSentencePiece); });
  EXPECT_NE(gpt.find("has no end-of-sentence piece"), std::string::npos) << gpt;
}

TEST(SentencePiece, BadInputNamesTheFlagAndFile) {
  Fixture& f = fixture();
  auto load = [](const std::string& path) {
    return testing::usage_error_of([&] { SentencePieceTokenizer(path, Kind::kLlama2); });
  };
  testing::write_bytes(f.dir / "empty.model", "");
  const std::string nobos = f.model("nobos");
  for (const auto& [path, says] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/tokenizer.model", "does not exist"},
           {f.dir.str(), "is a directory"},
           {f.dir.str("nobos.vocab"), "is not a SentencePiece model"},
           {f.dir.str("corpus.txt"), "is not a SentencePiece model"},
           {f.dir.str("empty.model"), "is not a SentencePiece model"}}) {
    const std::string m = load(path);
    EXPECT_NE(m.find("--tokenizer-model '" + path + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(says), std::string::npos) << m;
  }
  TokenizerConfig cfg;
  cfg.tokenizer_type = "Llama2Tokenizer";
  EXPECT_NE(testing::usage_error_of([&] { make_tokenizer(cfg); }).find("needs --tokenizer-model"),
            std::string::npos);
  cfg.tokenizer_model = nobos;
  cfg.vocab_extra_ids = 2;
  EXPECT_NE(testing::usage_error_of([&] {
              make_tokenizer(cfg);
            }).find("--vocab-extra-ids applies to"),
            std::string::npos);
  cfg.tokenizer_type = "SentencePieceTokenizer";
  auto tok = make_tokenizer(cfg);  // 300 pieces + 7 special tokens + 2 extra ids
  EXPECT_EQ(tok->vocab_size(), 309);
  EXPECT_NE(testing::usage_error_of([&] {
              tok->decode({5, 309});
            }).find("token id 309 is outside"),
            std::string::npos);
  EXPECT_NE(testing::usage_error_of([&] { tok->decode({-1}); }).find("token id -1 is outside"),
            std::string::npos);
}

// `preprocess --tokenizer-type Llama2Tokenizer --append-eod` of the first `n` corpus lines into
// <dir>/llama_text_document.
std::string preprocess_llama(Fixture& f, size_t n) {
  {
    std::ofstream in(f.dir / "docs.jsonl");
    for (size_t i = 0; i < n; ++i) in << nlohmann::json{{"text", f.lines[i]}}.dump() << "\n";
  }
  PreprocessConfig cfg;
  cfg.input = f.dir.str("docs.jsonl");
  cfg.output_prefix = f.dir.str("llama");
  cfg.tokenizer.tokenizer_type = "Llama2Tokenizer";
  cfg.tokenizer.tokenizer_model = f.model("llama");
  cfg.append_eod = true;
  cfg.workers = 2;
  cfg.log_interval = 1000000;
  run_preprocess(cfg);
  return f.dir.str("llama_text_document");
}

// Each document in the .bin/.idx is BOS + spm_encode's ids + EOD (the model's eos).
TEST(SentencePiece, PreprocessWithLlama2Tokenizer) {
  Fixture& f = fixture();
  const size_t n = 3000;
  IndexedDataset ds(preprocess_llama(f, n));
  EXPECT_EQ(ds.dtype(), TokenDType::U16);
  ASSERT_EQ(ds.num_documents(), int64_t(n));
  const std::vector<Ids> ref = f.ids("llama", "bos");
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    Ids want = ref[i];
    want.push_back(2);
    Ids got(size_t(ds.length(int64_t(i))));
    ds.get(int64_t(i), 0, int64_t(got.size()), got.data());
    if (got != want && ++bad <= 3) ADD_FAILURE() << "document " << i << ": " << f.lines[i];
  }
  EXPECT_EQ(bad, 0u);
}

// train and generate take the vocabulary from the model (2000 pieces, padded to 2048 as
// --vocab-size 2000 is) and read the Llama2Tokenizer dataset; generate's text begins with the
// prompt (BOS dropped in decoding).
TEST(SentencePiece, TrainAndGenerateWithLlama2Tokenizer) {
  Fixture& f = fixture();
  const std::string data = preprocess_llama(f, 2000);
  const std::string model =
      " --num-layers 1 --hidden-size 32 --num-attention-heads 2"
      " --seq-length 32 --max-position-embeddings 32";
  const std::string train = std::string(MG_BINARY) + " train" + model +
                            " --micro-batch-size 2 --global-batch-size 2 --train-iters 3 --lr 1e-3"
                            " --log-interval 1 --eval-interval 0 --split 98,1,1 --eod-mask-loss"
                            " --reset-position-ids --reset-attention-mask --data-path " +
                            data;
  const auto sp =
      testing::run_command(train + " --tokenizer-type Llama2Tokenizer --tokenizer-model " +
                           f.model("llama") + " --dump-final-params " + f.dir.str("p.bin"));
  ASSERT_EQ(sp.exit_code, 0) << sp.output;
  const auto null =
      testing::run_command(train + " --tokenizer-type NullTokenizer --vocab-size 2000");
  ASSERT_EQ(null.exit_code, 0) << null.output;
  auto params = [](const std::string& log) {
    const size_t at = log.find("number of parameters");
    return at == std::string::npos ? std::string("none") : log.substr(at, log.find('\n', at) - at);
  };
  EXPECT_EQ(params(sp.output), params(null.output));
  // 2048 x 32 embedding + 32 x 32 positions + one layer (12704) + final norm (64).
  EXPECT_NE(params(sp.output).find("(whole model: 79328)"), std::string::npos) << sp.output;
  const auto gen = testing::run_command(
      std::string(MG_BINARY) + " generate" + model + " --tokenizer-type Llama2Tokenizer" +
      " --tokenizer-model " + f.model("llama") + " --load-params " + f.dir.str("p.bin") +
      " --prompt 'Fortune favors the' --max-new-tokens 5");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_EQ(gen.output.rfind("Fortune favors the", 0), 0u) << gen.output;
}

}  // namespace
}  // namespace mg
