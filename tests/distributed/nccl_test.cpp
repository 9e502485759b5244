// The collectives on GPU tensors (NCCL), on a single-rank communicator: one process per GPU,
// and a test machine has one. What a single rank cannot show (values combined across ranks)
// the CPU path's tests show on 2 and 3 ranks; here: NCCL's setup through MPI, each
// collective's shape and values, its order with the GPU compute before and after it, many in
// flight, waits, and what is refused at the call. Skipped (77) without a GPU, by main.
#include "cotensor/distributed.hpp"
#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <boost/asio/awaitable.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {

using namespace cotensor;
namespace d = cotensor::dist;

constexpr device gpu = device::cuda(0);

std::vector<float> iota(std::size_t n, float first) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = first + static_cast<float>(i % 1000);
  }
  return v;
}

std::vector<float> on_host(const tensor& t) { return t.to(device::cpu()).to_vector(); }

}  // namespace

TEST_SUITE("distributed.nccl") {
  TEST_CASE("the world has one rank here" * doctest::timeout(60)) {
    REQUIRE(d::communicator::world().size() == 1);
  }

  TEST_CASE("every collective on a GPU tensor: shape and values" * doctest::timeout(120)) {
    const auto v = iota(4096, 1.0F);
    for (const auto op :
         {d::reduce_op::sum, d::reduce_op::avg, d::reduce_op::max, d::reduce_op::min}) {
      tensor t = from_vector(v, {4096}, gpu);
      d::all_reduce(t, op);
      CHECK(t.device() == gpu);
      CHECK(on_host(t) == v);  // one rank: every reduction is the identity
    }
    tensor b = from_vector(v, {64, 64}, gpu);
    d::broadcast(b, 0);
    CHECK(on_host(b) == v);
    tensor g = d::all_gather(from_vector(v, {64, 64}, gpu));
    CHECK(g.shape() == shape{1, 64, 64});
    CHECK(g.device() == gpu);
    CHECK(on_host(g) == v);
    tensor s = d::reduce_scatter(from_vector(v, {64, 64}, gpu), d::reduce_op::sum);
    CHECK(s.shape() == shape{64, 64});
    CHECK(on_host(s) == v);
  }

  TEST_CASE("every collective on GPU tensors of every dtype: dtype, shape and values" *
            doctest::timeout(120)) {
    // Small integers, negative ones too: exact in every dtype. One rank: every reduction is
    // the identity (an integer avg divides by 1), so a wrong NCCL type shows as other values.
    std::vector<double> v(4096);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<double>(static_cast<int>(i % 200) - 100);
    }
    const tensor host = from_vector(v, {64, 64});
    for (const dtype t : {dtype::int32, dtype::int64, dtype::float16, dtype::bfloat16,
                          dtype::float32, dtype::float64}) {
      CAPTURE(t);
      for (const auto op :
           {d::reduce_op::sum, d::reduce_op::avg, d::reduce_op::max, d::reduce_op::min}) {
        tensor x = host.astype(t).to(gpu);
        d::all_reduce(x, op);
        CHECK(x.dtype() == t);
        CHECK(x.to(device::cpu()).to_vector<double>() == v);
      }
      tensor b = host.astype(t).to(gpu);
      d::broadcast(b, 0);
      CHECK(b.to(device::cpu()).to_vector<double>() == v);
      tensor g = d::all_gather(host.astype(t).to(gpu));
      CHECK(g.dtype() == t);
      CHECK(g.shape() == shape{1, 64, 64});
      CHECK(g.to(device::cpu()).to_vector<double>() == v);
      tensor s = d::reduce_scatter(host.astype(t).to(gpu), d::reduce_op::avg);
      CHECK(s.dtype() == t);
      CHECK(s.to(device::cpu()).to_vector<double>() == v);
    }
    // Large int64 values, beyond float64's 53 bits: moved and reduced as int64.
    const std::int64_t big = (std::int64_t{1} << 60) + 1;
    tensor i64 = from_vector(std::vector<std::int64_t>(1000, big), {1000}, gpu);
    d::all_reduce(i64, d::reduce_op::max);
    CHECK(i64.to(device::cpu()).to_vector<std::int64_t>() == std::vector<std::int64_t>(1000, big));
  }

  TEST_CASE("bool GPU collectives move bytes: avg on bool is refused" * doctest::timeout(120)) {
    std::vector<bool> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = i % 3 == 0;
    }
    for (const auto op : {d::reduce_op::sum, d::reduce_op::max, d::reduce_op::min}) {
      tensor x = from_vector(v, {1000}, gpu);
      d::all_reduce(x, op);
      CHECK(x.dtype() == dtype::boolean);
      CHECK(x.to(device::cpu()).to_vector<bool>() == v);
    }
    tensor b = from_vector(v, {1000}, gpu);
    CHECK_THROWS_AS(d::all_reduce(b, d::reduce_op::avg), std::invalid_argument);
    d::broadcast(b, 0);
    CHECK(b.to(device::cpu()).to_vector<bool>() == v);
    tensor g = d::all_gather(b);
    CHECK(g.shape() == shape{1, 1000});
    CHECK(g.to(device::cpu()).to_vector<bool>() == v);
  }

  TEST_CASE("a GPU collective is ordered with the GPU compute before and after it" *
            doctest::timeout(120)) {
    // Big enough that the kernels take a while: a collective that ran before its producer, or
    // a consumer that ran before the collective, would see other values.
    const std::int64_t n = 1 << 22;
    tensor t = zeros({n}, gpu);
    for (int round = 0; round < 20; ++round) {
      t += 1.0F;
      d::all_reduce(t, d::reduce_op::avg);
      t *= 2.0F;
    }
    // x -> 2(x + 1), twenty times from 0: 2^21 - 2.
    CHECK(on_host(t) == std::vector<float>(static_cast<std::size_t>(n), 2097150.0F));
  }

  TEST_CASE("fifty GPU collectives in flight complete, in issue order" * doctest::timeout(120)) {
    std::vector<tensor> ts;
    for (int i = 0; i < 50; ++i) {
      ts.push_back(full({1 << 16}, static_cast<float>(i), gpu));
      d::all_reduce(ts.back());
    }
    for (int i = 0; i < 50; ++i) {
      CHECK(on_host(ts[static_cast<std::size_t>(i)]) ==
            std::vector<float>(1 << 16, static_cast<float>(i)));
    }
  }

  TEST_CASE("CPU and GPU collectives on one communicator, interleaved" * doctest::timeout(120)) {
    tensor cpu = full({1000}, 3.0F);
    tensor dev = full({1000}, 5.0F, gpu);
    for (int i = 0; i < 10; ++i) {
      d::all_reduce(cpu);
      d::all_reduce(dev);
      cpu += 1.0F;
      dev += 1.0F;
    }
    CHECK(cpu.to_vector() == std::vector<float>(1000, 13.0F));
    CHECK(on_host(dev) == std::vector<float>(1000, 15.0F));
  }

  TEST_CASE("a coroutine awaits a GPU collective" * doctest::timeout(120)) {
    const auto seen =
        cotensor::test::run_to_completion([]() -> boost::asio::awaitable<std::vector<float>> {
          tensor t = full({256}, 2.0F, gpu);
          d::all_reduce(t, d::reduce_op::max);
          co_await t.ready();
          co_return on_host(t);
        });
    CHECK(seen == std::vector<float>(256, 2.0F));
  }

  TEST_CASE("sends and receives of GPU tensors are refused at the call" * doctest::timeout(60)) {
    tensor t = zeros({4}, gpu);
    CHECK_THROWS_AS(d::send(t, 0, 0), std::invalid_argument);
    CHECK_THROWS_AS(d::recv(t, 0, 0), std::invalid_argument);
  }

  TEST_CASE("a bad root is refused at the call, with nothing issued" * doctest::timeout(60)) {
    tensor t = zeros({4}, gpu);
    CHECK_THROWS_AS(d::broadcast(t, 1), std::invalid_argument);
    CHECK_NOTHROW(d::broadcast(t, 0));
    t.wait();
  }
}
