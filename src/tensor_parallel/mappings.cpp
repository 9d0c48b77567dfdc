#include "tensor_parallel/mappings.h"

#include "backend/dispatch.h"

namespace mg::tp {

void scatter_to_sp_region_forward(const TPGroup& g, const float* full, float* local,
                                  int64_t n_local) {
  ops::copy(local, ops::device(), full + int64_t(g.rank()) * n_local, ops::device(),
            n_local * sizeof(float));
}

}  // namespace mg::tp
