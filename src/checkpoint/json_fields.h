// Typed, range-checked reading of an untrusted JSON document (checkpoint metadata, shard
// indexes, --dump-final-params manifests, HF config.json). Every accessor checks presence, type
// and range and names the document and the field's dotted path in its UsageError, e.g.
// "checkpoint metadata 'ck/iter_0000010/metadata.json': field 'optimizer.steps' must be an
// integer >= 0, got -1", so no JSON exception, narrowing or out-of-range conversion escapes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::ckpt {

// The largest count a file may record (iterations, samples, bytes): far above any real run,
// far below int64 overflow in the arithmetic that follows.
constexpr int64_t kMaxCount = int64_t(1) << 50;

class JsonFields {
 public:
  // `what` names the document ("checkpoint metadata 'PATH'"); j must outlive this view.
  JsonFields(const nlohmann::json& j, std::string what, std::string prefix = "");
  // Parses text as a JSON object (a parse error or another type is a UsageError naming `what`).
  static nlohmann::json parse_object(const std::string& text, const std::string& what);

  bool has(const std::string& key) const { return j_->contains(key); }
  int64_t integer(const std::string& key, int64_t min, int64_t max = kMaxCount) const;
  uint32_t crc(const std::string& key) const;
  double number(const std::string& key, double min, double max) const;  // finite
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  // A string that must be one of `allowed`.
  std::string one_of(const std::string& key, const std::vector<std::string>& allowed) const;
  std::vector<std::string> strings(const std::string& key) const;
  std::vector<int64_t> integers(const std::string& key, int64_t min, int64_t max) const;
  JsonFields object(const std::string& key) const;
  // An array of objects, each element named "key[i]".
  std::vector<JsonFields> objects(const std::string& key) const;
  // The raw value (checked present), for a caller that validates it itself.
  const nlohmann::json& raw(const std::string& key) const { return at(key); }
  // "checkpoint metadata 'PATH': field 'optimizer.steps'" (for the caller's own messages).
  std::string name(const std::string& key) const;
  const std::string& what() const { return what_; }

 private:
  const nlohmann::json& at(const std::string& key) const;
  [[noreturn]] void wrong(const std::string& key, const std::string& must) const;

  const nlohmann::json* j_;
  std::string what_, prefix_;
};

}  // namespace mg::ckpt
