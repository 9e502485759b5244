#include "cuda/cuda_error.hpp"

#include "cuda/blas.hpp"
#include "cuda/event_pool.hpp"

#include <doctest/doctest.h>

#include <new>
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

  TEST_CASE("out of device memory is std::bad_alloc, like the host's") {
    auto out_of_memory = [] { return cudaErrorMemoryAllocation; };
    CHECK_THROWS_AS(COTENSOR_CUDA_CHECK(out_of_memory()), std::bad_alloc);
  }

  TEST_CASE("errors name the op being launched on the thread") {
    auto failing = [] { return cudaErrorLaunchFailure; };
    cuda::launching_op = "matmul";
    try {
      COTENSOR_CUDA_CHECK(failing());
      FAIL("no exception");
    } catch (const std::system_error& e) {
      CHECK(std::string(e.what()).find("op matmul") != std::string::npos);
    }
    cuda::launching_op = nullptr;
  }

  TEST_CASE("cuBLAS statuses are error codes in the cublas category") {
    auto failing = [] { return CUBLAS_STATUS_EXECUTION_FAILED; };
    try {
      COTENSOR_CUBLAS_CHECK(failing());
      FAIL("no exception");
    } catch (const std::system_error& e) {
      CHECK(std::string(e.code().category().name()) == "cublas");
      CHECK(e.code().message() == "CUBLAS_STATUS_EXECUTION_FAILED");
    }
    auto no_memory = [] { return CUBLAS_STATUS_ALLOC_FAILED; };
    CHECK_THROWS_AS(COTENSOR_CUBLAS_CHECK(no_memory()), std::bad_alloc);
  }

  TEST_CASE("fault injection fails the N-th checked CUDA call") {
    struct disarm {
      ~disarm() { cotensor::detail::faults::reset(); }
    } at_exit;
    auto fine = [] { return cudaSuccess; };
    cotensor::detail::faults::fail_cuda_call(3);
    CHECK_NOTHROW(COTENSOR_CUDA_CHECK(fine()));
    CHECK_NOTHROW(COTENSOR_CUDA_CHECK(fine()));
    try {
      COTENSOR_CUDA_CHECK(fine());
      FAIL("the third call did not fail");
    } catch (const std::system_error& e) {
      CHECK(e.code() == cuda::make_error_code(cudaErrorUnknown));
    }
    CHECK_NOTHROW(COTENSOR_CUDA_CHECK(fine()));  // spent
    CHECK_FALSE(cotensor::detail::faults::enabled());
  }

  TEST_CASE("cuBLAS is loaded on first use, with every entry point the backend calls") {
    // The toolkit this build was made with has it: found on the loader's path or beside it.
    const cuda::blas_api& api = cuda::cublas();
    CHECK(static_cast<bool>(api.create));
    CHECK(static_cast<bool>(api.sgemm));
    CHECK(&cuda::cublas() == &api);  // loaded once
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
