#include "server/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <chrono>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "core/logging.h"

namespace kiln::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

// While a response is pending the connection reads ahead (to see a disconnect); past this many
// buffered bytes (a client pipelining a lot) it stops, and only a failed write shows a hang-up.
constexpr size_t kMaxReadAheadBytes = size_t{1} << 20;
constexpr size_t kReadAheadChunk = 4096;
// After an error response that leaves request bytes unread, how long the connection drains
// them before closing (closing with unread input sends a reset that can destroy the response).
constexpr auto kLingerTime = std::chrono::seconds(2);

std::string PlainError(int status, std::string_view message) {
  return std::to_string(status) + " " + std::string(message) + "\n";
}

}  // namespace

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  // NOTE: runs over every presented byte whatever the contents; a length mismatch is folded in
  // rather than returned early. The expected key is indexed modulo its length so that the loop
  // never reads out of bounds (and an empty expected key matches nothing but an empty one).
  size_t diff = presented.size() ^ expected.size();
  if (expected.empty()) return presented.empty();
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i]) ^
            static_cast<unsigned char>(expected[i % expected.size()]);
  }
  return diff == 0;
}

// One TCP connection: reads requests one at a time, writes their responses in order.
//
// State, all on the strand: at most one read outstanding (a request read, or the read-ahead that
// watches for a hang-up while a response is pending) and at most one write (queued byte strings
// gathered into one write).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer* server, tcp::socket socket)
      : server_(server), stream_(std::move(socket)) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
  }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // Called by the current exchange, on the strand.
  void Send(std::string bytes) {
    if (closed_ || bytes.empty()) return;
    pending_.push_back(std::move(bytes));
    if (!writing_) DoWrite();
  }
  // The current response's last bytes are queued; `close` when the connection ends with it.
  void EndResponse(bool close) {
    close_after_response_ |= close;
    response_complete_ = true;
    if (!writing_ && pending_.empty()) FinishResponse();
  }
  bool is_stopping() const { return server_->stopping_; }

 private:
  void ReadRequest() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(server_->options_.max_request_body_bytes));
    stream_.expires_after(std::chrono::seconds(server_->options_.keep_alive_timeout_s));
    reading_ = true;
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Connection::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code ec, size_t) {
    reading_ = false;
    if (closed_) return;
    if (ec) return OnReadError(ec);
    const auto& header = parser_->get();
    if (beast::iequals(header[http::field::expect], "100-continue") && !parser_->is_done()) {
      // curl waits a second for this before sending a body over 1 KiB.
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      writing_ = true;
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->writing_ = false;
                         if (self->closed_) return;
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    reading_ = true;
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Connection::OnRequest, shared_from_this()));
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return SendError(http::status::payload_too_large,
                       "the request body is larger than the server's limit of " +
                           std::to_string(server_->options_.max_request_body_bytes) +
                           " bytes (--max-request-body-bytes)");
    }
    if (ec == http::error::header_limit) {
      return SendError(http::status::request_header_fields_too_large,
                       "the request headers are too large");
    }
    if (ec.category() == make_error_code(http::error::end_of_stream).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return SendError(http::status::bad_request, "malformed HTTP request: " + ec.message());
    }
    Close();  // end of stream, timeout, reset
  }

  void OnRequest(beast::error_code ec, size_t) {
    reading_ = false;
    if (closed_) return;
    if (ec) return OnReadError(ec);
    stream_.expires_never();
    HttpRequest request = parser_->release();
    close_after_response_ = !request.keep_alive();
    response_complete_ = false;
    exchange_ = std::make_shared<HttpExchange>(shared_from_this(), std::move(request));
    ++server_->num_active_exchanges_;
    std::shared_ptr<HttpExchange> exchange = exchange_;
    try {
      server_->handler_(exchange);
    } catch (const std::exception& e) {
      LOG(ERROR) << "http: handler threw: " << e.what();
      if (!exchange->started_) {
        exchange->Respond(http::status::internal_server_error,
                          server_->options_.render_error(500, "internal error"),
                          server_->options_.error_content_type);
      }
    }
    if (exchange_ == exchange && !response_complete_) ReadAhead();
  }

  // Keeps a read outstanding while the response is pending: a hang-up (EOF, reset) then ends
  // the exchange at once, and bytes of a pipelined request land in buffer_ for the next parse.
  void ReadAhead() {
    if (reading_ || closed_ || buffer_.size() >= kMaxReadAheadBytes) return;
    reading_ = true;
    stream_.async_read_some(
        buffer_.prepare(kReadAheadChunk),
        beast::bind_front_handler(&Connection::OnReadAhead, shared_from_this()));
  }

  void OnReadAhead(beast::error_code ec, size_t n) {
    reading_ = false;
    const bool cancelled = std::exchange(cancel_read_ahead_, false);
    if (closed_) return;
    if (lingering_) {
      if (ec) return Close();
      buffer_.clear();
      return DrainUntilClosed();
    }
    if (ec == net::error::operation_aborted && cancelled) return ReadRequest();
    if (ec) return Close();
    buffer_.commit(n);
    if (exchange_ != nullptr) {
      ReadAhead();
    } else {
      ReadRequest();
    }
  }

  void DoWrite() {
    writing_ = true;
    writing_bytes_.swap(pending_);
    pending_.clear();
    std::vector<net::const_buffer> buffers;
    buffers.reserve(writing_bytes_.size());
    for (const std::string& s : writing_bytes_) buffers.push_back(net::buffer(s));
    net::async_write(stream_, buffers,
                     beast::bind_front_handler(&Connection::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, size_t) {
    writing_ = false;
    writing_bytes_.clear();
    if (closed_) return;
    if (ec) return Close();
    if (!pending_.empty()) return DoWrite();
    if (response_complete_) FinishResponse();
  }

  // The whole response is on the wire: next request, or close.
  void FinishResponse() {
    response_complete_ = false;
    if (exchange_ != nullptr) {
      exchange_.reset();
      --server_->num_active_exchanges_;
    }
    if (close_after_response_ || server_->stopping_) return Linger();
    if (reading_) {
      // The read-ahead is outstanding; cancel it and read the next request (bytes it already
      // took stay in buffer_).
      cancel_read_ahead_ = true;
      stream_.cancel();
      return;
    }
    ReadRequest();
  }

  // An error that ends the connection: answer, then close.
  void SendError(http::status status, const std::string& message) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::server, "kiln");
    res.set(http::field::content_type, server_->options_.error_content_type);
    res.keep_alive(false);
    res.body() = server_->options_.render_error(static_cast<int>(status), message);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    Send(os.str());
    EndResponse(/*close=*/true);
  }

  // Half-closes, then drains what the client still sends for a while before closing, so that
  // the response is not destroyed by a reset.
  void Linger() {
    if (closed_) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    lingering_ = true;
    cancel_read_ahead_ = false;
    stream_.expires_after(kLingerTime);
    if (!reading_) DrainUntilClosed();  // else the read-ahead's completion drains
  }

  void DrainUntilClosed() {
    reading_ = true;
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(kReadAheadChunk),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->reading_ = false;
                              if (ec || self->closed_) return self->Close();
                              self->DrainUntilClosed();
                            });
  }

  // The client went away or the connection failed: drop everything and tell the exchange.
  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().close(ec);
    pending_.clear();
    if (exchange_ != nullptr) {
      std::shared_ptr<HttpExchange> exchange = std::move(exchange_);
      --server_->num_active_exchanges_;
      exchange->Close();
    }
  }

  HttpServer* server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpExchange> exchange_;  // the request being answered, if any
  std::vector<std::string> pending_;        // bytes queued behind the write in flight
  std::vector<std::string> writing_bytes_;  // the write in flight
  bool reading_ = false;
  bool writing_ = false;
  bool cancel_read_ahead_ = false;
  bool response_complete_ = false;  // the current response's last bytes are queued
  bool close_after_response_ = false;
  bool lingering_ = false;
  bool closed_ = false;
};

// ---- HttpExchange ----------------------------------------------------------------------------

HttpExchange::HttpExchange(std::shared_ptr<Connection> connection, HttpRequest request)
    : connection_(std::move(connection)), request_(std::move(request)) {}

HttpExchange::~HttpExchange() = default;

net::any_io_executor HttpExchange::executor() const { return connection_->executor(); }

void HttpExchange::Post(std::function<void()> fn) {
  net::post(connection_->executor(), std::move(fn));
}

namespace {

template <class Message>
void SetCommonHeaders(Message& res, std::string_view content_type, const Headers& headers) {
  res.set(http::field::server, "kiln");
  res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) res.set(name, value);
}

}  // namespace

void HttpExchange::Respond(http::status status, std::string body, std::string_view content_type,
                           const Headers& headers) {
  CHECK(!started_) << "a second response to " << request_.target();
  started_ = finished_ = true;
  if (closed_) return;
  http::response<http::string_body> res{status, request_.version()};
  SetCommonHeaders(res, content_type, headers);
  const bool keep_alive = request_.keep_alive() && !connection_->is_stopping();
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  connection_->Send(os.str());
  connection_->EndResponse(!keep_alive);
}

void HttpExchange::BeginStream(std::string_view content_type, const Headers& headers) {
  CHECK(!started_) << "a second response to " << request_.target();
  started_ = true;
  if (closed_) return;
  http::response<http::empty_body> res{http::status::ok, request_.version()};
  SetCommonHeaders(res, content_type, headers);
  // HTTP/1.0 has no chunked encoding: the body then ends with the connection.
  chunked_ = request_.version() >= 11;
  res.keep_alive(chunked_ && request_.keep_alive());
  if (chunked_) res.chunked(true);
  std::ostringstream os;
  os << res.base();
  connection_->Send(os.str());
}

void HttpExchange::Write(std::string data) {
  CHECK(started_ && !finished_) << "Write outside a stream";
  if (closed_ || data.empty()) return;
  if (!chunked_) return connection_->Send(std::move(data));
  connection_->Send(beast::buffers_to_string(http::make_chunk(net::buffer(data))));
}

void HttpExchange::EndStream() {
  CHECK(started_ && !finished_) << "EndStream outside a stream";
  finished_ = true;
  if (closed_) return;
  if (chunked_) connection_->Send(beast::buffers_to_string(http::make_chunk_last()));
  connection_->EndResponse(!chunked_ || !request_.keep_alive() || connection_->is_stopping());
}

void HttpExchange::Close() {
  if (closed_) return;
  closed_ = true;
  if (!finished_ && on_close_) on_close_();
}

// ---- HttpServer ------------------------------------------------------------------------------

struct HttpServer::Acceptor {
  explicit Acceptor(net::io_context& ioc) : acceptor(net::make_strand(ioc)) {}
  tcp::acceptor acceptor;
};

HttpServer::HttpServer(const HttpServerOptions& options, Handler handler)
    : options_(options), handler_(std::move(handler)) {
  if (!options_.render_error) options_.render_error = PlainError;
}

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      Handler handler) {
  if (options.num_io_threads < 1 || options.num_io_threads > 1024) {
    return InvalidArgument("io threads: expected 1..1024, got " +
                           std::to_string(options.num_io_threads));
  }
  if (options.max_request_body_bytes < 1) {
    return InvalidArgument("max request body bytes: must be positive");
  }
  if (options.keep_alive_timeout_s < 1) {
    return InvalidArgument("keep-alive timeout: must be at least 1 second");
  }
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec) {
    return InvalidArgument("host: '" + options.host +
                           "' is not an IP address (e.g. 0.0.0.0, 127.0.0.1 or ::)");
  }
  std::unique_ptr<HttpServer> server(new HttpServer(options, std::move(handler)));
  server->acceptor_ = std::make_unique<Acceptor>(server->ioc_);
  tcp::acceptor& acceptor = server->acceptor_->acceptor;
  const tcp::endpoint endpoint(address, options.port);
  const std::string where = options.host + ":" + std::to_string(options.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on " + where + ": " + ec.message());
  server->port_ = acceptor.local_endpoint().port();
  server->DoAccept();
  for (int32_t i = 0; i < options.num_io_threads; ++i) {
    server->threads_.emplace_back([s = server.get()] { s->ioc_.run(); });
  }
  return server;
}

void HttpServer::DoAccept() {
  acceptor_->acceptor.async_accept(
      net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
        if (!acceptor_->acceptor.is_open()) return;  // StopAccepting
        if (!ec) {
          beast::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);  // SSE frames are small
          std::make_shared<Connection>(this, std::move(socket))->Start();
        } else {
          LOG(WARNING) << "http: accept failed: " << ec.message();
        }
        DoAccept();
      });
}

void HttpServer::StopAccepting() {
  if (stopping_.exchange(true)) return;
  net::dispatch(acceptor_->acceptor.get_executor(), [this] {
    beast::error_code ec;
    acceptor_->acceptor.close(ec);
  });
}

void HttpServer::Stop() {
  if (stopped_.exchange(true)) return;
  stopping_ = true;
  ioc_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace kiln::server
