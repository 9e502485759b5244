#pragma once

// The state behind serving::listener: accepting, the open connections and the drain
// (listener.cpp), and one connection's coroutine (connection.cpp).

#include <cotensor/serving.hpp>

#include "serving/http_metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/http/status.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <variant>

namespace cotensor::serving {
namespace http = boost::beast::http;
}

namespace cotensor::serving::detail {

using tcp = asio::ip::tcp;

// One accepted connection. Its members are touched only on the socket's strand.
struct connection {
  explicit connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
  bool busy = false;  // from a request read to its response written: a drain lets it finish
};

class listener_state : public std::enable_shared_from_this<listener_state> {
public:
  listener_state(asio::any_io_executor executor,
                 handler& v2,
                 listener_options options,
                 listener::routes routes);

  tcp::endpoint local_endpoint() const { return endpoint_; }
  asio::strand<asio::any_io_executor>& strand() { return strand_; }
  // Accepts until the acceptor closes, then waits for the connections to close. On the strand.
  asio::awaitable<std::error_code> serve();
  void drain();
  void stop();
  std::string metrics() const { return metrics_.text(); }

private:
  using request = handler::request;
  using response = handler::response;

  // listener.cpp: the acceptor and the set of connections, on `strand_`.
  void start_drain();
  void close_all();
  void closed(const std::shared_ptr<connection>& c);

  // connection.cpp: one connection's requests, on its own strand.
  asio::awaitable<void> session(std::shared_ptr<connection> c);
  class socket_stream;
  asio::awaitable<std::optional<response>>
  answer(connection& c, const request& req, socket_stream& stream, bool& streamed);
  asio::awaitable<std::variant<std::optional<response>, std::string>>
  call_routes(const request& req);
  asio::awaitable<std::variant<std::optional<response>, std::string>>
  call_handler(const request& req, socket_stream& stream);
  asio::awaitable<bool> write(connection& c, response& res);
  asio::awaitable<void> linger_close(connection& c);
  static asio::awaitable<void> watch_disconnect(connection& c);
  static response error_response(http::status status, const std::string& what, unsigned version);

  asio::any_io_executor executor_;
  asio::strand<asio::any_io_executor> strand_;
  handler& v2_;
  const listener_options options_;
  const listener::routes routes_;
  http_metrics metrics_;
  tcp::endpoint endpoint_;
  // On `strand_`:
  tcp::acceptor acceptor_;
  asio::steady_timer wake_;         // cancelled when a connection closes
  asio::steady_timer drain_timer_;  // the drain's deadline
  std::set<std::shared_ptr<connection>> connections_;
  bool timed_out_ = false;
  // false until `drain` or `stop`; then true for good. Read by connections on their strands.
  std::atomic<bool> draining_{false};
};

}  // namespace cotensor::serving::detail
