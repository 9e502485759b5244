#include "cuda/cuda_error.hpp"

#include "cuda/event_pool.hpp"

#include <doctest/doctest.h>

#include <string>
#include <system_error>

// CUDA's errors as error codes, and the event pool's use of them: what can be checked without a
// GPU (CUDA's runtime answers these on a machine with no driver).

namespace cuda = cotensor::detail::cuda;

TEST_SUITE("cuda_error") {
  TEST_CASE("CUDA errors are error codes in the cuda category, named in their message") {
    const std::error_code ec = cuda::make_error_code(cudaErrorMemoryAllocation);
    CHECK(std::string(ec.category().name()) == "cuda");
    CHECK(ec.message().find("cudaErrorMemoryAllocation") != std::string::npos);
    CHECK(ec != cuda::make_error_code(cudaErrorInvalidValue));
  }

  TEST_CASE("COTENSOR_CUDA_CHECK throws a system_error naming the call, the file and the line") {
    auto failing = [] { return cudaErrorInvalidValue; };
    try {
      COTENSOR_CUDA_CHECK(failing());
      FAIL("no exception");
    } catch (const std::system_error& e) {
      CHECK(e.code() == cuda::make_error_code(cudaErrorInvalidValue));
      const std::string what = e.what();
      CHECK(what.find("failing()") != std::string::npos);
      CHECK(what.find("cuda_error_test.cpp") != std::string::npos);
      CHECK(what.find("cudaErrorInvalidValue") != std::string::npos);
    }
    auto fine = [] { return cudaSuccess; };
    CHECK_NOTHROW(COTENSOR_CUDA_CHECK(fine()));
    CHECK_NOTHROW(COTENSOR_CUDA_LOG(failing()));  // logs, goes on
  }

  TEST_CASE("the event pool makes its events through CUDA, and reports CUDA's error") {
    cuda::event_pool pool(0);
    cudaEvent_t e = nullptr;
    try {
      e = pool.acquire();
    } catch (const std::system_error& error) {
      // No driver or no device here: CUDA's own error, in its category.
      CHECK(std::string(error.code().category().name()) == "cuda");
      MESSAGE("no CUDA device: " << error.what());
      return;
    }
    // With a GPU: a new event that was never recorded is complete.
    std::error_code ec;
    CHECK(pool.query(e, ec) == cuda::event_state::complete);
    pool.release(e);
    CHECK(pool.acquire() == e);  // reused once released
    pool.release(e);
  }
}
