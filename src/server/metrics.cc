#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace kiln::server {

namespace {

// Bucket bounds as vLLM's (seconds), so that dashboards' quantiles compare.
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640.0, 2560.0};
const prometheus::Histogram::BucketBoundaries kItlBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const prometheus::Histogram::BucketBoundaries kRequestBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

ServerMetrics::ServerMetrics(const std::string& model_name)
    : registry_(std::make_shared<prometheus::Registry>()) {
  const prometheus::Labels labels = {{"model_name", model_name}};
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add(labels);
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add(labels);
  };
  auto histogram = [&](const char* name, const char* help,
                       const prometheus::Histogram::BucketBoundaries& buckets) {
    return &prometheus::BuildHistogram()
                .Name(name)
                .Help(help)
                .Register(*registry_)
                .Add(labels, buckets);
  };
  num_running_ = gauge("kiln:num_requests_running", "Requests in the running batch.");
  num_waiting_ = gauge("kiln:num_requests_waiting", "Requests waiting to be scheduled.");
  kv_usage_ = gauge("kiln:kv_cache_usage_perc", "KV-cache usage: 1 = all blocks in use.");
  prefix_queries_ =
      counter("kiln:prefix_cache_queries_total", "Prefix-cache queries, in tokens looked up.");
  prefix_hits_ = counter("kiln:prefix_cache_hits_total", "Prefix-cache hits, in tokens found.");
  preemptions_ = counter("kiln:num_preemptions_total", "Requests preempted by the scheduler.");
  prompt_tokens_ =
      counter("kiln:prompt_tokens_total", "Prompt tokens computed (prefix-cache hits excluded).");
  generation_tokens_ = counter("kiln:generation_tokens_total", "Tokens generated.");
  auto& success = prometheus::BuildCounter()
                      .Name("kiln:request_success_total")
                      .Help("Requests finished, by finish reason.")
                      .Register(*registry_);
  for (FinishReason r : {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort}) {
    prometheus::Labels l = labels;
    l["finished_reason"] = std::string(FinishReasonName(r));
    success_[static_cast<int>(r)] = &success.Add(l);
  }
  ttft_ = histogram("kiln:time_to_first_token_seconds",
                    "Arrival to first generated token, per request.", kTtftBuckets);
  itl_ = histogram("kiln:inter_token_latency_seconds", "Time between two outputs of a request.",
                   kItlBuckets);
  e2e_ = histogram("kiln:e2e_request_latency_seconds", "Arrival to finish, per request.",
                   kRequestBuckets);
  queue_ = histogram("kiln:request_queue_time_seconds", "Arrival to first scheduled, per request.",
                     kRequestBuckets);
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::ObserveTimeToFirstToken(double seconds) { ttft_->Observe(seconds); }

void ServerMetrics::ObserveInterTokenLatency(double seconds) { itl_->Observe(seconds); }

void ServerMetrics::ObserveFinished(FinishReason reason, double e2e_seconds, double queue_seconds) {
  success_[static_cast<int>(reason)]->Increment();
  e2e_->Observe(e2e_seconds);
  if (queue_seconds >= 0) queue_->Observe(queue_seconds);
}

std::string ServerMetrics::Render(const ExecutorStats& stats) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const EngineStats& e = stats.engine;
    num_running_->Set(stats.num_running);
    num_waiting_->Set(stats.num_waiting);
    kv_usage_->Set(e.num_kv_blocks > 0
                       ? 1.0 - static_cast<double>(e.num_free_kv_blocks) / e.num_kv_blocks
                       : 0.0);
    // Stats only grow; a scrape adds what happened since the previous one.
    auto add = [](prometheus::Counter* c, int64_t now, int64_t before) {
      if (now > before) c->Increment(static_cast<double>(now - before));
    };
    add(prefix_queries_, e.kv.num_lookup_tokens, last_.kv.num_lookup_tokens);
    add(prefix_hits_, e.kv.num_hit_tokens, last_.kv.num_hit_tokens);
    add(preemptions_, e.num_preemptions, last_.num_preemptions);
    add(prompt_tokens_, e.num_prompt_tokens, last_.num_prompt_tokens);
    add(generation_tokens_, e.num_generated_tokens, last_.num_generated_tokens);
    last_ = e;
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kiln::server
