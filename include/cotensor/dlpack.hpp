#pragma once

#include "cotensor/asio.hpp"
#include "cotensor/tensor.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>

#include <exception>
#include <stdexcept>
#include <utility>

// DLPack's struct, declared as <dlpack/dlpack.h> defines it (`typedef struct DLManagedTensor
// {...} DLManagedTensor;`), so this header needs no DLPack headers: include <dlpack/dlpack.h>
// (Debian: libdlpack-dev) to read or fill its fields.
struct DLManagedTensor;

namespace cotensor {

/// Exports `t` as a DLPack tensor that shares its buffer (no copy). Blocks until the writes to
/// `t` issued before the call have ended.
///
/// The result describes `t`'s shape, dtype and device (`kDLCPU`, or `kDLCUDA` with the GPU's
/// index), compact row-major with `strides` set, `byte_offset` 0. Dtype codes: int32/int64
/// `kDLInt`, float16/float32/float64 `kDLFloat`, bfloat16 `kDLBfloat`, bool `kDLBool` (code 6,
/// 8 bits: DLPack 0.8's code; Debian's 0.6 header predates it). It holds a reference to the
/// buffer: the buffer lives until the consumer calls the result's `deleter` (exactly once, from
/// any thread), however long cotensor's own handles last.
///
/// Ownership: the caller owns the result and must call its `deleter`. The memory is shared:
/// ops issued on `t`'s buffer after the export (`+=`, say) are not ordered with the consumer's
/// reads or writes; the consumer must not use the memory while such ops may run, and must
/// not write it while cotensor ops read it.
/// Errors: `std::invalid_argument` for an empty handle; the exception of the op that failed
/// to compute `t`, as `tensor::wait`.
/// Thread safety: any thread but an Asio event loop's or a backend's (it blocks: use
/// `async_to_dlpack` there).
DLManagedTensor* to_dlpack(const tensor& t);

namespace detail {
/// Exports `t` without waiting: its writes must have ended.
DLManagedTensor* export_dlpack(const tensor& t);
}  // namespace detail

/// Exports `t` as `to_dlpack` does, once its pending writes have ended, as a universal Asio
/// async operation (it never blocks).
///
/// Completion: `void(std::exception_ptr, DLManagedTensor*)`: null and the DLPack tensor (the
/// handler owns it: call its `deleter`), or the error and null. The handler runs on its
/// associated executor, never on a backend thread. Boost 1.81 cannot `co_await` a `deferred`
/// operation with this signature: use `asio::use_awaitable`, which throws the error.
/// Errors: `std::invalid_argument` at the call for an empty handle; the exception of the op
/// that failed to compute `t`.
/// Cancellation: as `tensor::async_wait` (every type; a cancelled export completes with the
/// `operation_aborted` error and exports nothing).
/// Thread safety: any thread.
template <class Token>
auto async_to_dlpack(const tensor& t, Token&& token) {
  if (!t.defined()) {
    throw std::invalid_argument("cotensor::async_to_dlpack: the tensor is empty (no buffer)");
  }
  return asio::async_compose<Token, void(std::exception_ptr, DLManagedTensor*)>(
      [t, started = false](auto& self, std::exception_ptr error = nullptr) mutable {
        if (!started) {
          started = true;
          t.async_wait(std::move(self));
          return;
        }
        DLManagedTensor* exported = nullptr;
        if (!error) {
          try {
            exported = detail::export_dlpack(t);
          } catch (...) {
            error = std::current_exception();
          }
        }
        self.complete(std::move(error), exported);
      },
      token);
}

/// Wraps the DLPack tensor `m` as a cotensor tensor without copying: the tensor's buffer is
/// `m`'s memory, and `m->deleter(m)` is called when the last handle and the last op that use
/// it are gone (on the thread that drops it: a backend thread, possibly).
///
/// Accepted: `kDLCPU` and `kDLCUDAHost` memory (a CPU tensor), `kDLCUDA` (a tensor on
/// `device::cuda(device_id)`, in builds with the CUDA backend); the seven dtypes with one
/// lane (bool as `kDLBool` code 6, 8 bits); compact row-major strides (or null strides);
/// data aligned to the element size. The producer's pending work on the memory must have
/// ended (DLPack's C struct carries no stream to wait on).
///
/// Ownership: on success the tensor owns `m`; if the call throws, `m` is untouched and the
/// caller still owns it.
/// Errors: `std::invalid_argument` for a null `m`, an unsupported dtype, device, strides or
/// alignment, naming what is wrong; `std::system_error(errc::device_unavailable)` for a GPU
/// this build or machine cannot serve.
/// Thread safety: any thread.
tensor from_dlpack(DLManagedTensor* m);

}  // namespace cotensor
