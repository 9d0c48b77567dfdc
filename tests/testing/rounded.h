// A vector rounded to a 16-bit dtype for the precision tests: its codes and its widened values.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace mg::testing {

struct Rounded {
  std::vector<uint16_t> h;  // the 16-bit codes
  std::vector<float> f;     // the same values widened to f32
  Rounded(const std::vector<float>& v, DType t) : h(v.size()), f(v.size()) {
    cpu::cast_from_f32(h.data(), t, v.data(), int64_t(v.size()));
    cpu::cast_to_f32(f.data(), h.data(), t, int64_t(v.size()));
  }
};

}  // namespace mg::testing
