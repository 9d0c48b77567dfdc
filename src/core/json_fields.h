// Reading a JSON document a user handed us (a config.json, a manifest, checkpoint metadata) with
// each field's type and range checked, so a missing, mistyped or out-of-range field, or a file
// that is not JSON at all, is one UsageError naming the file and the field
//   "model.json: field 'hidden_size' must be an integer in [1, 4611686018427387904], got "768""
// and never a json.exception. Templates over the JSON type (nlohmann::json at the call sites),
// so core/ itself includes only the standard library.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace mg {

// The largest size a field may hold by default: 2^62, so a product or sum of two such sizes
// stays checkable (core/checked_math.h) without ever being negative.
inline constexpr int64_t kMaxJsonSize = int64_t(1) << 62;

// "FILE: field 'PATH' must be MUST, got VALUE" (VALUE the JSON text, cut at 60 characters);
// an empty path is the document itself: "FILE: must be MUST, got VALUE".
[[noreturn]] void throw_json_field_error(const std::string& file, const std::string& path,
                                         std::string_view must, const std::string& got);

// The parser's message without its "[json.exception.parse_error.101] " tag.
std::string json_error_reason(const std::string& what);

// Parses text as JSON; not JSON -> UsageError "FILE: not valid JSON (the parser's reason)".
template <typename Json>
Json parse_json_text(const std::string& text, const std::string& file) {
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    throw UsageError(str_cat(file, ": not valid JSON (", json_error_reason(e.what()), ")"));
  }
}

// A JSON object (or array element) together with the file it came from and its path in that
// file ("ranks[2].index"), whose fields are read with a type and a range.
template <typename Json>
class JsonFields {
 public:
  JsonFields(const Json& j, std::string file, std::string path = "")
      : j_(&j), file_(std::move(file)), path_(std::move(path)) {
    if (!j.is_object()) fail("a JSON object");
  }

  // The objects of a document that is a JSON array of them ("[i]" their paths).
  static std::vector<JsonFields> array_objects(const Json& a, const std::string& file) {
    if (!a.is_array()) throw_json_field_error(file, "", "a JSON array of objects", text(a));
    std::vector<JsonFields> out;
    for (size_t i = 0; i < a.size(); ++i)
      out.emplace_back(a[i], file, "[" + std::to_string(i) + "]");
    return out;
  }

  const Json& json() const { return *j_; }
  const std::string& file() const { return file_; }
  bool has(std::string_view key) const {
    return j_->contains(std::string(key)) && !(*j_)[std::string(key)].is_null();
  }

  // A nested object field.
  JsonFields at(std::string_view key) const { return {get(key), file_, child(key)}; }
  // The objects of an array field.
  std::vector<JsonFields> objects(std::string_view key) const {
    const Json& a = get(key);
    if (!a.is_array()) fail_field(key, "an array", a);
    std::vector<JsonFields> out;
    for (size_t i = 0; i < a.size(); ++i)
      out.emplace_back(a[i], file_, child(key) + "[" + std::to_string(i) + "]");
    return out;
  }

  int64_t integer(std::string_view key, int64_t lo = 0, int64_t hi = kMaxJsonSize) const {
    return as_integer(get(key), key, lo, hi);
  }
  // An optional integer field: `fallback` when it is absent or null.
  int64_t integer_or(std::string_view key, int64_t fallback, int64_t lo = 0,
                     int64_t hi = kMaxJsonSize) const {
    return has(key) ? integer(key, lo, hi) : fallback;
  }
  // A finite number in [lo, hi].
  double number(std::string_view key, double lo = -std::numeric_limits<double>::max(),
                double hi = std::numeric_limits<double>::max()) const {
    const Json& v = get(key);
    const double d = v.is_number() ? v.template get<double>() : NAN;
    if (!std::isfinite(d) || d < lo || d > hi)
      fail_field(key, str_cat("a finite number in [", lo, ", ", hi, "]"), v);
    return d;
  }
  std::string string(std::string_view key) const {
    const Json& v = get(key);
    if (!v.is_string()) fail_field(key, "a string", v);
    return v.template get<std::string>();
  }
  bool boolean(std::string_view key) const {
    const Json& v = get(key);
    if (!v.is_boolean()) fail_field(key, "true or false", v);
    return v.template get<bool>();
  }
  // An array of integers, each in [lo, hi] (a shape: sizes in [0, 2^62]).
  std::vector<int64_t> integers(std::string_view key, int64_t lo = 0,
                                int64_t hi = kMaxJsonSize) const {
    const Json& a = get(key);
    if (!a.is_array()) fail_field(key, str_cat("an array of integers in [", lo, ", ", hi, "]"), a);
    std::vector<int64_t> out;
    for (size_t i = 0; i < a.size(); ++i)
      out.push_back(as_integer(a[i], str_cat(key, "[", i, "]"), lo, hi));
    return out;
  }

 private:
  std::string child(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  const Json& get(std::string_view key) const {
    const std::string k(key);
    if (!j_->contains(k)) throw UsageError(str_cat(file_, ": field '", child(key), "' is missing"));
    return (*j_)[k];
  }
  int64_t as_integer(const Json& v, std::string_view key, int64_t lo, int64_t hi) const {
    bool ok = v.is_number_integer();
    int64_t x = 0;
    if (ok && v.is_number_unsigned())
      ok = v.template get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max());
    if (ok) x = v.template get<int64_t>();
    if (!ok || x < lo || x > hi)
      fail_field(key, str_cat("an integer in [", lo, ", ", hi, "]"), v);
    return x;
  }
  // The value as JSON text for a message (invalid UTF-8 replaced, not thrown on).
  static std::string text(const Json& v) {
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  [[noreturn]] void fail(std::string_view must) const {
    throw_json_field_error(file_, path_, must, text(*j_));
  }
  [[noreturn]] void fail_field(std::string_view key, std::string_view must, const Json& v) const {
    throw_json_field_error(file_, child(key), must, text(v));
  }

  const Json* j_;
  std::string file_, path_;
};

}  // namespace mg
