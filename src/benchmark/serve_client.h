// The load generator of `kiln bench serve`: sends a dataset's requests to an OpenAI-compatible
// server (kiln, vLLM, TensorRT-LLM's trtllm-serve, ...) over streaming HTTP, at a request rate
// or a fixed concurrency, and records what each request measured (metrics.h).
//
//   ServeClientOptions opts;
//   opts.base_url = "http://127.0.0.1:8000";
//   opts.model = "smollm2";
//   opts.request_rate = 16;  // Poisson arrivals; +inf sends everything at once
//   KILN_ASSIGN_OR_RETURN(ServeRun run, RunServeBenchmark(requests, opts));
//   Summary s = Summarize(run.records, run.duration_s, {});
//
// The requests ("stream": true, "stream_options": {"include_usage": true}, temperature 0):
//   completions  POST {base}/v1/completions  {"prompt": token ids (or text when the request has
//                none), "max_tokens": output_len}
//   chat         POST {base}/v1/chat/completions  {"messages": [system: the shared prefix,
//                when there is one] + [user: the prompt text], "max_completion_tokens"}
// plus "ignore_eos": true when asked, and options.extra_body's keys (which win).
// A chunk carries output when its text (completions) or delta.content (chat) is not empty; the
// first one is the TTFT, the gaps between the next ones the ITLs. Output tokens are the final
// usage chunk's completion_tokens, or the output-carrying chunks when the server sends no usage.
//
// Threading: RunServeBenchmark runs every connection on one Asio io_context on the calling
// thread (one connection per request); it returns when all requests have ended.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark/dataset.h"
#include "benchmark/metrics.h"
#include "core/status.h"

namespace kiln::benchmark {

struct ServeClientOptions {
  // http://host[:port][/prefix]; a prefix ending in /v1 is not doubled. (No https: put a local
  // proxy in front of a TLS endpoint.)
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "completions";  // completions | chat
  std::string model;                     // the "model" of every request
  std::string api_key;                   // sent as "Authorization: Bearer <key>" when set
  // Arrivals (dataset.h ArrivalTimes): requests per second (+inf: all at once) and the gamma
  // shape of the gaps (1 = Poisson).
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  // At most this many requests in flight (a request that arrives while the limit is reached
  // waits, in arrival order); 0 = no limit.
  int32_t max_concurrency = 0;
  // Requests sent first (the dataset's first ones, at once, within max_concurrency) and not
  // measured: they warm the server's caches, graphs and connections.
  int32_t num_warmup = 0;
  // > 0: send requests (cycling through the dataset) until this many seconds have passed, then
  // wait for those in flight; 0: send every request of the dataset once.
  double duration_s = 0;
  bool ignore_eos = false;
  double request_timeout_s = 600;  // per request, connect to last byte
  uint64_t seed = 0;               // arrival times
  // A progress bar on stderr (redrawn in place on a terminal; a line every 10 % otherwise).
  bool show_progress = true;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into each request body
};

struct ServeRun {
  std::vector<RequestRecord> records;  // in send order
  double duration_s = 0;               // first send -> last response end
};

// Runs the benchmark. Errors: kInvalidArgument for a bad base_url, endpoint, rate, burstiness,
// concurrency or an empty dataset, or duration_s with an infinite rate and no concurrency limit;
// kUnavailable when the host does not resolve. Failed requests are not errors: they are records
// with ok = false and an error type.
Result<ServeRun> RunServeBenchmark(const std::vector<BenchRequest>& requests,
                                   const ServeClientOptions& options);

// The id of the first model GET {base}/v1/models lists. Errors: kUnavailable when the server
// cannot be reached or answers with an error status (the message says which and why),
// kInvalidArgument when the answer lists no model.
Result<std::string> FetchModelName(const std::string& base_url, const std::string& api_key,
                                   double timeout_s = 10);

}  // namespace kiln::benchmark
