#include "text/unicode.h"

#include <algorithm>

namespace mg::unicode {

namespace {
struct CodeRange {
  char32_t first, last;
};
#include "text/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], char32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= std::prev(it)->last;
}
}  // namespace

bool is_letter(char32_t cp) { return in_ranges(kLetterRanges, cp); }
bool is_number(char32_t cp) { return in_ranges(kNumberRanges, cp); }
bool is_space(char32_t cp) { return in_ranges(kSpaceRanges, cp); }

size_t decode_one(std::string_view s, size_t i, char32_t& cp) {
  const uint8_t b = uint8_t(s[i]);
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  const int len = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  cp = len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
  bool ok = len > 0 && i + size_t(len) <= s.size();
  for (int k = 1; ok && k < len; ++k) {
    const uint8_t c = uint8_t(s[i + size_t(k)]);
    ok = (c >> 6) == 2;
    cp = (cp << 6) | (c & 0x3f);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
             (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff))
    ok = false;
  if (ok) return size_t(len);
  cp = 0xfffd;
  return 0;
}

std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const size_t len = decode_one(s, i, cp);
    out.push_back(cp);
    i += len ? len : 1;
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    const size_t len = decode_one(s, i, cp);
    if (!len) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  for (char32_t c : decode_utf8(s)) append_utf8(out, c);
  return out;
}

std::vector<std::string> byte_level_chars() {
  std::vector<int> cs(256, -1);
  for (int b = '!'; b <= '~'; ++b) cs[b] = b;
  for (int b = 0xa1; b <= 0xac; ++b) cs[b] = b;
  for (int b = 0xae; b <= 0xff; ++b) cs[b] = b;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (cs[b] < 0) cs[b] = 256 + n++;
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) append_utf8(out[b], char32_t(cs[b]));
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

}  // namespace mg::unicode
