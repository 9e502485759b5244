#include "support/fault_hooks.hpp"

namespace cotensor::detail::fault_hooks {

std::atomic<bool> armed{false};
std::atomic<void (*)()> on_allocate{nullptr};

}  // namespace cotensor::detail::fault_hooks
