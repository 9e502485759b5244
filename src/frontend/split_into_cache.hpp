#pragma once

// A generation step's q | k | v product split into its queries and the key/value cache's rows,
// the rotary embedding applied where the model has one, in one op. Internal: the language models
// use it (src/lm/forward.cpp); not part of the public API.

#include "cotensor/tensor.hpp"

#include <cstdint>

namespace cotensor::detail {

/// The rotary embedding a split applies to its queries and keys, as rotary_embedding(x,
/// positions, head_dim, theta) would: `positions` int64 [tokens].
struct split_rotary {
  const tensor& positions;
  std::int64_t head_dim;
  double theta;
};

/// From qkv [tokens, q_width + 2 · kv_width] (columns q | k | v): returns q [tokens, q_width]
/// and writes each row's k and v into row slots[r] of k_cache and v_cache (each seen as rows of
/// kv_width elements), in place, ordered with the ops around it as scatter_rows is; with
/// `rotary`, q's and k's heads rotated. The same bits as slice, rotary_embedding and
/// scatter_rows, which it issues instead where the device has no kernel for it (CUDA). One op on
/// the CPU: a row's angles computed once for its query and key heads. Slots must be distinct (a
/// step's tokens' own): on the CPU a repeated one fails the op with std::invalid_argument; one
/// outside the cache fails it with std::out_of_range; nothing is written then. Errors in the
/// arguments (shapes, dtypes, devices): std::invalid_argument at the call.
tensor split_into_cache(const tensor& qkv,
                        std::int64_t q_width,
                        std::int64_t kv_width,
                        const tensor& slots,
                        const tensor& k_cache,
                        const tensor& v_cache,
                        const split_rotary* rotary = nullptr);

}  // namespace cotensor::detail
