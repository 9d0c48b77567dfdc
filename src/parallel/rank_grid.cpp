#include "parallel/rank_grid.h"

#include <sstream>

#include "core/error.h"

namespace mg {

std::vector<std::vector<int>> RankGrid::groups(const std::string& dims) const {
  // Megatron's order with the dimension we do not have yet (ep) at size 1.
  const std::vector<std::string> names = {"tp", "cp", "ep", "dp", "pp"};
  const std::vector<int> sizes = {tp, cp, 1, dp, pp};
  std::vector<bool> mask(names.size(), false);
  std::stringstream ss(dims);
  for (std::string d; std::getline(ss, d, '-');) {
    bool found = false;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == d) mask[i] = found = true;
    MG_CHECK(found, "unknown parallel dimension '", d, "' in '", dims, "'");
  }
  std::vector<int> stride(sizes.size());
  for (size_t i = 0, s = 1; i < sizes.size(); s *= sizes[i], ++i) stride[i] = int(s);
  std::vector<int> in_shape, in_stride, out_shape, out_stride;
  for (size_t i = 0; i < sizes.size(); ++i) {
    (mask[i] ? in_shape : out_shape).push_back(sizes[i]);
    (mask[i] ? in_stride : out_stride).push_back(stride[i]);
  }
  // The rank at a flat index over `shape` (first dimension fastest), scaled by `stride`.
  auto offset = [](int index, const std::vector<int>& shape, const std::vector<int>& st) {
    int r = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      r += (index % shape[i]) * st[i];
      index /= shape[i];
    }
    return r;
  };
  int group_size = 1;
  for (int s : in_shape) group_size *= s;
  std::vector<std::vector<int>> out(size_t(world() / group_size));
  for (size_t g = 0; g < out.size(); ++g)
    for (int m = 0; m < group_size; ++m)
      out[g].push_back(offset(m, in_shape, in_stride) + offset(int(g), out_shape, out_stride));
  return out;
}

std::vector<std::vector<int>> RankGrid::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (const auto& ranks : groups("pp"))
    out.push_back(pp > 1 ? std::vector<int>{ranks.front(), ranks.back()}
                         : std::vector<int>{ranks.front()});
  return out;
}

}  // namespace mg
