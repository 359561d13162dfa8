// PNG plots of benchmark runs, drawn with cairo (Debian libcairo2-dev).
//
//   WriteTimelinePng(records, "timeline.png", "kiln, 16 req/s");
//   WriteLatencyThroughputPng(points, "latency.png", "ISL 467 / OSL 256");
//
// Thread safety: plain functions; cairo surfaces are private to each call.
#pragma once

#include <string>
#include <vector>

#include "benchmark/metrics.h"
#include "core/status.h"

namespace kiln::benchmark {

// One request per horizontal line, in send order: a thin grey bar from its send time to its first
// token (waiting + prefill), a coloured bar from there to its end (decode), red for a failed
// request; the x axis is seconds since the start, with a running count of requests in flight
// drawn beneath. Errors: kInvalidArgument for an empty record list; kIoError naming the path
// when cairo cannot write it.
Status WriteTimelinePng(const std::vector<RequestRecord>& records, const std::string& path,
                        const std::string& title);

// One run of a sweep: its throughput and latency percentiles (ms).
struct LatencyPoint {
  std::string label;  // e.g. "2 req/s", "inf"
  double output_throughput = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
};

// Two panels side by side, TTFT and ITL (p50 solid, p99 dashed) against output tok/s, each point
// labelled. Errors: kInvalidArgument for no points; kIoError naming the path on a write error.
Status WriteLatencyThroughputPng(const std::vector<LatencyPoint>& points, const std::string& path,
                                 const std::string& title);

}  // namespace kiln::benchmark
