#include "core/json_fields.h"

namespace mg {

void throw_json_field_error(const std::string& file, const std::string& path,
                            std::string_view must, const std::string& got) {
  const std::string shown = got.size() > 60 ? got.substr(0, 57) + "..." : got;
  throw UsageError(str_cat(file, ": ", path.empty() ? "" : "field '" + path + "' ", "must be ",
                           must, ", got ", shown));
}

std::string json_error_reason(const std::string& what) {
  const size_t tag_end = what.starts_with("[json.exception") ? what.find("] ") : std::string::npos;
  return tag_end == std::string::npos ? what : what.substr(tag_end + 2);
}

}  // namespace mg
