// Response rendering: TextDelta streams -> OpenAI / Triton / simple response bodies and SSE
// frames. Streaming and non-streaming share the pieces below, so that the streamed chunks of a
// choice concatenate to exactly the non-streamed text and logprobs.
#include <charconv>
#include <chrono>
#include <cmath>

#include "server/api.h"
#include "server/api_internal.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

// NOTE: kAbort (client gone, server shutting down) has no OpenAI name; the output was cut
// short, which "length" says better than "stop", and it keeps the body schema-valid.
std::string_view FinishReasonString(std::optional<FinishReason> reason) {
  if (reason == FinishReason::kStop) return "stop";
  return "length";
}

struct ChoiceState {
  std::string text;                          // non-streaming: the generated text so far
  std::vector<ScoredToken> logprobs;         // non-streaming: per generated token
  std::vector<ScoredToken> prompt_logprobs;  // until rendered (echo)
  int64_t num_tokens = 0;
  bool started = false;  // streaming: a frame of this choice has gone out
  bool finished = false;
  std::optional<FinishReason> finish_reason;
  std::optional<std::string> stop_string;
  int32_t stop_token_id = -1;
  int64_t text_offset = 0;  // completions logprobs: code points of the tokens rendered so far
};

// The completions logprobs object: parallel lists, one entry per token.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tokenizer, int32_t top_n, int64_t* text_offset)
      : tokenizer_(tokenizer), top_n_(top_n), text_offset_(text_offset) {}

  // `scored` is null for the first prompt token, which nothing precedes: its logprob and its
  // alternatives are null, as OpenAI and vLLM answer (0.0 would claim probability 1).
  void Add(int32_t token_id, const ScoredToken* scored) {
    int64_t length = 0;
    std::string token = SanitizeUtf8(TokenBytes(tokenizer_, token_id), &length);
    json top = scored != nullptr ? json::object() : json(nullptr);
    if (scored != nullptr) {
      const size_t count = std::min<size_t>(scored->top_logprobs.size(), size_t(top_n_));
      for (size_t k = 0; k < count; ++k) {
        const TokenLogprob& alt = scored->top_logprobs[k];
        std::string alt_token = SanitizeUtf8(TokenBytes(tokenizer_, alt.token_id));
        if (!top.contains(alt_token)) top[alt_token] = JsonLogprob(alt.logprob);
      }
      if (!top.contains(token)) top[token] = JsonLogprob(scored->logprob);
    }
    tokens_.push_back(token);
    token_logprobs_.push_back(scored != nullptr ? json(JsonLogprob(scored->logprob))
                                                : json(nullptr));
    top_logprobs_.push_back(std::move(top));
    text_offsets_.push_back(*text_offset_);
    *text_offset_ += length;
  }

  json ToJson() && {
    return json{{"tokens", std::move(tokens_)},
                {"token_logprobs", std::move(token_logprobs_)},
                {"top_logprobs", std::move(top_logprobs_)},
                {"text_offset", std::move(text_offsets_)}};
  }

 private:
  const Tokenizer& tokenizer_;
  int32_t top_n_;
  int64_t* text_offset_;
  json tokens_ = json::array();
  json token_logprobs_ = json::array();
  json top_logprobs_ = json::array();
  json text_offsets_ = json::array();
};

json TokenBytesJson(const std::string& bytes) {
  json out = json::array();
  for (unsigned char c : bytes) out.push_back(int{c});
  return out;
}

// One ChatCompletionTokenLogprob.
json ChatLogprob(const Tokenizer& tokenizer, const ScoredToken& scored, int32_t top_n) {
  const std::string bytes = TokenBytes(tokenizer, scored.token_id);
  json top = json::array();
  const size_t count = std::min<size_t>(scored.top_logprobs.size(), size_t(top_n));
  for (size_t k = 0; k < count; ++k) {
    const TokenLogprob& alt = scored.top_logprobs[k];
    const std::string alt_bytes = TokenBytes(tokenizer, alt.token_id);
    top.push_back({{"token", SanitizeUtf8(alt_bytes)},
                   {"logprob", JsonLogprob(alt.logprob)},
                   {"bytes", TokenBytesJson(alt_bytes)}});
  }
  return json{{"token", SanitizeUtf8(bytes)},
              {"logprob", JsonLogprob(scored.logprob)},
              {"bytes", TokenBytesJson(bytes)},
              {"top_logprobs", std::move(top)}};
}

json ChatLogprobs(const Tokenizer& tokenizer, const std::vector<ScoredToken>& tokens,
                  int32_t top_n) {
  json content = json::array();
  for (const ScoredToken& t : tokens) content.push_back(ChatLogprob(tokenizer, t, top_n));
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

}  // namespace

double JsonLogprob(float logprob) {
  if (!std::isfinite(logprob)) return -9999.0;
  // The double nearest the float's shortest decimal form, so -0.1f prints as -0.1 rather than
  // -0.10000000149011612.
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof(buffer), logprob).ptr;
  double value = logprob;
  std::from_chars(buffer, end, value);
  return value;
}

std::string TokenBytes(const Tokenizer& tokenizer, int32_t id) {
  std::string out;
  bool at_start = false;  // keep a SentencePiece piece's leading space
  tokenizer.AppendPiece(id, /*skip_special=*/false, &at_start, &out);
  return out;
}

std::string SanitizeUtf8(std::string_view bytes, int64_t* num_code_points) {
  std::string out;
  out.reserve(bytes.size());
  int64_t count = 0;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    size_t len = 0;
    uint32_t min_cp = 0;
    if (c < 0x80) {
      len = 1;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min_cp = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min_cp = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min_cp = 0x10000;
    }
    bool valid = len > 0 && i + len <= bytes.size();
    uint32_t cp = len == 1 ? c : (c & (0x7F >> len));
    for (size_t k = 1; valid && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(bytes[i + k]);
      valid = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    valid = valid && cp >= min_cp && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (valid) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
    ++count;
  }
  if (num_code_points != nullptr) *num_code_points = count;
  return out;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseFrame(const nlohmann::json& chunk) { return "data: " + DumpJson(chunk) + "\n\n"; }

struct ResponseWriter::State {
  const ModelInfo* model;
  std::shared_ptr<const ApiJob::Render> render;
  bool stream;
  std::vector<ChoiceState> choices;
  std::chrono::steady_clock::time_point start;

  const Tokenizer& tokenizer() const { return *model->tokenizer->tokenizer; }
  size_t PromptOf(size_t choice) const { return choice / size_t(render->n); }

  double LatencyMs() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

  // vLLM's stop_reason: the stop string, or a stop_token_ids entry; null for eos and length.
  json StopReason(const ChoiceState& c) const {
    if (c.stop_string.has_value()) return *c.stop_string;
    for (int32_t id : render->stop_token_ids) {
      if (id == c.stop_token_id) return id;
    }
    return nullptr;
  }

  json Header(std::string_view object) const {
    return json{{"id", render->id},
                {"object", object},
                {"created", render->created},
                {"model", render->model_name}};
  }

  json Usage() const {
    int64_t prompt_tokens = 0;
    for (const auto& ids : render->prompt_token_ids) prompt_tokens += int64_t(ids.size());
    int64_t completion_tokens = 0;
    for (const ChoiceState& c : choices) completion_tokens += c.num_tokens;
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  }

  // The completions logprobs of `tokens` (with the prompt's first when `with_prompt`).
  json CompletionLogprobsJson(size_t choice, ChoiceState& c, bool with_prompt,
                              const std::vector<ScoredToken>& scored) const {
    if (!render->logprobs.has_value()) return nullptr;
    CompletionLogprobs lp(tokenizer(), *render->logprobs, &c.text_offset);
    if (with_prompt) {
      const std::vector<int32_t>& prompt = render->prompt_token_ids[PromptOf(choice)];
      for (size_t k = 0; k < prompt.size(); ++k) {
        const ScoredToken* s =
            k > 0 && k - 1 < c.prompt_logprobs.size() ? &c.prompt_logprobs[k - 1] : nullptr;
        lp.Add(prompt[k], s);
      }
    }
    for (const ScoredToken& s : scored) lp.Add(s.token_id, &s);
    return std::move(lp).ToJson();
  }

  std::string StreamDelta(size_t index, ChoiceState& c, const TextDelta& delta) {
    const bool has_logprobs = render->logprobs.has_value() && !delta.logprobs.empty();
    if (!delta.finished && delta.text.empty() && !has_logprobs) return "";
    const bool first = !c.started;
    c.started = true;
    json finish_reason = nullptr;
    if (delta.finished) finish_reason = FinishReasonString(c.finish_reason);
    switch (render->kind) {
      case ApiKind::kCompletions: {
        const bool echo = first && render->echo;
        json choice = {
            {"index", index},
            {"text", echo ? render->echo_text[PromptOf(index)] + delta.text : delta.text},
            {"logprobs", CompletionLogprobsJson(index, c, echo, delta.logprobs)},
            {"finish_reason", finish_reason},
            {"stop_reason", delta.finished ? StopReason(c) : json(nullptr)}};
        json chunk = Header("text_completion");
        chunk["choices"] = json::array({std::move(choice)});
        return SseFrame(chunk);
      }
      case ApiKind::kChat: {
        json d = json::object();
        if (first) d["role"] = "assistant";
        d["content"] = delta.text;
        json choice = {{"index", index}, {"delta", std::move(d)}};
        if (render->logprobs.has_value()) {
          choice["logprobs"] = ChatLogprobs(tokenizer(), delta.logprobs, *render->logprobs);
        }
        choice["finish_reason"] = finish_reason;
        if (delta.finished) choice["stop_reason"] = StopReason(c);
        json chunk = Header("chat.completion.chunk");
        chunk["choices"] = json::array({std::move(choice)});
        return SseFrame(chunk);
      }
      case ApiKind::kGenerate: {
        json chunk = {{"text", delta.text}};
        if (delta.finished) {
          chunk["finish_reason"] = finish_reason;
          chunk["tokens_generated"] = c.num_tokens;
          chunk["latency_ms"] = LatencyMs();
        }
        return SseFrame(chunk);
      }
      case ApiKind::kTritonGenerate:
        return SseFrame(json{{"model_name", render->model_name},
                             {"model_version", "1"},
                             {"text_output", delta.text}});
    }
    return "";
  }

  std::string Body() {
    switch (render->kind) {
      case ApiKind::kCompletions: {
        json out = Header("text_completion");
        json list = json::array();
        for (size_t i = 0; i < choices.size(); ++i) {
          ChoiceState& c = choices[i];
          c.text_offset = 0;
          list.push_back({{"index", i},
                          {"text", render->echo ? render->echo_text[PromptOf(i)] + c.text : c.text},
                          {"logprobs", CompletionLogprobsJson(i, c, render->echo, c.logprobs)},
                          {"finish_reason", FinishReasonString(c.finish_reason)},
                          {"stop_reason", StopReason(c)}});
        }
        out["choices"] = std::move(list);
        out["usage"] = Usage();
        return DumpJson(out);
      }
      case ApiKind::kChat: {
        json out = Header("chat.completion");
        json list = json::array();
        for (size_t i = 0; i < choices.size(); ++i) {
          const ChoiceState& c = choices[i];
          json logprobs = nullptr;
          if (render->logprobs.has_value()) {
            logprobs = ChatLogprobs(tokenizer(), c.logprobs, *render->logprobs);
          }
          list.push_back(
              {{"index", i},
               {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
               {"logprobs", std::move(logprobs)},
               {"finish_reason", FinishReasonString(c.finish_reason)},
               {"stop_reason", StopReason(c)}});
        }
        out["choices"] = std::move(list);
        out["usage"] = Usage();
        return DumpJson(out);
      }
      case ApiKind::kGenerate: {
        const ChoiceState& c = choices.at(0);
        return DumpJson(json{{"text", c.text},
                             {"tokens_generated", c.num_tokens},
                             {"latency_ms", LatencyMs()},
                             {"finish_reason", FinishReasonString(c.finish_reason)}});
      }
      case ApiKind::kTritonGenerate:
        return DumpJson(json{{"model_name", render->model_name},
                             {"model_version", "1"},
                             {"text_output", choices.at(0).text}});
    }
    return "";
  }
};

ResponseWriter::ResponseWriter(const ApiJob& job, const ModelInfo& model)
    : state_(std::make_unique<State>()) {
  CHECK(job.render != nullptr);
  state_->model = &model;
  state_->render = job.render;
  state_->stream = job.stream;
  state_->choices.resize(job.requests.size());
  state_->start = std::chrono::steady_clock::now();
}

ResponseWriter::~ResponseWriter() = default;

bool ResponseWriter::streaming() const { return state_->stream; }

std::string ResponseWriter::OnDelta(size_t choice, const TextDelta& delta) {
  CHECK_LT(choice, state_->choices.size());
  ChoiceState& c = state_->choices[choice];
  if (c.finished) return "";  // the engine's last output after a stop string: nothing new
  c.num_tokens += int64_t(delta.token_ids.size());
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), delta.prompt_logprobs.begin(),
                           delta.prompt_logprobs.end());
  if (delta.finished) {
    c.finished = true;
    c.finish_reason = delta.finish_reason;
    c.stop_string = delta.stop_string;
    c.stop_token_id = delta.stop_token_id;
  }
  if (state_->stream) return state_->StreamDelta(choice, c, delta);
  c.text += delta.text;
  if (state_->render->logprobs.has_value()) {
    c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  }
  return "";
}

std::string ResponseWriter::Finish() {
  State& s = *state_;
  if (!s.stream) return s.Body();
  if (s.render->kind == ApiKind::kTritonGenerate) return "";
  std::string out;
  if (s.render->include_usage &&
      (s.render->kind == ApiKind::kCompletions || s.render->kind == ApiKind::kChat)) {
    json chunk =
        s.Header(s.render->kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
    chunk["choices"] = json::array();
    chunk["usage"] = s.Usage();
    out += SseFrame(chunk);
  }
  out += "data: [DONE]\n\n";
  return out;
}

}  // namespace kiln::server
