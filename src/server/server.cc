#include "server/server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <condition_variable>
#include <string_view>
#include <thread>

#include "core/check.h"
#include "core/logging.h"

namespace kiln::server {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr std::string_view kJson = "application/json";

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void SendError(HttpExchange& ex, const ApiError& error, const Headers& headers = {}) {
  ex.Respond(static_cast<http::status>(error.status),
             ErrorBody(error).dump(-1, ' ', false, Json::error_handler_t::replace), kJson, headers);
}

ApiError MakeError(int status, std::string message, std::string type) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  return e;
}

// The routes that need a key (everything that touches the model), as vLLM guards /v1.
bool NeedsAuth(std::string_view path) {
  return path.starts_with("/v1/") || path.starts_with("/v2/") || path == "/tokenize" ||
         path == "/detokenize" || path == "/generate";
}

// Answers 405 unless the request uses `verb`.
bool ExpectMethod(HttpExchange& ex, http::verb verb) {
  if (ex.request().method() == verb) return true;
  ApiError e = MakeError(405,
                         std::string(ex.request().method_string()) + " is not allowed on " +
                             std::string(ex.request().target()) + "; use " +
                             std::string(http::to_string(verb)),
                         "invalid_request_error");
  SendError(ex, e, {{"Allow", std::string(http::to_string(verb))}});
  return false;
}

// The offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no
// surrogates, nothing past U+10FFFF), or npos. NOTE: nlohmann's parser passes such bytes
// through in strings, and they would only fail later, when a response echoes them.
size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// The body as a JSON object, or a 400 already sent.
std::optional<Json> ParseJsonBody(HttpExchange& ex) {
  const std::string& text = ex.request().body();
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    SendError(ex, MakeError(400,
                            "the request body is not valid UTF-8 (first bad byte at offset " +
                                std::to_string(bad) + ")",
                            "invalid_request_error"));
    return std::nullopt;
  }
  Json body;
  try {
    body = Json::parse(text);
  } catch (const Json::exception& e) {
    SendError(ex, MakeError(400, std::string("the request body is not valid JSON: ") + e.what(),
                            "invalid_request_error"));
    return std::nullopt;
  }
  if (!body.is_object()) {
    SendError(ex,
              MakeError(400, "the request body must be a JSON object", "invalid_request_error"));
    return std::nullopt;
  }
  return body;
}

}  // namespace

// One HTTP request's engine work: its streams (choice i = streams[i]) feed one ResponseWriter.
// Everything but `streams`, `exchange` and `server` changes on the exchange's strand only.
struct Server::Job {
  std::shared_ptr<HttpExchange> exchange;
  Executor* executor = nullptr;
  ApiJob api;
  std::unique_ptr<ResponseWriter> writer;
  std::vector<std::shared_ptr<RequestStream>> streams;  // fixed once the job is registered
  struct Choice {
    Clock::time_point arrival;
    Clock::time_point last_output;
    bool has_token = false;
    bool finished = false;
  };
  std::vector<Choice> choices;
  size_t num_finished = 0;
  bool failed = false;  // an Enqueue failed: the error is sent, the rest only drains
  std::atomic<bool> drain_posted{false};

  // Thread-safe: the stream list is fixed and Executor::Abort may be called from anywhere.
  void AbortAll() {
    for (const auto& s : streams) executor->Abort(s->id());
  }
};

Server::Server(const ServerOptions& options) : options_(options) {}

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.retry_after_s < 0) return InvalidArgument("retry-after: must not be negative");
  if (options.shutdown_timeout_s < 0) {
    return InvalidArgument("shutdown timeout: must not be negative");
  }
  std::unique_ptr<Server> server(new Server(options));
  HttpServerOptions http = options.http;
  http.render_error = [](int status, std::string_view message) {
    const char* type = status == 413 || status == 431 ? "invalid_request_error" : "server_error";
    if (status == 400) type = "invalid_request_error";
    return ErrorBody(MakeError(status, std::string(message), type))
        .dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  http.error_content_type = std::string(kJson);
  Server* s = server.get();
  KILN_ASSIGN_OR_RETURN(
      server->http_,
      HttpServer::Start(http, [s](std::shared_ptr<HttpExchange> ex) { s->Handle(ex); }));
  return server;
}

Server::~Server() {
  Shutdown();
  // NOTE: the I/O threads are joined (Shutdown) before the executor goes: nothing calls it any
  // more, and its callbacks only post to the stopped io_context.
  if (model_ != nullptr) model_->executor->Shutdown();
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_.clear();
  }
  model_.reset();
  http_.reset();
}

void Server::SetModel(std::unique_ptr<ServedModel> model) {
  CHECK(model_ == nullptr) << "SetModel twice";
  CHECK(model != nullptr && model->executor != nullptr && model->info.tokenizer != nullptr);
  metrics_ = std::make_unique<ServerMetrics>(model->info.name);
  model_ = std::move(model);
  ready_ = true;  // NOTE: publishes model_ and metrics_ to the I/O threads (seq_cst store)
}

bool Server::Authorized(const HttpRequest& request) const {
  if (options_.api_keys.empty()) return true;
  std::string_view auth = request[http::field::authorization];
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() < kBearer.size() || !boost::beast::iequals(auth.substr(0, 7), kBearer)) {
    return false;
  }
  const std::string_view token = auth.substr(kBearer.size());
  bool ok = false;
  // Every key is compared (no early exit), so timing does not say which one came close.
  for (const std::string& key : options_.api_keys) ok |= ConstantTimeEquals(token, key);
  return ok;
}

void Server::Handle(const std::shared_ptr<HttpExchange>& exchange) {
  HttpExchange& ex = *exchange;
  std::string_view target = ex.request().target();
  const std::string path(target.substr(0, target.find('?')));

  if (path == "/health") {
    if (!ExpectMethod(ex, http::verb::get)) return;
    if (model() != nullptr && !shutting_down_) return ex.Respond(http::status::ok, "", kJson);
    return ex.Respond(http::status::service_unavailable, "", kJson,
                      {{"Retry-After", std::to_string(options_.retry_after_s)}});
  }
  if (path == "/version") {
    if (!ExpectMethod(ex, http::verb::get)) return;
    return ex.Respond(http::status::ok, Json{{"version", options_.version}}.dump(), kJson);
  }
  if (path == "/metrics") {
    if (!ExpectMethod(ex, http::verb::get)) return;
    ServedModel* m = model();
    std::string text = m != nullptr ? metrics_->Render(m->executor->Stats()) : "";
    return ex.Respond(http::status::ok, std::move(text), "text/plain; version=0.0.4");
  }
  if (NeedsAuth(path) && !Authorized(ex.request())) {
    return SendError(ex,
                     MakeError(401, "a valid API key is required: Authorization: Bearer <key>",
                               "authentication_error"),
                     {{"WWW-Authenticate", "Bearer"}});
  }

  // Everything below needs the model.
  struct Route {
    std::string_view path;
    enum Kind { kModels, kTokenize, kDetokenize, kEngine } kind;
    ApiKind api = ApiKind::kCompletions;
  };
  static constexpr Route kRoutes[] = {
      {"/v1/models", Route::kModels},
      {"/tokenize", Route::kTokenize},
      {"/detokenize", Route::kDetokenize},
      {"/v1/completions", Route::kEngine, ApiKind::kCompletions},
      {"/v1/chat/completions", Route::kEngine, ApiKind::kChat},
      {"/generate", Route::kEngine, ApiKind::kGenerate},
  };
  std::optional<Route> route;
  std::string model_segment;
  bool triton_stream = false;
  for (const Route& r : kRoutes) {
    if (path == r.path) route = r;
  }
  // /v2/models/{name}/generate[_stream]
  constexpr std::string_view kV2 = "/v2/models/";
  if (!route.has_value() && path.starts_with(kV2)) {
    const std::string rest = path.substr(kV2.size());
    const size_t slash = rest.rfind('/');
    if (slash != std::string::npos && slash > 0) {
      const std::string action = rest.substr(slash + 1);
      if (action == "generate" || action == "generate_stream") {
        route = Route{"", Route::kEngine, ApiKind::kTritonGenerate};
        model_segment = rest.substr(0, slash);
        triton_stream = action == "generate_stream";
      }
    }
  }
  if (!route.has_value()) {
    return SendError(ex, MakeError(404, "no route " + path, "not_found_error"));
  }
  if (!ExpectMethod(ex, route->kind == Route::kModels ? http::verb::get : http::verb::post)) {
    return;
  }
  ServedModel* m = model();
  if (m == nullptr || shutting_down_) {
    return SendError(ex,
                     MakeError(503,
                               m == nullptr ? "the model is still loading; retry shortly"
                                            : "the server is shutting down",
                               "server_error"),
                     {{"Retry-After", std::to_string(options_.retry_after_s)}});
  }
  if (route->kind == Route::kModels) {
    return ex.Respond(http::status::ok,
                      ModelList(m->info).dump(-1, ' ', false, Json::error_handler_t::replace),
                      kJson);
  }
  if (route->kind == Route::kEngine) {
    return HandleEngineRoute(exchange, route->api, model_segment, triton_stream);
  }
  std::optional<Json> body = ParseJsonBody(ex);
  if (!body.has_value()) return;
  auto result =
      route->kind == Route::kTokenize ? Tokenize(*body, m->info) : Detokenize(*body, m->info);
  if (const ApiError* e = std::get_if<ApiError>(&result)) return SendError(ex, *e);
  ex.Respond(http::status::ok,
             std::get<Json>(result).dump(-1, ' ', false, Json::error_handler_t::replace), kJson);
}

void Server::HandleEngineRoute(const std::shared_ptr<HttpExchange>& exchange, ApiKind kind,
                               const std::string& model_segment, bool triton_stream) {
  HttpExchange& ex = *exchange;
  ServedModel& m = *model_;
  std::optional<Json> body = ParseJsonBody(ex);
  if (!body.has_value()) return;
  ParseResult parsed;
  switch (kind) {
    case ApiKind::kCompletions:
      parsed = ParseCompletions(*body, m.info);
      break;
    case ApiKind::kChat:
      parsed = ParseChatCompletions(*body, m.info);
      break;
    case ApiKind::kGenerate:
      parsed = ParseGenerate(*body, m.info);
      break;
    case ApiKind::kTritonGenerate:
      parsed = ParseTritonGenerate(*body, model_segment, triton_stream, m.info);
      break;
  }
  if (const ApiError* e = std::get_if<ApiError>(&parsed)) return SendError(ex, *e);

  auto job = std::make_shared<Job>();
  job->api = std::move(std::get<ApiJob>(parsed));
  const size_t n = job->api.requests.size();
  if (n == 0) {
    return SendError(ex, MakeError(500, "the request produced no work", "server_error"));
  }

  // Admission: never drop what was accepted; refuse new work while too much waits.
  if (options_.max_num_waiting > 0) {
    const int32_t waiting = m.executor->Stats().num_waiting;
    if (waiting > 0 && waiting + static_cast<int64_t>(n) > options_.max_num_waiting) {
      return SendError(ex,
                       MakeError(429,
                                 "the server is at capacity (" + std::to_string(waiting) +
                                     " requests waiting, limit " +
                                     std::to_string(options_.max_num_waiting) + "); retry later",
                                 "rate_limit_error"),
                       {{"Retry-After", std::to_string(options_.retry_after_s)}});
    }
  }

  job->exchange = exchange;
  job->executor = m.executor.get();
  job->writer = std::make_unique<ResponseWriter>(job->api, m.info);
  job->choices.resize(n);
  std::weak_ptr<Job> weak = job;
  // The engine thread calls this after each output: one drain posted at a time per job.
  auto notify = [this, weak] {
    std::shared_ptr<Job> j = weak.lock();
    if (j == nullptr || j->drain_posted.exchange(true)) return;
    j->exchange->Post([this, j] {
      j->drain_posted = false;
      Drain(j);
    });
  };
  Status failure;
  for (size_t i = 0; i < n; ++i) {
    job->choices[i].arrival = Clock::now();
    auto stream = m.executor->Enqueue(std::move(job->api.requests[i]), notify);
    if (!stream.ok()) {
      failure = stream.status();
      break;
    }
    job->streams.push_back(std::move(*stream));
  }
  num_in_flight_ += static_cast<int64_t>(job->streams.size());
  if (!failure.ok()) {
    // NOTE: the api layer validates what the engine does, so this is rare (e.g. shutdown began).
    job->failed = true;
    job->AbortAll();
    job->choices.resize(job->streams.size());
    const bool unavailable = failure.code() == StatusCode::kUnavailable;
    SendError(ex, MakeError(unavailable ? 503 : 400, failure.message(),
                            unavailable ? "server_error" : "invalid_request_error"));
    if (job->streams.empty()) return;
  }
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_.insert(job);
  }
  if (!job->failed) {
    if (job->writer->streaming()) {
      ex.BeginStream("text/event-stream", {{"Cache-Control", "no-cache"}});
    }
    // A client that hangs up aborts its engine requests; their KV blocks are freed by the next
    // engine step.
    ex.SetOnClose([weak] {
      if (std::shared_ptr<Job> j = weak.lock()) j->AbortAll();
    });
  }
  Drain(job);  // outputs may have arrived before the job was registered
}

void Server::Drain(const std::shared_ptr<Job>& job) {
  Job& j = *job;
  if (j.num_finished == j.choices.size()) return;
  HttpExchange& ex = *j.exchange;
  for (size_t i = 0; i < j.streams.size(); ++i) {
    Job::Choice& c = j.choices[i];
    while (!c.finished) {
      std::optional<TextDelta> delta = j.streams[i]->TryNext();
      if (!delta.has_value()) break;
      const Clock::time_point now = Clock::now();
      if (!delta->token_ids.empty()) {
        if (!c.has_token) {
          metrics_->ObserveTimeToFirstToken(Seconds(now - c.arrival));
        } else {
          metrics_->ObserveInterTokenLatency(Seconds(now - c.last_output));
        }
        c.has_token = true;
        c.last_output = now;
      }
      if (!j.failed) {
        std::string out = j.writer->OnDelta(i, *delta);
        if (!out.empty() && !ex.is_closed()) ex.Write(std::move(out));
      }
      if (delta->finished) {
        c.finished = true;
        ++j.num_finished;
        --num_in_flight_;
        const Clock::time_point scheduled = j.streams[i]->first_scheduled_time();
        metrics_->ObserveFinished(
            delta->finish_reason.value_or(FinishReason::kStop), Seconds(now - c.arrival),
            scheduled == Clock::time_point{} ? -1.0 : Seconds(scheduled - c.arrival));
      }
    }
  }
  if (j.num_finished == j.choices.size()) FinishJob(job);
}

void Server::FinishJob(const std::shared_ptr<Job>& job) {
  Job& j = *job;
  if (!j.failed) {
    std::string tail = j.writer->Finish();
    if (j.writer->streaming()) {
      if (!j.exchange->is_closed()) {
        j.exchange->Write(std::move(tail));
        j.exchange->EndStream();
      }
    } else {
      j.exchange->Respond(http::status::ok, std::move(tail), kJson);
    }
  }
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_.erase(job);
}

void Server::RequestStop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  stop_requested_ = true;
  stop_cv_.notify_all();
}

void Server::WaitForShutdownSignal() {
  // The handler may run after this returns (when cancelled); it only touches the server.
  auto signals = std::make_shared<boost::asio::signal_set>(http_->io_context(), SIGINT, SIGTERM);
  signals->async_wait([this, signals](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    LOG(INFO) << "kiln serve: signal " << signal << ", shutting down";
    RequestStop();
  });
  {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }
  // NOTE: a signal_set is not thread-safe; cancel it on the I/O threads. It stays registered
  // until the server stops, so a second signal during the drain does not kill the process.
  boost::asio::post(http_->io_context(), [signals] {
    boost::system::error_code ignored;
    signals->cancel(ignored);
  });
}

void Server::Shutdown() {
  std::lock_guard<std::mutex> guard(shutdown_mu_);
  if (shutdown_done_) return;
  shutting_down_ = true;
  http_->StopAccepting();
  auto wait_until_idle = [&](Clock::time_point deadline) {
    while (Clock::now() < deadline && (num_in_flight_ > 0 || http_->num_active_exchanges() > 0)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return num_in_flight_ == 0 && http_->num_active_exchanges() == 0;
  };
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.shutdown_timeout_s));
  if (!wait_until_idle(Clock::now() + timeout)) {
    LOG(WARNING) << "kiln serve: " << num_in_flight_.load()
                 << " requests still running after the shutdown timeout; aborting them";
    std::vector<std::shared_ptr<Job>> jobs;
    {
      std::lock_guard<std::mutex> lock(jobs_mu_);
      jobs.assign(jobs_.begin(), jobs_.end());
    }
    for (const auto& j : jobs) j->AbortAll();
    // Aborted requests end within a step; give their last bytes a moment to go out.
    wait_until_idle(Clock::now() + std::chrono::seconds(2));
  }
  http_->Stop();
  shutdown_done_ = true;
}

}  // namespace kiln::server
