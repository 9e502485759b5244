#pragma once

// cuBLAS, loaded when a CUDA device is first used (dlopen), not when libcotensor loads: a
// process that never touches a GPU does not pay for mapping and relocating libcublas and
// libcublasLt (+0.1 s and +216 MB resident at startup, measured), and the library runs where
// cuBLAS is not installed at all. Compiled only with COTENSOR_WITH_CUDA.

#include <cublas_api.h>

namespace cotensor::detail::cuda {

/// The cuBLAS entry points the backend calls.
struct blas_api {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasDgemm_v2) dgemm;
  /// float16 and bfloat16, accumulating in float32 (the overload that takes a
  /// cublasComputeType_t; C++ code also sees a deprecated one taking a cudaDataType).
  cublasStatus_t (*gemm_ex)(cublasHandle_t,
                            cublasOperation_t,
                            cublasOperation_t,
                            int,
                            int,
                            int,
                            const void*,
                            const void*,
                            cudaDataType,
                            int,
                            const void*,
                            cudaDataType,
                            int,
                            const void*,
                            void*,
                            cudaDataType,
                            int,
                            cublasComputeType_t,
                            cublasGemmAlgo_t);
};

/// cuBLAS, loaded on the first call (thread-safe). Throws std::system_error
/// (errc::device_unavailable) naming the library and the loader's error if it cannot be
/// loaded, on this call and every later one.
const blas_api& cublas();

}  // namespace cotensor::detail::cuda
