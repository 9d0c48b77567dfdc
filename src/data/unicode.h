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

bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_space(char32_t cp);

}  // namespace mg::unicode
