#pragma once

#include "cotensor/asio.hpp"
#include "cotensor/detail/async_wait.hpp"
#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/scalar.hpp"
#include "cotensor/shape.hpp"

#include <cstdint>
#include <exception>
#include <iosfwd>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace cotensor {

namespace detail {
class storage;
/// The key to the constructors that only cotensor's own implementation calls.
struct internal_key {
  explicit internal_key() = default;
};
inline constexpr internal_key internal{};
}  // namespace detail

/// A read-only view of a computed CPU tensor's elements, in row-major order, sharing its buffer
/// (no copy): what `tensor::view_host` returns, as PyTorch's `.numpy()` and `np.asarray` of a
/// JAX array share theirs. It holds a reference to the buffer, which lives as long as the view
/// does, however long the tensor's handles last. A view is a range of `const T` (`begin`,
/// `end`, `operator[]`, `std::span`); a default-made or moved-from one is empty.
///
/// Sharing: ops issued on the buffer after the view was made (`+=` on the tensor or on a
/// `reshape` of it, say) are not ordered with reads through the view: read it only while no such
/// op may run, or copy it first (`tensor::to_vector`). Ops that only read the buffer may run
/// alongside.
/// Thread safety: a view may be read from any threads at once; copying or destroying one is as
/// for `std::shared_ptr`.
template <class T>
requires element_type<T>
class host_view {
public:
  using element_type = const T;   ///< the elements, read-only
  using value_type = T;           ///< the element type
  using size_type = std::size_t;  ///< the type of `size()`
  using iterator = const T*;      ///< the type of `begin()` and `end()`

  /// An empty view, of no buffer: no elements, shape `{0}`.
  host_view() : shape_{0} {}
  /// Copies the view: both refer to the same buffer.
  host_view(const host_view&) = default;
  /// Copies the view: both refer to the same buffer.
  host_view& operator=(const host_view&) = default;
  /// Moves the view; `other` is left empty, as a default-made one.
  host_view(host_view&& other) noexcept
      : buffer_(std::move(other.buffer_)), shape_(std::exchange(other.shape_, cotensor::shape{0})) {
  }
  /// Moves the view; `other` is left empty, as a default-made one.
  host_view& operator=(host_view&& other) noexcept {
    if (this != &other) {
      buffer_ = std::move(other.buffer_);
      shape_ = std::exchange(other.shape_, cotensor::shape{0});
    }
    return *this;
  }

  /// The first element (null for an empty view).
  const T* data() const noexcept { return static_cast<const T*>(buffer_.get()); }
  /// Number of elements.
  std::size_t size() const noexcept { return static_cast<std::size_t>(shape_.numel()); }
  /// True for no elements.
  bool empty() const noexcept { return size() == 0; }
  /// The tensor's extents when the view was made.
  const cotensor::shape& shape() const noexcept { return shape_; }
  /// Element `i` in row-major order; `i < size()`, unchecked.
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  /// The first element, in row-major order.
  const T* begin() const noexcept { return data(); }
  /// Past the last element.
  const T* end() const noexcept { return data() + size(); }
  /// The elements as a span, valid while this view lives (a view is a contiguous range, so
  /// `std::span<const T> s = view;` converts too; as with a `std::vector`, a span of a temporary
  /// view dangles).
  std::span<const T> span() const noexcept { return {data(), size()}; }

  /// Internal: made by `tensor::view_host`; not part of the API.
  host_view(detail::internal_key /*key*/,
            std::shared_ptr<const void> buffer,
            cotensor::shape s) noexcept
      : buffer_(std::move(buffer)), shape_(std::move(s)) {}

private:
  std::shared_ptr<const void> buffer_;  // the storage, aliased to its elements; null: no buffer
  cotensor::shape shape_;
};

/// A handle to a row-major, contiguous array of one `dtype` (float32 unless made otherwise)
/// whose value may still be being computed.
///
/// Every op on tensors returns at once: it validates its arguments (throwing
/// `std::invalid_argument` for a bad shape, size or device, with nothing enqueued), allocates the
/// result, and enqueues the work on the runtime's dependency engine. The engine orders the ops
/// that touch one buffer — reads run together, a write waits for earlier reads and writes — and
/// runs independent ops in parallel on the backend.
///
/// A `tensor` is a shared handle, like `std::shared_ptr`: copies refer to the same buffer, so an
/// in-place op (`+=`) through one copy is seen by all; `reshape` shares the buffer too. The buffer
/// lives as long as any handle or any op that uses it.
///
/// Errors: if an op's kernel throws (a user function in `map`, say), its outputs hold that
/// exception; every op that reads them is skipped and holds it too; every wait, blocker and
/// `co_await` on any of them rethrows it. Other work is not affected.
///
/// Thread safety: distinct handles may be used from any threads. One handle must not be assigned
/// to while another thread uses it (as with `std::shared_ptr`). Ops issued from several threads
/// on the same buffer are ordered in the order the engine receives them.
class tensor {
public:
  /// An empty handle with no buffer; ops and waits on it throw `std::invalid_argument`.
  tensor() noexcept = default;

  /// True when this handle refers to a buffer.
  bool defined() const noexcept { return storage_ != nullptr; }
  /// The extents.
  const cotensor::shape& shape() const noexcept { return shape_; }
  /// Number of elements.
  std::int64_t numel() const noexcept { return shape_.numel(); }
  /// Number of dimensions.
  std::size_t rank() const noexcept { return shape_.rank(); }
  /// Where the buffer lives.
  cotensor::device device() const noexcept;
  /// The element type (float32 for an empty handle).
  cotensor::dtype dtype() const noexcept;

  /// A copy converted to dtype `t`, asynchronously (the same buffer's contents when `t` is
  /// already this dtype: a new buffer all the same). Conversions round to nearest even; a
  /// float to an integer saturates at the integer's range and takes NaN to 0; anything to
  /// bool is `x != 0` (docs/dtypes.md has the table).
  tensor astype(cotensor::dtype t) const;

  /// Blocks until this value is computed (the chapter's `wait_to_read`). Other work keeps
  /// running.
  ///
  /// Errors: rethrows the exception of the op that failed to compute this value (or one it
  /// depended on). Throws `std::system_error` with `errc::wait_on_backend_thread` when called on
  /// a backend worker thread (from inside a `map` function), where it could deadlock.
  /// Thread safety: any thread; never call it on a thread that runs an Asio event loop, which
  /// it would stall: `co_await ready()` there instead.
  void wait() const;

  /// Waits for this value as a universal Asio async operation.
  ///
  /// Completion: `void(std::exception_ptr)`, null once every write to this tensor issued before
  /// the call has ended. The handler runs on its associated executor (the runtime's fallback
  /// executor if it has none), never on a backend thread, and never inside this call.
  /// Errors: the exception of the op that failed to compute this value; `use_awaitable`,
  /// `deferred` and `use_future` rethrow it.
  /// Cancellation: every type (terminal, partial, total). A cancelled wait completes promptly
  /// with a `boost::system::system_error` holding `asio::error::operation_aborted`; the op runs
  /// on and its buffers stay alive until it ends.
  /// Shutdown: destroying the handler's execution context (say, the `io_context`) while the
  /// wait is pending destroys the handler without running it, as Asio does for its own
  /// operations (a suspended coroutine's frame is destroyed); the op runs on.
  /// Thread safety: any thread.
  template <class Token>
  auto async_wait(Token&& token) const {
    require_defined("async_wait");
    return detail::async_wait_with(std::forward<Token>(token), [self = *this](detail::waiter& w) {
      detail::start_wait(self, w);
    });
  }

  /// `co_await t.ready()` inside an `asio::awaitable`: suspends until this value is computed
  /// and resumes on the coroutine's executor; rethrows the error of a failed op.
  /// Equivalent to `async_wait(asio::deferred)`; see `async_wait` for the details.
  auto ready() const { return async_wait(asio::deferred); }

  /// Blocks, then returns the single element (the chapter's `item()`), converted to `T` as
  /// `astype` converts. A GPU tensor's element is copied to the host by an op on its device;
  /// the wait is on that op. `T` is one of the seven element types (`dtype_of`).
  /// Errors: `std::invalid_argument` at once if `numel() != 1`; the op's exception, as `wait`.
  template <class T = float>
  requires element_type<T> T item()
  const {
    T value{};
    read_to_host(dtype_of<T>, &value, "item");
    return value;
  }

  /// Blocks, then copies the elements to the host in row-major order (the chapter's
  /// `asnumpy()`), converted to `T` as `astype` converts; from a GPU, through
  /// `to(device::cpu())`. Errors: as `wait`.
  template <class T = float>
  requires element_type<T> std::vector<T> to_vector()
  const {
    // A failed op's error first, before room for its elements (which may be why it failed).
    wait();
    if constexpr (std::is_same_v<T, bool>) {
      const auto bytes = std::make_unique<bool[]>(static_cast<std::size_t>(numel()));
      read_to_host(cotensor::dtype::boolean, bytes.get(), "to_vector");
      return std::vector<bool>(bytes.get(), bytes.get() + numel());
    } else {
      const auto count = static_cast<std::size_t>(numel());
      std::vector<T> values;
      values.reserve(count);
      prepare_host_copy(values.data(), count * sizeof(T));
      // Computed, on the host and of type T already: the vector copied straight from the
      // buffer, in one pass (no zeroing first).
      if (const void* p = host_elements(dtype_of<T>)) {
        const T* first = static_cast<const T*>(p);
        values.insert(values.end(), first, first + count);
        return values;
      }
      values.resize(count);
      read_to_host(dtype_of<T>, values.data(), "to_vector");
      return values;
    }
  }

  /// Blocks, then returns a view of the elements that shares this tensor's buffer, without a
  /// copy (PyTorch's `.numpy()`; `to_vector` copies). `T` must be this tensor's element type,
  /// and the tensor must be on the CPU. See `host_view` for what sharing allows.
  ///
  /// Errors: `std::invalid_argument` at once for an empty handle, a GPU tensor (copy it with
  /// `to(device::cpu())` first) or a `T` of another dtype, naming both; the op's exception, as
  /// `wait`.
  /// Thread safety: as `wait` (any thread but a backend's). On an Asio event loop, call it after
  /// `co_await ready()`: it then returns at once unless a write was issued in between.
  template <class T = float>
  requires element_type<T> cotensor::host_view<T> view_host()
  const { return {detail::internal, host_buffer(dtype_of<T>), shape_}; }

  /// Copies to device `d`, asynchronously. A copy between the host and a GPU runs on the GPU's
  /// copy streams, after the GPU's work on the source. Errors: `std::system_error` with
  /// `errc::device_unavailable` at once if `d` is not available in this build or machine.
  tensor to(cotensor::device d) const;

  /// The sum of all elements as a rank-0 (one-element) tensor, asynchronously.
  tensor sum() const;

  /// In place: adds `rhs` (same shape, or broadcastable to this shape) to this buffer. A write
  /// access: it waits for earlier reads and writes of this buffer and later ones wait for it.
  /// The result keeps this tensor's dtype: one of a wider dtype of the same kind is computed
  /// in it and rounded into this one (`float16 += float32`, `int32 += int64`, which wraps);
  /// `std::invalid_argument` at the call, with nothing enqueued, when the result is of a higher
  /// kind (bool < integer < floating), as PyTorch: an int32 tensor `+=` a float32 one, or `/=`
  /// anything; a bool tensor `+=` an int32 one.
  tensor& operator+=(const tensor& rhs);
  /// In place: adds the scalar `rhs` to every element (weak: `int32 += 2` stays int32; a
  /// float scalar on an integer tensor does not fit and throws).
  tensor& operator+=(scalar rhs);
  /// In place: subtracts `rhs`, as `+=`.
  tensor& operator-=(const tensor& rhs);
  /// In place: subtracts the scalar `rhs` from every element, as `+=`.
  tensor& operator-=(scalar rhs);
  /// In place: multiplies by `rhs`, as `+=`.
  tensor& operator*=(const tensor& rhs);
  /// In place: multiplies every element by the scalar `rhs`, as `+=`.
  tensor& operator*=(scalar rhs);
  /// In place: divides by `rhs`, as `+=` (true division: only float tensors).
  tensor& operator/=(const tensor& rhs);
  /// In place: divides every element by the scalar `rhs`, as `+=`.
  tensor& operator/=(scalar rhs);

  /// Internal: a tensor made from a buffer, for cotensor's own implementation (the key is
  /// `detail::internal`); not part of the API.
  tensor(detail::internal_key,
         std::shared_ptr<detail::storage> storage,
         cotensor::shape s) noexcept;
  /// Internal: the buffer, for cotensor's own implementation; not part of the API.
  const std::shared_ptr<detail::storage>& storage() const noexcept { return storage_; }

private:
  void require_defined(const char* what) const;
  void read_to_host(cotensor::dtype t, void* out, const char* what) const;
  // view_host's checks and wait; the storage, aliased to its elements.
  std::shared_ptr<const void> host_buffer(cotensor::dtype t) const;
  // The elements of a host tensor of dtype `t` with at least one element (the caller waits
  // first); else null.
  const void* host_elements(cotensor::dtype t) const noexcept;
  // Readies fresh room for a copy of `bytes` (to_vector's): its whole 2 MiB pages advised for
  // transparent huge pages, faulted in 2 MiB at a time rather than 4 KiB.
  static void prepare_host_copy(void* p, std::size_t bytes) noexcept;

  std::shared_ptr<detail::storage> storage_;
  cotensor::shape shape_;
};

/// Blocks until `t` is computed, then prints it as `tensor([[1, 2], [3, 4]], shape=[2, 2])`,
/// NumPy-like; a dtype other than float32 is shown (`tensor([1, 2], shape=[2], dtype=int64)`,
/// bool elements as `True`/`False`), and a GPU tensor is copied to the host first and prints
/// its device too: `tensor([1, 2], shape=[2], device=cuda:0)`. Errors: as `tensor::wait`.
std::ostream& operator<<(std::ostream& os, const tensor& t);

}  // namespace cotensor
