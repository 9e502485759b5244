#include "cotensor/error.hpp"

#include "cuda/blas.hpp"
#include "cuda/library.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <ostream>
#include <string>
#include <system_error>

// Loading CUDA's libraries when first needed, and what is said when one cannot be: checked
// without a GPU (dlopen needs none). The program's first use of cuBLAS is here, with CUBLAS_DIR
// pointing at nothing: cuBLAS then stays unloadable in this process, as it must for the check.

namespace cuda = cotensor::detail::cuda;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("cuda_library") {
  TEST_CASE("a library that cannot be loaded is named, with every path tried and the variable"
            " that points at it") {
    ::setenv("COTENSOR_TEST_LIBRARY_DIR", "/nonexistent/cotensor-test", 1);
    std::string error;
    CHECK(cuda::open_toolkit_library("libcotensor_absent.so.13", "COTENSOR_TEST_LIBRARY_DIR",
                                     error) == nullptr);
    CHECK(has(error, "cannot load libcotensor_absent.so.13"));
    // Named by the variable, that directory is the only place looked.
    CHECK(has(error, "tried /nonexistent/cotensor-test/libcotensor_absent.so.13 (from "
                     "COTENSOR_TEST_LIBRARY_DIR)"));
    CHECK_FALSE(has(error, "search path"));
    CHECK(has(error, "set COTENSOR_TEST_LIBRARY_DIR to the directory that holds"));
    ::unsetenv("COTENSOR_TEST_LIBRARY_DIR");

    error.clear();
    CHECK(cuda::open_toolkit_library("libcotensor_absent.so.13", "COTENSOR_TEST_LIBRARY_DIR",
                                     error) == nullptr);
    CHECK(has(error, "tried libcotensor_absent.so.13 (the loader's search path"));
    CHECK(has(error, "/libcotensor_absent.so.13 (the build's CUDA toolkit)"));
    CHECK(has(error, "set COTENSOR_TEST_LIBRARY_DIR"));
  }

  TEST_CASE("with cuBLAS not loadable, asking for it throws device_unavailable naming the library,"
            " the paths tried and CUBLAS_DIR") {
    const char* before = std::getenv("CUBLAS_DIR");
    const std::string saved = before != nullptr ? before : "";
    ::setenv("CUBLAS_DIR", "/nonexistent/cublas", 1);
    try {
      (void)cuda::cublas();
      // Loaded before this case, in this process (the whole suite in one run): ctest runs
      // each case on its own, where this one checks.
      MESSAGE("cuBLAS was loaded earlier in this process: run this case alone to check it");
      return;
    } catch (const std::system_error& e) {
      CHECK(e.code() == cotensor::make_error_code(cotensor::errc::device_unavailable));
      const std::string what = e.what();
      CHECK(has(what, "matmul on a GPU needs cuBLAS"));
      CHECK(has(what, "cannot load libcublas.so."));
      CHECK(has(what, "/nonexistent/cublas/libcublas.so."));
      CHECK(has(what, "set CUBLAS_DIR to the directory that holds"));
      CHECK(has(what, "every other GPU op runs without it"));
    }
    // Asked once per process: the same answer later, wherever CUBLAS_DIR points now.
    if (saved.empty()) {
      ::unsetenv("CUBLAS_DIR");
    } else {
      ::setenv("CUBLAS_DIR", saved.c_str(), 1);
    }
    CHECK_THROWS_AS((void)cuda::cublas(), std::system_error);
  }
}
