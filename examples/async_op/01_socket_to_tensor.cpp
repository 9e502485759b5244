// Network input straight into tensors: `async_op` ops that read frames of floats from a TCP
// socket into tensors, ordered by the engine like any op, and computed on as they arrive; a
// coroutine awaits the results. No thread blocks: the reads complete on the io_context, the
// compute runs on the backend, the coroutine resumes on its own executor.
//
// A peer on the same io_context sends 8 frames of 1024 floats (frame k holds k + 1). For each
// frame the receiver issues one async op (the socket read into a fresh tensor) and
// y = sum(relu(x - 0.5)), then awaits all results. Prints each frame's result and exits 1 if
// one is wrong. Usage: 01_socket_to_tensor

#include <cotensor/cotensor.hpp>

#include <boost/asio.hpp>

#include <cstdio>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr int frames = 8;
constexpr std::int64_t frame_floats = 1024;

// The peer: sends every frame, then closes.
asio::awaitable<void> send_frames(tcp::endpoint to) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect(to, asio::use_awaitable);
  for (int k = 0; k < frames; ++k) {
    std::vector<float> frame(frame_floats, static_cast<float>(k + 1));
    co_await asio::async_write(socket, asio::buffer(frame), asio::use_awaitable);
  }
}

// Issues a read of the next frame from `socket` into a new tensor, after `previous` (the last
// frame read: frames arrive in order on one socket, so each read waits for the one before).
cotensor::tensor receive_frame(tcp::socket& socket, const cotensor::tensor& previous) {
  auto x = cotensor::zeros({frame_floats});
  cotensor::async_op(
      "recv", {previous}, {x},
      [&socket](cotensor::async_op_context& ctx, cotensor::async_op_done done) {
        // `start` runs on a backend thread: hop to the socket's executor to use
        // it, and return at once. The read ends the op, with its error if any.
        asio::post(socket.get_executor(),
                   [&socket, out = ctx.write(0), done = std::move(done)]() mutable {
                     asio::async_read(socket, asio::buffer(out.data(), out.size_bytes()),
                                      [done = std::move(done)](boost::system::error_code ec,
                                                               std::size_t) mutable { done(ec); });
                   });
      });
  return x;
}

asio::awaitable<int> receive(tcp::acceptor& acceptor) {
  tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
  std::vector<cotensor::tensor> results;
  cotensor::tensor previous = cotensor::zeros({1});
  for (int k = 0; k < frames; ++k) {  // all issued at once; the engine orders them
    auto x = receive_frame(socket, previous);
    results.push_back(cotensor::sum(cotensor::relu(x - 0.5F)));
    previous = x;
  }
  int wrong = 0;
  for (int k = 0; k < frames; ++k) {
    co_await results[static_cast<std::size_t>(k)].ready();  // the loop stays free meanwhile
    const float got = results[static_cast<std::size_t>(k)].item();
    const float want = static_cast<float>(frame_floats) * (static_cast<float>(k) + 0.5F);
    std::printf("frame %d: sum(relu(x - 0.5)) = %.1f (expected %.1f)\n", k, got, want);
    wrong += got == want ? 0 : 1;
  }
  co_return wrong;
}

int main() {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
  asio::co_spawn(io, send_frames(acceptor.local_endpoint()), asio::detached);
  auto wrong = asio::co_spawn(io, receive(acceptor), asio::use_future);
  io.run();
  const int failures = wrong.get();
  std::printf("%s\n", failures == 0 ? "all frames received and computed" : "WRONG results");
  return failures == 0 ? 0 : 1;
}
