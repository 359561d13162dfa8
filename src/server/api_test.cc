// The api layer on a synthetic byte-level BPE tokenizer and a ChatML-like template: every parse
// error path, the context-length check, the n × prompts expansion, and every response shape
// (exact JSON for a few, structure for the rest; streaming against non-streaming).
#include "server/api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "engine/llm.h"
#include "server/api_internal.h"
#include "tokenizer/vocab.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

// 256 GPT-2 byte symbols, a few merges, and the control tokens <|im_start|> and <|im_end|>.
LoadedTokenizer TinyTokenizer(bool with_template = true) {
  GgufTokenizerFields f;
  f.model = "gpt2";
  f.pre = "gpt-2";
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    f.tokens.push_back(s);
  }
  for (const char* t : {"he", "hel", "lo", "hello", "<|im_start|>", "<|im_end|>"}) {
    f.tokens.push_back(t);
  }
  f.merges = {"h e", "he l", "l o", "hel lo"};
  f.token_type.assign(f.tokens.size(), 1);
  f.token_type[f.tokens.size() - 1] = 3;
  f.token_type[f.tokens.size() - 2] = 3;
  f.eos_id = static_cast<int64_t>(f.tokens.size()) - 1;
  auto vocab = VocabFromGgufMetadata(f);
  CHECK(vocab.ok()) << vocab.status().ToString();
  auto tokenizer = Tokenizer::Create(std::move(vocab).value());
  CHECK(tokenizer.ok()) << tokenizer.status().ToString();
  LoadedTokenizer loaded;
  loaded.tokenizer = std::move(tokenizer).value();
  loaded.eos_token = "<|im_end|>";
  if (with_template) {
    auto tmpl = ChatTemplate::Parse(
        "{% if tools %}TOOLS:{{ tools | length }}\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        "{% if shout %}!{% endif %}");
    CHECK(tmpl.ok()) << tmpl.status().ToString();
    loaded.chat_template = std::move(tmpl).value();
  }
  return loaded;
}

class ApiTest : public ::testing::Test {
 protected:
  ApiTest() : tokenizer_(TinyTokenizer()) {
    model_.name = "tiny";
    model_.tokenizer = &tokenizer_;
    model_.max_model_len = 64;
    model_.vocab_size = tokenizer_.tokenizer->vocab_size();
    model_.created = 1700000000;
    model_.default_max_tokens = 16;
  }

  const Tokenizer& tok() const { return *tokenizer_.tokenizer; }
  std::vector<int32_t> Encode(const std::string& s) const { return tok().Encode(s, true, true); }

  static ApiJob Job(ParseResult r) {
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << "unexpected error: " << e->message;
      return ApiJob{};
    }
    return std::get<ApiJob>(std::move(r));
  }
  static ApiError Error(ParseResult r) {
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << "expected an error";
    if (auto* e = std::get_if<ApiError>(&r)) return *e;
    return ApiError{};
  }
  // A 400 naming `param`, whose message starts with it.
  static void ExpectBadRequest(ParseResult r, const std::string& param,
                               const std::string& contains = "") {
    ApiError e = Error(std::move(r));
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, param) << e.message;
    EXPECT_EQ(e.message.rfind(param + ": ", 0), 0u) << e.message;
    if (!contains.empty()) {
      EXPECT_NE(e.message.find(contains), std::string::npos) << e.message;
    }
  }

  json Completion(json extra = json::object()) const {
    json body = {{"model", "tiny"}, {"prompt", "hello"}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  json Chat(json extra = json::object()) const {
    json body = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }

  LoadedTokenizer tokenizer_;
  ModelInfo model_;
};

ScoredToken Scored(int32_t id, float logprob, std::vector<TokenLogprob> top = {}) {
  ScoredToken s;
  s.token_id = id;
  s.logprob = logprob;
  s.rank = 1;
  s.top_logprobs = std::move(top);
  return s;
}

TextDelta Delta(std::string text, std::vector<int32_t> ids, bool finished = false,
                std::optional<FinishReason> reason = std::nullopt) {
  TextDelta d;
  d.text = std::move(text);
  d.token_ids = std::move(ids);
  d.finished = finished;
  d.finish_reason = reason;
  return d;
}

// The JSON payloads of "data: ...\n\n" frames, and whether [DONE] ended them.
std::vector<json> Frames(const std::string& sse, bool* done = nullptr) {
  std::vector<json> out;
  if (done != nullptr) *done = false;
  size_t at = 0;
  while (at < sse.size()) {
    EXPECT_EQ(sse.compare(at, 6, "data: "), 0) << sse.substr(at);
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string payload = sse.substr(at + 6, end - at - 6);
    if (payload == "[DONE]") {
      EXPECT_EQ(end + 2, sse.size()) << "[DONE] must be last";
      if (done != nullptr) *done = true;
    } else {
      out.push_back(json::parse(payload));
    }
    at = end + 2;
  }
  return out;
}

// ---- errors and shared fields ---------------------------------------------------------------

TEST_F(ApiTest, ErrorBodyHasNullsForEmptyParamAndCode) {
  const ApiError e{400, "boom", "invalid_request_error", "", ""};
  EXPECT_EQ(ErrorBody(e), json::parse(R"({"error": {"message": "boom",
      "type": "invalid_request_error", "param": null, "code": null}})"));
  const ApiError named{404, "m", "not_found_error", "model", "model_not_found"};
  EXPECT_EQ(ErrorBody(named), json::parse(R"({"error": {"message": "m",
      "type": "not_found_error", "param": "model", "code": "model_not_found"}})"));
}

TEST_F(ApiTest, BodyMustBeAnObject) {
  ApiError e = Error(ParseCompletions(json::array(), model_));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "");
  EXPECT_NE(e.message.find("JSON object"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<ApiError>(ParseChatCompletions(json(3), model_)));
}

TEST_F(ApiTest, UnknownModelIs404) {
  for (const ParseResult& r : {ParseCompletions(Completion({{"model", "gpt-4"}}), model_),
                               ParseChatCompletions(Chat({{"model", "gpt-4"}}), model_)}) {
    ApiError e = Error(r);
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.type, "not_found_error");
    EXPECT_EQ(e.param, "model");
    EXPECT_EQ(e.code, "model_not_found");
    EXPECT_NE(e.message.find("gpt-4"), std::string::npos);
  }
  json body = Completion();
  body.erase("model");  // vLLM serves the one model when `model` is left out
  EXPECT_EQ(Job(ParseCompletions(body, model_)).requests.size(), 1u);
}

TEST_F(ApiTest, WrongTypesNameTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"model", 5}}, "model"},
      {{{"n", "2"}}, "n"},
      {{{"n", 1.5}}, "n"},
      {{{"temperature", "hot"}}, "temperature"},
      {{{"top_p", true}}, "top_p"},
      {{{"top_k", 1.5}}, "top_k"},
      {{{"min_p", "x"}}, "min_p"},
      {{{"presence_penalty", json::array()}}, "presence_penalty"},
      {{{"frequency_penalty", json::object()}}, "frequency_penalty"},
      {{{"repetition_penalty", "x"}}, "repetition_penalty"},
      {{{"logit_bias", json::array()}}, "logit_bias"},
      {{{"logit_bias", {{"abc", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"12", "x"}}}}, "logit_bias"},
      {{{"seed", 1.5}}, "seed"},
      {{{"seed", "1"}}, "seed"},
      {{{"min_tokens", "1"}}, "min_tokens"},
      {{{"stop", 5}}, "stop"},
      {{{"stop", {"a", 1}}}, "stop[1]"},
      {{{"stop_token_ids", "x"}}, "stop_token_ids"},
      {{{"stop_token_ids", {1, 2.5}}}, "stop_token_ids[1]"},
      {{{"ignore_eos", 1}}, "ignore_eos"},
      {{{"include_stop_str_in_output", "yes"}}, "include_stop_str_in_output"},
      {{{"skip_special_tokens", 0}}, "skip_special_tokens"},
      {{{"priority", "high"}}, "priority"},
      {{{"cache_salt", 5}}, "cache_salt"},
      {{{"user", 5}}, "user"},
      {{{"stream", "true"}}, "stream"},
      {{{"stream", true}, {"stream_options", 1}}, "stream_options"},
      {{{"stream", true}, {"stream_options", {{"include_usage", "y"}}}},
       "stream_options.include_usage"},
      {{{"echo", "no"}}, "echo"},
      {{{"logprobs", true}}, "logprobs"},
      {{{"max_tokens", "16"}}, "max_tokens"},
      {{{"add_special_tokens", "x"}}, "add_special_tokens"},
      {{{"suffix", 3}}, "suffix"},
      {{{"best_of", "2"}}, "best_of"},
      {{{"prompt", 5}}, "prompt"},
      {{{"prompt", {"a", 5}}}, "prompt[1]"},
      {{{"prompt", {{1, 2}, "a"}}}, "prompt[1]"},
      {{{"prompt", {1, "a"}}}, "prompt[1]"},
      {{{"prompt", {{1, -2}}}}, "prompt[0][1]"},
  };
  for (const auto& [fields, param] : cases) {
    SCOPED_TRACE(fields.dump());
    ExpectBadRequest(ParseCompletions(Completion(fields), model_), param);
  }
  const std::vector<std::pair<json, std::string>> chat_cases = {
      {{{"logprobs", 1}}, "logprobs"},
      {{{"logprobs", true}, {"top_logprobs", "3"}}, "top_logprobs"},
      {{{"max_completion_tokens", 1.5}}, "max_completion_tokens"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", {5}}}, "messages[0]"},
      {{{"messages", {{{"role", 1}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "user"}, {"content", 1}}}}}, "messages[0].content"},
      {{{"messages", {{{"role", "user"}, {"content", {"x"}}}}}}, "messages[0].content[0]"},
      {{{"messages", {{{"role", "assistant"}, {"content", "x"}, {"tool_calls", 1}}}}},
       "messages[0].tool_calls"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}, {"tool_call_id", 1}}}}},
       "messages[0].tool_call_id"},
      {{{"tools", {{"type", "function"}}}}, "tools"},
      {{{"tools", {1}}}, "tools[0]"},
      {{{"response_format", "json"}}, "response_format"},
      {{{"add_generation_prompt", "no"}}, "add_generation_prompt"},
      {{{"chat_template_kwargs", 1}}, "chat_template_kwargs"},
      {{{"temperature", "x"}}, "temperature"},
  };
  for (const auto& [fields, param] : chat_cases) {
    SCOPED_TRACE(fields.dump());
    ExpectBadRequest(ParseChatCompletions(Chat(fields), model_), param);
  }
}

TEST_F(ApiTest, RangesAreValidatedWithTheEngineMessages) {
  ExpectBadRequest(ParseCompletions(Completion({{"temperature", 3}}), model_), "temperature",
                   "must be in [0, 2], got 3");
  ExpectBadRequest(ParseCompletions(Completion({{"top_p", 0}}), model_), "top_p");
  ExpectBadRequest(ParseCompletions(Completion({{"n", 0}}), model_), "n");
  ExpectBadRequest(ParseCompletions(Completion({{"n", 129}}), model_), "n");
  ExpectBadRequest(ParseCompletions(Completion({{"max_tokens", 0}}), model_), "max_tokens", ">= 1");
  ExpectBadRequest(ParseCompletions(Completion({{"logprobs", 21}}), model_), "logprobs");
  ExpectBadRequest(ParseCompletions(Completion({{"min_tokens", 20}, {"max_tokens", 10}}), model_),
                   "min_tokens");
  ExpectBadRequest(ParseCompletions(Completion({{"logit_bias", {{"100000", 1}}}}), model_),
                   "logit_bias", "out of range");
  ExpectBadRequest(ParseCompletions(Completion({{"logit_bias", {{"5", 101}}}}), model_),
                   "logit_bias");
  ExpectBadRequest(ParseCompletions(Completion({{"stop_token_ids", {99999}}}), model_),
                   "stop_token_ids");
  ExpectBadRequest(ParseCompletions(Completion({{"stop", {""}}}), model_), "stop");
  ExpectBadRequest(
      ParseCompletions(Completion({{"stop", json(std::vector<std::string>(17, "x"))}}), model_),
      "stop", "at most 16");
  ExpectBadRequest(ParseCompletions(Completion({{"max_tokens", 1e12}}), model_), "max_tokens");
  ExpectBadRequest(ParseChatCompletions(Chat({{"logprobs", true}, {"top_logprobs", 21}}), model_),
                   "top_logprobs");
}

TEST_F(ApiTest, UnsupportedFeaturesAreClear400s) {
  ExpectBadRequest(ParseCompletions(Completion({{"suffix", "x"}}), model_), "suffix",
                   "not supported");
  ExpectBadRequest(ParseCompletions(Completion({{"best_of", 3}}), model_), "best_of",
                   "not supported");
  // The no-op forms pass.
  Job(ParseCompletions(Completion({{"suffix", ""}, {"best_of", 2}, {"n", 2}}), model_));
  Job(ParseCompletions(Completion({{"best_of", 1}, {"suffix", nullptr}}), model_));
  ExpectBadRequest(
      ParseChatCompletions(Chat({{"response_format", {{"type", "json_object"}}}}), model_),
      "response_format", "not supported");
  Job(ParseChatCompletions(Chat({{"response_format", {{"type", "text"}}}}), model_));
  ExpectBadRequest(ParseChatCompletions(Chat({{"tool_choice", "required"}}), model_), "tool_choice",
                   "not supported");
  ExpectBadRequest(ParseChatCompletions(Chat({{"chat_template", "x"}}), model_), "chat_template");
  ExpectBadRequest(
      ParseChatCompletions(Chat({{"messages",
                                  {{{"role", "user"},
                                    {"content",
                                     {{{"type", "text"}, {"text", "a"}},
                                      {{"type", "image_url"}, {"image_url", "u"}}}}}}}}),
                           model_),
      "messages[0].content[1].type", "image_url");
}

TEST_F(ApiTest, StreamOptionsNeedStream) {
  ExpectBadRequest(
      ParseCompletions(Completion({{"stream_options", {{"include_usage", true}}}}), model_),
      "stream_options", "stream");
  ExpectBadRequest(
      ParseChatCompletions(Chat({{"stream", false}, {"stream_options", {{"include_usage", true}}}}),
                           model_),
      "stream_options");
  ApiJob job = Job(ParseCompletions(
      Completion({{"stream", true}, {"stream_options", {{"include_usage", true}}}}), model_));
  EXPECT_TRUE(job.stream);
  EXPECT_TRUE(job.render->include_usage);
}

TEST_F(ApiTest, UnknownFieldsAndNullsAreIgnored) {
  ApiJob job = Job(ParseCompletions(
      Completion({{"frobnicate", {1, 2}}, {"temperature", nullptr}, {"user", "u"}}), model_));
  ASSERT_EQ(job.requests.size(), 1u);
  EXPECT_EQ(job.requests[0].params.temperature, 1.0f);
}

// ---- completions parsing ----------------------------------------------------------------------

TEST_F(ApiTest, CompletionFieldsReachTheEngineRequest) {
  ApiJob job = Job(ParseCompletions(Completion({{"max_tokens", 7},
                                                {"temperature", 0.5},
                                                {"top_p", 0.9},
                                                {"top_k", 40},
                                                {"min_p", 0.1},
                                                {"presence_penalty", 0.5},
                                                {"frequency_penalty", -1},
                                                {"repetition_penalty", 1.1},
                                                {"logit_bias", {{"5", -100}, {"7", 2.5}}},
                                                {"seed", 42},
                                                {"stop", "\n"},
                                                {"stop_token_ids", {3}},
                                                {"min_tokens", 2},
                                                {"ignore_eos", true},
                                                {"include_stop_str_in_output", true},
                                                {"skip_special_tokens", false},
                                                {"priority", -3},
                                                {"cache_salt", "tenant"},
                                                {"logprobs", 3}}),
                                    model_));
  ASSERT_EQ(job.requests.size(), 1u);
  const EngineRequest& r = job.requests[0];
  EXPECT_EQ(job.kind, ApiKind::kCompletions);
  EXPECT_FALSE(job.stream);
  EXPECT_EQ(r.id, 0u);
  EXPECT_EQ(r.prompt_token_ids, Encode("hello"));
  const SamplingParams& p = r.params;
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  std::vector<std::pair<int32_t, float>> bias = {{5, -100.0f}, {7, 2.5f}};
  EXPECT_EQ(p.logit_bias, bias);
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(p.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(p.stop_token_ids, std::vector<int32_t>{3});
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_EQ(p.priority, -3);
  EXPECT_EQ(p.cache_salt, "tenant");
  EXPECT_EQ(r.cache_key.cache_salt, "tenant");
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_FALSE(p.prompt_logprobs.has_value());  // only with echo
  EXPECT_EQ(job.render->id.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(job.render->id.size(), 5u + 32u);
}

TEST_F(ApiTest, PromptForms) {
  const std::vector<int32_t> hello = Encode("hello");
  auto prompts = [&](json prompt) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : Job(ParseCompletions(Completion({{"prompt", prompt}}), model_)).requests) {
      out.push_back(r.prompt_token_ids);
    }
    return out;
  };
  EXPECT_EQ(prompts("hello"), (std::vector<std::vector<int32_t>>{hello}));
  EXPECT_EQ(prompts({"hello", "he"}), (std::vector<std::vector<int32_t>>{hello, Encode("he")}));
  EXPECT_EQ(prompts({1, 2, 3}), (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(prompts({{1, 2}, {3}}), (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  // The special token is parsed in text prompts.
  EXPECT_EQ(prompts("<|im_end|>"),
            (std::vector<std::vector<int32_t>>{{tok().TokenToId("<|im_end|>")}}));

  ExpectBadRequest(ParseCompletions(Completion({{"prompt", json::array()}}), model_), "prompt",
                   "empty");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", ""}}), model_), "prompt", "empty");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", {"a", ""}}}), model_), "prompt[1]",
                   "empty");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", {{1}, json::array()}}}), model_),
                   "prompt[1]", "empty");
  json no_prompt = Completion();
  no_prompt.erase("prompt");
  ExpectBadRequest(ParseCompletions(no_prompt, model_), "prompt", "required");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", {1, model_.vocab_size}}}), model_),
                   "prompt", "out of range");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", {{1}, {-1}}}}), model_), "prompt[1][0]");
}

TEST_F(ApiTest, PromptsTimesNExpandInChoiceOrderWithCompletionSeeds) {
  ApiJob job = Job(
      ParseCompletions(Completion({{"prompt", {"hello", "he"}}, {"n", 3}, {"seed", 42}}), model_));
  ASSERT_EQ(job.requests.size(), 6u);
  for (int p = 0; p < 2; ++p) {
    for (int j = 0; j < 3; ++j) {
      const EngineRequest& r = job.requests[p * 3 + j];
      EXPECT_EQ(r.prompt_token_ids, Encode(p == 0 ? "hello" : "he"));
      EXPECT_EQ(r.seed, CompletionSeed(42, j));
    }
  }
  EXPECT_EQ(job.render->n, 3);
  // A negative seed wraps like a C cast (OpenAI seeds are signed 64-bit).
  ApiJob negative = Job(ParseCompletions(Completion({{"seed", -1}}), model_));
  EXPECT_EQ(negative.requests[0].seed, std::numeric_limits<uint64_t>::max());
  // Unseeded: a fresh random seed per completion.
  ApiJob unseeded =
      Job(ParseCompletions(Completion({{"prompt", {"hello", "he"}}, {"n", 4}}), model_));
  std::set<uint64_t> seeds;
  for (const auto& r : unseeded.requests) seeds.insert(r.seed);
  EXPECT_EQ(seeds.size(), 8u);
}

TEST_F(ApiTest, ChoicesAreBounded) {
  json many = json::array();
  for (int i = 0; i < 9; ++i) many.push_back("hello");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", many}, {"n", 128}}), model_), "n",
                   "1024");
  json too_many = json::array();
  for (int i = 0; i < 1025; ++i) too_many.push_back("a");
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", too_many}}), model_), "prompt");
}

TEST_F(ApiTest, ContextLength) {
  const std::vector<int32_t> ten(10, 65);
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", ten}, {"max_tokens", 60}}), model_),
                   "max_tokens", "maximum context length is 64 tokens");
  ApiError e = Error(ParseCompletions(Completion({{"prompt", ten}, {"max_tokens", 60}}), model_));
  EXPECT_NE(e.message.find("70 tokens (10 in the prompt, 60 in the completion)"), std::string::npos)
      << e.message;
  // Exactly full fits.
  EXPECT_EQ(Job(ParseCompletions(Completion({{"prompt", ten}, {"max_tokens", 54}}), model_))
                .requests[0]
                .params.max_tokens,
            54);
  // The default max_tokens (16) shrinks to the room left; a prompt with no room is the error.
  const std::vector<int32_t> sixty(60, 65);
  EXPECT_EQ(
      Job(ParseCompletions(Completion({{"prompt", sixty}}), model_)).requests[0].params.max_tokens,
      4);
  ExpectBadRequest(ParseCompletions(Completion({{"prompt", std::vector<int32_t>(64, 65)}}), model_),
                   "prompt", "64 tokens");
  ExpectBadRequest(
      ParseCompletions(Completion({{"prompt", {json(ten), json(std::vector<int32_t>(70, 65))}}}),
                       model_),
      "prompt[1]", "70 tokens");
  // Chat: the default is all the room left; the error names the field that was given.
  ApiJob chat = Job(ParseChatCompletions(Chat(), model_));
  EXPECT_EQ(chat.requests[0].params.max_tokens,
            64 - static_cast<int32_t>(chat.requests[0].prompt_token_ids.size()));
  // A default is marked as such (the engine reserves only bounds the client chose).
  EXPECT_TRUE(chat.requests[0].max_tokens_is_default);
  EXPECT_TRUE(Job(ParseCompletions(Completion({{"prompt", ten}}), model_))
                  .requests[0]
                  .max_tokens_is_default);
  EXPECT_FALSE(Job(ParseCompletions(Completion({{"prompt", ten}, {"max_tokens", 54}}), model_))
                   .requests[0]
                   .max_tokens_is_default);
  EXPECT_FALSE(Job(ParseChatCompletions(Chat({{"max_completion_tokens", 5}}), model_))
                   .requests[0]
                   .max_tokens_is_default);
  ExpectBadRequest(ParseChatCompletions(Chat({{"max_completion_tokens", 64}}), model_),
                   "max_completion_tokens", "maximum context length");
  ExpectBadRequest(ParseChatCompletions(Chat({{"max_tokens", 64}}), model_), "max_tokens");
  ExpectBadRequest(ParseChatCompletions(Chat({{"max_completion_tokens", 0}}), model_),
                   "max_completion_tokens", ">= 1");
  // max_completion_tokens wins over max_tokens.
  EXPECT_EQ(
      Job(ParseChatCompletions(Chat({{"max_tokens", 50}, {"max_completion_tokens", 5}}), model_))
          .requests[0]
          .params.max_tokens,
      5);
  ExpectBadRequest(
      ParseChatCompletions(
          Chat({{"messages", {{{"role", "user"}, {"content", std::string(80, 'x')}}}}}), model_),
      "messages", "maximum context length");
}

// ---- chat parsing ---------------------------------------------------------------------------

TEST_F(ApiTest, ChatRendersTheTemplate) {
  const std::string want_text =
      "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
      "<|im_start|>assistant\n";
  ApiJob job = Job(ParseChatCompletions(
      Chat({{"messages",
             {{{"role", "developer"}, {"content", "be brief"}},
              {{"role", "user"},
               {"content",
                {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
            {"n", 2},
            {"logprobs", true},
            {"top_logprobs", 2}}),
      model_));
  ASSERT_EQ(job.requests.size(), 2u);
  EXPECT_EQ(job.kind, ApiKind::kChat);
  EXPECT_EQ(job.requests[0].prompt_token_ids, tok().Encode(want_text, false, true));
  EXPECT_EQ(job.requests[1].prompt_token_ids, job.requests[0].prompt_token_ids);
  EXPECT_EQ(job.requests[0].params.logprobs, 2);
  EXPECT_EQ(job.render->id.rfind("chatcmpl-", 0), 0u);

  // Tokenize shows the rendering; tools reach the template unless tool_choice is "none".
  auto rendered = [&](json extra) {
    json body = Chat(extra);
    auto r = Tokenize(body, model_);
    EXPECT_TRUE(std::holds_alternative<json>(r));
    if (!std::holds_alternative<json>(r)) return std::string();
    return tok().Decode(std::get<json>(r)["tokens"].get<std::vector<int32_t>>(), false);
  };
  const json tools = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  EXPECT_EQ(rendered({{"tools", tools}}).rfind("TOOLS:1\n", 0), 0u);
  EXPECT_EQ(rendered({{"tools", tools}, {"tool_choice", "auto"}}).rfind("TOOLS:1\n", 0), 0u);
  EXPECT_EQ(rendered({{"tools", tools}, {"tool_choice", "none"}}).find("TOOLS"), std::string::npos);
  EXPECT_EQ(rendered({{"add_generation_prompt", false}}), "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(rendered({{"chat_template_kwargs", {{"shout", true}}}}).back(), '!');
  // continue_final_message: the rendering stops right after the last message's text.
  EXPECT_EQ(rendered({{"messages",
                       {{{"role", "user"}, {"content", "hi"}},
                        {{"role", "assistant"}, {"content", "Once upon"}}}},
                      {"add_generation_prompt", false},
                      {"continue_final_message", true}}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nOnce upon");
  ExpectBadRequest(ParseChatCompletions(Chat({{"continue_final_message", true}}), model_),
                   "continue_final_message");
  // An assistant message may carry tool calls and no content.
  Job(ParseChatCompletions(
      Chat({{"messages",
             {{{"role", "user"}, {"content", "hi"}},
              {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}},
              {{"role", "tool"}, {"content", "42"}, {"tool_call_id", "c1"}}}}}),
      model_));
}

TEST_F(ApiTest, ChatMessageErrors) {
  ExpectBadRequest(ParseChatCompletions({{"model", "tiny"}}, model_), "messages", "required");
  ExpectBadRequest(ParseChatCompletions(Chat({{"messages", json::array()}}), model_), "messages",
                   "empty");
  ExpectBadRequest(ParseChatCompletions(Chat({{"messages", {{{"content", "x"}}}}}), model_),
                   "messages[0].role", "required");
  ExpectBadRequest(
      ParseChatCompletions(Chat({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}), model_),
      "messages[0].role", "wizard");
  ExpectBadRequest(ParseChatCompletions(Chat({{"messages", {{{"role", "user"}}}}}), model_),
                   "messages[0].content", "required");
  ExpectBadRequest(
      ParseChatCompletions(
          Chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}}), model_),
      "messages[0].content[0].text");
  ExpectBadRequest(ParseChatCompletions(Chat({{"top_logprobs", 2}}), model_), "top_logprobs",
                   "logprobs");
  // A template that raises is the client's 400, not a 500.
  LoadedTokenizer raising = TinyTokenizer(false);
  auto tmpl = ChatTemplate::Parse("{{ raise_exception('no system role') }}");
  ASSERT_TRUE(tmpl.ok());
  raising.chat_template = std::move(tmpl).value();
  ModelInfo raising_model = model_;
  raising_model.tokenizer = &raising;
  ExpectBadRequest(ParseChatCompletions(Chat(), raising_model), "messages", "no system role");
  // No template at all.
  LoadedTokenizer bare = TinyTokenizer(false);
  ModelInfo bare_model = model_;
  bare_model.tokenizer = &bare;
  ExpectBadRequest(ParseChatCompletions(Chat(), bare_model), "messages", "no chat template");
}

// ---- response shapes ------------------------------------------------------------------------

TEST_F(ApiTest, CompletionBodyExact) {
  ApiJob job = Job(ParseCompletions(Completion({{"n", 2}, {"stop", "!"}}), model_));
  ResponseWriter writer(job, model_);
  EXPECT_FALSE(writer.streaming());
  EXPECT_EQ(writer.OnDelta(0, Delta("Hi", {72, 105})), "");
  TextDelta stop = Delta(" there", {32, 116}, true, FinishReason::kStop);
  stop.stop_string = "!";
  EXPECT_EQ(writer.OnDelta(0, stop), "");
  EXPECT_EQ(writer.OnDelta(0, Delta("", {}, true)), "");  // after a stop string: ignored
  EXPECT_EQ(writer.OnDelta(1, Delta("Yo", {89, 111, 33}, true, FinishReason::kLength)), "");
  json body = json::parse(writer.Finish());
  json want = {{"id", job.render->id},
               {"object", "text_completion"},
               {"created", job.render->created},
               {"model", "tiny"},
               {"choices",
                {{{"index", 0},
                  {"text", "Hi there"},
                  {"logprobs", nullptr},
                  {"finish_reason", "stop"},
                  {"stop_reason", "!"}},
                 {{"index", 1},
                  {"text", "Yo"},
                  {"logprobs", nullptr},
                  {"finish_reason", "length"},
                  {"stop_reason", nullptr}}}},
               {"usage",
                {{"prompt_tokens", Encode("hello").size()},
                 {"completion_tokens", 7},
                 {"total_tokens", Encode("hello").size() + 7}}}};
  EXPECT_EQ(body, want) << body.dump(2);
}

TEST_F(ApiTest, CompletionLogprobsAndEcho) {
  const std::vector<int32_t> prompt = Encode("hello he");
  ASSERT_EQ(prompt.size(), 3u);  // "hello", " ", "he"
  ApiJob job = Job(ParseCompletions(
      Completion({{"prompt", "hello he"}, {"echo", true}, {"logprobs", 1}}), model_));
  ASSERT_EQ(job.requests.size(), 1u);
  EXPECT_EQ(job.requests[0].params.prompt_logprobs, 1);
  EXPECT_EQ(job.requests[0].params.logprobs, 1);
  const int32_t h = tok().TokenToId("h");
  const int32_t l = tok().TokenToId("l");
  TextDelta first = Delta("", {});
  first.prompt_logprobs = {Scored(prompt[1], -1.0f, {{prompt[1], -1.0f}}),
                           Scored(prompt[2], -2.0f, {{l, -0.5f}})};
  TextDelta gen = Delta("l", {l}, true, FinishReason::kLength);
  gen.logprobs = {Scored(l, -std::numeric_limits<float>::infinity(), {{h, -0.1f}})};
  ResponseWriter writer(job, model_);
  writer.OnDelta(0, first);
  writer.OnDelta(0, gen);
  json choice = json::parse(writer.Finish())["choices"][0];
  EXPECT_EQ(choice["text"], "hello hel");
  json want = {
      {"tokens", {"hello", " ", "he", "l"}},
      {"token_logprobs", {nullptr, -1.0, -2.0, -9999.0}},
      {"top_logprobs",
       {nullptr, {{" ", -1.0}}, {{"l", -0.5}, {"he", -2.0}}, {{"h", -0.1}, {"l", -9999.0}}}},
      {"text_offset", {0, 5, 6, 8}}};
  EXPECT_EQ(choice["logprobs"], want) << choice["logprobs"].dump();

  // Streaming the same deltas: the echo leads the first frame, offsets run on.
  ApiJob streamed = Job(ParseCompletions(
      Completion({{"prompt", "hello he"}, {"echo", true}, {"logprobs", 1}, {"stream", true}}),
      model_));
  ResponseWriter sw(streamed, model_);
  EXPECT_EQ(sw.OnDelta(0, first), "");  // prompt logprobs alone: held for the first frame
  std::vector<json> frames = Frames(sw.OnDelta(0, gen));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0]["choices"][0]["text"], "hello hel");
  EXPECT_EQ(frames[0]["choices"][0]["logprobs"], want);
}

TEST_F(ApiTest, EchoOfTokenPromptsDecodesThem) {
  const std::vector<int32_t> ids = Encode("hello");
  ApiJob job = Job(ParseCompletions(Completion({{"prompt", ids}, {"echo", true}}), model_));
  ResponseWriter writer(job, model_);
  writer.OnDelta(0, Delta("!", {33}, true, FinishReason::kLength));
  EXPECT_EQ(json::parse(writer.Finish())["choices"][0]["text"], "hello!");
}

TEST_F(ApiTest, ChatBodyExact) {
  ApiJob job = Job(ParseChatCompletions(Chat({{"logprobs", true}, {"top_logprobs", 1}}), model_));
  ResponseWriter writer(job, model_);
  const int32_t hello = tok().TokenToId("hello");
  const int32_t eos = tok().TokenToId("<|im_end|>");
  TextDelta d = Delta("hello", {hello, eos}, true, FinishReason::kStop);
  d.stop_token_id = eos;
  d.logprobs = {Scored(hello, -0.25f, {{hello, -0.25f}, {eos, -2.0f}}), Scored(eos, -0.5f)};
  writer.OnDelta(0, d);
  json body = json::parse(writer.Finish());
  const size_t prompt_tokens = job.requests[0].prompt_token_ids.size();
  json want = {
      {"id", job.render->id},
      {"object", "chat.completion"},
      {"created", job.render->created},
      {"model", "tiny"},
      {"choices",
       {{{"index", 0},
         {"message", {{"role", "assistant"}, {"content", "hello"}, {"refusal", nullptr}}},
         {"logprobs",
          {{"content",
            {{{"token", "hello"},
              {"logprob", -0.25},
              {"bytes", {104, 101, 108, 108, 111}},
              {"top_logprobs",
               {{{"token", "hello"}, {"logprob", -0.25}, {"bytes", {104, 101, 108, 108, 111}}}}}},
             {{"token", "<|im_end|>"},
              {"logprob", -0.5},
              {"bytes",
               json(std::vector<int>(std::begin("<|im_end|>"), std::end("<|im_end|>") - 1))},
              {"top_logprobs", json::array()}}}},
           {"refusal", nullptr}}},
         {"finish_reason", "stop"},
         {"stop_reason", nullptr}}}},
      {"usage",
       {{"prompt_tokens", prompt_tokens},
        {"completion_tokens", 2},
        {"total_tokens", prompt_tokens + 2}}}};
  EXPECT_EQ(body, want) << body.dump(2);
}

TEST_F(ApiTest, AbortAndStopTokenIdsFinishReasons) {
  ApiJob job = Job(ParseChatCompletions(Chat({{"n", 2}, {"stop_token_ids", {65}}}), model_));
  ResponseWriter writer(job, model_);
  writer.OnDelta(0, Delta("x", {120}, true, FinishReason::kAbort));
  TextDelta stopped = Delta("", {65}, true, FinishReason::kStop);
  stopped.stop_token_id = 65;
  writer.OnDelta(1, stopped);
  json body = json::parse(writer.Finish());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["stop_reason"], 65);
}

// Deltas as the engine hands them out: text held back around a stop string, a token-only delta,
// logprobs on every token, a final delta with the rest.
std::vector<TextDelta> ScriptedDeltas(bool with_logprobs) {
  std::vector<TextDelta> deltas = {
      Delta("Hel", {72, 101, 108}), Delta("", {108}), Delta("lo, w", {111, 44, 32, 119}),
      Delta("", {}), Delta("orld", {111, 114, 108, 100}, true, FinishReason::kLength)};
  if (with_logprobs) {
    for (TextDelta& d : deltas) {
      for (int32_t id : d.token_ids) d.logprobs.push_back(Scored(id, -0.5f, {{id, -0.5f}}));
    }
  }
  return deltas;
}

TEST_F(ApiTest, StreamingConcatenatesToTheNonStreamingBody) {
  for (const bool chat : {false, true}) {
    for (const bool logprobs : {false, true}) {
      SCOPED_TRACE(std::string(chat ? "chat" : "completions") + (logprobs ? " logprobs" : ""));
      json extra = {{"n", 2}};
      if (logprobs && chat) extra.update({{"logprobs", true}, {"top_logprobs", 1}});
      if (logprobs && !chat) extra["logprobs"] = 1;
      auto parse = [&](json body) {
        return chat ? ParseChatCompletions(Chat(body), model_)
                    : ParseCompletions(Completion(body), model_);
      };
      ApiJob plain = Job(parse(extra));
      extra["stream"] = true;
      extra["stream_options"] = {{"include_usage", true}};
      ApiJob streamed = Job(parse(extra));
      ResponseWriter pw(plain, model_);
      ResponseWriter sw(streamed, model_);
      EXPECT_TRUE(sw.streaming());
      std::string sse;
      const std::vector<TextDelta> deltas = ScriptedDeltas(logprobs);
      for (const TextDelta& d : deltas) {
        for (size_t choice : {0u, 1u}) {  // interleaved, as the engine steps them
          EXPECT_EQ(pw.OnDelta(choice, d), "");
          sse += sw.OnDelta(choice, d);
        }
      }
      sse += sw.Finish();
      const json body = json::parse(pw.Finish());
      bool done = false;
      std::vector<json> frames = Frames(sse, &done);
      EXPECT_TRUE(done);
      // Per choice: "Hel", a logprobs-only frame when logprobs, "lo, w", "orld" (the empty
      // delta is skipped); then one usage chunk.
      const size_t per_choice = logprobs ? 4 : 3;
      ASSERT_EQ(frames.size(), 2 * per_choice + 1);
      const json& usage = frames.back();
      EXPECT_EQ(usage["choices"], json::array());
      EXPECT_EQ(usage["usage"], body["usage"]);
      EXPECT_EQ(usage["object"], chat ? "chat.completion.chunk" : "text_completion");
      for (size_t choice : {0u, 1u}) {
        std::string text;
        json logprob_list = json::array();
        json tokens = json::array();
        bool first = true;
        std::vector<json> finishes;
        for (size_t f = 0; f + 1 < frames.size(); ++f) {
          const json& frame = frames[f];
          EXPECT_EQ(frame["id"], streamed.render->id);
          ASSERT_EQ(frame["choices"].size(), 1u);
          const json& c = frame["choices"][0];
          if (c["index"] != choice) continue;
          finishes.push_back(c["finish_reason"]);
          if (chat) {
            EXPECT_EQ(frame["object"], "chat.completion.chunk");
            EXPECT_EQ(c["delta"].contains("role"), first);
            if (first) {
              EXPECT_EQ(c["delta"]["role"], "assistant");
            }
            text += c["delta"]["content"].get<std::string>();
            if (logprobs) {
              for (const json& t : c["logprobs"]["content"]) logprob_list.push_back(t);
            } else {
              EXPECT_FALSE(c.contains("logprobs"));
            }
          } else {
            EXPECT_EQ(frame["object"], "text_completion");
            text += c["text"].get<std::string>();
            if (logprobs) {
              for (const json& t : c["logprobs"]["tokens"]) tokens.push_back(t);
              for (const json& t : c["logprobs"]["token_logprobs"]) logprob_list.push_back(t);
            } else {
              EXPECT_TRUE(c["logprobs"].is_null());
            }
          }
          first = false;
        }
        ASSERT_EQ(finishes.size(), per_choice);
        for (size_t k = 0; k + 1 < finishes.size(); ++k) EXPECT_TRUE(finishes[k].is_null());
        EXPECT_EQ(finishes.back(), "length");
        const json& want = body["choices"][choice];
        EXPECT_EQ(text, chat ? want["message"]["content"] : want["text"]);
        EXPECT_EQ(text, "Hello, world");
        if (logprobs && chat) {
          EXPECT_EQ(logprob_list, want["logprobs"]["content"]);
        }
        if (logprobs && !chat) {
          EXPECT_EQ(tokens, want["logprobs"]["tokens"]);
          EXPECT_EQ(logprob_list, want["logprobs"]["token_logprobs"]);
        }
      }
    }
  }
}

TEST_F(ApiTest, StreamingWithoutUsageEndsWithDone) {
  ApiJob job = Job(ParseChatCompletions(Chat({{"stream", true}}), model_));
  ResponseWriter writer(job, model_);
  // A choice whose only delta is the empty final one still gets its role and finish_reason.
  std::vector<json> frames = Frames(writer.OnDelta(0, Delta("", {}, true, FinishReason::kStop)));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(frames[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(writer.Finish(), "data: [DONE]\n\n");
}

TEST_F(ApiTest, InvalidUtf8InTextIsReplacedNotThrown) {
  ApiJob job = Job(ParseCompletions(Completion({{"stream", true}}), model_));
  ResponseWriter writer(job, model_);
  std::vector<json> frames =
      Frames(writer.OnDelta(0, Delta("a\xC3", {97, 195}, true, FinishReason::kLength)));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0]["choices"][0]["text"], "a\xEF\xBF\xBD");
}

// ---- /generate and Triton ---------------------------------------------------------------------

TEST_F(ApiTest, SimpleGenerate) {
  ApiJob job = Job(ParseGenerate({{"prompt", "hello"},
                                  {"max_tokens", 5},
                                  {"temperature", 0},
                                  {"top_k", 3},
                                  {"stop", {"x"}},
                                  {"seed", 7}},
                                 model_));
  ASSERT_EQ(job.requests.size(), 1u);
  EXPECT_EQ(job.kind, ApiKind::kGenerate);
  EXPECT_EQ(job.requests[0].params.max_tokens, 5);
  EXPECT_EQ(job.requests[0].params.top_k, 3);
  EXPECT_EQ(job.requests[0].seed, 7u);
  ResponseWriter writer(job, model_);
  writer.OnDelta(0, Delta("ab", {97, 98}));
  writer.OnDelta(0, Delta("c", {99, 5}, true, FinishReason::kStop));
  json body = json::parse(writer.Finish());
  EXPECT_EQ(body["text"], "abc");
  EXPECT_EQ(body["tokens_generated"], 4);
  EXPECT_GE(body["latency_ms"].get<double>(), 0.0);
  EXPECT_EQ(body["finish_reason"], "stop");

  ExpectBadRequest(ParseGenerate({{"max_tokens", 5}}, model_), "prompt", "required");
  ExpectBadRequest(ParseGenerate({{"prompt", {1, 2}}}, model_), "prompt");
  ExpectBadRequest(ParseGenerate({{"prompt", "a"}, {"n", 2}}, model_), "n");
  ExpectBadRequest(ParseGenerate({{"prompt", "a"}, {"max_tokens", 100}}, model_), "max_tokens",
                   "maximum context length");

  ApiJob streamed = Job(ParseGenerate({{"prompt", "hello"}, {"stream", true}}, model_));
  EXPECT_EQ(streamed.requests[0].params.max_tokens, 16);
  ResponseWriter sw(streamed, model_);
  std::string sse = sw.OnDelta(0, Delta("ab", {97, 98}));
  sse += sw.OnDelta(0, Delta("", {99}, true, FinishReason::kLength));
  sse += sw.Finish();
  bool done = false;
  std::vector<json> frames = Frames(sse, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0], json({{"text", "ab"}}));
  EXPECT_EQ(frames[1]["text"], "");
  EXPECT_EQ(frames[1]["tokens_generated"], 3);
  EXPECT_EQ(frames[1]["finish_reason"], "length");
  EXPECT_TRUE(frames[1]["latency_ms"].is_number());
}

TEST_F(ApiTest, TritonGenerate) {
  ApiJob job = Job(ParseTritonGenerate(
      {{"text_input", "hello"},
       {"parameters", {{"max_tokens", 9}, {"temperature", 0.5}, {"stop_words", {"x"}}}},
       {"temperature", 0.25},
       {"random_seed", 3}},
      "tiny", /*stream=*/false, model_));
  ASSERT_EQ(job.requests.size(), 1u);
  EXPECT_EQ(job.kind, ApiKind::kTritonGenerate);
  const SamplingParams& p = job.requests[0].params;
  EXPECT_EQ(p.max_tokens, 9);
  EXPECT_FLOAT_EQ(p.temperature, 0.25f);  // the top level wins
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(job.requests[0].seed, 3u);
  EXPECT_EQ(job.requests[0].prompt_token_ids, Encode("hello"));
  ResponseWriter writer(job, model_);
  writer.OnDelta(0, Delta("ab", {97, 98}, true, FinishReason::kLength));
  EXPECT_EQ(json::parse(writer.Finish()),
            json({{"model_name", "tiny"}, {"model_version", "1"}, {"text_output", "ab"}}));

  ApiError e = Error(ParseTritonGenerate({{"text_input", "a"}}, "other", false, model_));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  ExpectBadRequest(ParseTritonGenerate({{"max_tokens", 3}}, "tiny", false, model_), "text_input");
  ExpectBadRequest(ParseTritonGenerate({{"text_input", 3}}, "tiny", false, model_), "text_input");
  ExpectBadRequest(
      ParseTritonGenerate({{"text_input", "a"}, {"parameters", 3}}, "tiny", false, model_),
      "parameters");
  ExpectBadRequest(
      ParseTritonGenerate({{"text_input", "a"}, {"beam_width", 2}}, "tiny", false, model_),
      "beam_width");
  Job(ParseTritonGenerate({{"text_input", {"a"}}}, "tiny", false, model_));

  ApiJob streamed = Job(ParseTritonGenerate({{"text_input", "hello"}}, "tiny", true, model_));
  ResponseWriter sw(streamed, model_);
  EXPECT_EQ(sw.OnDelta(0, Delta("", {1})), "");
  std::string sse = sw.OnDelta(0, Delta("ab", {97, 98}));
  sse += sw.OnDelta(0, Delta("c", {99}, true, FinishReason::kLength));
  EXPECT_EQ(sw.Finish(), "");  // no [DONE] on Triton's stream
  bool done = true;
  std::vector<json> frames = Frames(sse, &done);
  EXPECT_FALSE(done);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0],
            json({{"model_name", "tiny"}, {"model_version", "1"}, {"text_output", "ab"}}));
  EXPECT_EQ(frames[1]["text_output"], "c");
}

// ---- tokenize, detokenize, models -----------------------------------------------------------

TEST_F(ApiTest, TokenizeDetokenizeRoundTrip) {
  auto r = Tokenize(
      {{"model", "tiny"}, {"prompt", "hello <|im_end|>"}, {"return_token_strs", true}}, model_);
  ASSERT_TRUE(std::holds_alternative<json>(r));
  const json t = std::get<json>(r);
  const std::vector<int32_t> ids = Encode("hello <|im_end|>");
  EXPECT_EQ(t["tokens"], ids);
  EXPECT_EQ(t["count"], ids.size());
  EXPECT_EQ(t["max_model_len"], 64);
  EXPECT_EQ(t["token_strs"], json({"hello", " ", "<|im_end|>"}));
  auto d = Detokenize({{"tokens", t["tokens"]}}, model_);
  ASSERT_TRUE(std::holds_alternative<json>(d));
  EXPECT_EQ(std::get<json>(d), json({{"prompt", "hello <|im_end|>"}}));
  EXPECT_FALSE(std::get<json>(Tokenize({{"prompt", "hi"}}, model_)).contains("token_strs"));

  auto error = [](std::variant<json, ApiError> v) {
    EXPECT_TRUE(std::holds_alternative<ApiError>(v));
    return std::holds_alternative<ApiError>(v) ? std::get<ApiError>(v) : ApiError{};
  };
  EXPECT_EQ(error(Detokenize({{"tokens", {1, model_.vocab_size}}}, model_)).param, "tokens");
  EXPECT_EQ(error(Detokenize({{"tokens", {1, -1}}}, model_)).param, "tokens[1]");
  EXPECT_EQ(error(Detokenize({{"tokens", "1"}}, model_)).param, "tokens");
  EXPECT_EQ(error(Detokenize(json::object(), model_)).param, "tokens");
  EXPECT_EQ(error(Tokenize(json::object(), model_)).param, "prompt");
  EXPECT_EQ(error(Tokenize({{"prompt", 1}}, model_)).param, "prompt");
  EXPECT_EQ(error(Tokenize({{"prompt", "a"}, {"model", "x"}}, model_)).status, 404);
  EXPECT_EQ(error(Tokenize({{"messages", json::array()}}, model_)).param, "messages");
}

TEST_F(ApiTest, ModelListShape) {
  EXPECT_EQ(ModelList(model_), json::parse(R"({"object": "list", "data": [{"id": "tiny",
      "object": "model", "created": 1700000000, "owned_by": "kiln", "root": "tiny",
      "max_model_len": 64}]})"));
}

TEST(ApiHelpersTest, SanitizeUtf8AndLogprobs) {
  int64_t n = 0;
  EXPECT_EQ(SanitizeUtf8("h\xC3\xA9llo", &n), "h\xC3\xA9llo");
  EXPECT_EQ(n, 5);
  EXPECT_EQ(SanitizeUtf8("a\xFF\xC3", &n), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(n, 3);
  EXPECT_EQ(SanitizeUtf8("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");       // overlong NUL
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80").substr(0, 3), "\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98\x80", &n), "\xF0\x9F\x98\x80");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(JsonLogprob(-std::numeric_limits<float>::infinity()), -9999.0);
  EXPECT_EQ(JsonLogprob(-0.5f), -0.5);
  EXPECT_EQ(JsonLogprob(-0.1f), -0.1);  // the float's shortest form, not its exact value
}

}  // namespace
}  // namespace kiln::server
