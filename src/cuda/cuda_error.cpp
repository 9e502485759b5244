#include "cuda/cuda_error.hpp"

#include <cstdio>

namespace cotensor::detail::cuda {
namespace {

class category final : public std::error_category {
public:
  const char* name() const noexcept override { return "cuda"; }
  std::string message(int code) const override {
    const auto e = static_cast<cudaError_t>(code);
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
};

}  // namespace

const std::error_category& cuda_category() noexcept {
  static const category instance;
  return instance;
}

void throw_cuda_error(cudaError_t rc, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  throw std::system_error(make_error_code(rc), std::string("cotensor: ") + expr + " at " + file +
                                                   ":" + std::to_string(line));
}

void log_cuda_error(cudaError_t rc, const char* expr, const char* file, int line) noexcept {
  (void)cudaGetLastError();
  std::fprintf(stderr, "cotensor: %s at %s:%d: %s: %s\n", expr, file, line, cudaGetErrorName(rc),
               cudaGetErrorString(rc));
}

}  // namespace cotensor::detail::cuda
