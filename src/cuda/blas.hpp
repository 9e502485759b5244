#pragma once

// cuBLAS, loaded with the first matmul on a GPU (dlopen), not when libcotensor loads nor when a
// device is first used: a process that never multiplies on a GPU does not pay for mapping and
// relocating libcublas and libcublasLt (+0.1 s and +216 MB resident at startup, measured), and
// a machine whose cuBLAS cannot be loaded runs every other GPU op; only matmul fails there,
// naming the library, the paths tried and CUBLAS_DIR. Compiled only with COTENSOR_WITH_CUDA.

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

/// cuBLAS, loaded on the first call (thread-safe): from $CUBLAS_DIR alone when it is set, else
/// the loader's search path, else the build's toolkit. Throws std::system_error
/// (errc::device_unavailable) naming the library, each path tried with the loader's error, and
/// CUBLAS_DIR if it cannot be loaded, on this call and every later one.
const blas_api& cublas();

}  // namespace cotensor::detail::cuda
