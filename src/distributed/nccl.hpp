#pragma once

// Collectives on GPU tensors through NCCL, in builds with both the CUDA backend and MPI
// (COTENSOR_HAVE_NCCL), compiled into libcotensor_cuda. NCCL is loaded with the first GPU
// collective (dlopen of libnccl.so.2), like cuBLAS with the first CUDA device.
//
// Each communicator gets, with its first GPU collective, an NCCL communicator over the same
// ranks (rank 0's ncclGetUniqueId, sent to the others by MPI_Bcast on the communication thread
// in issue order, then ncclCommInitRank), a stream of its own on the rank's device and a
// one-element "sequence" tensor on it. Every GPU collective is an engine op on the device that
// also writes the sequence tensor, so a communicator's GPU collectives launch in the order they
// were issued, on every rank (NCCL, like MPI, matches them by order). The op's work waits on
// the device for the work enqueued before it on the compute stream (an event, no host wait),
// runs on the communicator's stream, and ends through the device's event poller, so compute
// on other tensors goes on meanwhile.
//
// A watchdog thread per NCCL communicator checks, while collectives are in flight,
// ncclCommGetAsyncError and the communicator's timeout; on either it aborts the NCCL
// communicator (ncclCommAbort: the kernels return), fails the collectives in flight with the
// error and marks the communicator broken.

#include "cotensor/distributed.hpp"
#include "cotensor/tensor.hpp"

#include "distributed/comm_state.hpp"

#include <atomic>
#include <cstddef>

namespace cotensor::dist::detail {

/// A collective on GPU tensors: `kind` (all_reduce, broadcast, all_gather or reduce_scatter)
/// reads `in` (null for the in-place kinds) and writes `out`, `count` elements per rank, as
/// `request`.
struct gpu_collective {
  const communicator& c;
  const char* what;
  op_kind kind;
  reduce_op op;
  int root;
  const tensor* in;
  const tensor& out;
  std::size_t count;
};

/// Issues `g`. The first call on a communicator blocks until every rank has made its NCCL
/// communicator. Throws std::invalid_argument for a second device on one communicator,
/// std::system_error if NCCL cannot be loaded or set up.
void issue_on_gpu(const gpu_collective& g);

/// The NCCL path itself, in libcotensor_cuda (src/distributed/nccl.cpp), which sets this hook
/// as it loads: `issue_on_gpu` (in libcotensor) calls it. A GPU tensor cannot exist before the
/// library is loaded, so the hook is set by the time a collective gets one.
extern std::atomic<void (*)(const gpu_collective&)> gpu_issue;

}  // namespace cotensor::dist::detail
