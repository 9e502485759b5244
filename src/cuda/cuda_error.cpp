#include "cuda/cuda_error.hpp"

#include "support/error_category.hpp"

#include <cstdio>
#include <new>

namespace cotensor::detail::cuda {
namespace {

std::string cuda_message(int code) {
  const auto e = static_cast<cudaError_t>(code);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// A status and its name as cuBLAS spells it.
#define COTENSOR_CUBLAS_STATUS(status)                                                             \
  { status, #status }

std::string cublas_message(int code) {
  static constexpr code_message<cublasStatus_t> messages[] = {
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_SUCCESS),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_NOT_INITIALIZED),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_ALLOC_FAILED),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_INVALID_VALUE),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_ARCH_MISMATCH),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_MAPPING_ERROR),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_EXECUTION_FAILED),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_INTERNAL_ERROR),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_NOT_SUPPORTED),
      COTENSOR_CUBLAS_STATUS(CUBLAS_STATUS_LICENSE_ERROR),
  };
  return message_in(messages, code, "cuBLAS status " + std::to_string(code));
}

#undef COTENSOR_CUBLAS_STATUS

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
  static const message_category instance("cuda", cuda_message);
  return instance;
}

const std::error_category& cublas_category() noexcept {
  static const message_category instance("cublas", cublas_message);
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
