// Executor: the engine on its own thread, streamed to consumers on others.
#include "engine/executor.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "builder/synth_tokenizer.h"
#include "engine/fake_runner.h"
#include "tokenizer/vocab.h"

namespace kiln {
namespace {

constexpr int32_t kVocab = 512;
constexpr int32_t kEos = 2;

std::unique_ptr<Tokenizer> MakeTokenizer(const ModelConfig& config) {
  auto synth = BuildSyntheticTokenizer(config);
  CHECK(synth.ok()) << synth.status().ToString();
  auto vocab = VocabFromTokenizerJson(TokenizerJson(*synth), "synthetic");
  CHECK(vocab.ok()) << vocab.status().ToString();
  auto tokenizer = Tokenizer::Create(std::move(*vocab));
  CHECK(tokenizer.ok());
  return std::move(*tokenizer);
}

struct Harness {
  explicit Harness(int64_t step_delay_us = 0) {
    auto runner = std::make_unique<testing::FakeRunner>(kVocab, kEos);
    runner->set_step_delay_us(step_delay_us);
    tokenizer = MakeTokenizer(runner->config());
    EngineOptions o;
    o.block_size = 4;
    o.num_kv_blocks = 512;
    o.check_invariants = true;
    auto engine = Engine::Create(std::move(runner), o);
    CHECK(engine.ok());
    executor = Executor::Start(std::move(*engine), tokenizer.get());
  }
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Executor> executor;
};

EngineRequest Req(std::vector<int32_t> prompt, int32_t max_tokens) {
  EngineRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  std::optional<FinishReason> reason;
  std::optional<std::string> stop_string;
  int num_deltas = 0;
};

Collected Collect(RequestStream& s) {
  Collected c;
  while (std::optional<TextDelta> d = s.Next()) {
    ++c.num_deltas;
    c.text += d->text;
    c.tokens.insert(c.tokens.end(), d->token_ids.begin(), d->token_ids.end());
    if (d->finished) {
      c.reason = d->finish_reason;
      c.stop_string = d->stop_string;
    }
  }
  return c;
}

TEST(ExecutorTest, ConcurrentProducersStreamTheirOwnTokens) {
  Harness h;
  // Greedy outputs of each prompt alone, first.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Collected> alone;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back({1, 40 + i, 41 + i, 300 - i});
    auto s = h.executor->Enqueue(Req(prompts.back(), 20));
    ASSERT_TRUE(s.ok());
    alone.push_back(Collect(**s));
  }
  std::vector<Collected> together(prompts.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<RequestStream>> mine;
      for (size_t i = t; i < prompts.size(); i += 4) {
        mine.push_back(*h.executor->Enqueue(Req(prompts[i], 20)));
      }
      for (size_t k = 0; k < mine.size(); ++k) together[t + 4 * k] = Collect(*mine[k]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "prompt " << i;
    EXPECT_EQ(together[i].tokens.size(), 20u);
    EXPECT_EQ(together[i].reason, FinishReason::kLength);
    EXPECT_EQ(together[i].text, h.tokenizer->Decode(together[i].tokens, /*skip_special=*/true));
  }
  ExecutorStats stats = h.executor->Stats();
  EXPECT_EQ(stats.num_requests, 24);
  EXPECT_EQ(stats.num_active, 0);
}

TEST(ExecutorTest, StopStringsCutTheTextAndAbortTheRequest) {
  Harness h;
  auto s = h.executor->Enqueue(Req({1, 100, 200}, 40));
  Collected full = Collect(**s);
  ASSERT_GE(full.text.size(), 8u);
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  EngineRequest r = Req({1, 100, 200}, 40);
  r.params.stop = {stop};
  auto s2 = h.executor->Enqueue(std::move(r));
  Collected cut = Collect(**s2);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(cut.reason, FinishReason::kStop);
  EXPECT_EQ(cut.stop_string, stop);
  EXPECT_LT(cut.tokens.size(), full.tokens.size());
  // The engine request was aborted: nothing stays active.
  for (int i = 0; i < 100 && h.executor->Stats().num_active > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(h.executor->Stats().num_active, 0);
}

TEST(ExecutorTest, AbortEndsTheStreamWithAbort) {
  Harness h(/*step_delay_us=*/1000);  // 2,000 steps would take 2 s: the abort comes first
  auto s = h.executor->Enqueue(Req({1, 5, 6}, 100000 - 10));
  ASSERT_TRUE(s.ok());
  std::optional<TextDelta> first = (*s)->Next();
  ASSERT_TRUE(first.has_value());
  h.executor->Abort((*s)->id());
  Collected rest = Collect(**s);
  EXPECT_EQ(rest.reason, FinishReason::kAbort);
  EXPECT_FALSE((*s)->Next().has_value());
}

// The server's path: no blocking Next(); the callback says when TryNext() has something.
TEST(ExecutorTest, OutputCallbackWakesANonBlockingConsumer) {
  Harness h;
  Collected alone = Collect(**h.executor->Enqueue(Req({1, 9, 10}, 12)));

  std::mutex mu;
  std::condition_variable cv;
  int num_calls = 0;
  auto s = h.executor->Enqueue(Req({1, 9, 10}, 12), [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++num_calls;
    cv.notify_all();
  });
  ASSERT_TRUE(s.ok());
  Collected c;
  int seen_calls = 0;
  while (!c.reason.has_value()) {
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(
          cv.wait_for(lock, std::chrono::seconds(10), [&] { return num_calls > seen_calls; }))
          << "no callback after " << c.tokens.size() << " tokens";
      seen_calls = num_calls;
    }
    while (std::optional<TextDelta> d = (*s)->TryNext()) {
      c.text += d->text;
      c.tokens.insert(c.tokens.end(), d->token_ids.begin(), d->token_ids.end());
      if (d->finished) c.reason = d->finish_reason;
    }
  }
  EXPECT_EQ(c.tokens, alone.tokens);
  EXPECT_EQ(c.text, alone.text);
  EXPECT_EQ(c.reason, FinishReason::kLength);
  EXPECT_GE(num_calls, 1);
  EXPECT_FALSE((*s)->TryNext().has_value());
  // The first output carried the time the scheduler admitted it.
  EXPECT_NE((*s)->first_scheduled_time(), std::chrono::steady_clock::time_point{});
}

TEST(ExecutorTest, StatsCountQueuedRequestsAsWaitingAtOnce) {
  Harness h(/*step_delay_us=*/2000);
  // Default max_tokens (the room left in the context): admitted without reserving it, both run.
  EngineRequest long_a = Req({1, 3}, 100000 - 10), long_b = Req({1, 4}, 100000 - 10);
  long_a.max_tokens_is_default = long_b.max_tokens_is_default = true;
  auto a = h.executor->Enqueue(std::move(long_a));
  auto b = h.executor->Enqueue(std::move(long_b));
  ASSERT_TRUE(a.ok() && b.ok());
  ExecutorStats stats = h.executor->Stats();
  EXPECT_EQ(stats.num_running + stats.num_waiting, 2);  // none lost between queue and step
  for (int i = 0; i < 500 && h.executor->Stats().num_running < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stats = h.executor->Stats();
  EXPECT_EQ(stats.num_running, 2);
  EXPECT_EQ(stats.num_waiting, 0);
  h.executor->Abort((*a)->id());
  h.executor->Abort((*b)->id());
  EXPECT_EQ(Collect(**a).reason, FinishReason::kAbort);
  EXPECT_EQ(Collect(**b).reason, FinishReason::kAbort);
  for (int i = 0; i < 500 && h.executor->Stats().num_running > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stats = h.executor->Stats();
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_active, 0);
  EXPECT_EQ(stats.engine.num_free_kv_blocks, stats.engine.num_kv_blocks);
}

TEST(ExecutorTest, InvalidRequestsFailAtEnqueue) {
  Harness h;
  EngineRequest r = Req({1, 2, 3}, 4);
  r.params.temperature = 5;
  auto s = h.executor->Enqueue(std::move(r));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message().rfind("temperature", 0), 0u);
  EXPECT_FALSE(h.executor->Enqueue(Req({}, 4)).ok());
}

TEST(ExecutorTest, ShutdownAbortsWhatIsStillRunning) {
  Harness h(/*step_delay_us=*/1000);
  auto s = h.executor->Enqueue(Req({1, 7}, 3000));
  ASSERT_TRUE(s.ok());
  h.executor->Shutdown();
  Collected c = Collect(**s);
  EXPECT_EQ(c.reason, FinishReason::kAbort);
  EXPECT_FALSE(h.executor->Enqueue(Req({1, 7}, 3)).ok());
}

}  // namespace
}  // namespace kiln
