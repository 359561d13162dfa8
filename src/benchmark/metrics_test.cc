#include "benchmark/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace kiln::benchmark {
namespace {

// --- Percentile / Distribute: values from numpy.percentile (linear interpolation) ---

TEST(PercentileTest, MatchesNumpy) {
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 90), 3.7);   // numpy.percentile([1,2,3,4], 90)
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 50), 2.5);   // ... 50
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0), 1.0);    // unsorted input
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 100), 4.0);  // ... 100
  EXPECT_DOUBLE_EQ(Percentile({15, 20, 35, 40, 50}, 40), 29.0);
  EXPECT_DOUBLE_EQ(Percentile({10, 1, 7}, 25), 4.0);
  EXPECT_DOUBLE_EQ(Percentile({5}, 99), 5.0);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-12);  // numpy.percentile(range(1,101), 99)
}

TEST(DistributeTest, SummarizesInMilliseconds) {
  Distribution d = Distribute({0.004, 0.001, 0.003, 0.002});
  EXPECT_EQ(d.count, 4);
  EXPECT_NEAR(d.mean, 2.5, 1e-12);
  EXPECT_NEAR(d.stddev, std::sqrt(1.25), 1e-12);  // numpy.std (population)
  EXPECT_NEAR(d.min, 1.0, 1e-12);
  EXPECT_NEAR(d.max, 4.0, 1e-12);
  EXPECT_NEAR(d.p50, 2.5, 1e-12);
  EXPECT_NEAR(d.p90, 3.7, 1e-12);
  EXPECT_NEAR(d.p99, 3.97, 1e-12);

  Distribution empty = Distribute({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.mean, 0);
  EXPECT_EQ(empty.p99, 0);
  EXPECT_EQ(empty.max, 0);
}

// --- ParseSlo ---

TEST(ParseSloTest, ParsesAnySubset) {
  auto s = ParseSlo("ttft:200,tpot:50,e2el:5000");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ttft_ms, 200);
  EXPECT_EQ(s->tpot_ms, 50);
  EXPECT_EQ(s->e2el_ms, 5000);
  EXPECT_TRUE(s->any());

  s = ParseSlo("tpot:12.5  e2el:1e3");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ttft_ms, 0);
  EXPECT_EQ(s->tpot_ms, 12.5);
  EXPECT_EQ(s->e2el_ms, 1000);

  s = ParseSlo("");
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->any());
}

TEST(ParseSloTest, BadSpecsNameTheBadPart) {
  struct Case {
    const char* spec;
    const char* want;
  };
  for (const Case& c : {Case{"ttft:200,itl:5", "itl"}, Case{"ttft:abc", "ttft:abc"},
                        Case{"tpot:-5", "tpot:-5"}, Case{"ttft", "ttft"}, Case{"ttft:", "ttft:"},
                        Case{"e2el:10ms", "e2el:10ms"}, Case{"ttft:1,ttft:2", "twice"}}) {
    auto s = ParseSlo(c.spec);
    ASSERT_FALSE(s.ok()) << c.spec;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status().message();
  }
}

// --- Summarize ---

RequestRecord Ok(double ttft, double e2e, int32_t input, int32_t output, std::vector<double> itl) {
  RequestRecord r;
  r.ok = true;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.input_tokens = input;
  r.output_tokens = output;
  r.itl_s = std::move(itl);
  return r;
}

RequestRecord Failed(const std::string& type, const std::string& message) {
  RequestRecord r;
  r.error_type = type;
  r.error_message = message;
  // Timings and tokens a failed request must not contribute.
  r.ttft_s = 9;
  r.e2e_s = 9;
  r.input_tokens = 1000;
  r.output_tokens = 1000;
  r.itl_s = {9};
  return r;
}

// Three completed requests and three failures over 10 s:
//   A: TTFT 100 ms, E2E 1,100 ms, 11 tokens out -> TPOT 100 ms; 10 gaps of 100 ms
//   B: TTFT 300 ms, E2E 300 ms, 1 token out -> no TPOT
//   C: TTFT 200 ms, E2E 2,200 ms, 5 tokens out -> TPOT 500 ms; 4 gaps of 500 ms; input unknown
std::vector<RequestRecord> Records() {
  return {Ok(0.1, 1.1, 100, 11, std::vector<double>(10, 0.1)),
          Failed("http 503", "overloaded"),
          Ok(0.3, 0.3, 50, 1, {}),
          Failed("timeout", "no byte in 30 s"),
          Ok(0.2, 2.2, -1, 5, std::vector<double>(4, 0.5)),
          Failed("http 503", "second message")};
}

TEST(SummarizeTest, LatenciesAndThroughputs) {
  Summary s = Summarize(Records(), 10.0, Slo{});
  EXPECT_EQ(s.num_requests, 6);
  EXPECT_EQ(s.num_completed, 3);
  EXPECT_EQ(s.num_failed, 3);
  EXPECT_EQ(s.errors, (std::map<std::string, int32_t>{{"http 503", 2}, {"timeout", 1}}));
  EXPECT_EQ(s.error_examples.at("http 503"), "overloaded");
  EXPECT_EQ(s.error_examples.at("timeout"), "no byte in 30 s");
  EXPECT_EQ(s.duration_s, 10.0);
  EXPECT_EQ(s.total_input_tokens, 150);
  EXPECT_EQ(s.total_output_tokens, 17);
  EXPECT_NEAR(s.request_throughput, 0.3, 1e-12);
  EXPECT_NEAR(s.output_throughput, 1.7, 1e-12);
  EXPECT_NEAR(s.total_throughput, 16.7, 1e-12);

  EXPECT_EQ(s.ttft.count, 3);
  EXPECT_NEAR(s.ttft.mean, 200, 1e-9);
  EXPECT_NEAR(s.ttft.max, 300, 1e-9);
  EXPECT_EQ(s.tpot.count, 2);  // B has one output token
  EXPECT_NEAR(s.tpot.min, 100, 1e-9);
  EXPECT_NEAR(s.tpot.max, 500, 1e-9);
  EXPECT_NEAR(s.tpot.mean, 300, 1e-9);
  EXPECT_EQ(s.itl.count, 14);
  EXPECT_NEAR(s.itl.mean, 3000.0 / 14, 1e-9);
  EXPECT_NEAR(s.itl.p50, 100, 1e-9);
  EXPECT_NEAR(s.itl.max, 500, 1e-9);
  EXPECT_EQ(s.e2el.count, 3);
  EXPECT_NEAR(s.e2el.mean, 1200, 1e-9);
  EXPECT_NEAR(s.e2el.p50, 1100, 1e-9);

  EXPECT_FALSE(s.has_slo);
  EXPECT_EQ(s.num_good, 0);
  EXPECT_EQ(s.goodput, 0);
}

TEST(SummarizeTest, GoodputNeedsEverySlo) {
  // A meets all three; B misses only TTFT (300 > 250); C misses only TPOT (500 > 200).
  Slo slo{.ttft_ms = 250, .tpot_ms = 200, .e2el_ms = 3000};
  Summary s = Summarize(Records(), 10.0, slo);
  EXPECT_TRUE(s.has_slo);
  EXPECT_EQ(s.num_good, 1);
  EXPECT_NEAR(s.goodput, 0.1, 1e-12);

  // Only an E2E SLO of 1,500 ms: A and B meet it (B's single token has no TPOT to miss).
  s = Summarize(Records(), 10.0, Slo{.e2el_ms = 1500});
  EXPECT_EQ(s.num_good, 2);
  // Bounds are inclusive: TTFT SLO exactly A's TTFT.
  s = Summarize(Records(), 10.0, Slo{.ttft_ms = 100});
  EXPECT_EQ(s.num_good, 1);
}

TEST(SummarizeTest, EdgeCases) {
  // No output: no first token, so no TTFT; E2E still counts. Zero duration: no rates.
  std::vector<RequestRecord> records = {Ok(0.0, 0.5, 3, 0, {})};
  Summary s = Summarize(records, 0.0, Slo{});
  EXPECT_EQ(s.num_completed, 1);
  EXPECT_EQ(s.ttft.count, 0);
  EXPECT_EQ(s.e2el.count, 1);
  EXPECT_EQ(s.request_throughput, 0);
  // An error without a type is grouped as "unknown".
  s = Summarize({Failed("", "boom")}, 1.0, Slo{});
  EXPECT_EQ(s.errors.at("unknown"), 1);
  EXPECT_EQ(s.e2el.count, 0);
  EXPECT_EQ(s.total_output_tokens, 0);
}

// --- SummaryToJson / FormatSummary ---

std::vector<std::string> Keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  return keys;
}

TEST(SummaryToJsonTest, KeysAreTheFieldNames) {
  nlohmann::ordered_json j = SummaryToJson(Summarize(Records(), 10.0, Slo{}));
  EXPECT_EQ(Keys(j),
            (std::vector<std::string>{
                "num_requests", "num_completed", "num_failed", "errors", "error_examples",
                "duration_s", "total_input_tokens", "total_output_tokens", "request_throughput",
                "output_throughput", "total_throughput", "ttft", "tpot", "itl", "e2el"}));
  EXPECT_EQ(Keys(j["ttft"]), (std::vector<std::string>{"count", "mean", "stddev", "min", "p50",
                                                       "p90", "p99", "max"}));
  EXPECT_EQ(j["num_failed"], 3);
  EXPECT_EQ(j["errors"]["http 503"], 2);
  EXPECT_EQ(j["error_examples"]["timeout"], "no byte in 30 s");
  EXPECT_EQ(j["total_output_tokens"], 17);
  EXPECT_EQ(j["tpot"]["count"], 2);
  EXPECT_NEAR(j["e2el"]["mean"].get<double>(), 1200, 1e-9);

  j = SummaryToJson(Summarize(Records(), 10.0, Slo{.ttft_ms = 250, .tpot_ms = 200}));
  ASSERT_TRUE(j.contains("slo"));
  EXPECT_EQ(Keys(j["slo"]), (std::vector<std::string>{"ttft_ms", "tpot_ms", "e2el_ms"}));
  EXPECT_EQ(j["slo"]["ttft_ms"], 250.0);
  EXPECT_EQ(j["slo"]["e2el_ms"], 0.0);
  EXPECT_EQ(j["num_good"], 1);
  EXPECT_NEAR(j["goodput"].get<double>(), 0.1, 1e-12);
}

TEST(FormatSummaryTest, ContainsTheKeyFigures) {
  Slo slo{.ttft_ms = 250, .tpot_ms = 200, .e2el_ms = 3000};
  const std::string text =
      FormatSummary(Summarize(Records(), 10.0, slo), "Serving Benchmark Result");
  for (const char* want : {
           "============ Serving Benchmark Result ============\n",
           "Successful requests:                     3\n",
           "Failed requests:                         3\n",
           "Benchmark duration (s):                  10.00\n",
           "Total input tokens:                      150\n",
           "Total generated tokens:                  17\n",
           "Request throughput (req/s):              0.30\n",
           "Request goodput (req/s):                 0.10\n",
           "Output token throughput (tok/s):         1.70\n",
           "Total token throughput (tok/s):          16.70\n",
           "---------------Time to First Token----------------\n",
           "Mean TTFT (ms):                          200.00\n",
           "Median TTFT (ms):                        200.00\n",
           "P90 TTFT (ms):                           280.00\n",
           "P99 TTFT (ms):                           298.00\n",
           "Mean TPOT (ms):                          300.00\n",
           "Mean ITL (ms):                           214.29\n",
           "P99 E2EL (ms):                           2178.00\n",
           "http 503:                                2\n",
           "  first: overloaded\n",
           "timeout:                                 1\n",
           "==================================================\n",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << text;
  }
  const std::string no_slo = FormatSummary(Summarize(Records(), 10.0, Slo{}), "X");
  EXPECT_EQ(no_slo.find("goodput"), std::string::npos);
  EXPECT_NE(no_slo.find("Errors"), std::string::npos);
  const std::string clean = FormatSummary(Summarize({Ok(0.1, 0.2, 5, 2, {0.1})}, 1.0, Slo{}), "X");
  EXPECT_EQ(clean.find("Errors"), std::string::npos);
  EXPECT_EQ(clean.find("first:"), std::string::npos);
}

}  // namespace
}  // namespace kiln::benchmark
