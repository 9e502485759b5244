#pragma once

namespace cotensor::detail {

/// When an NVTX tool (Nsight Systems) is attached to the process, attaches an observer that
/// wraps each op's work in an NVTX range named after the op; once per process. Without one, or
/// in a build without NVTX (COTENSOR_WITH_NVTX), does nothing.
void observe_with_nvtx_if_profiled();

}  // namespace cotensor::detail
