// UTF-8 decoding/encoding and the Unicode classes the GPT-2 pre-tokenizer needs (\p{L}, \p{N},
// JavaScript's \s), from tables generated with the JavaScript reference's own regex engine.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mg::unicode {

// Code points of a UTF-8 string; malformed sequences become U+FFFD, as TextDecoder does.
std::vector<char32_t> decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t cp);
// The code point starting at s[i] and its length in bytes; 0 (and U+FFFD) when malformed.
size_t decode_one(std::string_view s, size_t i, char32_t& cp);
bool is_valid_utf8(std::string_view s);
// s with malformed bytes replaced by U+FFFD (as decode_utf8 reads them).
std::string to_valid_utf8(std::string_view s);

// GPT-2's reversible map from bytes to printable characters (byte-level BPE vocabularies):
// printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards in byte order.
std::vector<std::string> byte_level_chars();

bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_space(char32_t cp);

}  // namespace mg::unicode
