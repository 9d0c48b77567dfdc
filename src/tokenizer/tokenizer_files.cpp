#include "tokenizer/tokenizer_files.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace mg {

std::string read_tokenizer_file(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  MG_USER_CHECK(f.good(), flag, ": cannot read '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json read_tokenizer_json(const std::string& path, const char* flag) {
  try {
    return nlohmann::json::parse(read_tokenizer_file(path, flag));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(str_cat(flag, " '", path, "' is not valid JSON: ", e.what()));
  }
}

}  // namespace mg
