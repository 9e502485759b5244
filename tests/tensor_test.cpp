#include "cotensor/tensor.hpp"

#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <ranges>
#include <span>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

using namespace cotensor;

TEST_SUITE("tensor") {
  TEST_CASE("a tensor reports its shape, size, rank and device" * doctest::timeout(10)) {
    auto t = zeros({2, 3});
    CHECK(t.defined());
    CHECK(t.shape() == shape{2, 3});
    CHECK(t.numel() == 6);
    CHECK(t.rank() == 2);
    CHECK(t.device() == device::cpu());
  }

  TEST_CASE("an empty tensor is rejected by ops and waits with invalid_argument") {
    tensor empty;
    CHECK_FALSE(empty.defined());
    CHECK_THROWS_AS(empty.wait(), std::invalid_argument);
    CHECK_THROWS_AS(empty.item(), std::invalid_argument);
    CHECK_THROWS_AS(empty + ones({1}), std::invalid_argument);
    CHECK_THROWS_AS(empty.async_wait([](std::exception_ptr) {}), std::invalid_argument);
    CHECK_THROWS_AS(empty += 1.0F, std::invalid_argument);
    std::ostringstream os;
    os << empty;
    CHECK(os.str() == "tensor(undefined)");
  }

  TEST_CASE("item converts a one-element tensor and rejects any other size at the call" *
            doctest::timeout(10)) {
    CHECK(full({1, 1}, 2.5F).item() == 2.5F);
    CHECK(ones({3}).sum().item() == 3.0F);
    const auto issued = runtime::current().stats().issued;
    auto v = ones({2});
    CHECK_THROWS_WITH_AS(v.item(), doctest::Contains("one element"), std::invalid_argument);
    CHECK(runtime::current().stats().issued == issued + 1);  // only `ones` was issued
  }

  TEST_CASE("to_vector copies the values to the host in row-major order" * doctest::timeout(10)) {
    auto t = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(transpose(t).to_vector() == std::vector<float>{1, 4, 2, 5, 3, 6});
  }

  TEST_CASE("to_vector copies a tensor of several huge pages whole, as is and converted" *
            doctest::timeout(30)) {
    // 1.5 M elements: 6 MB as float32, 12 MB as float64, room advised for huge pages.
    constexpr std::int64_t n = 1'500'000;
    const auto t = arange(n, dtype::float32);
    for (int round = 0; round < 2; ++round) {  // a fresh vector, then one in reused memory
      const auto as_float = t.to_vector<float>();
      REQUIRE(as_float.size() == static_cast<std::size_t>(n));
      const auto as_double = t.to_vector<double>();
      REQUIRE(as_double.size() == static_cast<std::size_t>(n));
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const auto want = static_cast<float>(i);
        wrong += as_float[static_cast<std::size_t>(i)] != want ? 1 : 0;
        wrong += as_double[static_cast<std::size_t>(i)] != static_cast<double>(want) ? 1 : 0;
      }
      CHECK(wrong == 0);
    }
  }

  TEST_CASE("view_host reads the computed elements in place, sharing the buffer" *
            doctest::timeout(10)) {
    auto t = matmul(from_vector({1, 2, 3, 4}, {2, 2}), from_vector({1, 0, 0, 2}, {2, 2}));
    host_view<float> v = t.view_host();
    CHECK(v.shape() == shape{2, 2});
    REQUIRE(v.size() == 4);
    CHECK(std::vector<float>(v.begin(), v.end()) == std::vector<float>{1, 4, 3, 8});
    const std::span<const float> s = v;
    CHECK(v.span().size() == 4);
    static_assert(std::ranges::contiguous_range<const host_view<float>>);
    CHECK(s.data() == v.data());
    // No copy: a later write to the buffer, once ended, is read through the view.
    t += 1.0F;
    t.wait();
    CHECK(v[0] == 2.0F);
    CHECK(v[3] == 9.0F);
    CHECK(t.view_host().data() == v.data());
    CHECK(reshape(t, {4}).view_host().data() == v.data());
    // The view holds the buffer: its elements outlive every handle, and a move hands them on.
    const std::weak_ptr<detail::storage> buffer = t.storage();
    t = tensor{};
    CHECK_FALSE(buffer.expired());
    CHECK(std::vector<float>(v.begin(), v.end()) == std::vector<float>{2, 5, 4, 9});
    host_view<float> moved = std::move(v);
    CHECK(v.empty());  // NOLINT(bugprone-use-after-move): a moved-from view is empty
    CHECK(v.data() == nullptr);
    CHECK(v.shape().numel() == 0);
    CHECK(moved.size() == 4);
    CHECK(moved[3] == 9.0F);
    moved = host_view<float>{};
    // The last reference gone, the buffer goes too (once the engine has retired its ops).
    for (int i = 0; i < 5000 && !buffer.expired(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(buffer.expired());
  }

  TEST_CASE("view_host waits for the pending writes, for every dtype's own elements" *
            doctest::timeout(30)) {
    constexpr std::int64_t n = 1'000'000;
    auto t = arange(n, dtype::int64);
    t *= 3;  // pending, most likely, when the view is asked for
    const auto v = t.view_host<std::int64_t>();
    REQUIRE(v.size() == static_cast<std::size_t>(n));
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      wrong += v[static_cast<std::size_t>(i)] != 3 * i ? 1 : 0;
    }
    CHECK(wrong == 0);
    const auto flags = (arange(4, dtype::int32) > 1).view_host<bool>();
    CHECK(std::vector<bool>(flags.begin(), flags.end()) ==
          std::vector<bool>{false, false, true, true});
    const auto halves = arange(3, dtype::bfloat16).view_host<bfloat16_t>();
    CHECK(static_cast<float>(halves[2]) == 2.0F);
    const auto none = zeros({0, 3}).view_host();
    CHECK(none.empty());
    CHECK(none.shape() == shape{0, 3});
    const host_view<double> unset;
    CHECK(unset.empty());
    CHECK(unset.data() == nullptr);
    CHECK(unset.shape().numel() == 0);
  }

  TEST_CASE("view_host refuses another dtype and an empty handle at the call, and rethrows a "
            "failed op's error" *
            doctest::timeout(10)) {
    const auto t = ones({2});
    CHECK_THROWS_WITH_AS(static_cast<void>(t.view_host<double>()),
                         doctest::Contains("float64 elements of a float32 tensor"),
                         std::invalid_argument);
    CHECK_THROWS_AS(static_cast<void>(tensor{}.view_host()), std::invalid_argument);
    const auto failed =
        map(ones(shape{2}), [](float) -> float { throw std::runtime_error("boom"); });
    CHECK_THROWS_WITH_AS(static_cast<void>(failed.view_host()), "boom", std::runtime_error);
  }

  TEST_CASE("printing blocks for the value and shows nested rows" * doctest::timeout(10)) {
    std::ostringstream os;
    os << from_vector({1, 2, 3, 4}, {2, 2}) + 1.0F;
    CHECK(os.str() == "tensor([[2, 3], [4, 5]], shape=[2, 2])");
    std::ostringstream scalar;
    scalar << ones({4}).sum();
    CHECK(scalar.str() == "tensor(4, shape=[])");
  }

  TEST_CASE("printing a large tensor summarizes each dimension" * doctest::timeout(10)) {
    std::ostringstream os;
    os << zeros({2000});
    CHECK(os.str() == "tensor([0, 0, 0, ..., 0, 0, 0], shape=[2000])");
  }

  TEST_CASE("copies of a handle share the buffer, so in-place ops are seen by all" *
            doctest::timeout(10)) {
    auto a = ones({3});
    auto b = a;
    b += 1.0F;
    a *= 3.0F;
    CHECK(a.to_vector() == std::vector<float>{6, 6, 6});
    CHECK(b.to_vector() == std::vector<float>{6, 6, 6});
  }

  TEST_CASE("to(cpu) makes an independent copy, ordered after earlier writes" *
            doctest::timeout(10)) {
    auto a = ones({3});
    a += 1.0F;
    auto c = a.to(device::cpu());
    a += 10.0F;
    CHECK(c.to_vector() == std::vector<float>{2, 2, 2});
    CHECK(a.to_vector() == std::vector<float>{12, 12, 12});
  }

  TEST_CASE("a device that this build cannot serve is refused at the call") {
    const auto issued = runtime::current().stats().issued;
    try {
      (void)ones({2}).to(device::cuda(0));
      FAIL("to(cuda) did not throw");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::device_unavailable);
      const std::string what = e.what();
      CHECK(what.find("cuda:0") != std::string::npos);
      // Why, in CUDA's own words when the runtime is linked (on a machine without a driver:
      // cudaErrorInsufficientDriver), else that the build has no CUDA backend.
      if (COTENSOR_HAVE_CUDA_RUNTIME != 0) {
        CHECK_MESSAGE((what.find("cudaGetDeviceCount: cudaError") != std::string::npos ||
                       what.find("CUDA device") != std::string::npos ||
                       what.find("CUDA backend is not complete") != std::string::npos),
                      what);
      } else {
        CHECK_MESSAGE(what.find("this build has no CUDA backend") != std::string::npos, what);
      }
    }
    CHECK_THROWS_AS(zeros({2}, device::cuda(1)), std::system_error);
    CHECK_THROWS_AS(randn({2}, device::cuda(0)), std::system_error);
    CHECK(runtime::current().stats().issued == issued + 1);  // just the `ones`
  }

  TEST_CASE("in-place ops with a tensor broadcast it over the updated shape only" *
            doctest::timeout(10)) {
    auto m = ones({2, 3});
    m += from_vector({1, 2, 3}, {3});
    CHECK(m.to_vector() == std::vector<float>{2, 3, 4, 2, 3, 4});
    m -= ones({2, 1});
    m *= full({2, 3}, 2.0F);
    m /= from_vector({1, 2, 4}, {1, 3});
    CHECK(m.to_vector() == std::vector<float>{2, 2, 1.5F, 2, 2, 1.5F});
    CHECK_THROWS_AS(m += ones({3, 3}), std::invalid_argument);
    auto row = ones({3});
    CHECK_THROWS_AS(row += ones({2, 3}), std::invalid_argument);  // would change row's shape
  }

  TEST_CASE("a tensor updated with itself reads and writes one buffer" * doctest::timeout(10)) {
    auto x = full({4}, 3.0F);
    x += x;
    x *= x;
    CHECK(x.to_vector() == std::vector<float>{36, 36, 36, 36});
  }
}
