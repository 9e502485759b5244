#include "cotensor/error.hpp"

namespace cotensor {
namespace {

class category final : public std::error_category {
public:
  const char* name() const noexcept override { return "cotensor"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
    case errc::device_unavailable:
      return "device unavailable in this build or on this machine";
    case errc::wait_on_backend_thread:
      return "blocking wait on a backend worker thread (it could deadlock)";
    case errc::shutting_down:
      return "the runtime is shutting down";
    case errc::op_abandoned:
      return "the op's completion was destroyed without being invoked";
    }
    return "unknown cotensor error";
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace cotensor
