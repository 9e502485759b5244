#include "cuda/cuda_error.hpp"

#include <cstdio>
#include <new>

namespace cotensor::detail::cuda {
namespace {

class cuda_errors final : public std::error_category {
public:
  const char* name() const noexcept override { return "cuda"; }
  std::string message(int code) const override {
    const auto e = static_cast<cudaError_t>(code);
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
};

class cublas_errors final : public std::error_category {
public:
  const char* name() const noexcept override { return "cublas"; }
  std::string message(int code) const override {
    switch (static_cast<cublasStatus_t>(code)) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "cuBLAS status " + std::to_string(code);
  }
};

std::string where(const char* expr, const char* file, int line) {
  std::string s = "cotensor: ";
  if (launching_op != nullptr) {
    s += std::string("op ") + launching_op + ": ";
  }
  return s + expr + " at " + file + ":" + std::to_string(line);
}

}  // namespace

thread_local const char* launching_op = nullptr;

const std::error_category& cuda_category() noexcept {
  static const cuda_errors instance;
  return instance;
}

const std::error_category& cublas_category() noexcept {
  static const cublas_errors instance;
  return instance;
}

void throw_cuda_error(cudaError_t rc, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  if (rc == cudaErrorMemoryAllocation) {
    throw std::bad_alloc();  // as the CPU's out of memory
  }
  throw std::system_error(make_error_code(rc), where(expr, file, line));
}

void throw_cublas_error(cublasStatus_t rc, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  if (rc == CUBLAS_STATUS_ALLOC_FAILED) {
    throw std::bad_alloc();
  }
  throw std::system_error(std::error_code(static_cast<int>(rc), cublas_category()),
                          where(expr, file, line));
}

void log_cuda_error(cudaError_t rc, const char* expr, const char* file, int line) noexcept {
  (void)cudaGetLastError();
  std::fprintf(stderr, "cotensor: %s at %s:%d: %s: %s\n", expr, file, line, cudaGetErrorName(rc),
               cudaGetErrorString(rc));
}

}  // namespace cotensor::detail::cuda
