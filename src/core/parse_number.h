// A flag's (or a config field's) text as a number, the one parser the option tables and the
// model's field list share: integers must be whole and fit their type (an int64 flag stops at
// 9223372036854775807, an int flag at 2147483647), floating-point values must be finite and fit
// their type (no inf, nan, or 1e39 for a float). Errors are UsageErrors naming the flag.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace mg {

template <typename T>
T parse_number(std::string_view name, const std::string& text) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    MG_USER_CHECK(!text.empty() && end && *end == '\0', name, " expects a number, got '", text,
                  "'");
    MG_USER_CHECK(std::isfinite(d), name, " expects a finite number, got '", text, "'");
    MG_USER_CHECK(std::fabs(d) <= double(std::numeric_limits<T>::max()), name, " ", text,
                  " is out of range: it must be within ±", std::numeric_limits<T>::max());
    return T(d);
  } else {
    T v{};
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    const bool whole = p == text.data() + text.size();
    MG_USER_CHECK(ec != std::errc::result_out_of_range || !whole, name, " ", text,
                  " is out of range: it must be in [", +std::numeric_limits<T>::min(), ", ",
                  +std::numeric_limits<T>::max(), "]");
    MG_USER_CHECK(ec == std::errc() && whole, name, " expects ",
                  std::is_signed_v<T> ? "an integer" : "a non-negative integer", ", got '", text,
                  "'");
    return v;
  }
}

}  // namespace mg
