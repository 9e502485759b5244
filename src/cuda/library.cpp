#include "cuda/library.hpp"

#include "support/environment.hpp"

#include <cstdlib>
#include <mutex>
#include <shared_mutex>

namespace cotensor::detail::cuda {

void* open_toolkit_library(const char* soname, const char* dir_variable, std::string& error) {
  // The library's constructors may read the environment.
  const std::shared_lock environment(environment_mutex());
  std::string tried;
  auto attempt = [&](const std::string& path, const std::string& where) -> void* {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      tried += "; tried " + path + where + ": " + (why != nullptr ? why : "?");
    }
    return h;
  };
  const char* dir = dir_variable != nullptr ? std::getenv(dir_variable) : nullptr;  // locked
  void* h = nullptr;
  if (dir != nullptr && *dir != '\0') {
    // Named by the user: the only place looked, so that no other copy is taken silently.
    h = attempt(std::string(dir) + "/" + soname, std::string(" (from ") + dir_variable + ")");
  } else {
    h = attempt(soname, " (the loader's search path: LD_LIBRARY_PATH, RUNPATH, ldconfig)");
    if (h == nullptr) {
      h = attempt(std::string(COTENSOR_CUDA_LIBRARY_DIR) + "/" + soname,
                  " (the build's CUDA toolkit)");
    }
  }
  if (h == nullptr) {
    error = std::string("cannot load ") + soname + tried;
    if (dir_variable != nullptr) {
      error += std::string("; set ") + dir_variable + " to the directory that holds " + soname;
    }
  }
  return h;
}

}  // namespace cotensor::detail::cuda
