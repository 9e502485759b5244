#pragma once

// Picking a sequence's next token from its logits (sampling_params): greedy, or temperature,
// top-k and top-p with one Philox-4x32-10 number per token, so that a seed gives the same
// tokens on any thread count and in any batch.

#include "cotensor/lm.hpp"

#include <cstdint>
#include <span>

namespace cotensor::lm {

/// Throws std::invalid_argument naming the first parameter out of range.
void check_sampling(const sampling_params& p);

/// The token picked from `logits` (one row of the vocabulary) for the `n`-th token generated
/// under `seed`. Throws std::runtime_error if a logit is NaN or +infinity.
std::int32_t sample(std::span<const float> logits,
                    const sampling_params& p,
                    std::uint64_t seed,
                    std::uint64_t n);

}  // namespace cotensor::lm
