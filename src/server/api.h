// The server's API layer: OpenAI / Triton / simple-JSON request bodies <-> engine requests, and
// engine output (TextDelta) -> response bodies and SSE frames. Pure: no I/O, no threads, no
// engine state; the transport (server.cc) does the rest:
//
//   ApiJob job = std::get<ApiJob>(ParseCompletions(body, model));       // or an ApiError -> 4xx
//   for (EngineRequest& r : job.requests) streams.push_back(executor.Enqueue(std::move(r)));
//   ResponseWriter writer(job, model);
//   on each TextDelta d of stream i:  send(writer.OnDelta(i, d));      // SSE frames when streaming
//   when all finished:                send(writer.Finish());           // usage + [DONE], or the
//   body
//
// Errors name the offending field in ApiError::param and start the message with it, the way
// SamplingParams::Validate does.
//
// Thread safety: the Parse* functions are reentrant; a ResponseWriter belongs to one HTTP request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/tokenizer_loader.h"

namespace kiln::server {

// An OpenAI-style error: sent as {"error": {"message", "type", "param", "code"}} with `status`.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or "authentication_error", "not_found_error",
                                               // "rate_limit_error", "server_error", ...
  std::string param;                           // "" -> null
  std::string code;                            // "" -> null
};
nlohmann::json ErrorBody(const ApiError& error);

// What the routes know about the served model. Owned by the server; outlives every request.
struct ModelInfo {
  std::string name;  // the served model name (`model` must match it)
  const LoadedTokenizer* tokenizer = nullptr;
  int32_t max_model_len = 0;  // prompt + max_tokens must fit
  int32_t vocab_size = 0;
  int64_t created = 0;              // unix seconds the server started
  int32_t default_max_tokens = 16;  // completions; chat defaults to the room left in context
};

enum class ApiKind : uint8_t {
  kCompletions,  // POST /v1/completions
  kChat,         // POST /v1/chat/completions
  kGenerate,     // POST /generate (prompt, max_tokens, ... -> text, tokens_generated, latency_ms)
  kTritonGenerate,  // POST /v2/models/{name}/generate and /generate_stream
};

// One HTTP request's work. requests[i] is choice i: prompt p's completion j is
// requests[p * n + j] (OpenAI's choice index), seeded with CompletionSeed(seed, j) when seeded.
// Request ids are left 0 (the Executor assigns them).
struct ApiJob {
  ApiKind kind = ApiKind::kCompletions;
  bool stream = false;
  std::vector<EngineRequest> requests;
  // Everything the writer needs to render (model name, echo, logprob counts, include_usage,
  // the prompts' token ids and text for echo, ...); opaque to the transport.
  struct Render;
  std::shared_ptr<const Render> render;
};

using ParseResult = std::variant<ApiJob, ApiError>;

// Body: the parsed JSON request body (the transport answers invalid JSON / UTF-8 itself).
ParseResult ParseCompletions(const nlohmann::json& body, const ModelInfo& model);
ParseResult ParseChatCompletions(const nlohmann::json& body, const ModelInfo& model);
ParseResult ParseGenerate(const nlohmann::json& body, const ModelInfo& model);
// `model_name` is the {name} path segment (unknown -> 404); `stream` for /generate_stream.
ParseResult ParseTritonGenerate(const nlohmann::json& body, const std::string& model_name,
                                bool stream, const ModelInfo& model);

// Renders one job's response. Non-streaming: OnDelta returns "" and Finish returns the JSON body.
// Streaming: OnDelta returns zero or more complete SSE frames ("data: {...}\n\n"), Finish the
// last ones (usage chunk when asked, then "data: [DONE]\n\n" for OpenAI routes).
class ResponseWriter {
 public:
  ResponseWriter(const ApiJob& job, const ModelInfo& model);
  ~ResponseWriter();
  std::string OnDelta(size_t choice, const TextDelta& delta);
  std::string Finish();
  // The status and JSON content type are the transport's; streaming uses text/event-stream.
  bool streaming() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// POST /tokenize ({"prompt"} or {"messages", "add_generation_prompt"}, "add_special_tokens")
// -> {"tokens", "count", "max_model_len"}; POST /detokenize ({"tokens"}) -> {"prompt"}.
std::variant<nlohmann::json, ApiError> Tokenize(const nlohmann::json& body, const ModelInfo& model);
std::variant<nlohmann::json, ApiError> Detokenize(const nlohmann::json& body,
                                                  const ModelInfo& model);
// GET /v1/models.
nlohmann::json ModelList(const ModelInfo& model);

}  // namespace kiln::server
