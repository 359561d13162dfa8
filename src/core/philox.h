// Philox-4x32-10: the counter-based random number generator of Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3" (SC'11), as published with Random123. A pure function of a
// 128-bit counter and a 64-bit key, so any thread (CPU or GPU) can draw the numbers of any
// (request, position, token) without shared state; this is what makes a seeded request give the
// same tokens whatever batch it runs in (DESIGN.md §3).
//
// Header-only and free of the standard library beyond <cstdint>, so CUDA kernels can include it.
//
// One round maps the counter words (x0, x1, x2, x3) under the round key (k0, k1) to
//
//   (hi(M1 * x2) ^ x1 ^ k0,  lo(M1 * x2),  hi(M0 * x0) ^ x3 ^ k1,  lo(M0 * x0))
//
// where hi/lo are the upper/lower 32 bits of the 64-bit product; the key grows by the Weyl
// constants (W0, W1) between rounds. Ten rounds.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

// A 128-bit counter block, and the output block (same shape); word 0 is the lowest.
struct Philox4x32Block {
  uint32_t w[4];
};

// The 64-bit key; word 0 is the lowest.
struct Philox4x32Key {
  uint32_t w[2];
};

namespace philox_internal {

inline constexpr uint32_t kM0 = 0xD2511F53u;  // round multipliers
inline constexpr uint32_t kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u;  // key schedule (golden ratio, sqrt(3) - 1)
inline constexpr uint32_t kW1 = 0xBB67AE85u;

KILN_HOST_DEVICE inline Philox4x32Block Round(const Philox4x32Block& x, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * x.w[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * x.w[2];
  return {{static_cast<uint32_t>(p1 >> 32) ^ x.w[1] ^ k0, static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ x.w[3] ^ k1, static_cast<uint32_t>(p0)}};
}

}  // namespace philox_internal

// Philox-4x32-10 of `counter` under `key`: four independent uniform 32-bit words.
KILN_HOST_DEVICE inline Philox4x32Block Philox4x32(Philox4x32Block counter, Philox4x32Key key) {
  uint32_t k0 = key.w[0];
  uint32_t k1 = key.w[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += philox_internal::kW0;
      k1 += philox_internal::kW1;
    }
    counter = philox_internal::Round(counter, k0, k1);
  }
  return counter;
}

// Maps 32 random bits to a float in (0, 1]: ((x >> 8) + 1) * 2^-24, from the top 24 bits. Every
// value is exact in fp32 (a 24-bit integer times a power of two), so CPU and GPU agree bit for
// bit; the smallest is 2^-24 (never 0, so log() is finite) and the largest is exactly 1.
KILN_HOST_DEVICE inline float UniformFloat(uint32_t x) {
  return static_cast<float>((x >> 8) + 1u) * 0x1p-24f;
}

// The random words of the sampler's exponential race (backend/step.h): for the request keyed by
// `seed`, at output position `position` (the number of tokens generated so far), word j of the
// result belongs to token id 4 * group + j. Counter = {group, position lo, position hi, 0},
// key = {seed lo, seed hi}.
KILN_HOST_DEVICE inline Philox4x32Block SamplerRandomWords(uint64_t seed, uint64_t position,
                                                           uint32_t group) {
  return Philox4x32(
      {{group, static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), 0u}},
      {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}});
}

}  // namespace kiln
