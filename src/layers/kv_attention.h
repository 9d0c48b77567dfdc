// The attention core of an inference step over a KV cache (inference/kv_cache.h implements it):
// the layer hands over its new rows' Q, K and V views (after RoPE and the Q/K norms) and gets
// each sequence's attention output for its new rows, computed over every key the sequence has
// cached plus the new ones.
#pragma once
#include <cstdint>

#include "backend/ops.h"

namespace mg {

class KvAttention {
 public:
  virtual ~KvAttention() = default;
  // Global layer `layer`: stores k and v's rows, then out (rows, NH HD) = attention of q's.
  virtual void forward(int64_t layer, cpu::MatOut out, const cpu::Heads& q, const cpu::Heads& k,
                       const cpu::Heads& v, int64_t NH, int64_t NKV, int64_t HD) const = 0;
};

}  // namespace mg
