#include "cpu/openblas.hpp"

#include "dynamic_symbol.hpp"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <stdexcept>

namespace cotensor::detail::cpu {

namespace {

// OPENBLAS_CORETYPE set for the duration of a scope, when it was unset; unset again after.
class coretype_for_scope {
public:
  coretype_for_scope() {
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      if (const char* core = openblas_coretype();
          core != nullptr && ::setenv("OPENBLAS_CORETYPE", core, 0) == 0) {
        set_ = core;
      }
    }
  }
  coretype_for_scope(const coretype_for_scope&) = delete;
  coretype_for_scope& operator=(const coretype_for_scope&) = delete;
  ~coretype_for_scope() {
    if (!set_.empty()) {
      ::unsetenv("OPENBLAS_CORETYPE");
    }
  }
  const std::string& set() const noexcept { return set_; }

private:
  std::string set_;
};

openblas_library open_openblas() {
  // The SONAME first (the loader's search path, libcotensor's RUNPATH), then the file this build
  // linked against.
  const char* const candidates[] = {COTENSOR_OPENBLAS_SONAME, COTENSOR_OPENBLAS_LIBRARY};
  std::string tried;
  void* handle = nullptr;
  openblas_library lib;
  {
    const coretype_for_scope coretype;
    for (const char* path : candidates) {
      handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);  // never closed
      if (handle != nullptr) {
        break;
      }
      const char* why = ::dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + path + ": " + (why ? why : "?");
    }
    lib.coretype_set = coretype.set();
  }
  if (handle == nullptr) {
    throw std::runtime_error("cotensor: cannot load OpenBLAS for matmul on the CPU (tried " +
                             tried + "); on Debian: apt-get install libopenblas0");
  }
  std::string missing;  // the names of those not found, for the message
  const auto need = [&](const char* name, auto& f) {
    if (!resolve(handle, name, f)) {
      missing += missing.empty() ? name : std::string(", ") + name;
    }
  };
  need("cblas_sgemm", lib.sgemm);
  need("cblas_dgemm", lib.dgemm);
  void (*set_num_threads)(int) = nullptr;
  char* (*get_corename)() = nullptr;
  need("openblas_set_num_threads", set_num_threads);
  need("openblas_get_corename", get_corename);
  if (!missing.empty()) {
    throw std::runtime_error(std::string("cotensor: the OpenBLAS loaded for matmul lacks ") +
                             missing);
  }
  set_num_threads(1);
  const char* core = get_corename();
  lib.core = core != nullptr ? core : "";
  return lib;
}

}  // namespace

const char* openblas_coretype() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return "Haswell";
  }
#endif
  return nullptr;
}

const openblas_library& openblas() {
  // A failed load is retried by the next GEMM (call_once does not complete on an exception).
  static std::once_flag once;
  static openblas_library lib;
  std::call_once(once, [] { lib = open_openblas(); });
  return lib;
}

}  // namespace cotensor::detail::cpu
