#include "cpu/openblas.hpp"

#include "support/dynamic_symbol.hpp"
#include "support/environment.hpp"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>

namespace cotensor::detail::cpu {

namespace {

// An environment variable set to `value` for the duration of a scope, when it was unset and
// `value` is not null; unset again after.
class env_for_scope {
public:
  env_for_scope(const char* name, const char* value) : name_(name) {
    if (value != nullptr && std::getenv(name) == nullptr && ::setenv(name, value, 0) == 0) {
      set_ = value;
    }
  }
  env_for_scope(const env_for_scope&) = delete;
  env_for_scope& operator=(const env_for_scope&) = delete;
  ~env_for_scope() {
    if (!set_.empty()) {
      ::unsetenv(name_);
    }
  }
  const std::string& set() const noexcept { return set_; }

private:
  const char* name_;
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
    // Exclusive: no thread of cotensor reads the environment while it changes (environment.hpp).
    const std::lock_guard environment(environment_mutex());
    // OpenBLAS reads both in its constructor: the kernels, and how many threads its pool gets.
    // cotensor calls it from one worker per tile, so a pool would only spin (its thread polls
    // for 2^28 cycles, ~0.13 s of CPU, after the load) and sleep.
    const env_for_scope coretype("OPENBLAS_CORETYPE", openblas_coretype());
    const env_for_scope threads("OPENBLAS_NUM_THREADS", "1");
    for (const char* path : candidates) {
      handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);  // never closed
      if (handle != nullptr) {
        break;
      }
      const char* why = ::dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + path + ": " + (why ? why : "?");
    }
    lib.coretype_set = coretype.set();
    lib.num_threads_set = !threads.set().empty();
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
