#include "cuda/blas.hpp"

#include "cotensor/error.hpp"

#include "cuda/library.hpp"

#include <string>
#include <system_error>

namespace cotensor::detail::cuda {
namespace {

// The soname of the toolkit we build with (libcublas.so.13 for CUDA 13).
constexpr const char* library = "libcublas.so." COTENSOR_CUDA_SOVERSION;

struct loaded {
  blas_api api{};
  std::string error;  // empty once loaded
};

loaded load() {
  loaded l;
  void* h = open_toolkit_library(library, "CUBLAS_DIR", l.error);
  if (h == nullptr) {
    l.error = "matmul on a GPU needs cuBLAS: " + l.error + " and libcublasLt.so." +
              COTENSOR_CUDA_SOVERSION + " (CUDA 13's cuBLAS; every other GPU op runs without it)";
    return l;
  }
  blas_api& a = l.api;
  if (!resolve(h, "cublasCreate_v2", a.create) || !resolve(h, "cublasDestroy_v2", a.destroy) ||
      !resolve(h, "cublasSetStream_v2", a.set_stream) ||
      !resolve(h, "cublasSetWorkspace_v2", a.set_workspace) ||
      !resolve(h, "cublasSetMathMode", a.set_math_mode) || !resolve(h, "cublasSgemm_v2", a.sgemm) ||
      !resolve(h, "cublasDgemm_v2", a.dgemm) || !resolve(h, "cublasGemmEx", a.gemm_ex)) {
    l.error = std::string(library) + " lacks a cuBLAS entry point we call";
  }
  return l;
}

}  // namespace

const blas_api& cublas() {
  static const loaded l = load();
  if (!l.error.empty()) {
    throw std::system_error(make_error_code(errc::device_unavailable), "cotensor: " + l.error);
  }
  return l.api;
}

}  // namespace cotensor::detail::cuda
