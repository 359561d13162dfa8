// Many fp32 quotients y / d by one divisor d (a row's or a layer's quantization scale), each
// rounded exactly as the IEEE division y / d (what the CPU reference, model/quantization.h,
// computes), without a division per value: one product and two FMA corrections against the
// correctly rounded reciprocal 1 / d, made once per divisor.
//
// Why it is exact (Markstein's theorem, as used for division on IA-64): with inv = RN(1 / d)
// (within half an ulp of 1 / d), q0 = RN(y * inv) is within ~2 ulps of y / d; one correction
// q1 = RN(q0 + RN(y - d * q0) * inv) is then within one ulp (faithful), so the remainder
// r1 = y - d * q1 is exact in one FMA, and RN(q1 + r1 * inv) is the correctly rounded y / d —
// as long as nothing over- or underflows. That holds for divisors in [2^-64, 2^64] and
// quotients in [2^-40, 2^100] (both remainders are then normal numbers). Outside that quotient
// range the product q0 is returned as it is: within 2 ulps of y / d and of its sign, +-0 for +-0,
// and infinite or NaN where the division is (the corrections would turn an infinite q0 into NaN);
// it may also be infinite where y / d is a finite number above 2^127. No quantization needs more
// there: e4m3 rounds everything below 2^-10 to zero and saturates above 464, int8 rounds to 0 and
// clamps at +-127. Divisors outside the range take the division itself. The unit test
// (divide_test.cc) checks this against y / d on the CPU.
//
// __host__ __device__: the kernels divide with it, the unit test runs it on the CPU.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KILN_DIVIDE_FN __host__ __device__ __forceinline__
#else
#define KILN_DIVIDE_FN inline
#endif

namespace kiln::kernels {

struct Divisor {
  float d = 1.0f;
  float inv = 1.0f;  // RN(1 / d)
  bool fast = true;  // d within [2^-64, 2^64]: DivideRn corrects the product
};

KILN_DIVIDE_FN Divisor MakeDivisor(float d) {
  Divisor v;
  v.d = d;
  v.inv = 1.0f / d;  // an IEEE division (no fast-math anywhere in kiln)
  v.fast = d >= 0x1p-64f && d <= 0x1p64f;
  return v;
}

// y / d: bitwise the IEEE division for quotients in [2^-40, 2^100], zeros, infinities and NaN;
// within 2 ulps, with its sign, elsewhere (above). REQUIRES: v.fast.
KILN_DIVIDE_FN float DivideRnFast(float y, const Divisor& v) {
  const float q0 = y * v.inv;
  const float r0 = std::fma(-v.d, q0, y);
  const float q1 = std::fma(r0, v.inv, q0);
  const float r1 = std::fma(-v.d, q1, y);
  const float q2 = std::fma(r1, v.inv, q1);
  const float m = std::fabs(q0);
  return m >= 0x1p-40f && m <= 0x1p100f ? q2 : q0;
}

// DivideRnFast where kFast (= v.fast), else the division itself (a divisor outside the fast
// range). Loops over many quotients take kFast from WithDivisor: testing v.fast inside costs a
// branch a value.
template <bool kFast>
KILN_DIVIDE_FN float DivideRnAs(float y, const Divisor& v) {
  if constexpr (kFast) {
    return DivideRnFast(y, v);
  } else {
    return y / v.d;
  }
}

// The same with the range tested here.
KILN_DIVIDE_FN float DivideRn(float y, const Divisor& v) {
  return v.fast ? DivideRnAs<true>(y, v) : DivideRnAs<false>(y, v);
}

// f.template operator()<v.fast>(): a loop of quotients inside f tests the range once.
template <typename F>
KILN_DIVIDE_FN void WithDivisor(const Divisor& v, F&& f) {
  if (v.fast) {
    f.template operator()<true>();
  } else {
    f.template operator()<false>();
  }
}

}  // namespace kiln::kernels

#undef KILN_DIVIDE_FN
