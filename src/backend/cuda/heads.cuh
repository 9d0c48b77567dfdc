// cpu::Heads (backend/ops.h) for device code: head h of row n starts at element
// n*row_stride + (h / heads_per_group)*group_stride + (h % heads_per_group)*HD of the view's
// data (Heads::offset is host-only); the typed pointer travels beside it.
#pragma once
#include <cstdint>

#include "backend/ops.h"

namespace mg::cuda {

struct HeadView {
  int64_t row_stride, group_stride, heads_per_group;
  __host__ __device__ int64_t at(int64_t row, int64_t head, int64_t HD) const {
    return row * row_stride + (head / heads_per_group) * group_stride +
           (head % heads_per_group) * HD;
  }
};
inline HeadView head_view(const cpu::Heads& h) {
  return {h.row_stride, h.group_stride, h.heads_per_group};
}

}  // namespace mg::cuda
