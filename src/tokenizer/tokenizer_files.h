// Reading a tokenizer's files: every failure is a UsageError naming the flag and the file.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace mg {

// The whole file; `flag` is the command-line flag that named it (for the error message).
std::string read_tokenizer_file(const std::string& path, const char* flag);

// The file parsed as JSON (malformed JSON is a UsageError naming the flag and the file).
nlohmann::json read_tokenizer_json(const std::string& path, const char* flag);

}  // namespace mg
