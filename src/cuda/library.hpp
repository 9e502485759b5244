#pragma once

// Loading a library of the CUDA toolkit when it is first needed (dlopen), not when libcotensor
// loads: cuBLAS with the first CUDA device, NCCL with the first GPU collective. Compiled only
// with COTENSOR_WITH_CUDA.

#include <dlfcn.h>
#include <string>

namespace cotensor::detail::cuda {

/// Opens `soname` (e.g. "libcublas.so.13"): the loader's search path first (LD_LIBRARY_PATH,
/// ldconfig), then the toolkit's library directory this build was made with (rarely on the
/// search path). Never closed: handles made from it may be destroyed at exit, after static
/// destructors. Returns null, with `error` naming the loader's first complaint, if neither
/// works.
void* open_toolkit_library(const char* soname, std::string& error);

/// Resolves `name` in `handle` into `f`; false if it is missing.
template <class F>
bool resolve(void* handle, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  return f != nullptr;
}

}  // namespace cotensor::detail::cuda
