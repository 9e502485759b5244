#pragma once

#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include <cstdint>

namespace cotensor {

/// A tensor of shape `s` with standard normal samples, computed on the backend.
///
/// The numbers come from the counter-based Philox-4x32-10 generator (the stream of Random123's
/// `r123::Philox4x32`) and the Box-Muller transform: element `4b + 2j + t` of the `c`-th
/// `randn` call since `manual_seed(seed)` takes the words `(w0, w1)` = words `2j, 2j + 1` of
/// Philox block `(b, 0, c, 0)` under key `seed`, and is `r·cos θ` (t = 0) or `r·sin θ` (t = 1)
/// with `r = √(−2 ln((w0 + ½)·2⁻³²))` and `θ = 2π·w1·2⁻³²`, to float precision (so |z| < 6.8).
/// So element `i` is a function of `(seed, c, i)` alone: a seed gives the same numbers whatever
/// the number of threads, and the same bits on every x86 vector width (AVX-512, AVX2, SSE2),
/// since the transform uses only correctly rounded IEEE operations. Calls from several threads
/// at once draw distinct call numbers in an unspecified order. Thread safety: any thread.
tensor randn(shape s, device d = device::cpu());

/// A tensor of float dtype `t` with standard normal samples. float16 and bfloat16 are the
/// float32 samples above rounded to nearest even (so the same bits on every device); float64
/// takes its own draw: element `2p + t` is Box-Muller in double on the 53-bit uniforms made
/// of words (0, 1) and (2, 3) of Philox block `(p, 0, c, 0)`. std::invalid_argument for
/// an integer or bool dtype, or a dtype the device lacks.
tensor randn(shape s, dtype t, device d = device::cpu());

/// Restarts the random sequence: the next `randn` call is call 0 for `seed`. The default seed,
/// before any call, is 0.
void manual_seed(std::uint64_t seed);

}  // namespace cotensor
