// The MPI types and reduction ops of cotensor's dtypes (float16 and bfloat16 reduced by ops of
// our own), and the average after a sum. See comm_state.hpp.

#include "core/visit_dtype.hpp"
#include "distributed/comm_state.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cotensor::dist::detail {

// The MPI type that carries `t`'s elements. float16 and bfloat16 travel as MPI_UINT16_T (MPI
// has no 2-byte float) and are reduced by ops of our own (half_op); bool as MPI_UINT8_T.
MPI_Datatype mpi_type(dtype t) noexcept {
  // Not constexpr: MPI_Datatype may be a pointer to a library object (Open MPI).
  static const MPI_Datatype types[] = {MPI_UINT8_T,  MPI_INT32_T, MPI_INT64_T, MPI_UINT16_T,
                                       MPI_UINT16_T, MPI_FLOAT,   MPI_DOUBLE};
  return ::cotensor::detail::dtype_entry(types, t, MPI_FLOAT);
}

namespace {

// float16 and bfloat16 combine in float32, rounded to the type once per combine: MPI calls
// this with a block of one rank's (or one partial result's) elements in `in`, and `inout`.
// max and min keep one operand's bits (a NaN wins), so only sums round.
template <class T, reduce_op Op>
void combine_halves(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  const auto n = static_cast<std::size_t>(*len);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = a[i];
    const float y = b[i];
    if constexpr (Op == reduce_op::max) {
      if (x > y || x != x) {
        b[i] = a[i];
      }
    } else if constexpr (Op == reduce_op::min) {
      if (x < y || x != x) {
        b[i] = a[i];
      }
    } else {
      b[i] = T(x + y);
    }
  }
}

// The ops of combine_halves, made on first use (MPI_Op_create, commutative), freed before
// MPI_Finalize (free_reduce_ops). Under mpi_lock().
std::array<MPI_Op, 6>& half_ops() {
  static std::array<MPI_Op, 6> ops = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                                      MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  return ops;
}

int half_op(dtype t, reduce_op op, MPI_Op& out) {
  static constexpr std::array<MPI_User_function*, 6> combine = {
      &combine_halves<float16_t, reduce_op::sum>,  &combine_halves<float16_t, reduce_op::max>,
      &combine_halves<float16_t, reduce_op::min>,  &combine_halves<bfloat16_t, reduce_op::sum>,
      &combine_halves<bfloat16_t, reduce_op::max>, &combine_halves<bfloat16_t, reduce_op::min>};
  const std::size_t which = (t == dtype::float16 ? 0 : 3) + (op == reduce_op::max   ? 1
                                                             : op == reduce_op::min ? 2
                                                                                    : 0);
  MPI_Op& slot = half_ops()[which];
  if (slot == MPI_OP_NULL) {
    if (const int rc = MPI_Op_create(combine[which], 1, &slot); rc != MPI_SUCCESS) {
      slot = MPI_OP_NULL;
      return rc;
    }
  }
  out = slot;
  return MPI_SUCCESS;
}

// Divides each of the `n` sums at `p` by `size`, in float32 for float16 and bfloat16.
template <class T>
void divide(void* p, int n, int size) {
  auto* x = static_cast<T*>(p);
  for (int i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      x[i] = T(static_cast<float>(x[i]) / static_cast<float>(size));
    } else {
      x[i] = static_cast<T>(x[i] / static_cast<T>(size));
    }
  }
}

}  // namespace

// The MPI op that reduces `t` by `op`, into `out`; MPI's error code. avg is the sum, divided
// by the size when it completes (finish). bool: sum and max are MPI_MAX (logical or), min is
// MPI_MIN (logical and); its avg is refused at the call.
int mpi_op(reduce_op op, dtype t, MPI_Op& out) {
  if (t == dtype::float16 || t == dtype::bfloat16) {
    return half_op(t, op, out);
  }
  switch (op) {
  case reduce_op::max:
    out = MPI_MAX;
    break;
  case reduce_op::min:
    out = MPI_MIN;
    break;
  case reduce_op::sum:
  case reduce_op::avg:
    out = t == dtype::boolean ? MPI_MAX : MPI_SUM;
    break;
  }
  return MPI_SUCCESS;
}

// The average from the sum of `n` elements at `p`, on `size` ranks: floats divided (float32
// multiplied by 1/size, as always; float16 and bfloat16 in float32, rounded once), integers
// divided with truncation toward zero, as NCCL's ncclAvg on integers.
void average(dtype t, void* p, int n, int size) {
  switch (t) {
  case dtype::float32: {
    auto* x = static_cast<float*>(p);
    const float inv = 1.0F / static_cast<float>(size);
    for (int i = 0; i < n; ++i) {
      x[i] *= inv;
    }
    break;
  }
  case dtype::float64:
    divide<double>(p, n, size);
    break;
  case dtype::float16:
    divide<float16_t>(p, n, size);
    break;
  case dtype::bfloat16:
    divide<bfloat16_t>(p, n, size);
    break;
  case dtype::int32:
    divide<std::int32_t>(p, n, size);
    break;
  case dtype::int64:
    divide<std::int64_t>(p, n, size);
    break;
  case dtype::boolean:
    break;  // refused at the call
  }
}

void free_reduce_ops() noexcept {
  for (MPI_Op& op : half_ops()) {
    if (op != MPI_OP_NULL) {
      MPI_Op_free(&op);
    }
  }
}

}  // namespace cotensor::dist::detail
