// Counter-based normal random numbers for synthetic weights.
//
// Element i of a stream is a pure function of (stream key, i): no generator state is carried
// from one element to the next, so any range of a tensor can be filled by any thread, in any
// order, and the bytes come out identical whatever the thread count or chunking.
//
//   pair k = elements (2k, 2k+1)
//   bits   = SplitMix64Mix(key + (k + 1) * 0x9e3779b97f4a7c15)       (64 random bits)
//   u1     = (bits[63:40] + 1) / 2^24   in (0, 1]
//   u2     = bits[23:0] / 2^24          in [0, 1)
//   r      = sqrt(-2 ln u1)                          (Box-Muller, in double precision)
//   x[2k]  = std * r * cos(2 pi u2),  x[2k+1] = std * r * sin(2 pi u2)
//
// The 24-bit u1 bounds |x| by std * sqrt(48 ln 2) ~= 5.77 std: the tails are cut just past
// 5.7 sigma, which is what a weight initializer wants (no outliers), and the distribution is
// otherwise an exact normal. SplitMix64 over a Weyl sequence passes BigCrush.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace kiln {

// The SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix.
constexpr uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The stream key of one tensor: a mix of the seed and a 64-bit FNV-1a hash of the tensor name.
// NOTE: keyed by name, not by position in the tensor list, so a checkpoint cut to fewer layers
// (--num-layers) holds exactly the same values in the layers it keeps.
uint64_t TensorStreamKey(uint64_t seed, std::string_view tensor_name);

// Writes elements [first, first + count) of stream `key`, drawn from normal(0, stddev) and
// rounded to nearest-even into `dtype`, to `out` (count elements of dtype, densely packed).
// REQUIRES: dtype is kF32, kF16 or kBF16 (CHECKed); first >= 0, count >= 0.
// Thread-safe (pure function of its arguments).
void FillNormal(uint64_t key, int64_t first, int64_t count, float stddev, DType dtype, void* out);

// Writes `count` copies of `value` rounded into `dtype` (kF32, kF16 or kBF16) to `out`.
void FillConstant(float value, int64_t count, DType dtype, void* out);

}  // namespace kiln
