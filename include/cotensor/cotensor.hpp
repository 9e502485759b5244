#pragma once

// cotensor: asynchronous tensors on a dependency engine, awaitable from Asio coroutines.

#include "cotensor/config.hpp"

#include "cotensor/asio.hpp"
#include "cotensor/async_op.hpp"
#include "cotensor/batcher.hpp"
#include "cotensor/device.hpp"
#include "cotensor/dlpack.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/error.hpp"
#include "cotensor/io.hpp"
#include "cotensor/lm.hpp"
#include "cotensor/ops.hpp"
#include "cotensor/random.hpp"
#include "cotensor/runtime.hpp"
#include "cotensor/scalar.hpp"
#include "cotensor/scope.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"
#include "cotensor/trace.hpp"
#include "cotensor/wait.hpp"

#if COTENSOR_WITH_MPI
#include "cotensor/distributed.hpp"
#endif
