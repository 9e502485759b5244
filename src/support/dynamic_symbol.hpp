#pragma once

// A function of a library opened with dlopen: cuBLAS and NCCL (cuda/library.hpp), OpenBLAS
// (cpu/openblas.hpp).

#include <dlfcn.h>

namespace cotensor::detail {

/// Resolves `name` in `handle` into `f`; false if it is missing.
template <class F>
bool resolve(void* handle, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  return f != nullptr;
}

}  // namespace cotensor::detail
