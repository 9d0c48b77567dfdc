#include "data/numpy_random.h"

#include "core/error.h"

namespace mg {

// ---- MT19937 (Matsumoto & Nishimura 1998), seeded as numpy's mt19937_seed ----

LegacyRandomState::LegacyRandomState(uint32_t seed) {
  uint32_t s = seed;
  for (int i = 0; i < 624; ++i) {
    key_[i] = s;
    s = 1812433253u * (s ^ (s >> 30)) + uint32_t(i + 1);
  }
  pos_ = 624;
}

uint32_t LegacyRandomState::next_uint32() {
  if (pos_ == 624) {
    constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
    for (int i = 0; i < 624; ++i) {
      const uint32_t y = (key_[i] & kUpper) | (key_[(i + 1) % 624] & kLower);
      key_[i] = key_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
    }
    pos_ = 0;
  }
  uint32_t y = key_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t LegacyRandomState::next_uint64() {
  const uint64_t hi = next_uint32();
  return (hi << 32) | next_uint32();
}

uint64_t LegacyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s <<= 1) mask |= mask >> s;
  uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

// ---- SeedSequence (numpy's hash-mix entropy pool) -> PCG64 ----

namespace {

constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u, kInitB = 0x8b51f9ddu,
                   kMultB = 0x58f38dedu, kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> 16;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> 16);
}

// SeedSequence(seed).generate_state(n_words, uint32)
std::vector<uint32_t> seed_sequence_state(uint64_t seed, int n_words) {
  std::vector<uint32_t> entropy;
  if (seed == 0) entropy.push_back(0);
  for (uint64_t s = seed; s > 0; s >>= 32) entropy.push_back(uint32_t(s));
  uint32_t pool[kPoolSize];
  uint32_t hc = kInitA;
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < int(entropy.size()) ? entropy[i] : 0u, hc);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hc));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hc));
  std::vector<uint32_t> out(n_words);
  uint32_t hb = kInitB;
  for (int i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> 16;
    out[i] = v;
  }
  return out;
}

constexpr unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(2549297995355413924ull) << 64) | 4865540595714422341ull;

}  // namespace

Pcg64Generator::Pcg64Generator(uint64_t seed) {
  const std::vector<uint32_t> w = seed_sequence_state(seed, 8);  // 4 x uint64, little-endian
  auto u64 = [&](int i) { return uint64_t(w[2 * i]) | (uint64_t(w[2 * i + 1]) << 32); };
  const unsigned __int128 initstate = (static_cast<unsigned __int128>(u64(0)) << 64) | u64(1);
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(u64(2)) << 64) | u64(3);
  state_ = 0;
  inc_ = (initseq << 1) | 1;
  state_ = state_ * kPcgMult + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t Pcg64Generator::next_uint64() {
  state_ = state_ * kPcgMult + inc_;
  const uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
  const unsigned rot = unsigned(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t Pcg64Generator::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uinteger_ = uint32_t(next >> 32);
  return uint32_t(next);
}

std::vector<int64_t> Pcg64Generator::integers(int64_t low, int64_t high, int64_t n) {
  MG_CHECK(high > low, "integers: empty range [", low, ", ", high, ")");
  const uint64_t rng = uint64_t(high - 1 - low);
  MG_CHECK(rng < 0xffffffffull, "integers: ranges >= 2^32 are not ported");
  std::vector<int64_t> out(n);
  const uint32_t rng_excl = uint32_t(rng) + 1;
  for (int64_t i = 0; i < n; ++i) {
    if (rng == 0) {
      out[i] = low;
      continue;
    }
    uint64_t m = uint64_t(next_uint32()) * rng_excl;
    uint32_t leftover = uint32_t(m);
    if (leftover < rng_excl) {
      const uint32_t threshold = (0xffffffffu - uint32_t(rng)) % rng_excl;
      while (leftover < threshold) {
        m = uint64_t(next_uint32()) * rng_excl;
        leftover = uint32_t(m);
      }
    }
    out[i] = low + int64_t(m >> 32);
  }
  return out;
}

}  // namespace mg
