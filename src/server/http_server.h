// HttpServer: an asynchronous HTTP/1.1 server on Boost.Beast/Asio. It owns the sockets and the
// I/O threads; what to answer is the Handler's business (server.cc routes it).
//
//   auto http = HttpServer::Start(options, [](std::shared_ptr<HttpExchange> ex) {
//     ex->Respond(http::status::ok, "{}", "application/json");   // or, streaming:
//     ex->BeginStream("text/event-stream"); ex->Write("data: ...\n\n"); ex->EndStream();
//   });
//
// One connection serves its requests one at a time, in order (keep-alive and pipelining: bytes
// of the next request wait in the connection's buffer until the current response is written).
// While a response is pending the connection keeps a read outstanding on the socket, so a client
// that goes away is seen at once (HttpExchange::SetOnClose), streaming or not.
//
// Threading: N threads run one io_context; every connection has its own strand. The handler and
// every HttpExchange method run on the exchange's strand; other threads reach it with Post().
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using Headers = std::vector<std::pair<std::string, std::string>>;

class Connection;

// One request and its response. Created by the server for each request read; the handler (and
// whatever it passes the exchange to) keeps it alive as long as it may still answer.
// REQUIRES: every method but Post() and executor() runs on executor() (the connection's strand).
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  HttpExchange(std::shared_ptr<Connection> connection, HttpRequest request);
  ~HttpExchange();

  const HttpRequest& request() const { return request_; }
  boost::asio::any_io_executor executor() const;
  // Runs `fn` on the strand (from any thread).
  void Post(std::function<void()> fn);

  // A whole response (Content-Length). At most one of Respond / BeginStream per exchange.
  void Respond(http::status status, std::string body, std::string_view content_type,
               const Headers& headers = {});
  // A chunked response: each Write() goes out as one chunk as soon as the socket takes it.
  void BeginStream(std::string_view content_type, const Headers& headers = {});
  void Write(std::string data);
  void EndStream();

  // True once the client has gone (or the connection failed); writes are then dropped.
  bool is_closed() const { return closed_; }
  // True once Respond or EndStream was called.
  bool is_finished() const { return finished_; }
  // Called once, on the strand, when the client disconnects before the response is complete.
  void SetOnClose(std::function<void()> on_close) { on_close_ = std::move(on_close); }

 private:
  friend class Connection;
  void Close();  // from the connection: the client went away

  std::shared_ptr<Connection> connection_;
  HttpRequest request_;
  std::function<void()> on_close_;
  bool chunked_ = false;   // a stream in chunked encoding (HTTP/1.1)
  bool started_ = false;   // Respond or BeginStream called
  bool finished_ = false;  // Respond or EndStream called
  bool closed_ = false;
};

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;  // 0 = an ephemeral port (tests); see HttpServer::port()
  // Threads running the io_context. Parsing and JSON rendering run on them, so a few suffice
  // for thousands of streams; more help only when many requests arrive at once.
  int32_t num_io_threads = 4;
  // Bodies larger than this are answered 413 and the connection closed.
  int64_t max_request_body_bytes = int64_t{8} << 20;
  // An idle keep-alive connection (or one that is slow to send its request) is closed after it.
  int32_t keep_alive_timeout_s = 60;
  // Renders the body of the errors the transport answers by itself (413, 431, malformed HTTP,
  // a handler that threw); empty = "<status> <message>" as text.
  std::function<std::string(int status, std::string_view message)> render_error;
  std::string error_content_type = "text/plain";
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;

  // Binds host:port, starts accepting and starts the I/O threads. Errors: kInvalidArgument for
  // an address that does not parse or options out of range; kUnavailable when the port cannot
  // be bound (in use, no permission), naming the address.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   Handler handler);
  ~HttpServer();  // Stop()

  uint16_t port() const { return port_; }
  // Closes the listening socket; later responses close their connections (Connection: close).
  // Thread-safe, idempotent.
  void StopAccepting();
  bool is_stopping() const { return stopping_; }
  // Requests read whose response has not been fully written (nor the client gone).
  int64_t num_active_exchanges() const { return num_active_exchanges_; }
  // Stops the I/O threads and joins them; connections still open are dropped without their
  // on_close callbacks. Thread-safe, idempotent; not from an I/O thread.
  void Stop();

  boost::asio::io_context& io_context() { return ioc_; }

 private:
  friend class Connection;
  friend class HttpExchange;
  explicit HttpServer(const HttpServerOptions& options, Handler handler);
  void DoAccept();

  HttpServerOptions options_;
  Handler handler_;
  boost::asio::io_context ioc_;
  struct Acceptor;
  std::unique_ptr<Acceptor> acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> num_active_exchanges_{0};
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
};

// Compares a presented secret with an expected one in time that depends only on the presented
// length (no early exit on the first differing byte), so response timing does not reveal how
// much of a guess was right.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

}  // namespace kiln::server
