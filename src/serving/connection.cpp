// One connection of serving::listener: its requests in order, with keep-alive, the limits and
// timeouts of listener_options, and a watch that cancels a request's work when the client
// leaves.

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "serving/listener_state.hpp"
#include "serving/protocol.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <sys/socket.h>
#include <variant>

namespace cotensor::serving::detail {

namespace {

namespace beast = boost::beast;
using namespace asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;

// Cancels `c`'s socket operations after `timeout` unless destroyed first; `fired()` then.
class deadline {
public:
  deadline(connection& c, std::chrono::milliseconds timeout)
      : timer_(c.socket.get_executor(), timeout), state_(std::make_shared<state>()) {
    timer_.async_wait([&c, st = state_](boost::system::error_code ec) {
      // `armed` false: the operation it bounded ended first, and the timer expired meanwhile
      // (its wait already queued, which cancel() cannot take back): cancelling now would
      // cancel the connection's next operation instead.
      if (!ec && st->armed) {
        st->fired = true;
        boost::system::error_code ignored;
        c.socket.cancel(ignored);
      }
    });
  }
  deadline(const deadline&) = delete;
  deadline& operator=(const deadline&) = delete;
  ~deadline() {
    state_->armed = false;
    timer_.cancel();
  }
  bool fired() const { return state_->fired; }

private:
  struct state {
    bool armed = true;
    bool fired = false;
  };
  asio::steady_timer timer_;
  std::shared_ptr<state> state_;  // shared with the wait, which may run after this is gone
};

}  // namespace

// A streamed response on a connection: the head, then each piece as an HTTP/1.1 chunk (HTTP/1.0:
// the bytes as they are, and the connection closes after), each write bounded by the write
// timeout (a client that stops reading is a client gone). While it streams, the socket's send
// buffer is `send_buffer` bytes (0: left as it is), so that the writes of a client that stops
// reading wait after that much instead of the megabytes Linux grows it to; the size it had
// comes back when the stream is destroyed.
class listener_state::socket_stream final : public handler::response_stream {
public:
  socket_stream(connection& c,
                const request& req,
                std::chrono::milliseconds timeout,
                std::size_t send_buffer)
      : c_(c), chunked_(req.version() >= 11), keep_alive_(req.keep_alive() && chunked_),
        timeout_(timeout), send_buffer_(send_buffer) {}
  socket_stream(const socket_stream&) = delete;
  socket_stream& operator=(const socket_stream&) = delete;
  ~socket_stream() override {
    if (restore_buffer_ > 0) {
      boost::system::error_code ignored;  // the socket may be closed by now
      c_.socket.set_option(asio::socket_base::send_buffer_size(restore_buffer_), ignored);
    }
  }

  asio::awaitable<bool> begin(response head) override {
    began_ = true;
    bound_send_buffer();
    head_ = std::move(head);
    head_.keep_alive(keep_alive_);
    head_.chunked(chunked_);
    const deadline d(c_, timeout_);
    http::response_serializer<http::string_body> sr{head_};
    auto [ec, n] =
        co_await http::async_write_header(c_.socket, sr, asio::as_tuple(asio::use_awaitable));
    ok_ = !ec;
    co_return ok_;
  }

  asio::awaitable<bool> write(std::string_view piece) override {
    if (!ok_ || piece.empty()) {
      co_return ok_;
    }
    const deadline d(c_, timeout_);
    boost::system::error_code ec;
    if (chunked_) {
      std::tie(ec, std::ignore) = co_await asio::async_write(
          c_.socket, http::make_chunk(asio::buffer(piece)), asio::as_tuple(asio::use_awaitable));
    } else {
      std::tie(ec, std::ignore) = co_await asio::async_write(c_.socket, asio::buffer(piece),
                                                             asio::as_tuple(asio::use_awaitable));
    }
    ok_ = !ec;
    co_return ok_;
  }

  // Ends the body; whether the connection may serve another request.
  asio::awaitable<bool> end() {
    if (ok_ && chunked_) {
      const deadline d(c_, timeout_);
      auto [ec, n] = co_await asio::async_write(c_.socket, http::make_chunk_last(),
                                                asio::as_tuple(asio::use_awaitable));
      ok_ = !ec;
    }
    co_return ok_&& keep_alive_;
  }

  bool began() const { return began_; }
  int status() const { return head_.result_int(); }

private:
  void bound_send_buffer() {
    if (send_buffer_ == 0) {
      return;
    }
    asio::socket_base::send_buffer_size was;
    boost::system::error_code ec;
    c_.socket.get_option(was, ec);
    if (ec) {
      return;
    }
    // Set even when smaller now: Linux would grow it while the stream runs. Setting it ends
    // that growth for the connection's life, so the size it had is what comes back.
    c_.socket.set_option(asio::socket_base::send_buffer_size(static_cast<int>(send_buffer_)), ec);
    if (!ec) {
      // Linux doubles what is set (for its bookkeeping) and reports the doubled size.
      restore_buffer_ = std::max(1, was.value() / 2);
    }
  }

  connection& c_;
  const bool chunked_;
  const bool keep_alive_;
  const std::chrono::milliseconds timeout_;
  const std::size_t send_buffer_;
  int restore_buffer_ = 0;  // the size to set back when destroyed (0: none)
  response head_;
  bool began_ = false;
  bool ok_ = true;
};

handler::response
listener_state::error_response(http::status status, const std::string& what, unsigned version) {
  response res{status, version};
  res.set(http::field::content_type, "application/json");
  res.body() = protocol::error_body(what);
  res.keep_alive(false);
  return res;
}

asio::awaitable<bool> listener_state::write(connection& c, response& res) {
  const deadline d(c, options_.write_timeout);
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(c.socket, res, asio::as_tuple(asio::use_awaitable));
  co_return !ec;
}

// Stops sending, then reads and drops what the peer still sends, until it closes or a second
// has passed: closing at once could reset the connection before the client read the response.
asio::awaitable<void> listener_state::linger_close(connection& c) {
  boost::system::error_code ignored;
  c.socket.shutdown(tcp::socket::shutdown_send, ignored);
  const deadline d(c, std::chrono::seconds(1));
  std::array<char, 16384> scratch;
  for (;;) {
    auto [ec, n] = co_await c.socket.async_read_some(asio::buffer(scratch),
                                                     asio::as_tuple(asio::use_awaitable));
    if (ec) {
      break;
    }
  }
}

asio::awaitable<void> listener_state::session(std::shared_ptr<connection> cp) {
  connection& c = *cp;
  beast::flat_buffer buffer;
  if (metrics_.connections.load() > static_cast<std::int64_t>(options_.max_connections)) {
    auto res = error_response(http::status::service_unavailable, "too many connections", 11);
    res.set(http::field::retry_after, "1");
    metrics_.count(503);
    co_await write(c, res);
    co_await linger_close(c);
    co_return;
  }
  for (bool first = true;; first = false) {
    c.busy = false;
    if (draining_) {
      break;
    }
    if (!first && buffer.size() == 0) {
      // Between requests: wait for the next one's first byte at most idle_timeout.
      const deadline d(c, options_.idle_timeout);
      auto [ec] =
          co_await c.socket.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
      if (ec || draining_) {
        break;  // idle too long, drained while idle, or stopped
      }
    }
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
    boost::system::error_code ec;
    bool timed_out = false;
    {
      const deadline d(c, options_.read_timeout);
      std::tie(ec, std::ignore) =
          co_await http::async_read(c.socket, buffer, parser, asio::as_tuple(asio::use_awaitable));
      timed_out = d.fired();
    }
    c.busy = true;
    if (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
        ec == asio::error::eof) {
      break;
    }
    if (ec == asio::error::operation_aborted && timed_out) {
      auto res = error_response(http::status::request_timeout, "request timed out", 11);
      metrics_.count(408);
      co_await write(c, res);
      break;
    }
    if (ec == asio::error::operation_aborted) {
      break;  // drained while idle, or stopped
    }
    if (ec) {
      auto status = http::status::bad_request;
      std::string what = "malformed HTTP request: " + ec.message();
      if (ec == http::error::body_limit) {
        status = http::status::payload_too_large;
        what = "body exceeds " + std::to_string(options_.max_body_bytes) + " bytes";
      } else if (ec == http::error::header_limit) {
        status = http::status::request_header_fields_too_large;
        what = "headers too large";
      }
      auto res = error_response(status, what, 11);
      metrics_.count(static_cast<int>(status));
      co_await write(c, res);
      // The client may still be sending the body we refused: read it away for a moment.
      co_await linger_close(c);
      break;
    }
    const auto start = clock_type::now();
    auto req = parser.release();
    socket_stream stream(c, req, options_.write_timeout, options_.stream_send_buffer_bytes);
    bool streamed = false;
    std::optional<response> res = co_await answer(c, req, stream, streamed);
    if (streamed) {
      metrics_.count(stream.status());
      if (!co_await stream.end() || draining_) {
        break;
      }
      continue;
    }
    if (!res) {
      metrics_.count(499);
      break;  // the client went away
    }
    metrics_.count(static_cast<int>(res->result_int()));
    if (req.target().ends_with("/infer")) {
      metrics_.latency.observe(clock_type::now() - start);
    }
    const bool keep = req.keep_alive() && !draining_;
    res->keep_alive(keep);
    if (!co_await write(c, *res) || !keep) {
      break;
    }
  }
  boost::system::error_code ignored;
  c.socket.shutdown(tcp::socket::shutdown_send, ignored);
  c.socket.close(ignored);
}

// The application's routes, then /metrics, then the handler's routes; empty when the client
// left before the answer was ready (the answer's coroutine is then cancelled), or when the
// handler streamed its answer through `stream` (`streamed` is then set; the body's end is
// the caller's to write).
asio::awaitable<std::optional<handler::response>>
listener_state::answer(connection& c, const request& req, socket_stream& stream, bool& streamed) {
  const std::string_view target(req.target().data(), req.target().size());
  if (routes_) {
    ++metrics_.in_flight;
    // `||` flattens the variant: the answer, the failure, or the client gone.
    auto r = co_await (call_routes(req) || watch_disconnect(c));
    --metrics_.in_flight;
    if (std::holds_alternative<std::monostate>(r)) {
      co_return std::nullopt;
    }
    if (auto* failure = std::get_if<std::string>(&r)) {
      // The application's failure is its request's 500, not the end of the connection.
      co_return error_response(http::status::internal_server_error, *failure, req.version());
    }
    if (auto& res = std::get<std::optional<response>>(r)) {
      co_return std::move(res);
    }
  }
  if (target == "/metrics" && req.method() == http::verb::get) {
    response res{http::status::ok, req.version()};
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.body() = v2_.metrics() + metrics_.text();
    co_return res;
  }
  if (!handler::matches(target)) {
    co_return error_response(http::status::not_found, "no such route", req.version());
  }
  ++metrics_.in_flight;
  // `||` flattens the variant, as above: the answer, the failure, or the client gone.
  auto r = co_await (call_handler(req, stream) || watch_disconnect(c));
  --metrics_.in_flight;
  if (std::holds_alternative<std::monostate>(r)) {
    co_return std::nullopt;
  }
  if (auto* failure = std::get_if<std::string>(&r)) {
    if (stream.began()) {
      co_return std::nullopt;  // a stream cut short: the connection closes
    }
    co_return error_response(http::status::internal_server_error, *failure, req.version());
  }
  auto& res = std::get<std::optional<response>>(r);
  streamed = !res && stream.began();  // else empty: the client went away before an answer
  co_return std::move(res);
}

// The application's answer, or the message of the exception its routes threw. A failure must
// be a value: `||` waits for the first operand to succeed, so an exception would leave the
// request waiting on the disconnect watch.
asio::awaitable<std::variant<std::optional<handler::response>, std::string>>
listener_state::call_routes(const request& req) {
  try {
    co_return co_await routes_(req);
  } catch (const std::exception& e) {
    co_return std::string(e.what());
  } catch (...) {
    co_return std::string("unknown error");
  }
}

// The handler's answer, or the message of what it threw (a value, as `call_routes`'s).
asio::awaitable<std::variant<std::optional<handler::response>, std::string>>
listener_state::call_handler(const request& req, socket_stream& stream) {
  try {
    co_return co_await v2_.handle(req, stream);
  } catch (const std::exception& e) {
    co_return std::string(e.what());
  } catch (...) {
    co_return std::string("unknown error");
  }
}

// Completes when the peer closes or resets the connection; otherwise runs until cancelled.
//
// Readiness is only a hint: the reactor can report a socket readable after the bytes that
// made it so were already read (an edge-triggered event delivered late), so the peek must not
// block — a blocking peek would hold this thread until the client sent again, which it never
// does while it waits for this response — and "nothing there yet" means wait again.
asio::awaitable<void> listener_state::watch_disconnect(connection& c) {
  for (;;) {
    auto [ec] =
        co_await c.socket.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
    if (ec) {
      co_return;
    }
    char byte = 0;
    const auto n = ::recv(c.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      continue;  // nothing there after all
    }
    if (n <= 0) {
      co_return;  // closed or reset: cancel the work
    }
    // A pipelined request is waiting: it cannot tell us about a disconnect; wait to be
    // cancelled.
    asio::steady_timer forever(c.socket.get_executor(), clock_type::duration::max());
    co_await forever.async_wait(asio::as_tuple(asio::use_awaitable));
    throw boost::system::system_error(asio::error::operation_aborted);
  }
}

}  // namespace cotensor::serving::detail
