#pragma once

#include "cotensor/config.hpp"

#include "cotensor/asio.hpp"
#include "cotensor/detail/op_completion.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/tensor.hpp"

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <exception>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cotensor {

namespace detail {
class async_op_access;
}  // namespace detail

/// What the start of an `async_op` sees: the elements of the tensors it reads and writes, of
/// any dtype.
///
/// Valid, with every span it returns, until the op's `async_op_done` is invoked (or
/// destroyed). Errors: an index past the list throws std::out_of_range; an element type other
/// than the tensor's throws std::invalid_argument, naming both. Thrown inside `start`, either
/// fails the op, as any exception of `start` does. Thread safety: read from any thread; not to
/// be modified.
class async_op_context {
public:
  /// The elements of the `i`-th tensor of `reads`, in the order given, as `T`, its element type
  /// (`dtype_of<T>` is `read_dtype(i)`): `ctx.read(0)` for float32, `ctx.read<std::int64_t>(0)`
  /// for int64.
  template <class T = float>
  requires element_type<T> std::span<const T> read(std::size_t i)
  const {
    const buffer& b = typed(reads_, i, dtype_of<T>, "read");
    return {static_cast<const T*>(b.data), b.numel};
  }
  /// The elements of the `i`-th tensor of `writes`, in the order given, as `T`, its element type:
  /// the op's to fill.
  template <class T = float>
  requires element_type<T> std::span<T> write(std::size_t i)
  const {
    const buffer& b = typed(writes_, i, dtype_of<T>, "write");
    return {static_cast<T*>(b.data), b.numel};
  }
  /// The bytes of the `i`-th tensor of `reads` (its elements, whatever their dtype), for work
  /// that moves bytes: a socket's write, a file's.
  std::span<const std::byte> read_bytes(std::size_t i) const {
    const buffer& b = at(reads_, i, "read_bytes");
    return {static_cast<const std::byte*>(b.data), b.numel * itemsize(b.type)};
  }
  /// The bytes of the `i`-th tensor of `writes`, whatever its dtype: a socket's read into it.
  std::span<std::byte> write_bytes(std::size_t i) const {
    const buffer& b = at(writes_, i, "write_bytes");
    return {static_cast<std::byte*>(b.data), b.numel * itemsize(b.type)};
  }
  /// The dtype of the `i`-th tensor of `reads`.
  cotensor::dtype read_dtype(std::size_t i) const { return at(reads_, i, "read_dtype").type; }
  /// The dtype of the `i`-th tensor of `writes`.
  cotensor::dtype write_dtype(std::size_t i) const { return at(writes_, i, "write_dtype").type; }
  /// The number of tensors read.
  std::size_t reads() const noexcept { return reads_.size(); }
  /// The number of tensors written.
  std::size_t writes() const noexcept { return writes_.size(); }

private:
  friend class detail::async_op_access;
  struct buffer {
    void* data;
    std::size_t numel;
    cotensor::dtype type;
  };
  // list[i], or std::out_of_range naming `what`.
  static const buffer& at(const std::vector<buffer>& list, std::size_t i, const char* what);
  // list[i] if its dtype is `t`, else std::invalid_argument naming both.
  static const buffer&
  typed(const std::vector<buffer>& list, std::size_t i, cotensor::dtype t, const char* what);

  std::vector<buffer> reads_;
  std::vector<buffer> writes_;
};

/// Ends an `async_op`: invoke it exactly once, from any thread, when the op's work is done.
///
/// Invoking it hands the op back to the engine, which then releases the tensors it wrote to
/// their readers, starts the ops waiting on them and completes waits (`wait`, `co_await
/// t.ready()`, `wait_all`, scopes), each on its own executor: nothing of that runs on the
/// invoking thread. Destroying it without invoking it fails the op with
/// `errc::op_abandoned`, so a lost completion never hangs a waiter. Move-only.
class async_op_done {
public:
  /// Moves the obligation to end the op; `other` is left empty (destroying it does nothing).
  async_op_done(async_op_done&&) noexcept = default;
  /// Moves the obligation to end the op, as the move constructor.
  async_op_done& operator=(async_op_done&&) noexcept = default;
  async_op_done(const async_op_done&) = delete;
  async_op_done& operator=(const async_op_done&) = delete;
  ~async_op_done() = default;

  /// Ends the op successfully. Precondition: not yet invoked (a second call aborts).
  void operator()() noexcept { completion_(nullptr); }
  /// Ends the op: failed with `error`, like a kernel that threw it, or successfully if null.
  void operator()(std::exception_ptr error) noexcept { completion_(std::move(error)); }
  /// Ends the op: failed with `boost::system::system_error(ec)` if `ec` is set, else
  /// successfully. Hand it an Asio operation's error code as is.
  void operator()(const boost::system::error_code& ec) noexcept {
    if (ec) {
      completion_(make_error(ec));
    } else {
      completion_(nullptr);
    }
  }
  /// True until invoked (or moved from).
  explicit operator bool() const noexcept { return static_cast<bool>(completion_); }

private:
  friend class detail::async_op_access;
  explicit async_op_done(detail::op_completion c) noexcept : completion_(std::move(c)) {}
  static std::exception_ptr make_error(const boost::system::error_code& ec) noexcept;

  detail::op_completion completion_;
};

namespace detail {

/// A name with static storage duration (a string literal), which an op may point at as is.
struct static_name {
  const char* name;
};

/// An async op's start, type-erased; holds the op's name (the op points at it), or, for a
/// `static_name`, only the pointer.
class async_start {
public:
  explicit async_start(const char* name) : name_(name != nullptr ? name : "async_op") {}
  explicit async_start(static_name name) noexcept : static_name_(name.name) {}
  async_start(const async_start&) = delete;
  async_start& operator=(const async_start&) = delete;
  virtual ~async_start() = default;

  virtual void operator()(async_op_context& ctx, async_op_done done) = 0;
  const char* name() const noexcept {
    return static_name_ != nullptr ? static_name_ : name_.c_str();
  }
  /// The name outlives every op (a `static_name`): no copy needed.
  bool name_is_static() const noexcept { return static_name_ != nullptr; }

private:
  const char* static_name_ = nullptr;
  std::string name_;
};

template <class Start>
class async_start_for final : public async_start {
public:
  template <class S>
  async_start_for(const char* name, S&& start)
      : async_start(name), start_(std::forward<S>(start)) {}
  template <class S>
  async_start_for(static_name name, S&& start)
      : async_start(name), start_(std::forward<S>(start)) {}

  void operator()(async_op_context& ctx, async_op_done done) override {
    start_(ctx, std::move(done));
  }

private:
  Start start_;
};

/// Validates and issues an async op; see `cotensor::async_op`.
void issue_async_op(std::span<const tensor> reads,
                    std::span<const tensor> writes,
                    std::unique_ptr<async_start> start);

}  // namespace detail

/// Issues an op named `name` that reads `reads` and writes `writes`, ordered by the engine
/// like any op, whose work starts something and ends later: network input straight into a
/// tensor, a device's or a library's own asynchronous call. Returns at once.
///
/// When the op's accesses are granted (every earlier write to what it reads, and every earlier
/// read and write of what it writes, has ended), `start(ctx, done)` runs on a backend thread:
/// `ctx.read(i)` is a `std::span<const float>` of the `i`-th read tensor, `ctx.write(i)` a
/// `std::span<float>` of the `i`-th written one (holding its old values: it is updated in
/// place, like `+=`), both valid until `done` is invoked; a tensor of another dtype is
/// `ctx.read<T>(i)` for its element type `T` (`ctx.write<std::int64_t>(i)`), or its bytes,
/// `ctx.read_bytes(i)` (see `async_op_context`). `start` must not block: it starts the
/// work and returns, handing `done` to whatever finishes it. `start` is destroyed as soon as it
/// returns (or throws): what the work needs later (a buffer, a socket's handle) must be owned
/// by what ends it, as with any Asio handler, and a completion that `start` stored cannot keep
/// its own op alive. Once `start` has returned, the op no longer counts against the in-flight
/// bounds (`runtime_options::max_in_flight`): an op waiting on an idle socket holds back no
/// other work.
///
/// Completion: the op ends when `done` is invoked: `done()` succeeds; `done(std::exception_ptr)`
/// or `done(boost::system::error_code)` (non-zero) fails it like a kernel's exception, so the
/// ops that read what it writes are skipped and every wait on them rethrows. Then, as for any
/// op, its writes are released, dependents start and waiters resume on their own executors.
///
/// Errors: `start` throwing fails the op the same way (unless `done` was invoked first); `done`
/// destroyed uninvoked fails it with `errc::op_abandoned`. An error in a tensor it reads or
/// writes (from the op that computed it) skips `start` and passes on. Bad arguments throw at the
/// call with nothing enqueued: an empty tensor or a tensor both read and written
/// (std::invalid_argument), a device whose memory the host cannot touch (std::invalid_argument) or
/// that this build cannot serve (std::system_error, `errc::device_unavailable`).
///
/// Cancellation: none: an op in flight runs to its end (a wait on its result can be
/// cancelled).
///
/// Thread safety: any thread; `start` runs on a backend thread, so it must not wait on
/// cotensor tensors; `done` may be invoked from any thread, once. Under the synchronous engine
/// (`runtime_options::synchronous`) `start` runs inside the call, on the calling thread, and
/// the call returns only after `done` is invoked, so `done` must not need the calling thread.
///
/// `name` names the op in traces and errors; it is copied (null: "async_op").
template <class Start>
void async_op(const char* name,
              std::initializer_list<tensor> reads,
              std::initializer_list<tensor> writes,
              Start&& start) {
  using start_type = std::decay_t<Start>;
  static_assert(std::is_invocable_v<start_type&, async_op_context&, async_op_done>,
                "cotensor::async_op: start must be callable as start(async_op_context&, "
                "async_op_done)");
  detail::issue_async_op(
      std::span<const tensor>(reads.begin(), reads.size()),
      std::span<const tensor>(writes.begin(), writes.size()),
      std::make_unique<detail::async_start_for<start_type>>(name, std::forward<Start>(start)));
}

}  // namespace cotensor
