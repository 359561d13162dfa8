// Small statistics shared by the benchmarks and the accuracy tools.
#pragma once

#include <span>

namespace kiln {

// Percentile p in [0, 100] (clamped) of `sorted` (ascending), linear between the two nearest
// ranks (numpy's default, vLLM's benchmark percentiles). REQUIRES: sorted is not empty.
double PercentileOfSorted(std::span<const double> sorted, double p);

}  // namespace kiln
