#pragma once

// CUDA's runtime errors as std::error_codes, and the two checks every CUDA call goes through.
// Compiled only in builds that link CUDA's runtime (COTENSOR_HAVE_CUDA_RUNTIME).

#include <cuda_runtime_api.h>
#include <string>
#include <system_error>

namespace cotensor::detail::cuda {

/// The category of CUDA runtime errors (`cudaError_t`): named "cuda"; a message is the
/// error's name and CUDA's description, "cudaErrorMemoryAllocation: out of memory".
const std::error_category& cuda_category() noexcept;

inline std::error_code make_error_code(cudaError_t e) noexcept {
  return {static_cast<int>(e), cuda_category()};
}

/// Throws std::system_error for `rc`, naming `expr`, the file and the line, after clearing
/// CUDA's last error (a sticky error stays with the context; this does not hide it).
[[noreturn]] void throw_cuda_error(cudaError_t rc, const char* expr, const char* file, int line);
/// Prints `rc` with `expr`, the file and the line to stderr, after clearing the last error.
void log_cuda_error(cudaError_t rc, const char* expr, const char* file, int line) noexcept;

}  // namespace cotensor::detail::cuda

/// Evaluates a CUDA runtime call; throws std::system_error in `cuda_category()` if it failed.
#define COTENSOR_CUDA_CHECK(expr)                                                                  \
  do {                                                                                             \
    if (const cudaError_t cotensor_rc_ = (expr); cotensor_rc_ != cudaSuccess) {                    \
      ::cotensor::detail::cuda::throw_cuda_error(cotensor_rc_, #expr, __FILE__, __LINE__);         \
    }                                                                                              \
  } while (false)

/// Evaluates a CUDA runtime call; logs a failure and goes on. For destructors and shutdown.
#define COTENSOR_CUDA_LOG(expr)                                                                    \
  do {                                                                                             \
    if (const cudaError_t cotensor_rc_ = (expr); cotensor_rc_ != cudaSuccess) {                    \
      ::cotensor::detail::cuda::log_cuda_error(cotensor_rc_, #expr, __FILE__, __LINE__);           \
    }                                                                                              \
  } while (false)
