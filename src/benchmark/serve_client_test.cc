// The load generator end to end against a real kiln Server in this process (the engine on the
// FakeRunner, a delay per step so that timings have something to measure).
#include "benchmark/serve_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include "server/fake_model.h"
#include "server/server.h"

namespace kiln::benchmark {
namespace {

using server::Server;
using server::testing::FakeModelSetup;

// A server on an ephemeral port, serving the fake model.
struct TestServer {
  explicit TestServer(FakeModelSetup setup = {.step_delay_us = 2000}) {
    server::ServerOptions o;
    o.http.host = "127.0.0.1";
    o.http.port = 0;
    o.http.num_io_threads = 2;
    auto s = Server::Start(o);
    CHECK(s.ok()) << s.status().ToString();
    srv = std::move(*s);
    auto model = server::testing::MakeFakeServedModel(setup);
    tokenizer = model->tokenizer->tokenizer.get();
    srv->SetModel(std::move(model));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(srv->port()); }
  std::unique_ptr<Server> srv;
  const Tokenizer* tokenizer = nullptr;  // owned by the served model
};

std::vector<BenchRequest> RandomRequests(const Tokenizer* tokenizer, int32_t n, int32_t input_len,
                                         int32_t output_len) {
  DatasetOptions d;
  d.num_requests = n;
  d.input_len = input_len;
  d.output_len = output_len;
  auto r = MakeDataset(d, tokenizer);
  CHECK(r.ok()) << r.status().ToString();
  return std::move(*r);
}

ServeClientOptions Options(const TestServer& s) {
  ServeClientOptions o;
  o.base_url = s.url();
  o.model = "fake";
  o.ignore_eos = true;
  o.show_progress = false;
  return o;
}

// The largest number of records whose [start, start + e2e) intervals overlap.
int32_t MaxOverlap(const std::vector<RequestRecord>& records) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : records) {
    events.push_back({r.start_s, +1});
    events.push_back({r.start_s + r.e2e_s, -1});
  }
  std::sort(events.begin(), events.end());  // an end sorts before a start at the same time
  int32_t now = 0, most = 0;
  for (const auto& [t, delta] : events) most = std::max(most, now += delta);
  return most;
}

TEST(ServeClientTest, CompletionsAtFixedConcurrencyMeasureEveryToken) {
  TestServer s;
  const auto requests = RandomRequests(s.tokenizer, 24, 20, 16);
  ServeClientOptions o = Options(s);
  o.max_concurrency = 4;
  auto run = RunServeBenchmark(requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->records.size(), 24u);
  double previous_start = 0;
  for (const RequestRecord& r : run->records) {
    ASSERT_TRUE(r.ok) << r.error_type << ": " << r.error_message;
    EXPECT_EQ(r.output_tokens, 16);  // the usage chunk's count, exact with ignore_eos
    EXPECT_EQ(r.input_tokens, 20);   // usage.prompt_tokens: token-id prompts arrive exactly
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_LE(r.ttft_s, r.e2e_s);
    // Output-carrying chunks: at most one per token; their gaps fit between TTFT and the end.
    EXPECT_LE(r.itl_s.size(), 15u);
    EXPECT_GE(r.itl_s.size(), 8u);  // the fake model's text rarely holds a token back
    const double itl_sum = std::accumulate(r.itl_s.begin(), r.itl_s.end(), 0.0);
    EXPECT_LE(itl_sum, r.e2e_s - r.ttft_s + 1e-9);
    EXPECT_GE(r.start_s, previous_start);  // records are in send order
    previous_start = r.start_s;
  }
  EXPECT_LE(MaxOverlap(run->records), 4);
  EXPECT_GE(MaxOverlap(run->records), 2);  // the limit was used, not only respected
  const Summary sum = Summarize(run->records, run->duration_s, {});
  EXPECT_EQ(sum.num_completed, 24);
  EXPECT_EQ(sum.total_output_tokens, 24 * 16);
  EXPECT_GT(run->duration_s, 0);
}

TEST(ServeClientTest, RequestRateSpreadsTheSends) {
  TestServer s({.step_delay_us = 500});
  const auto requests = RandomRequests(s.tokenizer, 30, 8, 4);
  ServeClientOptions o = Options(s);
  o.request_rate = 100;  // 30 requests over ~0.3 s
  o.seed = 7;
  auto run = RunServeBenchmark(requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::vector<double> arrivals = ArrivalTimes(30, 100, 1.0, 7);
  for (size_t i = 0; i < run->records.size(); ++i) {
    ASSERT_TRUE(run->records[i].ok) << run->records[i].error_message;
    // Sent at its arrival time: never early, and late only by scheduling noise.
    EXPECT_GE(run->records[i].start_s, arrivals[i] - 1e-4);
    EXPECT_LT(run->records[i].start_s, arrivals[i] + 0.05);
  }
}

TEST(ServeClientTest, ChatWithSharedPrefixesSendsASystemMessage) {
  // A template that keeps only the system message's text: the prompt tokens then show that the
  // shared prefix went out as the system message.
  TestServer s({.step_delay_us = 2000,
                .chat_template = "{% for m in messages %}{% if m.role == 'system' %}"
                                 "{{ m.content }}{% endif %}{% endfor %}"});
  DatasetOptions d;
  d.kind = "shared-prefix";
  d.num_requests = 8;
  d.num_prefixes = 2;
  d.prefix_len = 24;
  d.question_len = 8;
  d.output_len = 6;
  auto requests = MakeDataset(d, s.tokenizer);
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  ServeClientOptions o = Options(s);
  o.endpoint = "chat";
  o.max_concurrency = 3;
  auto run = RunServeBenchmark(*requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  for (const RequestRecord& r : run->records) {
    ASSERT_TRUE(r.ok) << r.error_type << ": " << r.error_message;
    EXPECT_EQ(r.output_tokens, 6);
    EXPECT_GT(r.input_tokens, 0);
  }
  // Requests i and i + 2 share a prefix and differ in their question: equal prompt lengths show
  // the template saw the prefix alone, as the system message.
  for (size_t i = 0; i + 2 < run->records.size(); ++i) {
    EXPECT_EQ(run->records[i].input_tokens, run->records[i + 2].input_tokens) << i;
  }
}

TEST(ServeClientTest, ServerErrorsAreCountedByType) {
  TestServer s;
  const auto requests = RandomRequests(s.tokenizer, 5, 8, 4);
  ServeClientOptions o = Options(s);
  o.model = "not-this-one";
  auto run = RunServeBenchmark(requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const Summary sum = Summarize(run->records, run->duration_s, {});
  EXPECT_EQ(sum.num_completed, 0);
  EXPECT_EQ(sum.num_failed, 5);
  ASSERT_EQ(sum.errors.count("http 404"), 1u);
  EXPECT_EQ(sum.errors.at("http 404"), 5);
  EXPECT_NE(sum.error_examples.at("http 404").find("not-this-one"), std::string::npos);
}

TEST(ServeClientTest, PromptsLongerThanTheContextFailAloneAndTheRestComplete) {
  TestServer s;
  auto requests = RandomRequests(s.tokenizer, 4, 8, 4);
  requests[2].prompt_ids.assign(5000, 7);  // the fake model's context is 4,096
  auto run = RunServeBenchmark(requests, Options(s));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_TRUE(run->records[0].ok);
  EXPECT_FALSE(run->records[2].ok);
  EXPECT_EQ(run->records[2].error_type, "http 400");
  EXPECT_TRUE(run->records[3].ok);
}

TEST(ServeClientTest, UnreachableServerGivesConnectErrors) {
  TestServer s;
  const auto requests = RandomRequests(s.tokenizer, 3, 8, 4);
  ServeClientOptions o = Options(s);
  const uint16_t port = s.srv->port();
  s.srv.reset();  // the listener is closed once the server is gone
  o.base_url = "http://127.0.0.1:" + std::to_string(port);
  o.request_timeout_s = 5;  // a failure of this test, not a hang
  auto run = RunServeBenchmark(requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  for (const RequestRecord& r : run->records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error_type, "connect");
    EXPECT_FALSE(r.error_message.empty());
  }
}

TEST(ServeClientTest, SlowResponsesTimeOut) {
  TestServer s({.step_delay_us = 20000});
  const auto requests = RandomRequests(s.tokenizer, 2, 8, 50);  // ~1 s each
  ServeClientOptions o = Options(s);
  o.request_timeout_s = 0.1;
  auto run = RunServeBenchmark(requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  for (const RequestRecord& r : run->records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error_type, "timeout");
    EXPECT_LT(r.e2e_s, 0.5);
  }
  // The client closed its connections: the server aborts those requests instead of finishing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (s.srv->num_requests_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.srv->num_requests_in_flight(), 0);
}

TEST(ServeClientTest, WarmupIsNotMeasuredAndDurationBoundsTheSends) {
  TestServer s({.step_delay_us = 1000});
  const auto requests = RandomRequests(s.tokenizer, 6, 8, 4);
  ServeClientOptions o = Options(s);
  o.num_warmup = 3;
  o.max_concurrency = 2;
  o.duration_s = 0.3;
  auto run = RunServeBenchmark(requests, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // Duration mode cycles the dataset: more records than its 6 entries, all sent in time.
  EXPECT_GT(run->records.size(), 6u);
  for (const RequestRecord& r : run->records) {
    EXPECT_TRUE(r.ok) << r.error_message;
    EXPECT_LT(r.start_s, 0.3);
  }
  EXPECT_LE(MaxOverlap(run->records), 2);
}

TEST(ServeClientTest, FetchModelNameAsksTheServer) {
  TestServer s;
  auto name = FetchModelName(s.url(), "");
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_EQ(*name, "fake");
  // A /v1 suffix and a trailing slash are accepted.
  auto again = FetchModelName(s.url() + "/v1/", "");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, "fake");
}

TEST(ServeClientTest, BadOptionsAreRejectedBeforeSending) {
  TestServer s;
  const auto requests = RandomRequests(s.tokenizer, 2, 8, 4);
  auto expect_invalid = [&](ServeClientOptions o, const std::string& needle) {
    auto run = RunServeBenchmark(requests, o);
    ASSERT_FALSE(run.ok()) << needle;
    EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(run.status().message().find(needle), std::string::npos) << run.status().message();
  };
  ServeClientOptions o = Options(s);
  o.base_url = "https://example.com";
  expect_invalid(o, "https is not supported");
  o.base_url = "ftp://x";
  expect_invalid(o, "must start with http://");
  o.base_url = "http://127.0.0.1:99999";
  expect_invalid(o, "not in 1..65535");
  o.base_url = "http://127.0.0.1:8x";
  expect_invalid(o, "not a number");
  o = Options(s);
  o.endpoint = "embeddings";
  expect_invalid(o, "neither completions nor chat");
  o = Options(s);
  o.request_rate = 0;
  expect_invalid(o, "request rate");
  o = Options(s);
  o.duration_s = 1;  // with an infinite rate and no limit
  expect_invalid(o, "needs a max concurrency");
  o = Options(s);
  o.endpoint = "chat";
  std::vector<BenchRequest> ids_only = requests;
  for (BenchRequest& r : ids_only) r.prompt_text.clear();
  auto run = RunServeBenchmark(ids_only, o);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("chat endpoint needs"), std::string::npos);
  EXPECT_FALSE(RunServeBenchmark({}, Options(s)).ok());
}

}  // namespace
}  // namespace kiln::benchmark
