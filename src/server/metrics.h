// ServerMetrics: the Prometheus metrics of `kiln serve` (GET /metrics), named `kiln:` + vLLM's
// suffixes so that vLLM dashboards and the Kubernetes inference gateway read them unchanged.
// Every series carries the label model_name, as vLLM's do.
//
//   gauges      kiln:num_requests_running, kiln:num_requests_waiting, kiln:kv_cache_usage_perc
//   counters    kiln:prefix_cache_queries_total, kiln:prefix_cache_hits_total (tokens),
//               kiln:num_preemptions_total, kiln:prompt_tokens_total,
//               kiln:generation_tokens_total, kiln:request_success_total{finished_reason}
//   histograms  kiln:time_to_first_token_seconds, kiln:inter_token_latency_seconds,
//               kiln:e2e_request_latency_seconds, kiln:request_queue_time_seconds
//
// Gauges and the engine's counters are read from ExecutorStats when scraped (Render); the
// latencies and finish reasons are observed by the server per engine request (one choice).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/executor.h"
#include "engine/request.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace kiln::server {

class ServerMetrics {
 public:
  explicit ServerMetrics(const std::string& model_name);
  ~ServerMetrics();

  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  // One engine request finished: its reason, arrival -> finish, and arrival -> first scheduled
  // (queue_seconds < 0 when it never was, e.g. aborted while waiting).
  void ObserveFinished(FinishReason reason, double e2e_seconds, double queue_seconds);

  // The Prometheus text exposition (format 0.0.4), gauges and engine counters taken from
  // `stats`.
  std::string Render(const ExecutorStats& stats);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* num_running_;
  prometheus::Gauge* num_waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* success_[3];  // by FinishReason
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;

  std::mutex mu_;  // guards the engine counters' last values (counters only go up by deltas)
  EngineStats last_;
};

}  // namespace kiln::server
