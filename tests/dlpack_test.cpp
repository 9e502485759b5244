#include <cotensor/cotensor.hpp>
#include <cotensor/dlpack.hpp>

#include "support/run.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <dlpack/dlpack.h>
#include <memory>
#include <vector>

using namespace cotensor;

namespace {

// A DLPack tensor over a vector of T made by a "producer", counting its deleter's calls.
template <class T>
struct producer {
  std::vector<T> values;
  std::vector<std::int64_t> extents;
  std::vector<std::int64_t> strides;
  std::atomic<int>* deleted;
  DLManagedTensor managed{};
};

template <class T>
DLManagedTensor* make_dlpack(std::vector<T> values,
                             std::vector<std::int64_t> extents,
                             DLDataType type,
                             std::atomic<int>* deleted) {
  auto* p = new producer<T>{std::move(values), std::move(extents), {}, deleted, {}};
  p->managed.dl_tensor.data = p->values.data();
  p->managed.dl_tensor.device = {kDLCPU, 0};
  p->managed.dl_tensor.ndim = static_cast<std::int32_t>(p->extents.size());
  p->managed.dl_tensor.dtype = type;
  p->managed.dl_tensor.shape = p->extents.data();
  p->managed.dl_tensor.strides = nullptr;
  p->managed.dl_tensor.byte_offset = 0;
  p->managed.manager_ctx = p;
  p->managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<producer<T>*>(self->manager_ctx);
    owner->deleted->fetch_add(1);
    delete owner;
  };
  return &p->managed;
}

template <class T>
void check_export(const tensor& t, DLDataType want, const std::vector<T>& values) {
  DLManagedTensor* m = to_dlpack(t);
  REQUIRE(m != nullptr);
  const DLTensor& dl = m->dl_tensor;
  CHECK(dl.device.device_type == kDLCPU);
  CHECK(dl.dtype.code == want.code);
  CHECK(dl.dtype.bits == want.bits);
  CHECK(dl.dtype.lanes == 1);
  REQUIRE(dl.ndim == static_cast<std::int32_t>(t.rank()));
  for (std::size_t i = 0; i < t.rank(); ++i) {
    CHECK(dl.shape[i] == t.shape()[i]);
  }
  CHECK(std::memcmp(static_cast<const char*>(dl.data) + dl.byte_offset, values.data(),
                    values.size() * sizeof(T)) == 0);
  m->deleter(m);
}

}  // namespace

TEST_SUITE("dlpack") {

  TEST_CASE("to_dlpack describes every dtype and shares the computed buffer" *
            doctest::timeout(30)) {
    check_export(from_vector(std::vector<std::int32_t>{1, -2, 3}, shape{3}), {kDLInt, 32, 1},
                 std::vector<std::int32_t>{1, -2, 3});
    check_export(from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, shape{2, 2}), {kDLInt, 64, 1},
                 std::vector<std::int64_t>{1, 2, 3, 4});
    check_export(from_vector(std::vector<float>{1.5F, 2.5F}, shape{2}), {kDLFloat, 32, 1},
                 std::vector<float>{1.5F, 2.5F});
    check_export(from_vector(std::vector<double>{0.1, 0.2}, shape{1, 2}), {kDLFloat, 64, 1},
                 std::vector<double>{0.1, 0.2});
    check_export(from_vector(std::vector<float16_t>{float16_t(1.0F)}, shape{1}), {kDLFloat, 16, 1},
                 std::vector<float16_t>{float16_t(1.0F)});
    check_export(from_vector(std::vector<bfloat16_t>{bfloat16_t(-2.0F)}, shape{1}),
                 {kDLBfloat, 16, 1}, std::vector<bfloat16_t>{bfloat16_t(-2.0F)});
    check_export(from_vector(std::vector<bool>{true, false}, shape{2}), {6, 8, 1},
                 std::vector<std::uint8_t>{1, 0});
  }

  TEST_CASE("to_dlpack waits for the pending writes and keeps the buffer past the tensor" *
            doctest::timeout(30)) {
    DLManagedTensor* m = nullptr;
    {
      tensor x = ones(shape{1000, 100});
      x += 41.0F;  // pending when to_dlpack is called, most likely
      m = to_dlpack(x);
    }  // the last cotensor handle is gone: the export holds the buffer
    const auto* data = static_cast<const float*>(m->dl_tensor.data);
    CHECK(data[0] == 42.0F);
    CHECK(data[99999] == 42.0F);
    CHECK(m->dl_tensor.strides[0] == 100);
    CHECK(m->dl_tensor.strides[1] == 1);
    m->deleter(m);
  }

  TEST_CASE("to_dlpack rethrows the error of the op that computed the tensor") {
    const tensor bad =
        map(ones(shape{2}), [](float) -> float { throw std::runtime_error("boom"); });
    CHECK_THROWS_WITH_AS((void)to_dlpack(bad), "boom", std::runtime_error);
    CHECK_THROWS_AS((void)to_dlpack(tensor{}), std::invalid_argument);
  }

  TEST_CASE("async_to_dlpack completes in a coroutine with the exported tensor" *
            doctest::timeout(30)) {
    const tensor x = full(shape{3}, 2.0) * 3.0F;
    DLManagedTensor* m = test::run_to_completion([x]() -> asio::awaitable<DLManagedTensor*> {
      co_return co_await async_to_dlpack(x, asio::use_awaitable);
    });
    REQUIRE(m != nullptr);
    CHECK(static_cast<const float*>(m->dl_tensor.data)[2] == 6.0F);
    m->deleter(m);

    const tensor bad =
        map(ones(shape{2}), [](float) -> float { throw std::runtime_error("boom"); });
    CHECK_THROWS_WITH_AS(test::run_to_completion([bad]() -> asio::awaitable<void> {
                           (void)co_await async_to_dlpack(bad, asio::use_awaitable);
                         }),
                         "boom", std::runtime_error);
    CHECK_THROWS_AS((void)async_to_dlpack(tensor{}, asio::use_awaitable), std::invalid_argument);
  }

  TEST_CASE("from_dlpack wraps the producer's memory and calls its deleter once, last" *
            doctest::timeout(30)) {
    std::atomic<int> deleted{0};
    DLManagedTensor* m =
        make_dlpack(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, {kDLFloat, 32, 1}, &deleted);
    const void* memory = m->dl_tensor.data;
    tensor y;
    {
      tensor x = from_dlpack(m);
      CHECK(x.shape() == shape{2, 3});
      CHECK(x.dtype() == dtype::float32);
      // Zero-copy: an in-place op writes the producer's memory.
      x += 10.0F;
      x.wait();
      CHECK(static_cast<const float*>(memory)[5] == 16.0F);
      y = x * 2.0F;  // an op still reading x may outlive the handle
    }
    CHECK(y.to_vector() == std::vector<float>{22, 24, 26, 28, 30, 32});
    wait_all();
    CHECK(deleted.load() == 1);
  }

  TEST_CASE("from_dlpack takes the seven dtypes, bool as kDLBool") {
    std::atomic<int> deleted{0};
    CHECK(from_dlpack(make_dlpack(std::vector<std::int32_t>{-5}, {1}, {kDLInt, 32, 1}, &deleted))
              .item<std::int32_t>() == -5);
    CHECK(from_dlpack(
              make_dlpack(std::vector<std::int64_t>{1LL << 40}, {1}, {kDLInt, 64, 1}, &deleted))
              .item<std::int64_t>() == (1LL << 40));
    CHECK(from_dlpack(make_dlpack(std::vector<float16_t>{float16_t(0.5F)}, {1}, {kDLFloat, 16, 1},
                                  &deleted))
              .item<float>() == 0.5F);
    CHECK(from_dlpack(make_dlpack(std::vector<bfloat16_t>{bfloat16_t(-3.0F)}, {1},
                                  {kDLBfloat, 16, 1}, &deleted))
              .item<float>() == -3.0F);
    CHECK(from_dlpack(make_dlpack(std::vector<double>{0.1}, {}, {kDLFloat, 64, 1}, &deleted))
              .item<double>() == 0.1);
    const tensor b =
        from_dlpack(make_dlpack(std::vector<std::uint8_t>{1, 0, 1}, {3}, {6, 8, 1}, &deleted));
    CHECK(b.dtype() == dtype::boolean);
    CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
    wait_all();
    CHECK(deleted.load() == 5);
  }

  TEST_CASE("a round trip through DLPack shares one buffer") {
    const tensor x = arange(6, dtype::int64);
    const tensor y = from_dlpack(to_dlpack(x));
    CHECK(y.storage() != x.storage());
    CHECK(y.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
    const tensor z = x + std::int64_t{0};
    z.wait();
    // y's memory is x's.
    DLManagedTensor* m = to_dlpack(x);
    DLManagedTensor* n = to_dlpack(y);
    CHECK(m->dl_tensor.data == n->dl_tensor.data);
    m->deleter(m);
    n->deleter(n);
  }

  TEST_CASE("from_dlpack refuses what it cannot wrap and leaves it to the caller") {
    std::atomic<int> deleted{0};
    CHECK_THROWS_AS((void)from_dlpack(nullptr), std::invalid_argument);
    SUBCASE("unsupported dtype") {
      DLManagedTensor* m =
          make_dlpack(std::vector<std::uint8_t>{1}, {1}, {kDLUInt, 8, 1}, &deleted);
      CHECK_THROWS_AS((void)from_dlpack(m), std::invalid_argument);
      m->dl_tensor.dtype = {kDLFloat, 32, 4};
      CHECK_THROWS_AS((void)from_dlpack(m), std::invalid_argument);
      CHECK(deleted.load() == 0);
      m->deleter(m);
    }
    SUBCASE("non-contiguous strides") {
      DLManagedTensor* m =
          make_dlpack(std::vector<float>{1, 2, 3, 4}, {2, 2}, {kDLFloat, 32, 1}, &deleted);
      std::int64_t strides[2] = {1, 2};  // a transposed view
      m->dl_tensor.strides = strides;
      CHECK_THROWS_WITH_AS((void)from_dlpack(m), doctest::Contains("strides"),
                           std::invalid_argument);
      std::int64_t compact[2] = {2, 1};
      m->dl_tensor.strides = compact;
      CHECK(from_dlpack(m).to_vector() == std::vector<float>{1, 2, 3, 4});
      wait_all();
      CHECK(deleted.load() == 1);
    }
    SUBCASE("unsupported device") {
      DLManagedTensor* m = make_dlpack(std::vector<float>{1}, {1}, {kDLFloat, 32, 1}, &deleted);
      m->dl_tensor.device = {kDLROCM, 0};
      CHECK_THROWS_WITH_AS((void)from_dlpack(m), doctest::Contains("device type 10"),
                           std::invalid_argument);
      CHECK(deleted.load() == 0);
      m->deleter(m);
    }
    SUBCASE("misaligned data") {
      DLManagedTensor* m = make_dlpack(std::vector<float>{1, 2}, {1}, {kDLFloat, 32, 1}, &deleted);
      m->dl_tensor.byte_offset = 2;
      CHECK_THROWS_WITH_AS((void)from_dlpack(m), doctest::Contains("aligned"),
                           std::invalid_argument);
      m->deleter(m);
    }
  }

}  // TEST_SUITE("dlpack")
