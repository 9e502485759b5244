#include "engine/nvtx.hpp"

#include "cotensor/config.hpp"

#include "engine/observer.hpp"
#include "engine/op_node.hpp"
#include "support/environment.hpp"

#include <memory>
#include <mutex>

#if COTENSOR_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace cotensor::detail {
namespace {

#if COTENSOR_WITH_NVTX
// A range per op's work, pushed and popped on the backend thread that runs it (an op that
// completes later: around its start).
class nvtx_observer final : public op_observer {
public:
  void on_start(const op_node& op) noexcept override { nvtxRangePushA(op.name); }
  void on_stop(const op_node& /*op*/) noexcept override { nvtxRangePop(); }
};
#endif

}  // namespace

void observe_with_nvtx_if_profiled() {
#if COTENSOR_WITH_NVTX
  static std::once_flag once;
  std::call_once(once, [] {
    // Nsight Systems (or another NVTX tool) announces itself through this variable.
    if (!environment_variable("NVTX_INJECTION64_PATH")) {
      return;
    }
    // NVTX loads its tool on its first call, with a double-checked flag that is not atomic;
    // two workers making that first call at once race (TSan reports it). Load it here, once,
    // before any op runs, as NVTX's own header advises.
    nvtxInitialize(nullptr);
    attach_observer(std::make_shared<nvtx_observer>());
  });
#endif
}

}  // namespace cotensor::detail
