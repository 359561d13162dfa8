// Server: `kiln serve`'s HTTP front end. It routes requests to the api layer (api.h: JSON <->
// EngineRequest / response bodies), runs the engine requests through the Executor, streams
// their output back, and adds what a production endpoint needs: API keys, a body limit,
// admission control (429), disconnect -> abort, /health, /metrics and a graceful shutdown.
//
//   KILN_ASSIGN_OR_RETURN(auto server, Server::Start(options));  // listening; /health 503
//   server->SetModel(std::move(model));                           // /health 200, routes live
//   server->WaitForShutdownSignal();                              // SIGTERM / SIGINT
//   server->Shutdown();                                           // drains, then stops
//
// Routes (auth: the ones marked * need `Authorization: Bearer <key>` when keys are set):
//   POST /v1/completions*, /v1/chat/completions*, /generate*, /v2/models/{name}/generate*,
//        /v2/models/{name}/generate_stream*, /tokenize*, /detokenize*
//   GET  /v1/models*, /health, /version, /metrics
//
// Thread safety: every method may be called from any thread but the server's I/O threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"
#include "server/api.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace kiln::server {

struct ServerOptions {
  HttpServerOptions http;
  // Accepted bearer tokens; empty = no authentication.
  std::vector<std::string> api_keys;
  // Engine requests accepted but not yet running (a choice of n counts as one) beyond which new
  // HTTP requests are refused with 429 + Retry-After. Accepted requests are never dropped; a
  // single job larger than the limit is still admitted when nothing waits. <= 0: no limit.
  int32_t max_num_waiting = 1024;
  // Seconds a client is told to wait after a 429 / 503 (Retry-After).
  int32_t retry_after_s = 1;
  // How long Shutdown lets requests in flight finish before aborting them.
  double shutdown_timeout_s = 30;
  // GET /version's answer.
  std::string version = "unknown";
};

// What the server serves, once loaded: the executor, the api layer's view of the model, and
// whatever those borrow from (e.g. the LLM that holds the mapped checkpoint and the tokenizer).
struct ServedModel {
  std::shared_ptr<void> owner;  // destroyed last: the executor's engine and info borrow from it
  std::unique_ptr<LoadedTokenizer> tokenizer;  // when the owner holds none (tests)
  ModelInfo info;                              // info.tokenizer points into owner or tokenizer
  std::unique_ptr<Executor> executor;
};

class Server {
 public:
  // Starts listening (see HttpServer::Start for the errors); /health answers 503 until SetModel.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();  // Shutdown(), then the executor stops

  // Makes the model live: /health 200, the engine routes answer. Once.
  void SetModel(std::unique_ptr<ServedModel> model);
  uint16_t port() const { return http_->port(); }

  // Blocks until SIGTERM or SIGINT arrives, or RequestStop() is called.
  void WaitForShutdownSignal();
  // Wakes WaitForShutdownSignal (e.g. the model failed to load). Thread-safe.
  void RequestStop();
  // Graceful stop: closes the listener (/health 503 from now), lets requests in flight finish
  // up to options.shutdown_timeout_s, aborts those left (their clients get finish_reason
  // "abort"), then stops the I/O threads. Idempotent.
  void Shutdown();

  // Engine requests accepted and not yet finished.
  int64_t num_requests_in_flight() const { return num_in_flight_; }

 private:
  struct Job;
  explicit Server(const ServerOptions& options);
  void Handle(const std::shared_ptr<HttpExchange>& exchange);
  void HandleEngineRoute(const std::shared_ptr<HttpExchange>& exchange, ApiKind kind,
                         const std::string& model_segment, bool triton_stream);
  void Drain(const std::shared_ptr<Job>& job);
  void FinishJob(const std::shared_ptr<Job>& job);
  bool Authorized(const HttpRequest& request) const;
  ServedModel* model() const { return ready_ ? model_.get() : nullptr; }

  ServerOptions options_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> num_in_flight_{0};

  std::mutex jobs_mu_;
  std::unordered_set<std::shared_ptr<Job>> jobs_;  // jobs with engine requests not yet finished
  std::mutex shutdown_mu_;
  bool shutdown_done_ = false;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
};

}  // namespace kiln::server
