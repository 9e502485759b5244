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

/// Whether `p` picks the likeliest token (temperature 0 or top_k 1), which needs only each
/// row's first largest logit and its value.
bool is_greedy(const sampling_params& p) noexcept;

/// Whether `p` adjusts a row's logits before the pick (`logit_bias` or a penalty), which then
/// needs the whole row.
bool adjusts_logits(const sampling_params& p) noexcept;

/// `logits` (one row of the vocabulary) adjusted by `p` for a sequence of `prompt` and
/// `generated` ids, in vLLM's order, in float: each `logit_bias` added; then for each id of the
/// prompt or generated (once), x / repetition_penalty where x > 0, else x · repetition_penalty,
/// a finite result held within float's range; then for each generated id seen c times,
/// c · frequency_penalty subtracted, then presence_penalty. The ids are below the row's size
/// (submit checks them).
void adjust_logits(std::span<float> logits,
                   const sampling_params& p,
                   std::span<const std::int32_t> prompt,
                   std::span<const std::int32_t> generated);

/// The greedy pick of a row whose first largest logit is at `first_largest` with value
/// `largest` (argmax and max over the row; max is NaN or +infinity where the row has one).
/// Throws std::runtime_error, as `sample`, if the row has a NaN or +infinity.
std::int32_t pick_greedy(std::int64_t first_largest, float largest);

/// The token picked from `logits` (one row of the vocabulary) for the `n`-th token generated
/// under `seed`: `pick` with the Philox number of (seed, n), or the first largest logit when
/// greedy. Throws std::runtime_error if a logit is NaN or +infinity.
std::int32_t sample(std::span<const float> logits,
                    const sampling_params& p,
                    std::uint64_t seed,
                    std::uint64_t n);

/// The token a uniform `u` in [0, 1) picks from `logits` (no NaN or +infinity; -infinity has
/// weight 0) whose largest is `top`, under a temperature above 0: the weights e^(x/T − top/T)
/// in float (libmvec's exp, within 4 ulp), kept by top-k, then by top-p over their total (in
/// double), the kept ones walked to where u · their total falls: likeliest first when top-k
/// (below the vocabulary's size) filters, in id order otherwise.
std::int32_t pick(std::span<const float> logits, float top, const sampling_params& p, double u);

/// The log-probabilities of `id` and of the `top` most likely ids of `logits` (one row of the
/// vocabulary; throws std::runtime_error, as `sample`, if a logit is NaN or +infinity):
/// x − max − log Σ e^(x − max), the exponentials in
/// float (libmvec's, within 4 ulp), their sum, the logarithm and the difference in double,
/// rounded to float; the most likely first, the lower id first among equals.
token_logprobs logprobs_of(std::span<const float> logits, std::int32_t id, int top);

}  // namespace cotensor::lm
