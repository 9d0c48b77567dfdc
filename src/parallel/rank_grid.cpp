#include "parallel/rank_grid.h"

#include <sstream>

#include "core/error.h"

namespace mg {

namespace {
// Groups spanning the '-'-joined dims of a grid of these named dimensions (first fastest).
std::vector<std::vector<int>> grid_groups(const std::vector<std::string>& names,
                                          const std::vector<int>& sizes, const std::string& dims) {
  std::vector<bool> mask(names.size(), false);
  std::stringstream ss(dims);
  for (std::string d; std::getline(ss, d, '-');) {
    bool found = false;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == d) mask[i] = found = true;
    MG_CHECK(found, "unknown parallel dimension '", d, "' in '", dims, "'");
  }
  std::vector<int> stride(sizes.size());
  for (size_t i = 0, s = 1; i < sizes.size(); s *= size_t(sizes[i]), ++i) stride[i] = int(s);
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
  int world = 1, group_size = 1;
  for (int s : sizes) world *= s;
  for (int s : in_shape) group_size *= s;
  std::vector<std::vector<int>> out(size_t(world / group_size));
  for (size_t g = 0; g < out.size(); ++g)
    for (int m = 0; m < group_size; ++m)
      out[g].push_back(offset(m, in_shape, in_stride) + offset(int(g), out_shape, out_stride));
  return out;
}
}  // namespace

std::vector<std::vector<int>> RankGrid::groups(const std::string& dims) const {
  // Megatron's order; ep is 1 in the dense layout (experts: expert_groups).
  return grid_groups({"tp", "cp", "ep", "dp", "pp"}, {tp, cp, 1, dp, pp}, dims);
}

std::vector<std::vector<int>> RankGrid::expert_groups(const std::string& dims) const {
  MG_CHECK(ep >= 1 && (tp * cp * dp) % (expert_tp() * ep) == 0, "expert TP ", expert_tp(), " x EP ",
           ep, " must divide TP x CP x DP ", tp * cp * dp);
  return grid_groups({"etp", "ep", "edp", "pp"}, {expert_tp(), ep, edp(), pp}, dims);
}

std::vector<std::vector<int>> RankGrid::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (const auto& ranks : groups("pp"))
    out.push_back(pp > 1 ? std::vector<int>{ranks.front(), ranks.back()}
                         : std::vector<int>{ranks.front()});
  return out;
}

}  // namespace mg
