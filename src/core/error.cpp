#include "cotensor/error.hpp"

#include "support/error_category.hpp"

namespace cotensor {
namespace {

std::string message_of(int code) {
  static constexpr detail::code_message<errc> messages[] = {
      {errc::device_unavailable, "device unavailable in this build or on this machine"},
      {errc::wait_on_backend_thread,
       "blocking wait on a backend worker thread (it could deadlock)"},
      {errc::shutting_down, "the runtime is shutting down"},
      {errc::op_abandoned, "the op's completion was destroyed without being invoked"},
  };
  return detail::message_in(messages, code, "unknown cotensor error");
}

}  // namespace

const std::error_category& error_category() noexcept {
  static const detail::message_category instance("cotensor", message_of);
  return instance;
}

}  // namespace cotensor
