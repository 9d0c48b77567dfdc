// Sizes in exact integer arithmetic: products and sums of 64-bit counts (elements, bytes) that
// throw UsageError naming what overflowed instead of wrapping to a negative or small size, so a
// huge flag value is refused before anything is allocated. `what` names the quantity and the
// flags that drive it ("bytes of the position table (--max-position-embeddings x --hidden-size)").
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace mg {

// Throws UsageError "WHAT: A x B overflows a 64-bit integer; lower ..." (op is 'x' or '+').
[[noreturn]] void throw_size_overflow(std::string_view what, int64_t a, char op, int64_t b);

inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_size_overflow(what, a, 'x', b);
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw_size_overflow(what, a, '+', b);
  return r;
}

// The product of all factors, checked at each step.
inline int64_t checked_product(std::initializer_list<int64_t> factors, std::string_view what) {
  int64_t r = 1;
  for (int64_t f : factors) r = checked_mul(r, f, what);
  return r;
}

// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace mg
