#include "core/stats.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace kiln {

double PercentileOfSorted(std::span<const double> sorted, double p) {
  CHECK(!sorted.empty()) << "Percentile of no values";
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace kiln
