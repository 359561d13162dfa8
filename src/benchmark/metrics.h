// Benchmark metrics: what each request measured, and the summary a run reports (the
// definitions of vLLM's `benchmark_serving`, so figures compare across tools).
//
//   TTFT  time to first token: send -> the first chunk carrying output.
//   ITL   inter-token latency: the gaps between successive output-carrying chunks, pooled over
//         all requests (a chunk carrying k > 1 tokens counts as one gap).
//   TPOT  time per output token, per request: (E2E - TTFT) / (output tokens - 1), for requests
//         with more than one output token.
//   E2E   send -> the last byte of the response.
//   goodput  completed requests per second that met every SLO given (TTFT, TPOT, E2E).
//
// Thread safety: plain functions of their arguments.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln::benchmark {

// What one request measured. Times are seconds; start_s is since the benchmark started, the
// others since start_s.
struct RequestRecord {
  bool ok = false;
  // When !ok: a short type that groups errors ("http 400", "http 503", "connect", "timeout",
  // "read", "bad response"), and the first message seen for it.
  std::string error_type;
  std::string error_message;
  double start_s = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;  // gaps between output-carrying chunks
  int32_t input_tokens = -1;  // the server's usage.prompt_tokens, else the dataset's, else -1
  int32_t output_tokens = 0;  // the server's usage.completion_tokens, else chunks counted
};

// Service-level objectives for goodput, in milliseconds; 0 = not set.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2el_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2el_ms > 0; }
};

// Parses "ttft:200,tpot:50,e2el:5000" (any subset, milliseconds; vLLM's --goodput syntax, with
// commas or spaces between). Errors: kInvalidArgument naming the bad part.
Result<Slo> ParseSlo(std::string_view spec);

// A latency distribution in milliseconds. Empty samples give zeros and count 0.
struct Distribution {
  int64_t count = 0;
  double mean = 0;
  double stddev = 0;
  double min = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// Seconds from a to b on the benchmarks' clock.
inline double SecondsBetween(std::chrono::steady_clock::time_point a,
                             std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The p-th percentile (0..100) of `values`, linearly interpolated between closest ranks
// (numpy's default). REQUIRES: !values.empty().
double Percentile(std::vector<double> values, double p);
// Summarizes `values_s` (seconds) into milliseconds.
Distribution Distribute(const std::vector<double>& values_s);

struct Summary {
  int32_t num_requests = 0;  // records given
  int32_t num_completed = 0;
  int32_t num_failed = 0;
  std::map<std::string, int32_t> errors;              // error_type -> count
  std::map<std::string, std::string> error_examples;  // error_type -> first message
  double duration_s = 0;
  int64_t total_input_tokens = 0;  // completed requests with a known input length
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // completed / duration
  double output_throughput = 0;   // output tokens / s
  double total_throughput = 0;    // (input + output) tokens / s
  bool has_slo = false;
  Slo slo;
  int32_t num_good = 0;
  double goodput = 0;  // requests / s meeting every SLO
  Distribution ttft, tpot, itl, e2el;
};

// Summarizes a run of `duration_s` seconds. Failed requests count only in errors.
Summary Summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo);

// The summary as JSON (the keys are Summary's field names; distributions as objects with the
// keys mean, stddev, min, p50, p90, p99, max, count, in ms).
nlohmann::ordered_json SummaryToJson(const Summary& summary);
// The summary as a readable table headed by `title`.
std::string FormatSummary(const Summary& summary, std::string_view title);

}  // namespace kiln::benchmark
