// The HTTP transport end to end: a Server in this process on an ephemeral port, the engine on the
// FakeRunner, and plain blocking sockets (Beast's client side) as clients.
#include "server/server.h"

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <thread>

#include "server/fake_model.h"

namespace kiln::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using Json = nlohmann::json;
using Response = http::response<http::string_body>;

using EngineSetup = testing::FakeModelSetup;
constexpr int32_t kNumKvBlocks = EngineSetup{}.num_kv_blocks;

ServerOptions BaseOptions() {
  ServerOptions o;
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.http.num_io_threads = 2;
  o.version = "test-version";
  return o;
}

struct Harness {
  explicit Harness(ServerOptions options = BaseOptions(), EngineSetup setup = {},
                   bool load = true) {
    auto s = Server::Start(options);
    CHECK(s.ok()) << s.status().ToString();
    server = std::move(*s);
    if (load) Load(setup);
  }
  void Load(const EngineSetup& setup = {}) {
    auto m = testing::MakeFakeServedModel(setup);
    executor = m->executor.get();
    server->SetModel(std::move(m));
  }
  std::unique_ptr<Server> server;
  Executor* executor = nullptr;
};

// A blocking client connection.
class Client {
 public:
  explicit Client(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  void Send(http::verb verb, const std::string& target, const std::string& body = "",
            const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "localhost");
    for (const auto& [k, v] : headers) req.set(k, v);
    if (!body.empty() || verb == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    http::write(socket_, req);
  }
  Response Read() {
    Response res;
    http::read(socket_, buffer_, res);
    return res;
  }
  Response Call(http::verb verb, const std::string& target, const std::string& body = "",
                const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    Send(verb, target, body, headers);
    return Read();
  }
  void WriteRaw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }
  tcp::socket& socket() { return socket_; }
  beast::flat_buffer& buffer() { return buffer_; }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

std::string Completion(int max_tokens, bool stream, std::vector<int> prompt = {1, 5, 6}) {
  return Json{{"model", "fake"},  {"prompt", prompt},   {"max_tokens", max_tokens},
              {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}}
      .dump();
}

// Waits up to 5 s for `done`.
template <class F>
bool Eventually(F done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

bool EngineIdle(Executor* e) {
  ExecutorStats s = e->Stats();
  return s.num_active == 0 && s.num_running == 0 && s.num_waiting == 0 &&
         s.engine.num_free_kv_blocks == s.engine.num_kv_blocks;
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("secret-key", "secret-key"));
  EXPECT_FALSE(ConstantTimeEquals("secret-kez", "secret-key"));
  EXPECT_FALSE(ConstantTimeEquals("secret-ke", "secret-key"));
  EXPECT_FALSE(ConstantTimeEquals("secret-keyy", "secret-key"));
  // A presented key that repeats the expected one is not a match (the modulo index).
  EXPECT_FALSE(ConstantTimeEquals("abab", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", ""));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(ServerTest, StartFailsClearlyOnABadAddressOrABusyPort) {
  ServerOptions o = BaseOptions();
  o.http.host = "localhost:80";
  auto bad = Server::Start(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("localhost:80"), std::string::npos);
  Harness h;
  o.http.host = "127.0.0.1";
  o.http.port = h.server->port();
  auto busy = Server::Start(o);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(busy.status().message().find(std::to_string(o.http.port)), std::string::npos);
}

TEST(ServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  Harness h;
  Client c(h.server->port());
  Response a = c.Call(http::verb::get, "/version");
  EXPECT_EQ(a.result_int(), 200);
  EXPECT_EQ(Json::parse(a.body())["version"], "test-version");
  EXPECT_TRUE(a.keep_alive());
  Response b = c.Call(http::verb::post, "/v1/completions", Completion(4, false));
  ASSERT_EQ(b.result_int(), 200) << b.body();
  Json body = Json::parse(b.body());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  // Pipelined: two requests written at once come back in order.
  c.Send(http::verb::get, "/v1/models");
  c.Send(http::verb::get, "/version");
  Response m = c.Read();
  Response v = c.Read();
  EXPECT_EQ(m.result_int(), 200);
  EXPECT_EQ(Json::parse(m.body())["data"][0]["id"], "fake");
  EXPECT_EQ(Json::parse(v.body())["version"], "test-version");
}

TEST(ServerTest, StreamsServerSentEventsInChunks) {
  Harness h;
  Client c(h.server->port());
  Response r = c.Call(http::verb::post, "/v1/completions", Completion(5, true));
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r[http::field::content_type], "text/event-stream");
  EXPECT_EQ(r[http::field::cache_control], "no-cache");
  EXPECT_TRUE(r.chunked());
  const std::string& text = r.body();
  EXPECT_EQ(text.rfind("data: [DONE]\n\n"), text.size() - 14) << text;
  // The streamed tokens equal the non-streamed completion.
  std::string streamed;
  size_t pos = 0;
  while ((pos = text.find("data: {", pos)) != std::string::npos) {
    const size_t end = text.find("\n\n", pos);
    Json chunk = Json::parse(text.substr(pos + 6, end - pos - 6));
    if (!chunk["choices"].empty()) streamed += chunk["choices"][0]["text"].get<std::string>();
    pos = end;
  }
  Response full = c.Call(http::verb::post, "/v1/completions", Completion(5, false));
  EXPECT_EQ(streamed, Json::parse(full.body())["choices"][0]["text"].get<std::string>());
}

TEST(ServerTest, OversizedBodyIs413) {
  ServerOptions o = BaseOptions();
  o.http.max_request_body_bytes = 1000;
  Harness h(o);
  Client c(h.server->port());
  Response r = c.Call(http::verb::post, "/v1/completions", std::string(2000, ' '));
  EXPECT_EQ(r.result_int(), 413);
  EXPECT_EQ(Json::parse(r.body())["error"]["type"], "invalid_request_error");
  EXPECT_FALSE(r.keep_alive());
  // Under the limit is fine.
  Client d(h.server->port());
  EXPECT_EQ(d.Call(http::verb::post, "/v1/completions", Completion(2, false)).result_int(), 200);
}

TEST(ServerTest, BadJsonAndBadUtf8Are400WithAnOpenAiErrorBody) {
  Harness h;
  Client c(h.server->port());
  Response r = c.Call(http::verb::post, "/v1/completions", "{\"prompt\": ");
  EXPECT_EQ(r.result_int(), 400);
  Json e = Json::parse(r.body())["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_TRUE(e.contains("param") && e.contains("code"));
  Response u = c.Call(http::verb::post, "/v1/completions",
                      "{\"model\": \"fake\", \"prompt\": \"a\xff\xfe\"}");
  EXPECT_EQ(u.result_int(), 400);
  EXPECT_NE(Json::parse(u.body())["error"]["message"].get<std::string>().find("UTF-8"),
            std::string::npos);
  for (const char* bad :
       {"\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xe2\x82\""}) {
    EXPECT_EQ(c.Call(http::verb::post, "/tokenize", bad).result_int(), 400) << bad;
  }
  // Well-formed multi-byte text passes the check (and reaches the api layer).
  EXPECT_NE(c.Call(http::verb::post, "/tokenize",
                   "{\"prompt\": \"h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}")
                .result_int(),
            400);
  Response arr = c.Call(http::verb::post, "/v1/completions", "[1, 2]");
  EXPECT_EQ(arr.result_int(), 400);
  // The connection survives client mistakes.
  EXPECT_EQ(c.Call(http::verb::get, "/health").result_int(), 200);
}

TEST(ServerTest, MalformedHttpIs400) {
  Harness h;
  Client c(h.server->port());
  c.WriteRaw("THIS IS NOT HTTP\r\n\r\n");
  Response r = c.Read();
  EXPECT_EQ(r.result_int(), 400);
}

TEST(ServerTest, UnknownRouteIs404AndWrongMethodIs405) {
  Harness h;
  Client c(h.server->port());
  Response r = c.Call(http::verb::get, "/v1/nothing");
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_EQ(Json::parse(r.body())["error"]["type"], "not_found_error");
  Response m = c.Call(http::verb::get, "/v1/completions");
  EXPECT_EQ(m.result_int(), 405);
  EXPECT_EQ(m[http::field::allow], "POST");
  EXPECT_EQ(c.Call(http::verb::post, "/health").result_int(), 405);
  EXPECT_EQ(c.Call(http::verb::post, "/v2/models/fake/nothing", "{}").result_int(), 404);
}

TEST(ServerTest, ApiKeysGuardTheModelRoutesOnly) {
  ServerOptions o = BaseOptions();
  o.api_keys = {"key-one", "key-two"};
  Harness h(o);
  Client c(h.server->port());
  Response none = c.Call(http::verb::get, "/v1/models");
  EXPECT_EQ(none.result_int(), 401);
  EXPECT_EQ(Json::parse(none.body())["error"]["type"], "authentication_error");
  EXPECT_EQ(
      c.Call(http::verb::get, "/v1/models", "", {{"Authorization", "Bearer key-on"}}).result_int(),
      401);
  EXPECT_EQ(c.Call(http::verb::post, "/tokenize", "{}", {{"Authorization", "Basic key-one"}})
                .result_int(),
            401);
  EXPECT_EQ(
      c.Call(http::verb::get, "/v1/models", "", {{"Authorization", "Bearer key-two"}}).result_int(),
      200);
  EXPECT_EQ(c.Call(http::verb::post, "/v1/completions", Completion(2, false),
                   {{"Authorization", "Bearer key-one"}})
                .result_int(),
            200);
  EXPECT_EQ(c.Call(http::verb::post, "/v2/models/fake/generate", "{}").result_int(), 401);
  // Not guarded: probes and scrapers.
  EXPECT_EQ(c.Call(http::verb::get, "/health").result_int(), 200);
  EXPECT_EQ(c.Call(http::verb::get, "/metrics").result_int(), 200);
  EXPECT_EQ(c.Call(http::verb::get, "/version").result_int(), 200);
}

TEST(ServerTest, HealthIs503UntilTheModelIsLoaded) {
  Harness h(BaseOptions(), {}, /*load=*/false);
  Client c(h.server->port());
  Response r = c.Call(http::verb::get, "/health");
  EXPECT_EQ(r.result_int(), 503);
  EXPECT_FALSE(r[http::field::retry_after].empty());
  EXPECT_EQ(c.Call(http::verb::post, "/v1/completions", Completion(2, false)).result_int(), 503);
  h.Load();
  EXPECT_EQ(c.Call(http::verb::get, "/health").result_int(), 200);
  EXPECT_EQ(c.Call(http::verb::post, "/v1/completions", Completion(2, false)).result_int(), 200);
}

TEST(ServerTest, OverTheWaitingLimitIs429WithRetryAfter) {
  ServerOptions o = BaseOptions();
  o.max_num_waiting = 1;
  o.retry_after_s = 3;
  // One running at a time, slow steps: the second request waits, the third is refused.
  Harness h(o, {.step_delay_us = 2000, .max_num_seqs = 1});
  Client a(h.server->port()), b(h.server->port()), c(h.server->port());
  a.Send(http::verb::post, "/v1/completions", Completion(200, false));
  ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_running == 1; }));
  b.Send(http::verb::post, "/v1/completions", Completion(3, false));
  ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_waiting == 1; }));
  Response r = c.Call(http::verb::post, "/v1/completions", Completion(3, false));
  EXPECT_EQ(r.result_int(), 429);
  EXPECT_EQ(r[http::field::retry_after], "3");
  EXPECT_EQ(Json::parse(r.body())["error"]["type"], "rate_limit_error");
  // The accepted ones are served.
  EXPECT_EQ(a.Read().result_int(), 200);
  EXPECT_EQ(b.Read().result_int(), 200);
}

TEST(ServerTest, DisconnectMidStreamAbortsAndFreesTheKvBlocks) {
  Harness h(BaseOptions(), {.step_delay_us = 1000});
  {
    Client c(h.server->port());
    c.Send(http::verb::post, "/v1/completions", Completion(2000, true));
    http::response_parser<http::empty_body> parser;
    http::read_header(c.socket(), c.buffer(), parser);
    EXPECT_EQ(parser.get().result_int(), 200);
    ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_running == 1; }));
    EXPECT_LT(h.executor->Stats().engine.num_free_kv_blocks, kNumKvBlocks);
  }  // the client hangs up
  EXPECT_TRUE(Eventually([&] { return EngineIdle(h.executor); }));
  EXPECT_TRUE(Eventually([&] { return h.server->num_requests_in_flight() == 0; }));
}

TEST(ServerTest, AClientThatStopsReadingIsCutOffAndAborted) {
  ServerOptions o = BaseOptions();
  o.http.write_timeout_s = 1;
  // 16 streams of 2,000 tokens with logprobs: ~20 MB of SSE over >= 2 s of engine time, far more
  // than the socket buffers hold, so the writes stall long before the engine is done.
  Harness h(o, {.step_delay_us = 1000, .num_kv_blocks = 9000});
  Client c(h.server->port());
  c.socket().set_option(net::socket_base::receive_buffer_size(4096));
  Json req = {{"model", "fake"}, {"prompt", {1, 5, 6}}, {"max_tokens", 2000}, {"n", 16},
              {"stream", true},  {"logprobs", 5},       {"ignore_eos", true}};
  c.Send(http::verb::post, "/v1/completions", req.dump());
  ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_running == 16; }));
  // Never read: the server's writes stall, time out, and the requests are aborted.
  EXPECT_TRUE(Eventually([&] { return EngineIdle(h.executor); }));
  EXPECT_TRUE(Eventually([&] { return h.server->num_requests_in_flight() == 0; }));
  Client m(h.server->port());
  const std::string metrics = m.Call(http::verb::get, "/metrics").body();
  EXPECT_NE(
      metrics.find("kiln:request_success_total{finished_reason=\"abort\",model_name=\"fake\"} 16"),
      std::string::npos)
      << metrics;
}

TEST(ServerTest, DisconnectWhileWaitingForAWholeResponseAborts) {
  Harness h(BaseOptions(), {.step_delay_us = 1000});
  {
    Client c(h.server->port());
    c.Send(http::verb::post, "/v1/completions", Completion(2000, false));
    ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_running == 1; }));
  }
  EXPECT_TRUE(Eventually([&] { return EngineIdle(h.executor); }));
  EXPECT_TRUE(Eventually([&] { return h.server->num_requests_in_flight() == 0; }));
  Client c(h.server->port());
  Response m = c.Call(http::verb::get, "/metrics");
  EXPECT_NE(
      m.body().find("kiln:request_success_total{finished_reason=\"abort\",model_name=\"fake\"} 1"),
      std::string::npos)
      << m.body();
}

TEST(ServerTest, ShutdownLetsRequestsInFlightFinish) {
  Harness h(BaseOptions(), {.step_delay_us = 2000});
  Client c(h.server->port());
  c.Send(http::verb::post, "/v1/completions", Completion(100, true));
  ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_running == 1; }));
  std::thread stopper([&] { h.server->Shutdown(); });
  Response r = c.Read();
  stopper.join();
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_NE(r.body().find("\"finish_reason\":\"length\""), std::string::npos) << r.body();
  EXPECT_NE(r.body().find("data: [DONE]"), std::string::npos);
  // No new connections.
  EXPECT_THROW(Client late(h.server->port()), boost::system::system_error);
}

TEST(ServerTest, ShutdownAbortsWhatOutlastsTheTimeout) {
  ServerOptions o = BaseOptions();
  o.shutdown_timeout_s = 0.2;
  Harness h(o, {.step_delay_us = 2000});
  Client c(h.server->port());
  c.Send(http::verb::post, "/v1/completions", Completion(2000, false));
  ASSERT_TRUE(Eventually([&] { return h.executor->Stats().num_running == 1; }));
  const auto start = std::chrono::steady_clock::now();
  std::thread stopper([&] { h.server->Shutdown(); });
  Response r = c.Read();
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(r.result_int(), 200);
  // Cut short (the api layer reports an abort as "length": OpenAI has no name for it).
  EXPECT_LT(Json::parse(r.body())["usage"]["completion_tokens"].get<int>(), 2000);
}

TEST(ServerTest, MetricsReportEngineCountersAndLatencies) {
  Harness h;
  Client c(h.server->port());
  ASSERT_EQ(c.Call(http::verb::post, "/v1/completions", Completion(6, false)).result_int(), 200);
  ASSERT_TRUE(Eventually([&] { return EngineIdle(h.executor); }));
  Response m = c.Call(http::verb::get, "/metrics");
  ASSERT_EQ(m.result_int(), 200);
  const std::string& t = m.body();
  for (const char* line : {
           "kiln:num_requests_running{model_name=\"fake\"} 0",
           "kiln:num_requests_waiting{model_name=\"fake\"} 0",
           "kiln:kv_cache_usage_perc{model_name=\"fake\"} 0",
           "kiln:generation_tokens_total{model_name=\"fake\"} 6",
           "kiln:prompt_tokens_total{model_name=\"fake\"} 3",
           "kiln:request_success_total{finished_reason=\"length\",model_name=\"fake\"} 1",
           "kiln:time_to_first_token_seconds_count{model_name=\"fake\"} 1",
           "kiln:inter_token_latency_seconds_count{model_name=\"fake\"} 5",
           "kiln:e2e_request_latency_seconds_count{model_name=\"fake\"} 1",
           "kiln:request_queue_time_seconds_count{model_name=\"fake\"} 1",
           "kiln:num_preemptions_total{model_name=\"fake\"} 0",
           "kiln:prefix_cache_queries_total{model_name=\"fake\"}",
           "kiln:prefix_cache_hits_total{model_name=\"fake\"}",
       }) {
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  }
}

TEST(ServerTest, SeveralChoicesShareOneResponse) {
  Harness h;
  Client c(h.server->port());
  Json req = {{"model", "fake"}, {"prompt", {{1, 5, 6}, {1, 7, 8}}},
              {"max_tokens", 3}, {"n", 2},
              {"seed", 7},       {"ignore_eos", true}};
  Response r = c.Call(http::verb::post, "/v1/completions", req.dump());
  ASSERT_EQ(r.result_int(), 200) << r.body();
  Json body = Json::parse(r.body());
  EXPECT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  EXPECT_TRUE(Eventually([&] { return EngineIdle(h.executor); }));
}

}  // namespace
}  // namespace kiln::server
