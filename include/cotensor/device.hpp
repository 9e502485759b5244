#pragma once

#include "cotensor/config.hpp"

#include <cstdint>
#include <iosfwd>
#include <string>

namespace cotensor {

/// Where a tensor's storage lives and where ops on it run.
///
/// `device::cpu()` is always available. `device::cuda(i)` names GPU `i`, served by the CUDA
/// backend in builds with COTENSOR_WITH_CUDA. Where it cannot be used (a build without CUDA, a
/// machine without a driver or without that GPU), creating a tensor on it, or copying to it,
/// throws `std::system_error` with `errc::device_unavailable` at the call, saying why in CUDA's
/// own words (such as `cudaErrorInsufficientDriver`); `is_available` and `unavailable_reason`
/// ask beforehand.
struct device {
  /// The kind of device.
  enum class kind : std::uint8_t { cpu, cuda };

  /// The host CPU, served by the runtime's oneTBB arena.
  static constexpr device cpu() noexcept { return device{kind::cpu, 0}; }
  /// The GPU with ordinal `index` (0-based).
  static constexpr device cuda(int index = 0) noexcept { return device{kind::cuda, index}; }

  kind type = kind::cpu;  ///< CPU or CUDA
  int index = 0;          ///< the device's ordinal within its kind (0 for the CPU)

  /// True for `device::cpu()`.
  constexpr bool is_cpu() const noexcept { return type == kind::cpu; }
  friend constexpr bool operator==(const device&, const device&) noexcept = default;
};

/// True if ops can run on `d` in this build on this machine. Asks CUDA once per process, on the
/// first question about a CUDA device (CUDA initialises then, not at startup). Thread-safe.
bool is_available(device d) noexcept;
/// Why `d` cannot be used, in words ("cudaGetDeviceCount: cudaErrorInsufficientDriver (...)",
/// "this machine has 1 CUDA device", "this build has no CUDA backend"); empty if it can.
std::string unavailable_reason(device d);
/// The CUDA devices ops can run on: 0 in a build without CUDA or on a machine without a GPU.
int cuda_device_count() noexcept;

/// Prints `cpu` or `cuda:<index>`.
std::ostream& operator<<(std::ostream& os, const device& d);

}  // namespace cotensor
