// Small helpers shared by the benchmark programs (bench/*.cc): a fatal check, wall-clock
// seconds, the median of a sample.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Ends the benchmark with the failed expression and its place: a benchmark has no result to
// report once its setup failed.
#define BENCH_CHECK(expr)                                                    \
  do {                                                                       \
    if (!(expr)) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #expr); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

namespace kiln::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace kiln::bench
