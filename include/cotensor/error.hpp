#pragma once

#include <string>
#include <system_error>
#include <type_traits>

namespace cotensor {

/// Runtime failures reported by cotensor as `std::error_code`s in `cotensor::error_category()`.
///
/// Bad arguments to an op (wrong shape, size, device) are not runtime failures: the op throws
/// `std::invalid_argument` at its call and enqueues nothing.
enum class errc {
  /// The device named exists in no backend of this build or machine.
  device_unavailable = 1,
  /// A blocking wait was called on a backend worker thread, where it could deadlock.
  wait_on_backend_thread,
  /// The runtime is shutting down and takes no more work.
  shutting_down,
  /// An op that completes later (`async_op`) lost its completion without invoking it: the
  /// op failed, and every wait on what it writes rethrows this.
  op_abandoned,
};

/// The category of `cotensor::errc`.
const std::error_category& error_category() noexcept;

/// Makes an error code in `cotensor::error_category()`.
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

}  // namespace cotensor

template <>
struct std::is_error_code_enum<cotensor::errc> : std::true_type {};
