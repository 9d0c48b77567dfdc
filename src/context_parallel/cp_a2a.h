// The Ulysses all-to-all over heads (--cp-comm-type a2a) behind cp_attention_forward /
// backward (cp_attention.h has the layout and the bytes).
#pragma once
#include "context_parallel/cp_attention.h"

namespace mg::cp {

void a2a_attention_forward(const CpAttention& cp, ops::MatOut out, float* lse, const ops::Heads& q,
                           const ops::Heads& k, const ops::Heads& v, const ops::AttentionShape& a,
                           const int32_t* seg_start);
void a2a_attention_backward(const CpAttention& cp, const ops::Heads& dq, const ops::Heads& dk,
                            const ops::Heads& dv, const float* dout, ops::Mat out,
                            const ops::Heads& q, const ops::Heads& k, const ops::Heads& v,
                            const float* lse, const ops::AttentionShape& a,
                            const int32_t* seg_start, ops::GradWrite write);

}  // namespace mg::cp
