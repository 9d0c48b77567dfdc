// A fresh directory under /tmp for one test, removed with everything in it at scope exit.
#pragma once
#include <stdlib.h>

#include <filesystem>
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
};

}  // namespace mg::testing
