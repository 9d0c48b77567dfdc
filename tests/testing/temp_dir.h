// A fresh directory under /tmp for one test, removed with everything in it at scope exit, and
// whole-file reads and writes: the scaffolding of tests that write and corrupt files.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mg::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* prefix = "mg_test") {
    std::string tmpl = std::string("/tmp/") + prefix + "_XXXXXX";
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
  std::filesystem::path operator/(const std::string& sub) const { return path / sub; }
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace mg::testing
