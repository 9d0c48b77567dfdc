// The tokenizer parity tests' documents: UTF-8 edge cases, then the fortunes corpus (~2.5 MB of
// real English, one document per fortune, Debian package `fortunes`), and the JSON-lines file
// the JavaScript references read.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "text/unicode.h"

namespace mg::testing {

inline std::vector<std::string> tokenizer_edge_cases() {
  return {
      "Hello world! It's 2026, naïve café — 日本語のテキスト 中文 한국어",
      "emoji 👍🏽👨‍👩‍👧 flags 🇩🇪 and e\u0301 combining ñ, Å, ä\u0308",
      "  leading spaces, trailing   \n\n\n\ttabs\t\t and \r\n CRLF  ",
      "contractions: it's, I'm, you're, we've, they'll, he'd, don't, IT'S, 'tis, ''",
      "digits 1234567890 3.14159 1,000,000 ٣٤٥ ½ Ⅻ ①",
      "punctuation !!!??? ... --- ((())) {{}} [[]] @#$%^&*_+=|\\/<>~`",
      "           many spaces then text",
      "\u00a0nbsp\u2003em space\u3000ideographic space\u2028line sep",
      "Ελληνικά, русский язык, עברית, العربية, हिन्दी, ไทย",
      std::string(300, 'a') + " " + std::string(200, '-') + " x",
      "",
      " ",
      "DON'T WON'T I'M YOU'RE WE'VE THEY'LL HE'D IT'S Don'T",
      "\r\n\r\n\r\nline\r\n\r\n  \r\n\t\r\nend\n\n\n",
      std::string(1000, ' ') + "x" + std::string(500, '\n') + "y" + std::string(300, '\t'),
      "12345678901234567890 0000000 3.14159265358979 ١٢٣٤٥٦٧٨٩",
      "4-byte: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 𠜎𠜱𠝹 🀄 🧑‍💻 "
      "\U0001F600\U0001F601",
      "combining: a\u0300\u0301\u0302 Z\u0351\u0352\u0353 क्षत्रिय",
      "special tokens as text: <|begin_of_text|> <|end_of_text|> <s> </s> <unk> "
      "<|endoftext|> <|reserved_special_token_7|><s></s>x<|eot_id|>",
      "<s>leading special",
      "中文没有空格的句子，标点符号。日本語の文章です！",
  };
}

// Valid UTF-8 (the files may hold stray Latin-1 bytes): malformed bytes become U+FFFD.
inline std::vector<std::string> fortunes_corpus() {
  std::vector<std::string> docs;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/games/fortunes")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || ext == ".dat" || ext == ".u8") continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = unicode::to_valid_utf8(ss.str());
    size_t start = 0;
    while (start < text.size()) {  // fortunes are separated by lines holding "%"
      size_t end = text.find("\n%\n", start);
      if (end == std::string::npos) end = text.size();
      docs.push_back(text.substr(start, end - start + 1));
      start = end + 3;
    }
  }
  return docs;
}

// Writes {"text": doc} per line; returns the number of text bytes.
inline size_t write_jsonl(const std::filesystem::path& path, const std::vector<std::string>& docs) {
  std::ofstream f(path);
  size_t bytes = 0;
  for (const auto& d : docs) {
    f << nlohmann::json{{"text", d}}.dump() << "\n";
    bytes += d.size();
  }
  return bytes;
}

}  // namespace mg::testing
