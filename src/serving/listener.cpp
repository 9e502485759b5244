// serving::listener: the acceptor, the set of open connections, the drain and the stop. A
// connection's own coroutine is in connection.cpp.

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "serving/listener_state.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>

namespace cotensor::serving {

namespace detail {

listener_state::listener_state(asio::any_io_executor executor,
                               handler& v2,
                               listener_options options,
                               listener::routes routes)
    : executor_(std::move(executor)), strand_(asio::make_strand(executor_)), v2_(v2),
      options_(std::move(options)), routes_(std::move(routes)), acceptor_(strand_), wake_(strand_),
      drain_timer_(strand_) {
  const tcp::endpoint ep(asio::ip::make_address(options_.address), options_.port);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(ep);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  endpoint_ = acceptor_.local_endpoint();
}

asio::awaitable<std::error_code> listener_state::serve() {
  auto self = shared_from_this();
  while (acceptor_.is_open()) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(executor_),
                                                        asio::as_tuple(asio::use_awaitable));
    if (!acceptor_.is_open()) {
      break;  // drained or stopped; a socket accepted meanwhile closes with it
    }
    if (ec) {
      // A transient failure (a reset before accept, no descriptors left): keep serving, but
      // do not spin while descriptors are short.
      asio::steady_timer pause(strand_, std::chrono::milliseconds(10));
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    // Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds each
    // behind the client's delayed acknowledgement of the previous one (40 ms on Linux).
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<connection>(std::move(socket));
    connections_.insert(c);
    ++metrics_.connections;
    asio::co_spawn(c->socket.get_executor(), session(c), [self, c](std::exception_ptr) {
      asio::post(self->strand_, [self, c] { self->closed(c); });
    });
  }
  while (!connections_.empty()) {
    wake_.expires_at(asio::steady_timer::time_point::max());
    co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  drain_timer_.cancel();
  co_return timed_out_ ? std::make_error_code(std::errc::timed_out) : std::error_code();
}

void listener_state::closed(const std::shared_ptr<connection>& c) {
  --metrics_.connections;
  connections_.erase(c);
  wake_.cancel();
}

void listener_state::drain() {
  asio::post(strand_, [self = shared_from_this()] { self->start_drain(); });
}

void listener_state::start_drain() {
  if (draining_.exchange(true)) {
    return;
  }
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  // Idle connections close now; busy ones after their response (they see `draining_`).
  for (const auto& c : connections_) {
    asio::post(c->socket.get_executor(), [c] {
      if (!c->busy) {
        boost::system::error_code ec;
        c->socket.cancel(ec);
      }
    });
  }
  drain_timer_.expires_after(options_.drain_timeout);
  drain_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->connections_.empty()) {
      self->timed_out_ = true;
      self->close_all();
    }
  });
}

void listener_state::stop() {
  asio::post(strand_, [self = shared_from_this()] {
    self->draining_ = true;
    boost::system::error_code ignored;
    self->acceptor_.close(ignored);
    self->close_all();
  });
}

void listener_state::close_all() {
  // Closing the socket ends its reads and writes and the disconnect watch, which cancels the
  // request in flight.
  for (const auto& c : connections_) {
    asio::post(c->socket.get_executor(), [c] {
      boost::system::error_code ec;
      c->socket.shutdown(tcp::socket::shutdown_both, ec);
      c->socket.close(ec);
    });
  }
}

}  // namespace detail

listener::listener(asio::any_io_executor executor,
                   handler& v2,
                   listener_options options,
                   routes app_routes)
    : state_(std::make_shared<detail::listener_state>(
          std::move(executor), v2, std::move(options), std::move(app_routes))) {}

listener::~listener() { state_->stop(); }

asio::ip::tcp::endpoint listener::local_endpoint() const { return state_->local_endpoint(); }

asio::awaitable<std::error_code> listener::run() {
  auto state = state_;
  // Not cancellable: an empty cancellation slot keeps the awaiting coroutine's cancellation
  // from reaching the accept loop; stop() is the way to end it.
  co_return co_await asio::co_spawn(
      state->strand(), state->serve(),
      asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable));
}

void listener::drain() { state_->drain(); }

void listener::stop() { state_->stop(); }

std::string listener::metrics() const { return state_->metrics(); }

}  // namespace cotensor::serving
