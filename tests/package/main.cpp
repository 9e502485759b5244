// Built against the *installed* cotensor package: uses the public contract and checks results.
#include <cotensor/cotensor.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <sstream>

int main() {
  namespace asio = cotensor::asio;
  auto x = cotensor::ones({2, 3});
  auto z = x * cotensor::full({2, 3}, 3.0F) + 2.0F;  // 5 everywhere
  float total = 0;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await z.ready();
        co_await cotensor::when_all(z, x);
        co_await cotensor::when_all();
        total = z.sum().item();
      },
      asio::detached);
  io.run();
  cotensor::wait_all();
#if COTENSOR_WITH_MPI
  // The collectives link with neither MPI's headers nor its CMake package: run as a singleton
  // (no mpirun), one process is its own group.
  auto world = cotensor::dist::communicator::world();
  auto g = cotensor::full({3}, 2.0F);
  cotensor::dist::all_reduce(g, cotensor::dist::reduce_op::avg);
  if (world.size() != 1 || g.sum().item() != 6.0F) {
    std::fprintf(stderr, "consumer: all_reduce on one process gave %f\n", g.sum().item());
    return 1;
  }
#endif
  std::ostringstream printed;
  printed << z;
  if (total != 30.0F || printed.str().find("[5, 5, 5]") == std::string::npos) {
    std::fprintf(stderr, "consumer: wrong result %f / %s\n", total, printed.str().c_str());
    return 1;
  }
  std::puts("consumer: ok");
  return 0;
}
