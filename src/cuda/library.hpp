#pragma once

// Loading a library of the CUDA toolkit when it is first needed (dlopen), not when libcotensor
// loads: cuBLAS with the first matmul on a GPU, NCCL with the first GPU collective. Compiled only
// with COTENSOR_WITH_CUDA.

#include "support/dynamic_symbol.hpp"

#include <dlfcn.h>
#include <string>

namespace cotensor::detail::cuda {

/// Opens `soname` (e.g. "libcublas.so.13"): from the directory named by the environment
/// variable `dir_variable` when it is given and set (`CUBLAS_DIR`), and from there only; else
/// the loader's search path (LD_LIBRARY_PATH, the RUNPATH of the program, ldconfig's cache),
/// then the toolkit's library directory this build was made with (rarely on the search path). Never
/// closed: handles made from it may be destroyed at exit, after static destructors. Returns
/// null if none works, with `error` saying so: "cannot load libcublas.so.13; tried
/// /opt/x/libcublas.so.13 (from CUBLAS_DIR): <the loader's complaint>; ...".
void* open_toolkit_library(const char* soname, const char* dir_variable, std::string& error);

/// As above, with no environment variable.
inline void* open_toolkit_library(const char* soname, std::string& error) {
  return open_toolkit_library(soname, nullptr, error);
}

/// Resolves a function of a library opened here (dynamic_symbol.hpp).
using detail::resolve;

}  // namespace cotensor::detail::cuda
