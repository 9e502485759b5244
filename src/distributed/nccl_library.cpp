// NCCL loaded on first use (dlopen), and what NCCL's names are for cotensor's. See
// nccl_library.hpp.

#include "distributed/nccl_library.hpp"

#include "cotensor/error.hpp"

#include "core/visit_dtype.hpp"
#include "cuda/library.hpp"
#include "support/error_category.hpp"

#include <string>

namespace cotensor::dist::detail {

namespace {

constexpr const char* library = "libnccl.so.2";

struct loaded_nccl {
  nccl_api api;
  std::string error;  // empty once loaded
};

loaded_nccl load() {
  loaded_nccl l;
  void* h = cotensor::detail::cuda::open_toolkit_library(library, l.error);
  if (h == nullptr) {
    l.error += " (NCCL, for collectives on GPU tensors)";
    return l;
  }
  using cotensor::detail::cuda::resolve;
  nccl_api& a = l.api;
  if (!resolve(h, "ncclGetUniqueId", a.get_unique_id) ||
      !resolve(h, "ncclCommInitRank", a.comm_init_rank) ||
      !resolve(h, "ncclCommAbort", a.comm_abort) ||
      !resolve(h, "ncclCommDestroy", a.comm_destroy) ||
      !resolve(h, "ncclCommGetAsyncError", a.comm_get_async_error) ||
      !resolve(h, "ncclGetErrorString", a.get_error_string) ||
      !resolve(h, "ncclAllReduce", a.all_reduce) || !resolve(h, "ncclBroadcast", a.broadcast) ||
      !resolve(h, "ncclAllGather", a.all_gather) ||
      !resolve(h, "ncclReduceScatter", a.reduce_scatter)) {
    l.error = std::string(library) + " lacks an NCCL entry point we call";
  }
  (void)resolve(h, "ncclCommFinalize", a.comm_finalize);  // optional: destroy alone before it
  return l;
}

// Never destroyed: the last NCCL communicator may go at exit, after static destructors.
const loaded_nccl& loaded() {
  static const auto* l = new loaded_nccl(load());
  return *l;
}

}  // namespace

const nccl_api& nccl() {
  const auto& l = loaded();
  if (!l.error.empty()) {
    throw std::system_error(make_error_code(cotensor::errc::device_unavailable),
                            "cotensor::dist: " + l.error);
  }
  return l.api;
}

namespace {

std::string nccl_message(int code) {
  const auto& l = loaded();
  if (l.error.empty()) {
    return l.api.get_error_string(static_cast<ncclResult_t>(code));
  }
  return "NCCL error " + std::to_string(code);
}

}  // namespace

const std::error_category& nccl_category() {
  // errors may outlive static destructors
  static const auto* c = new ::cotensor::detail::message_category("nccl", nccl_message);
  return *c;
}

std::system_error nccl_error(ncclResult_t rc, const std::string& what) {
  return {static_cast<int>(rc), nccl_category(), "cotensor::dist: " + what};
}

void check(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) {
    throw nccl_error(rc, call);
  }
}

ncclDataType_t nccl_type(dtype t) noexcept {
  static constexpr ncclDataType_t types[] = {ncclUint8,    ncclInt32,   ncclInt64,  ncclFloat16,
                                             ncclBfloat16, ncclFloat32, ncclFloat64};
  return ::cotensor::detail::dtype_entry(types, t, ncclFloat32);
}

ncclRedOp_t nccl_op(reduce_op op, dtype t) noexcept {
  if (t == dtype::boolean) {
    return op == reduce_op::min ? ncclMin : ncclMax;
  }
  switch (op) {
  case reduce_op::avg:
    return ncclAvg;
  case reduce_op::max:
    return ncclMax;
  case reduce_op::min:
    return ncclMin;
  case reduce_op::sum:
    break;
  }
  return ncclSum;
}

}  // namespace cotensor::dist::detail
