#pragma once

#include "cotensor/device.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include <cstdint>

namespace cotensor {

/// A tensor of shape `s` with standard normal samples, computed on the backend.
///
/// The numbers come from the counter-based Philox-4x32-10 generator (Random123) and the
/// Box-Muller transform: element `i` of the `c`-th `randn` call since `manual_seed(seed)` is a
/// function of `(seed, c, i)` alone, so a seed gives the same numbers whatever the number of
/// threads. Calls from several threads at once draw distinct call numbers in an unspecified
/// order. Thread safety: any thread.
tensor randn(shape s, device d = device::cpu());

/// Restarts the random sequence: the next `randn` call is call 0 for `seed`. The default seed,
/// before any call, is 0.
void manual_seed(std::uint64_t seed);

}  // namespace cotensor
