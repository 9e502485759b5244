#pragma once

// CUDA's runtime and cuBLAS errors as std::error_codes, and the checks every call goes through.
// Compiled only in builds with the CUDA backend (COTENSOR_WITH_CUDA).

#include "engine/faults.hpp"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <string>
#include <system_error>

namespace cotensor::detail::cuda {

/// The category of CUDA runtime errors (`cudaError_t`): named "cuda"; a message is the
/// error's name and CUDA's description, "cudaErrorMemoryAllocation: out of memory".
const std::error_category& cuda_category() noexcept;
/// The category of cuBLAS statuses (`cublasStatus_t`): named "cublas"; a message is the
/// status's name, "CUBLAS_STATUS_EXECUTION_FAILED".
const std::error_category& cublas_category() noexcept;

inline std::error_code make_error_code(cudaError_t e) noexcept {
  return {static_cast<int>(e), cuda_category()};
}

/// Throws for `rc`, naming `expr`, the file, the line and the op being launched on this thread
/// (if any), after clearing CUDA's last error (a sticky error stays with the context; this does
/// not hide it): std::bad_alloc for cudaErrorMemoryAllocation, like the CPU's out of memory;
/// else std::system_error in `cuda_category()`.
[[noreturn]] void throw_cuda_error(cudaError_t rc, const char* expr, const char* file, int line);
/// Throws std::system_error in `cublas_category()`, as `throw_cuda_error`.
[[noreturn]] void
throw_cublas_error(cublasStatus_t rc, const char* expr, const char* file, int line);
/// Prints `rc` with `expr`, the file and the line to stderr, after clearing the last error.
void log_cuda_error(cudaError_t rc, const char* expr, const char* file, int line) noexcept;

/// `rc`, or cudaErrorUnknown when fault injection picked this call (faults::fail_cuda_call).
inline cudaError_t counted(cudaError_t rc) noexcept {
  if (faults::enabled() && faults::on_cuda_call()) [[unlikely]] {
    return cudaErrorUnknown;
  }
  return rc;
}

/// The op whose work this thread is launching, named in errors (null: none).
extern thread_local const char* launching_op;

}  // namespace cotensor::detail::cuda

/// Evaluates a CUDA runtime call; throws (see throw_cuda_error) if it failed.
#define COTENSOR_CUDA_CHECK(expr)                                                                  \
  COTENSOR_CUDA_ON_FAILURE(cudaError_t, cudaSuccess, throw_cuda_error,                             \
                           ::cotensor::detail::cuda::counted(expr), #expr)

/// Evaluates a cuBLAS call; throws std::system_error in `cublas_category()` if it failed.
#define COTENSOR_CUBLAS_CHECK(expr)                                                                \
  COTENSOR_CUDA_ON_FAILURE(cublasStatus_t, CUBLAS_STATUS_SUCCESS, throw_cublas_error, (expr), #expr)

/// Evaluates a CUDA runtime call; logs a failure and goes on. For destructors and shutdown.
#define COTENSOR_CUDA_LOG(expr)                                                                    \
  COTENSOR_CUDA_ON_FAILURE(cudaError_t, cudaSuccess, log_cuda_error, (expr), #expr)

// The three above: `value`, a `Status`, unless it is `ok` goes to the function `handler` of
// this namespace with the call's text, file and line.
#define COTENSOR_CUDA_ON_FAILURE(Status, ok, handler, value, text)                                 \
  do {                                                                                             \
    if (const Status cotensor_rc_ = value; cotensor_rc_ != ok) {                                   \
      ::cotensor::detail::cuda::handler(cotensor_rc_, text, __FILE__, __LINE__);                   \
    }                                                                                              \
  } while (false)
