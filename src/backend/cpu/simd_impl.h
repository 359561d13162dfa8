// The dot-product kernels shared by every instruction set (simd.h), written once over a 16-lane
// vector type. Included only by the simd_*.cc files, after each has defined, in
// kiln::cpu::internal's anonymous namespace:
//
//   struct Vec {                                   // 16 float lanes
//     static Vec Zero();
//     static Vec Load(const float* p);             // p[0..16)
//     static Vec LoadPartial(const float* p, int n);  // p[0..n), zeros after; 0 < n < 16
//     static Vec Fma(Vec a, Vec b, Vec c);         // a * b + c, one rounding per lane
//     static Vec Mul(Vec a, Vec b);                // a * b, rounded
//     static Vec Add(Vec a, Vec b);                // a + b, rounded
//     static Vec Set1(float x);
//     void Store(float* p) const;                  // p[0..16)
//     static float Reduce(Vec v);                  // the lane tree of cpu_ops.h
//   };
//   constexpr int kTileRows, kTileCols;            // register block of Linear
//
// and after its `#pragma GCC target`, so these templates are compiled for that instruction set.
// NOTE: the anonymous namespace is deliberate: each simd_*.cc instantiates its own copy, and no
// instantiation compiled for one instruction set can be picked by the linker for another.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln::cpu::internal {
namespace {

// out[r * C + c] = dot(x[r], w[c]) over k for r < R, c < C, in the 16-lane order.
template <int R, int C>
inline void DotTile(const float* x, int64_t ldx, const float* const (&w)[C], int64_t k,
                    float* out) {
  Vec acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = Vec::Zero();
  }
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    Vec wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = Vec::Load(w[c] + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Vec xv = Vec::Load(x + r * ldx + i);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = Vec::Fma(xv, wv[c], acc[r][c]);
    }
  }
  if (i < k) {  // the zero-padded tail: 0 * 0 adds an exact zero to the unused lanes
    const int n = static_cast<int>(k - i);
    Vec wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = Vec::LoadPartial(w[c] + i, n);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Vec xv = Vec::LoadPartial(x + r * ldx + i, n);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = Vec::Fma(xv, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) out[r * C + c] = Vec::Reduce(acc[r][c]);
  }
}

inline float DotImpl(const float* a, const float* b, int64_t n) {
  const float* const rows[1] = {b};
  float out;
  DotTile<1, 1>(a, 0, rows, n, &out);
  return out;
}

// Writes the R x C tile at y (row stride ldy): bias, then the residual, in Linear's order.
template <int R, int C>
inline void StoreTile(const float* dots, const float* bias, float* y, int64_t ldy,
                      bool accumulate) {
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float v = dots[r * C + c];
      if (bias != nullptr) v = v + bias[c];
      if (accumulate) v = y[r * ldy + c] + v;
      y[r * ldy + c] = v;
    }
  }
}

template <int R, int C>
inline void LinearTile(const float* x, int64_t ldx, int64_t k, const float* w, int64_t ldw,
                       const float* bias, float* y, int64_t ldy, bool accumulate) {
  const float* rows[C];
  for (int c = 0; c < C; ++c) rows[c] = w + c * ldw;
  float dots[R * C];
  DotTile<R, C>(x, ldx, rows, k, dots);
  StoreTile<R, C>(dots, bias, y, ldy, accumulate);
}

// Rows of x in blocks of kTileRows (then one at a time), w rows in blocks of kTileCols (then one
// at a time): the blocking changes which dots share registers, never a dot's arithmetic.
inline void LinearBlockImpl(const float* x, int64_t ldx, int64_t num_rows, int64_t k,
                            const float* w, int64_t ldw, int64_t num_cols, const float* bias,
                            float* y, int64_t ldy, bool accumulate) {
  int64_t m = 0;
  for (; m + kTileRows <= num_rows; m += kTileRows) {
    int64_t c = 0;
    for (; c + kTileCols <= num_cols; c += kTileCols) {
      LinearTile<kTileRows, kTileCols>(x + m * ldx, ldx, k, w + c * ldw, ldw,
                                       bias ? bias + c : nullptr, y + m * ldy + c, ldy, accumulate);
    }
    for (; c < num_cols; ++c) {
      LinearTile<kTileRows, 1>(x + m * ldx, ldx, k, w + c * ldw, ldw, bias ? bias + c : nullptr,
                               y + m * ldy + c, ldy, accumulate);
    }
  }
  for (; m < num_rows; ++m) {
    int64_t c = 0;
    for (; c + kTileCols <= num_cols; c += kTileCols) {
      LinearTile<1, kTileCols>(x + m * ldx, ldx, k, w + c * ldw, ldw, bias ? bias + c : nullptr,
                               y + m * ldy + c, ldy, accumulate);
    }
    for (; c < num_cols; ++c) {
      LinearTile<1, 1>(x + m * ldx, ldx, k, w + c * ldw, ldw, bias ? bias + c : nullptr,
                       y + m * ldy + c, ldy, accumulate);
    }
  }
}

// One (token, head) of PagedAttention, in the orders cpu_ops.h states: scores 4 keys at a time
// (each dot its own 16-lane chain), max-subtracted exp summed in increasing position, then
// out += (prob / sum) * v per element, mul then add, in increasing position.
inline void AttendImpl(const AttendArgs& a) {
  // Walks positions 0, 1, 2, ... through the block table without a division per position.
  struct Cursor {
    const AttendArgs& a;
    int64_t block = 0;
    int32_t offset = 0;
    int64_t Next() {  // floats from the cache start to this position's row
      const int64_t row = (int64_t{a.block_table[block]} * a.block_size + offset) * a.kv_width;
      if (++offset == a.block_size) offset = 0, ++block;
      return row;
    }
  };
  float* probs = a.probs;
  float max_score = -INFINITY;
  Cursor keys{a};
  int64_t j = 0;
  for (; j + 4 <= a.context; j += 4) {
    // Braced initializers are evaluated left to right: positions j .. j + 3.
    const float* const rows[4] = {a.k_cache + keys.Next(), a.k_cache + keys.Next(),
                                  a.k_cache + keys.Next(), a.k_cache + keys.Next()};
    float dots[4];
    DotTile<1, 4>(a.q, 0, rows, a.head_dim, dots);
    for (int c = 0; c < 4; ++c) {
      probs[j + c] = dots[c] * a.scale;
      max_score = probs[j + c] > max_score ? probs[j + c] : max_score;
    }
  }
  for (; j < a.context; ++j) {
    const float* const rows[1] = {a.k_cache + keys.Next()};
    float dot;
    DotTile<1, 1>(a.q, 0, rows, a.head_dim, &dot);
    probs[j] = dot * a.scale;
    max_score = probs[j] > max_score ? probs[j] : max_score;
  }
  float sum = 0.0f;
  for (j = 0; j < a.context; ++j) {
    probs[j] = std::exp(probs[j] - max_score);
    sum += probs[j];
  }
  float* out = a.out;
  for (int d = 0; d < a.head_dim; ++d) out[d] = 0.0f;
  Cursor values{a};
  for (j = 0; j < a.context; ++j) {
    const float p = probs[j] / sum;
    const float* v = a.v_cache + values.Next();
    const Vec pv = Vec::Set1(p);
    int d = 0;
    for (; d + 16 <= a.head_dim; d += 16) {
      Vec::Add(Vec::Load(out + d), Vec::Mul(pv, Vec::Load(v + d))).Store(out + d);
    }
    for (; d < a.head_dim; ++d) out[d] = out[d] + p * v[d];
  }
}

}  // namespace
}  // namespace kiln::cpu::internal
