#pragma once

#include "cotensor/config.hpp"

#include <cstdint>
#include <iosfwd>

namespace cotensor {

/// Where a tensor's storage lives and where ops on it run.
///
/// `device::cpu()` is always available. `device::cuda(i)` names a GPU; this build cannot run ops
/// on one yet (COTENSOR_WITH_CUDA is 0), so creating a tensor on it, or copying to it, throws
/// `std::system_error` with `errc::device_unavailable` at the call, saying why (in CUDA's own
/// words, such as `cudaErrorInsufficientDriver`, when the build links CUDA's runtime:
/// COTENSOR_HAVE_CUDA_RUNTIME).
struct device {
  /// The kind of device.
  enum class kind : std::uint8_t { cpu, cuda };

  /// The host CPU, served by the runtime's oneTBB arena.
  static constexpr device cpu() noexcept { return device{kind::cpu, 0}; }
  /// The GPU with ordinal `index` (0-based).
  static constexpr device cuda(int index = 0) noexcept { return device{kind::cuda, index}; }

  kind type = kind::cpu;
  int index = 0;

  /// True for `device::cpu()`.
  constexpr bool is_cpu() const noexcept { return type == kind::cpu; }
  friend constexpr bool operator==(const device&, const device&) noexcept = default;
};

/// Prints `cpu` or `cuda:<index>`.
std::ostream& operator<<(std::ostream& os, const device& d);

}  // namespace cotensor
