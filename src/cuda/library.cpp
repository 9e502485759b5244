#include "cuda/library.hpp"

namespace cotensor::detail::cuda {

void* open_toolkit_library(const char* soname, std::string& error) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    const std::string first = why != nullptr ? why : "?";
    const std::string beside_toolkit = std::string(COTENSOR_CUDA_LIBRARY_DIR) + "/" + soname;
    h = dlopen(beside_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = std::string("cannot load ") + soname + ": " + first;
    }
  }
  return h;
}

}  // namespace cotensor::detail::cuda
