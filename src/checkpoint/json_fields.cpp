#include "checkpoint/json_fields.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mg::ckpt {

namespace {

using json = nlohmann::json;

// A value as the message shows it: scalars as JSON (shortened), containers by kind (a deeply
// nested one would not even print without recursing as deep).
std::string shown(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// How deeply text nests arrays and objects (outside strings), stopping once past `limit`:
// copying or printing a parsed document recurses as deep.
int nesting(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    else if (ch == '[' || ch == '{') deepest = std::max(deepest, ++depth);
    else if (ch == ']' || ch == '}') --depth;
    if (deepest > limit) break;
  }
  return deepest;
}

}  // namespace

JsonFields::JsonFields(const json& j, std::string what, std::string prefix)
    : j_(&j), what_(std::move(what)), prefix_(std::move(prefix)) {}

json JsonFields::parse_object(const std::string& text, const std::string& what) {
  constexpr int kMaxDepth = 32;  // our files nest 3 deep
  MG_USER_CHECK(nesting(text, kMaxDepth) <= kMaxDepth, what, " nests arrays or objects more than ",
                kMaxDepth, " deep (corrupt?)");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  MG_USER_CHECK(!j.is_discarded(), what, " is not valid JSON (truncated or corrupt?)");
  MG_USER_CHECK(j.is_object(), what, " must hold a JSON object, not ", shown(j));
  return j;
}

std::string JsonFields::name(const std::string& key) const {
  return what_ + ": field '" + prefix_ + key + "'";
}

void JsonFields::wrong(const std::string& key, const std::string& must) const {
  throw UsageError(name(key) + " must be " + must + ", got " + shown(j_->at(key)));
}

const json& JsonFields::at(const std::string& key) const {
  MG_USER_CHECK(j_->is_object() && j_->contains(key), name(key), " is missing");
  return j_->at(key);
}

int64_t JsonFields::integer(const std::string& key, int64_t min, int64_t max) const {
  const json& v = at(key);
  // Counts are bounded far above any real value; saying so only matters to a value above it.
  const std::string must = max == kMaxCount ? str_cat("an integer >= ", min)
                                            : str_cat("an integer in [", min, ", ", max, "]");
  const std::string too_big = max == kMaxCount ? str_cat("an integer <= ", max, " (2^50)") : must;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (min > 0 && u < uint64_t(min)) wrong(key, must);
    if (max < 0 || u > uint64_t(max)) wrong(key, too_big);
    return int64_t(u);
  }
  if (!v.is_number_integer()) wrong(key, must);
  const int64_t i = v.get<int64_t>();
  if (i < min) wrong(key, must);
  if (i > max) wrong(key, too_big);
  return i;
}

uint32_t JsonFields::crc(const std::string& key) const {
  return uint32_t(integer(key, 0, int64_t(UINT32_MAX)));
}

double JsonFields::number(const std::string& key, double min, double max) const {
  const json& v = at(key);
  const double d = v.is_number() ? v.get<double>() : NAN;
  if (!(std::isfinite(d) && d >= min && d <= max))
    wrong(key, str_cat("a number in [", min, ", ", max, "]"));
  return d;
}

bool JsonFields::boolean(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_boolean()) wrong(key, "true or false");
  return v.get<bool>();
}

std::string JsonFields::string(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_string()) wrong(key, "a string");
  return v.get<std::string>();
}

std::string JsonFields::one_of(const std::string& key,
                               const std::vector<std::string>& allowed) const {
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + ("\"" + a + "\"");
  const json& v = at(key);
  if (v.is_string())
    for (const std::string& a : allowed)
      if (v.get<std::string>() == a) return a;
  wrong(key, "one of " + list);
}

std::vector<std::string> JsonFields::strings(const std::string& key) const {
  const json& v = at(key);
  std::vector<std::string> out;
  if (!v.is_array()) wrong(key, "an array of strings");
  for (const json& e : v) {
    if (!e.is_string()) wrong(key, "an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<int64_t> JsonFields::integers(const std::string& key, int64_t min, int64_t max) const {
  const json& v = at(key);
  const std::string must = str_cat("an array of integers in [", min, ", ", max, "]");
  if (!v.is_array()) wrong(key, must);
  std::vector<int64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(max)))
      wrong(key, must);
    const int64_t i = e.get<int64_t>();
    if (i < min || i > max) wrong(key, must);
    out.push_back(i);
  }
  return out;
}

JsonFields JsonFields::object(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_object()) wrong(key, "an object");
  return JsonFields(v, what_, prefix_ + key + ".");
}

std::vector<JsonFields> JsonFields::objects(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_array()) wrong(key, "an array of objects");
  std::vector<JsonFields> out;
  for (size_t i = 0; i < v.size(); ++i) {
    MG_USER_CHECK(v[i].is_object(), name(key), "[", i, "] must be an object, got ", shown(v[i]));
    out.emplace_back(v[i], what_, str_cat(prefix_, key, "[", i, "]."));
  }
  return out;
}

}  // namespace mg::ckpt
