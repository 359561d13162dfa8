// The api layer on the real default model (SmolLM2-135M, CPU backend), driven the way the server
// drives it: parse, run each choice through the engine with its own RequestTextStream, feed the
// deltas to a ResponseWriter. Checks that a seed gives `LLM::Generate`'s text, that streaming
// concatenates to the non-streaming text (stop strings included), that chat prompts are
// `LLM::Tokenize`'s, and that token strings concatenate to the text. Skipped without
// KILN_DEFAULT_MODEL (scripts/test sets it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "engine/llm.h"
#include "server/api.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

class ApiModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("KILN_DEFAULT_MODEL");
    if (path == nullptr) return;
    LlmOptions options;
    options.device = "cpu";
    options.num_threads = 2;
    options.engine.max_model_len = 512;
    options.engine.num_kv_blocks = 256;  // 4096 tokens: plenty for these tests
    auto llm = LLM::Create(path, options);
    ASSERT_TRUE(llm.ok()) << llm.status().ToString();
    llm_ = std::move(llm).value().release();
  }
  static void TearDownTestSuite() {
    delete llm_;
    llm_ = nullptr;
  }

  void SetUp() override {
    if (llm_ == nullptr) GTEST_SKIP() << "KILN_DEFAULT_MODEL is not set (scripts/test sets it)";
    model_.name = "smollm2";
    model_.tokenizer = &llm_->tokenizer();
    model_.max_model_len = llm_->engine().max_model_len();
    model_.vocab_size = llm_->model_config().vocab_size;
    model_.created = 1;
  }

  static ApiJob Job(ParseResult r) {
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << e->message;
      return ApiJob{};
    }
    return std::get<ApiJob>(std::move(r));
  }

  // Runs every choice of `job` on the engine and returns what the writer produced.
  std::string Run(const ApiJob& job) {
    ResponseWriter writer(job, model_);
    Engine& engine = llm_->engine();
    struct Pending {
      size_t choice;
      RequestTextStream text;
    };
    std::map<RequestId, Pending> pending;
    for (size_t i = 0; i < job.requests.size(); ++i) {
      EngineRequest r = job.requests[i];
      r.id = next_id_++;
      pending.emplace(r.id,
                      Pending{i, RequestTextStream(llm_->tokenizer().tokenizer.get(), r.params)});
      EXPECT_TRUE(engine.AddRequest(std::move(r)).ok());
    }
    std::string out;
    while (engine.HasWork()) {
      for (const RequestOutput& output : engine.Step()) {
        auto it = pending.find(output.id);
        if (it == pending.end()) continue;
        TextDelta delta = it->second.text.Process(output);
        if (delta.needs_abort) engine.Abort(output.id);
        out += writer.OnDelta(it->second.choice, delta);
        if (delta.finished) pending.erase(it);
      }
    }
    EXPECT_TRUE(pending.empty());
    out += writer.Finish();
    return out;
  }

  // The text of each choice: from the body, or concatenated from the SSE frames.
  static std::vector<std::string> Texts(const std::string& out, bool stream, bool chat) {
    std::vector<std::string> texts;
    auto add = [&](size_t index, const std::string& text) {
      if (texts.size() <= index) texts.resize(index + 1);
      texts[index] += text;
    };
    if (!stream) {
      const json body = json::parse(out);
      for (const json& c : body["choices"]) {
        add(c["index"], chat ? c["message"]["content"] : c["text"]);
      }
      return texts;
    }
    size_t at = 0;
    while (at < out.size()) {
      const size_t end = out.find("\n\n", at);
      const std::string payload = out.substr(at + 6, end - at - 6);
      at = end + 2;
      if (payload == "[DONE]") break;
      const json chunk = json::parse(payload);
      for (const json& c : chunk["choices"]) {
        add(c["index"], chat ? c["delta"]["content"] : c["text"]);
      }
    }
    return texts;
  }

  static LLM* llm_;
  static RequestId next_id_;
  ModelInfo model_;
};

LLM* ApiModelTest::llm_ = nullptr;
RequestId ApiModelTest::next_id_ = 1'000'000;

TEST_F(ApiModelTest, SeededCompletionsMatchGenerateAndStreaming) {
  const std::string prompt = "Once upon a time";
  json body = {
      {"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0.9}, {"seed", 1234}, {"n", 2}};
  const std::vector<std::string> plain =
      Texts(Run(Job(ParseCompletions(body, model_))), false, false);
  body["stream"] = true;
  const std::vector<std::string> streamed =
      Texts(Run(Job(ParseCompletions(body, model_))), true, false);
  SamplingParams params;
  params.max_tokens = 24;
  params.temperature = 0.9f;
  params.seed = 1234;
  params.n = 2;
  auto reference = llm_->Generate({Prompt::Text(prompt)}, params);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  ASSERT_EQ(plain.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(plain[j], (*reference)[0].completions[j].text) << j;
    EXPECT_EQ(streamed.at(j), plain[j]) << j;
  }
  EXPECT_NE(plain[0], plain[1]);  // two seeds, two stories
}

TEST_F(ApiModelTest, StopStringsStreamLikeTheyComplete) {
  json body = {{"prompt", "The capital of France is"},
               {"max_tokens", 32},
               {"temperature", 0},
               {"ignore_eos", true}};
  const std::string greedy = Texts(Run(Job(ParseCompletions(body, model_))), false, false)[0];
  ASSERT_GE(greedy.size(), 12u) << greedy;
  // A stop string from the middle of the text, likely straddling a token boundary.
  const std::string stop = greedy.substr(greedy.size() / 2, 3);
  const std::string want = greedy.substr(0, greedy.find(stop));
  body["stop"] = stop;
  const std::string out = Run(Job(ParseCompletions(body, model_)));
  EXPECT_EQ(Texts(out, false, false)[0], want);
  EXPECT_EQ(json::parse(out)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(json::parse(out)["choices"][0]["stop_reason"], stop);
  body["stream"] = true;
  EXPECT_EQ(Texts(Run(Job(ParseCompletions(body, model_))), true, false)[0], want);
}

TEST_F(ApiModelTest, ChatPromptIsLlmTokenizeAndLogprobTokensSpellTheText) {
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Say hi in French."}}};
  json body = {{"messages", json::parse(messages.dump())},
               {"max_tokens", 12},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logprobs", true},
               {"top_logprobs", 3}};
  ApiJob job = Job(ParseChatCompletions(body, model_));
  auto want_ids = llm_->Tokenize(Prompt::Chat(messages));
  ASSERT_TRUE(want_ids.ok());
  EXPECT_EQ(job.requests.at(0).prompt_token_ids, *want_ids);
  const json choice = json::parse(Run(job))["choices"][0];
  std::string spelled;
  const json& content = choice["logprobs"]["content"];
  EXPECT_EQ(content.size(), 12u);
  for (const json& t : content) {
    for (int b : t["bytes"]) spelled.push_back(static_cast<char>(b));
    EXPECT_LE(t["top_logprobs"].size(), 3u);
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
  }
  EXPECT_EQ(spelled, choice["message"]["content"].get<std::string>());
}

TEST_F(ApiModelTest, TokenizeDetokenizeRoundTrip) {
  const std::string text = "Héllo, wörld! 你好 <|im_start|>";
  auto t = Tokenize({{"prompt", text}}, model_);
  ASSERT_TRUE(std::holds_alternative<json>(t));
  const json tokens = std::get<json>(t)["tokens"];
  EXPECT_EQ(tokens.get<std::vector<int32_t>>(),
            llm_->tokenizer().tokenizer->Encode(text, true, true));
  auto d = Detokenize({{"tokens", tokens}}, model_);
  ASSERT_TRUE(std::holds_alternative<json>(d));
  EXPECT_EQ(std::get<json>(d)["prompt"], text);
}

}  // namespace
}  // namespace kiln::server
