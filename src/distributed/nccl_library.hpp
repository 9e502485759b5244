#pragma once

// NCCL, loaded with the first GPU collective (dlopen of libnccl.so.2, like cuBLAS: the toolkit's
// loader, cuda/library.hpp), and the mapping of cotensor's dtypes, reductions and errors onto
// NCCL's. Used by nccl.cpp; in builds with COTENSOR_HAVE_NCCL only.

#include "cotensor/distributed.hpp"
#include "cotensor/dtype.hpp"

#include <nccl.h>
#include <string>
#include <system_error>

namespace cotensor::dist::detail {

// The NCCL entry points we call, resolved from the library.
struct nccl_api {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommFinalize) comm_finalize = nullptr;  // NCCL >= 2.14; null before
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
};

/// NCCL, loaded on the first call (thread-safe; never unloaded). Throws std::system_error
/// (errc::device_unavailable) naming the library and what was tried if it cannot be.
const nccl_api& nccl();

/// NCCL's error category: messages from ncclGetErrorString once NCCL is loaded.
const std::error_category& nccl_category();
/// A std::system_error of `rc` in nccl_category(), "cotensor::dist: <what>".
std::system_error nccl_error(ncclResult_t rc, const std::string& what);
/// Throws nccl_error(rc, call) unless rc is ncclSuccess.
void check(ncclResult_t rc, const char* call);

/// NCCL's own type for each dtype; bool moves as bytes (ncclUint8), 0 or 1.
ncclDataType_t nccl_type(dtype t) noexcept;
/// NCCL's reduction for `op` on `t`. ncclAvg on integers is the sum divided with truncation
/// toward zero, as on the CPU path. bool reduces by ncclMax (sum, max: logical or) and ncclMin
/// (logical and); its avg is refused at the call.
ncclRedOp_t nccl_op(reduce_op op, dtype t) noexcept;

}  // namespace cotensor::dist::detail
