// Two Hugging Face model directories hold the same model (the conversion tests' round trips):
// every tensor (name, dtype, shape, bytes), config.json and the tokenizer files agree.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/hf_files.h"
#include "testing/temp_dir.h"

namespace mg::testing {

inline void expect_same_hf(const std::filesystem::path& a, const std::filesystem::path& b) {
  const HfTensorFiles x(a.string()), y(b.string());
  ASSERT_EQ(x.names(), y.names()) << a << " vs " << b;
  for (const std::string& n : x.names()) {
    const SafeTensor &s = x.get(n), &t = y.get(n);
    EXPECT_EQ(s.dtype, t.dtype) << n;
    EXPECT_EQ(s.shape, t.shape) << n;
    ASSERT_EQ(s.bytes, t.bytes) << n;
    EXPECT_EQ(std::memcmp(s.data, t.data, s.bytes), 0) << n << " differs";
  }
  EXPECT_EQ(nlohmann::json::parse(slurp(a / "config.json")),
            nlohmann::json::parse(slurp(b / "config.json")));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_EQ(slurp(a / f), slurp(b / f)) << f;
}

}  // namespace mg::testing
