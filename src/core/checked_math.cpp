#include "core/checked_math.h"

#include "core/error.h"

namespace mg {

void throw_size_overflow(std::string_view what, int64_t a, char op, int64_t b) {
  throw UsageError(str_cat(what, ": ", a, op == 'x' ? " x " : " + ", b,
                           " overflows a 64-bit integer; lower the sizes that drive it"));
}

}  // namespace mg
