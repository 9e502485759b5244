#pragma once

// The events of one CUDA device, as the event poller sees them. Compiled only in builds that
// link CUDA's runtime (COTENSOR_HAVE_CUDA_RUNTIME).

#include "cuda/event_poller.hpp"

#include <cuda_runtime_api.h>
#include <mutex>
#include <vector>

namespace cotensor::detail::cuda {

/// A pool of events of device `device`, made with `cudaEventDisableTiming`: one is recorded
/// after an op's work on its stream, queried by the poller, and reused only once the poller
/// has seen it complete (or the device failed), so that a pending event is never re-recorded.
///
/// Thread safety: `acquire` and `release` from any thread; `query` and `bind_thread` from the
/// poller's thread (`event_source`).
class event_pool final : public event_source {
public:
  explicit event_pool(int device) noexcept : device_(device) {}
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;
  /// Destroys the pooled events. Call it once the poller has drained (every event released).
  ~event_pool();

  /// An event of the device, from the pool or new. The calling thread must have the device
  /// set. Throws std::system_error in `cuda_category()`.
  cudaEvent_t acquire();

  /// complete for cudaSuccess; pending for cudaErrorNotReady (cleared: it is no error); any
  /// other status fails the device with it, since the poller cannot tell a sticky context error
  /// (an illegal address) from the rest and a waiter must never hang.
  event_state query(void* event, std::error_code& ec) noexcept override;
  void release(void* event) noexcept override;
  /// Sets the poller's thread's current device: the current device is per thread.
  void bind_thread() noexcept override;

private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace cotensor::detail::cuda
