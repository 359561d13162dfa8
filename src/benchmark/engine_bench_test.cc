// The in-process benchmarks on the FakeRunner: every request accounted for, the counters and
// timings consistent with what the engine did.
#include "benchmark/engine_bench.h"

#include <gtest/gtest.h>

#include "engine/fake_runner.h"

namespace kiln::benchmark {
namespace {

std::unique_ptr<Engine> MakeEngine(int32_t num_kv_blocks = 256, int32_t max_num_seqs = 64,
                                   CapacityPolicy policy = CapacityPolicy::kAuto) {
  auto runner = std::make_unique<kiln::testing::FakeRunner>(/*vocab_size=*/300, /*eos=*/2);
  EngineOptions o;
  o.block_size = 4;
  o.num_kv_blocks = num_kv_blocks;
  o.scheduler.max_num_seqs = max_num_seqs;
  o.scheduler.capacity_policy = policy;
  o.check_invariants = true;
  auto engine = Engine::Create(std::move(runner), o);
  CHECK(engine.ok()) << engine.status().ToString();
  return std::move(*engine);
}

std::vector<BenchRequest> Requests(int32_t n, int32_t input_len, int32_t output_len,
                                   double output_stddev = 0) {
  DatasetOptions d;
  d.num_requests = n;
  d.input_len = input_len;
  d.output_len = output_len;
  d.output_len_stddev = output_stddev;
  d.vocab_size = 300;
  auto r = MakeDataset(d, nullptr);
  CHECK(r.ok()) << r.status().ToString();
  return std::move(*r);
}

TEST(OfflineBenchTest, EveryRequestGetsItsExactLengthAndTimings) {
  auto engine = MakeEngine();
  const auto requests = Requests(40, 12, 10, /*output_stddev=*/3);
  OfflineOptions o;
  o.num_warmup = 2;
  auto run = RunOffline(*engine, requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->records.size(), 40u);
  int64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestRecord& r = run->records[i];
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.output_tokens, requests[i].output_len) << i;  // ignore_eos: exact
    EXPECT_EQ(r.input_tokens, 12);
    EXPECT_EQ(r.start_s, 0);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_LE(r.ttft_s, r.e2e_s);
    EXPECT_LE(r.e2e_s, run->duration_s);
    EXPECT_EQ(r.itl_s.size(), static_cast<size_t>(r.output_tokens - 1));
    total += r.output_tokens;
  }
  const EngineCounters& c = run->counters;
  EXPECT_GT(c.num_steps, 0);
  EXPECT_GT(c.num_decode_only_steps, 0);
  EXPECT_GT(c.mean_decode_batch, 1.0);
  EXPECT_LE(c.mean_decode_batch, 40.0);
  EXPECT_EQ(c.num_prompt_tokens, 40 * 12);  // random prompts share no block
  EXPECT_EQ(c.num_preemptions, 0);
  EXPECT_EQ(c.max_num_running, 40);
  EXPECT_EQ(Summarize(run->records, run->duration_s, {}).total_output_tokens, total);

  // The step log: one record per step, adding up to the counters.
  ASSERT_EQ(static_cast<int64_t>(run->steps.size()), c.num_steps);
  EXPECT_EQ(c.num_prompt_steps + c.num_decode_only_steps, c.num_steps);
  int64_t prompt_tokens = 0, decodes = 0, prompt_step_decodes = 0;
  double previous_end = 0;
  for (const StepRecord& s : run->steps) {
    EXPECT_GT(s.num_seqs, 0);
    EXPECT_LE(s.num_decode_seqs, s.num_seqs);
    EXPECT_GE(s.end_s, previous_end);
    previous_end = s.end_s;
    prompt_tokens += s.num_batched_tokens - s.num_decode_seqs;
    decodes += s.num_decode_seqs;
    if (s.num_decode_seqs < s.num_seqs) prompt_step_decodes += s.num_decode_seqs;
  }
  EXPECT_EQ(prompt_tokens, c.num_prompt_tokens);
  EXPECT_EQ(decodes, total - 40);  // each request's first token comes from its prompt
  EXPECT_EQ(prompt_step_decodes, c.num_prompt_step_decodes);
  EXPECT_EQ(StepToJson(run->steps.front())["num_prompt_tokens"],
            run->steps.front().num_batched_tokens - run->steps.front().num_decode_seqs);
}

TEST(OfflineBenchTest, ASmallPoolPreemptsAndStillFinishesEverything) {
  auto engine = MakeEngine(/*num_kv_blocks=*/40, 64, CapacityPolicy::kMaxUtilization);
  const auto requests = Requests(30, 16, 20);
  auto run = RunOffline(*engine, requests, {});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  for (const RequestRecord& r : run->records) {
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.output_tokens, 20);
  }
  EXPECT_GT(run->counters.num_preemptions, 0);
  EXPECT_LT(run->counters.max_num_running, 30);
}

TEST(OfflineBenchTest, RequestsNeedTokenIds) {
  auto engine = MakeEngine();
  auto requests = Requests(3, 8, 4);
  requests[1].prompt_ids.clear();
  auto run = RunOffline(*engine, requests, {});
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("request 1"), std::string::npos);
  EXPECT_FALSE(RunOffline(*engine, {}, {}).ok());
}

TEST(LatencyBenchTest, IterationsHaveAPrefillAndOneStepPerLaterToken) {
  auto engine = MakeEngine();
  LatencyOptions o;
  o.batch_size = 4;
  o.input_len = 16;
  o.output_len = 9;
  o.num_iterations = 3;
  o.num_warmup = 1;
  auto its = RunLatency(*engine, o, nullptr);
  ASSERT_TRUE(its.ok()) << its.status().ToString();
  ASSERT_EQ(its->size(), 3u);
  for (const LatencyIteration& it : *its) {
    EXPECT_GT(it.prefill_s, 0);
    EXPECT_GE(it.e2e_s, it.prefill_s);
    EXPECT_EQ(it.decode_step_s.size(), 8u);  // tokens 2..9, one step each, the batch together
  }
  EXPECT_FALSE(engine->HasWork());
}

TEST(LatencyBenchTest, BadOptionsAreRejected) {
  auto engine = MakeEngine();
  LatencyOptions o;
  o.batch_size = 0;
  EXPECT_FALSE(RunLatency(*engine, o, nullptr).ok());
  o = {};
  o.input_len = 4000;
  o.output_len = 200;  // beyond the fake model's 4,096 positions
  auto r = RunLatency(*engine, o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds the model's context"), std::string::npos);
}

}  // namespace
}  // namespace kiln::benchmark
