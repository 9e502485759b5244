#include "cuda/blas.hpp"

#include "cotensor/error.hpp"

#include <dlfcn.h>
#include <string>
#include <system_error>

namespace cotensor::detail::cuda {
namespace {

// The soname of the toolkit we build with (libcublas.so.13 for CUDA 13).
constexpr const char* library = "libcublas.so." COTENSOR_CUBLAS_SOVERSION;

struct loaded {
  blas_api api{};
  std::string error;  // empty once loaded
};

template <class F>
bool resolve(void* handle, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  return f != nullptr;
}

loaded load() {
  loaded l;
  // Never unloaded: handles may be destroyed at exit, after static destructors would run.
  // The loader's search path first (LD_LIBRARY_PATH, ldconfig), then the toolkit we built with
  // (/usr/local/cuda/lib64 is rarely on the search path).
  void* h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    const std::string first = why != nullptr ? why : "?";
    const std::string beside_toolkit = std::string(COTENSOR_CUBLAS_BUILD_DIR) + "/" + library;
    h = dlopen(beside_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      l.error = std::string("cannot load ") + library + " (cuBLAS): " + first;
      return l;
    }
  }
  blas_api& a = l.api;
  if (!resolve(h, "cublasCreate_v2", a.create) || !resolve(h, "cublasDestroy_v2", a.destroy) ||
      !resolve(h, "cublasSetStream_v2", a.set_stream) ||
      !resolve(h, "cublasSetWorkspace_v2", a.set_workspace) ||
      !resolve(h, "cublasSetMathMode", a.set_math_mode) || !resolve(h, "cublasSgemm_v2", a.sgemm)) {
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
