// Counter-based RNG (Philox4x32-10, Salmon et al., SC'11): the value at (key, counter) does not
// depend on how many values were drawn before, so a full weight generated from the seed is the
// same whatever layout later shards it.
#pragma once
#include <array>
#include <cstdint>

namespace mg {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Fills out[0..n) with elements [start, start + n) of the N(0, std) sequence of stream `stream`
// under `seed` (Box-Muller on Philox). Element i depends only on (seed, stream, i), so a shard
// of a weight is generated without materializing the whole weight.
void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint64_t stream,
                 int64_t start = 0);

// Stable 64-bit hash (FNV-1a) of a name, used to give each parameter its own stream.
uint64_t stream_id(const char* name);

}  // namespace mg
