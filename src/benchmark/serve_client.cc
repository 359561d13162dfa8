#include "benchmark/serve_client.h"

#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>
#include <string_view>
#include <utility>

namespace kiln::benchmark {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// Every awaited operation hands back (error_code, ...) instead of throwing.
constexpr auto kAwait = net::as_tuple(net::use_awaitable);

// base_url, split.
struct Endpoint {
  std::string host;
  std::string port;
  std::string path_prefix;  // "" or "/prefix" (no trailing slash, no /v1)
  std::string host_header;
};

Result<Endpoint> ParseBaseUrl(std::string_view url) {
  const std::string quoted = "base URL '" + std::string(url) + "'";
  if (url.starts_with("https://")) {
    return InvalidArgument(quoted +
                           ": https is not supported; benchmark the server's plain http port "
                           "(or put a local TLS proxy in front of it)");
  }
  if (!url.starts_with("http://")) return InvalidArgument(quoted + ": must start with http://");
  url.remove_prefix(7);
  const size_t slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  Endpoint e;
  e.host_header = std::string(authority);
  if (slash != std::string_view::npos) e.path_prefix = std::string(url.substr(slash));
  while (!e.path_prefix.empty() && e.path_prefix.back() == '/') e.path_prefix.pop_back();
  if (e.path_prefix.ends_with("/v1")) e.path_prefix.resize(e.path_prefix.size() - 3);
  std::string_view host = authority, port = "80";
  if (authority.starts_with('[')) {  // [ipv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument(quoted + ": unclosed '['");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return InvalidArgument(quoted + ": bad port");
      port = authority.substr(close + 2);
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return InvalidArgument(quoted + ": no host");
  int64_t port_number = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || port_number > 65535) {
      return InvalidArgument(quoted + ": port '" + std::string(port) + "' is not a number");
    }
    port_number = port_number * 10 + (c - '0');
  }
  if (port.empty() || port_number < 1 || port_number > 65535) {
    return InvalidArgument(quoted + ": port '" + std::string(port) + "' is not in 1..65535");
  }
  e.host = std::string(host);
  e.port = std::string(port);
  return e;
}

Result<tcp::resolver::results_type> Resolve(net::io_context& ioc, const Endpoint& e) {
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto results = resolver.resolve(e.host, e.port, ec);
  if (ec) return Unavailable("cannot resolve '" + e.host + "': " + ec.message());
  return results;
}

// The request body of `r`, as ServeClientOptions' header describes.
std::string RequestBody(const BenchRequest& r, const ServeClientOptions& o) {
  Json body = {{"model", o.model},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0.0}};
  if (o.endpoint == "chat") {
    Json messages = Json::array();
    const size_t split = std::min<size_t>(r.prefix_text_len, r.prompt_text.size());
    if (split > 0) {
      messages.push_back({{"role", "system"}, {"content", r.prompt_text.substr(0, split)}});
    }
    messages.push_back({{"role", "user"}, {"content", r.prompt_text.substr(split)}});
    body["messages"] = std::move(messages);
    body["max_completion_tokens"] = r.output_len;
  } else {
    if (r.prompt_ids.empty()) {
      body["prompt"] = r.prompt_text;
    } else {
      body["prompt"] = r.prompt_ids;
    }
    body["max_tokens"] = r.output_len;
  }
  if (o.ignore_eos) body["ignore_eos"] = true;
  for (const auto& [key, value] : o.extra_body.items()) body[key] = value;
  // Text decoded from random token ids may split a UTF-8 sequence: send U+FFFD for it.
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void Fail(RequestRecord* rec, std::string type, std::string message) {
  rec->ok = false;
  rec->error_type = std::move(type);
  rec->error_message = std::move(message);
}

// Reads a server-sent event stream of OpenAI chunks, timing the output-carrying ones.
class SseReader {
 public:
  SseReader(bool is_chat, RequestRecord* rec) : is_chat_(is_chat), rec_(rec) {}

  // Feeds bytes that arrived `now_s` seconds after the send.
  void Feed(std::string_view bytes, double now_s) {
    pending_.append(bytes);
    for (;;) {
      const size_t lf = pending_.find("\n\n");
      const size_t crlf = pending_.find("\r\n\r\n");
      const size_t end = std::min(lf, crlf);
      if (end == std::string::npos) return;
      const size_t sep = end == lf ? 2 : 4;
      HandleEvent(std::string_view(pending_).substr(0, end), now_s);
      pending_.erase(0, end + sep);
    }
  }

  bool done() const { return done_; }
  int32_t num_output_chunks() const { return num_output_chunks_; }
  int32_t usage_completion_tokens() const { return usage_completion_tokens_; }
  int32_t usage_prompt_tokens() const { return usage_prompt_tokens_; }
  const std::string& error() const { return error_; }

 private:
  void HandleEvent(std::string_view event, double now_s) {
    std::string data;
    while (!event.empty()) {
      const size_t nl = event.find('\n');
      std::string_view line = event.substr(0, nl);
      event = nl == std::string_view::npos ? std::string_view() : event.substr(nl + 1);
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (!line.starts_with("data:")) continue;  // comments, event:, id:, retry:
      line.remove_prefix(5);
      if (line.starts_with(' ')) line.remove_prefix(1);
      if (!data.empty()) data += '\n';
      data.append(line);
    }
    if (data.empty()) return;
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    const Json chunk = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded() || !chunk.is_object()) {
      if (error_.empty()) error_ = "a stream chunk is not a JSON object: " + data.substr(0, 200);
      return;
    }
    if (const auto it = chunk.find("error"); it != chunk.end() && !it->is_null()) {
      if (error_.empty()) {
        error_ = it->is_object() && it->contains("message") && (*it)["message"].is_string()
                     ? (*it)["message"].get<std::string>()
                     : it->dump();
      }
      return;
    }
    if (const auto it = chunk.find("usage"); it != chunk.end() && it->is_object()) {
      const Json& usage = *it;
      if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
        usage_completion_tokens_ = usage["completion_tokens"].get<int32_t>();
      }
      if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer()) {
        usage_prompt_tokens_ = usage["prompt_tokens"].get<int32_t>();
      }
    }
    if (OutputText(chunk).empty()) return;
    if (num_output_chunks_ == 0) {
      rec_->ttft_s = now_s;
    } else {
      rec_->itl_s.push_back(now_s - last_output_s_);
    }
    last_output_s_ = now_s;
    ++num_output_chunks_;
  }

  // The text a chunk carries: choices[0].text, or choices[0].delta.content (or
  // reasoning_content) for chat.
  std::string_view OutputText(const Json& chunk) const {
    const auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return {};
    const Json& choice = (*choices)[0];
    if (!choice.is_object()) return {};
    const Json* holder = &choice;
    if (is_chat_) {
      const auto delta = choice.find("delta");
      if (delta == choice.end() || !delta->is_object()) return {};
      holder = &*delta;
    }
    for (const char* key : {is_chat_ ? "content" : "text", "reasoning_content"}) {
      const auto it = holder->find(key);
      if (it != holder->end() && it->is_string() && !it->get_ref<const std::string&>().empty()) {
        return it->get_ref<const std::string&>();
      }
    }
    return {};
  }

  bool is_chat_;
  RequestRecord* rec_;
  std::string pending_;
  bool done_ = false;
  int32_t num_output_chunks_ = 0;
  double last_output_s_ = 0;
  int32_t usage_completion_tokens_ = -1;
  int32_t usage_prompt_tokens_ = -1;
  std::string error_;
};

// The message of an OpenAI-style error body, else the body's start.
std::string ErrorMessage(const std::string& body) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    if (e.is_string()) return e.get<std::string>();
  }
  return body.substr(0, 300);
}

// The state of one run, shared by its coroutines (all on one thread).
struct Run {
  Run(net::io_context& ioc, const Endpoint& endpoint, tcp::resolver::results_type addresses,
      const ServeClientOptions& options)
      : ioc(ioc),
        endpoint(endpoint),
        addresses(std::move(addresses)),
        options(options),
        wake(ioc) {}
  net::io_context& ioc;
  const Endpoint& endpoint;
  tcp::resolver::results_type addresses;
  const ServeClientOptions& options;
  std::string target;
  Clock::time_point start;
  int32_t num_in_flight = 0;
  int32_t num_sent = 0;
  int32_t num_done = 0;
  int64_t num_output_tokens = 0;
  bool finished = false;
  net::steady_timer wake;  // cancelled whenever a request ends
};

net::awaitable<void> SendOne(Run& run, const std::string& body, RequestRecord* rec) {
  const ServeClientOptions& o = run.options;
  beast::tcp_stream stream(co_await net::this_coro::executor);
  const Clock::time_point t0 = Clock::now();
  rec->start_s = SecondsBetween(run.start, t0);
  stream.expires_at(t0 + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(o.request_timeout_s)));
  auto fail_io = [&](const beast::error_code& ec, const char* what) {
    rec->e2e_s = SecondsBetween(t0, Clock::now());
    Fail(rec, ec == beast::error::timeout ? "timeout" : what, ec.message());
  };
  if (auto [ec, unused] = co_await stream.async_connect(run.addresses, kAwait); ec) {
    fail_io(ec, "connect");
    co_return;
  }
  http::request<http::string_body> req{http::verb::post, run.target, 11};
  req.set(http::field::host, run.endpoint.host_header);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.set(http::field::user_agent, "kiln-bench");
  if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
  req.body() = body;
  req.prepare_payload();
  if (auto [ec, n] = co_await http::async_write(stream, req, kAwait); ec) {
    fail_io(ec, "write");
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  if (auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, kAwait); ec) {
    fail_io(ec, "read");
    co_return;
  }
  const unsigned status = parser.get().result_int();
  SseReader sse(o.endpoint == "chat", rec);
  std::string error_body;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    auto [ec, n] = co_await http::async_read_some(stream, buffer, parser, kAwait);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      fail_io(ec, "read");
      co_return;
    }
    const size_t got = sizeof chunk - parser.get().body().size;
    const double now_s = SecondsBetween(t0, Clock::now());
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(chunk, got);
    } else {
      sse.Feed(std::string_view(chunk, got), now_s);
    }
  }
  rec->e2e_s = SecondsBetween(t0, Clock::now());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (status != 200) {
    Fail(rec, "http " + std::to_string(status), ErrorMessage(error_body));
    co_return;
  }
  if (!sse.error().empty()) {
    Fail(rec, "stream error", sse.error());
    co_return;
  }
  if (sse.num_output_chunks() == 0) {
    Fail(rec, "bad response", "the stream carried no output text");
    co_return;
  }
  rec->ok = true;
  rec->output_tokens =
      sse.usage_completion_tokens() >= 0 ? sse.usage_completion_tokens() : sse.num_output_chunks();
  if (sse.usage_prompt_tokens() >= 0) rec->input_tokens = sse.usage_prompt_tokens();
  run.num_output_tokens += rec->output_tokens;
}

// Waits until some request ends (or a spurious wake-up): callers re-check their condition.
net::awaitable<void> WaitForARequestToEnd(Run& run) {
  run.wake.expires_at(Clock::time_point::max());
  co_await run.wake.async_wait(kAwait);
}

// Sends requests in arrival order until `count` are sent (count mode) or `duration_s` has passed
// (duration mode, count = 0), within max_concurrency, then waits for all to end.
net::awaitable<void> Dispatch(Run& run, const std::vector<std::string>& bodies,
                              const std::vector<BenchRequest>& requests,
                              const std::vector<double>& arrivals, int32_t count, double duration_s,
                              int32_t max_concurrency, std::deque<RequestRecord>* records) {
  net::steady_timer timer(run.ioc);
  for (size_t i = 0;; ++i) {
    if (count > 0 && i == static_cast<size_t>(count)) break;
    // An infinite rate has one arrival time (0) for every request.
    const bool all_at_once = std::isinf(run.options.request_rate);
    if (count == 0 && !all_at_once && i >= arrivals.size()) break;
    const double arrival = arrivals[std::min(i, arrivals.size() - 1)];
    if (count == 0 && arrival >= duration_s) break;
    timer.expires_at(run.start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(arrival)));
    co_await timer.async_wait(kAwait);
    while (max_concurrency > 0 && run.num_in_flight >= max_concurrency) {
      co_await WaitForARequestToEnd(run);
    }
    if (count == 0 && SecondsBetween(run.start, Clock::now()) >= duration_s) break;
    const size_t k = i % requests.size();
    RequestRecord& rec = records->emplace_back();  // a deque: earlier records stay in place
    rec.input_tokens = requests[k].input_len;
    ++run.num_in_flight;
    ++run.num_sent;
    net::co_spawn(run.ioc, SendOne(run, bodies[k], &rec), [&run, &rec](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          Fail(&rec, "internal", ex.what());
        }
      }
      --run.num_in_flight;
      ++run.num_done;
      run.wake.cancel();
    });
  }
  while (run.num_in_flight > 0) co_await WaitForARequestToEnd(run);
  run.finished = true;
}

// Redraws the progress bar every half second until the run finishes.
net::awaitable<void> ShowProgress(Run& run, int32_t total, double duration_s) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  net::steady_timer timer(run.ioc);
  int last_decile = -1;
  auto draw = [&](bool final_line) {
    const double elapsed = SecondsBetween(run.start, Clock::now());
    const double fraction =
        total > 0 ? static_cast<double>(run.num_done) / total : std::min(1.0, elapsed / duration_s);
    const int decile = static_cast<int>(fraction * 10);
    if (!tty && !final_line && decile == last_decile) return;
    last_decile = decile;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stderr, "%s[%s] %d/%s done, %d in flight, %.1f s, %.0f out tok/s%s",
                 tty ? "\r" : "", bar.c_str(), run.num_done,
                 total > 0 ? std::to_string(total).c_str() : "?", run.num_in_flight, elapsed,
                 elapsed > 0 ? run.num_output_tokens / elapsed : 0.0,
                 tty && !final_line ? "   " : "\n");
    std::fflush(stderr);
  };
  while (!run.finished) {
    draw(false);
    timer.expires_after(std::chrono::milliseconds(500));
    co_await timer.async_wait(kAwait);
  }
  draw(true);
}

Status Validate(const std::vector<BenchRequest>& requests, const ServeClientOptions& o) {
  if (requests.empty()) return InvalidArgument("the dataset has no requests");
  if (o.endpoint != "completions" && o.endpoint != "chat") {
    return InvalidArgument("endpoint '" + o.endpoint + "' is neither completions nor chat");
  }
  if (!(o.request_rate > 0)) return InvalidArgument("the request rate must be > 0 (or inf)");
  if (!(o.burstiness > 0) || std::isinf(o.burstiness)) {
    return InvalidArgument("burstiness must be a finite number > 0");
  }
  if (o.max_concurrency < 0) return InvalidArgument("max concurrency must be >= 0");
  if (o.num_warmup < 0) return InvalidArgument("the warm-up count must be >= 0");
  if (o.duration_s < 0 || std::isinf(o.duration_s)) {
    return InvalidArgument("the duration must be a finite number of seconds >= 0");
  }
  if (o.duration_s > 0 && std::isinf(o.request_rate) && o.max_concurrency == 0) {
    return InvalidArgument(
        "a duration with an infinite request rate needs a max concurrency (else every request "
        "would be sent at once)");
  }
  if (!(o.request_timeout_s > 0)) return InvalidArgument("the request timeout must be > 0");
  if (!o.extra_body.is_object()) return InvalidArgument("the extra body must be a JSON object");
  if (o.endpoint == "chat") {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].prompt_text.empty()) {
        return InvalidArgument("request " + std::to_string(i) +
                               " has no prompt text, which the chat endpoint needs (give a "
                               "tokenizer to decode token-id prompts)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ServeRun> RunServeBenchmark(const std::vector<BenchRequest>& requests,
                                   const ServeClientOptions& options) {
  KILN_RETURN_IF_ERROR(Validate(requests, options));
  KILN_ASSIGN_OR_RETURN(Endpoint endpoint, ParseBaseUrl(options.base_url));
  net::io_context ioc(1);
  KILN_ASSIGN_OR_RETURN(tcp::resolver::results_type addresses, Resolve(ioc, endpoint));
  std::vector<std::string> bodies;
  bodies.reserve(requests.size());
  for (const BenchRequest& r : requests) bodies.push_back(RequestBody(r, options));

  Run run(ioc, endpoint, addresses, options);
  run.target = endpoint.path_prefix +
               (options.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions");
  const int32_t n = static_cast<int32_t>(requests.size());

  if (options.num_warmup > 0) {
    std::vector<BenchRequest> variants;
    for (int32_t i = 0; i < options.num_warmup; ++i) {
      variants.push_back(WarmupVariant(requests[i % requests.size()]));
    }
    std::vector<std::string> warmup_bodies;
    for (const BenchRequest& r : variants) warmup_bodies.push_back(RequestBody(r, options));
    std::deque<RequestRecord> warmup;
    run.start = Clock::now();
    net::co_spawn(ioc,
                  Dispatch(run, warmup_bodies, variants, {0.0}, options.num_warmup, 0,
                           options.max_concurrency, &warmup),
                  [](std::exception_ptr e) {
                    if (e) std::rethrow_exception(e);
                  });
    ioc.run();
    ioc.restart();
    int32_t failed = 0;
    for (const RequestRecord& r : warmup) failed += r.ok ? 0 : 1;
    if (failed == options.num_warmup) {
      const RequestRecord& r = warmup.front();
      return Unavailable("every warm-up request failed; the first with " + r.error_type + ": " +
                         r.error_message);
    }
  }

  // Arrival times: one per request (count mode), or enough for the duration (the dispatcher
  // stops at the duration's end).
  int32_t num_arrivals = n;
  if (options.duration_s > 0) {
    num_arrivals = std::isinf(options.request_rate)
                       ? 1
                       : static_cast<int32_t>(std::min<double>(
                             options.request_rate * options.duration_s * 2 + 1000, 1e7));
  }
  const std::vector<double> arrivals =
      ArrivalTimes(num_arrivals, options.request_rate, options.burstiness, options.seed);
  std::deque<RequestRecord> records;
  run.num_in_flight = run.num_sent = run.num_done = 0;
  run.num_output_tokens = 0;
  run.finished = false;
  run.start = Clock::now();
  const int32_t count = options.duration_s > 0 ? 0 : n;
  net::co_spawn(ioc,
                Dispatch(run, bodies, requests, arrivals, count, options.duration_s,
                         options.max_concurrency, &records),
                [](std::exception_ptr e) {
                  if (e) std::rethrow_exception(e);
                });
  if (options.show_progress) {
    net::co_spawn(ioc, ShowProgress(run, count, options.duration_s), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
  }
  ioc.run();
  ServeRun result;
  result.records.assign(std::make_move_iterator(records.begin()),
                        std::make_move_iterator(records.end()));
  double end_s = 0;
  for (const RequestRecord& r : result.records) end_s = std::max(end_s, r.start_s + r.e2e_s);
  result.duration_s = end_s;
  return result;
}

Result<std::string> FetchModelName(const std::string& base_url, const std::string& api_key,
                                   double timeout_s) {
  KILN_ASSIGN_OR_RETURN(Endpoint endpoint, ParseBaseUrl(base_url));
  net::io_context ioc(1);
  KILN_ASSIGN_OR_RETURN(tcp::resolver::results_type addresses, Resolve(ioc, endpoint));
  const std::string url = "http://" + endpoint.host_header + endpoint.path_prefix + "/v1/models";
  beast::tcp_stream stream(ioc);
  stream.expires_after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  beast::error_code ec;
  stream.connect(addresses, ec);
  if (ec) return Unavailable("cannot connect to " + url + ": " + ec.message());
  http::request<http::empty_body> req{http::verb::get, endpoint.path_prefix + "/v1/models", 11};
  req.set(http::field::host, endpoint.host_header);
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) return Unavailable("GET " + url + " failed: " + ec.message());
  if (res.result_int() != 200) {
    return Unavailable("GET " + url + " answered " + std::to_string(res.result_int()) + ": " +
                       ErrorMessage(res.body()));
  }
  const Json j = Json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    return j["data"][0]["id"].get<std::string>();
  }
  return InvalidArgument("GET " + url + " lists no model (give --model)");
}

}  // namespace kiln::benchmark
