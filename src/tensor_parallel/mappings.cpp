#include "tensor_parallel/mappings.h"

#include <cstring>

namespace mg::tp {

void scatter_to_sp_region_forward(const TPGroup& g, const float* full, float* local,
                                  int64_t n_local) {
  std::memcpy(local, full + int64_t(g.rank()) * n_local, n_local * sizeof(float));
}

}  // namespace mg::tp
