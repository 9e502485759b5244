#include "cotensor/async_op.hpp"

#include "cotensor/error.hpp"

#include "frontend/frontend.hpp"

#include <boost/container/small_vector.hpp>
#include <boost/system/system_error.hpp>

#include <stdexcept>
#include <string>
#include <system_error>

namespace cotensor {

const async_op_context::buffer&
async_op_context::at(const std::vector<buffer>& list, std::size_t i, const char* what) {
  if (i >= list.size()) {
    throw std::out_of_range("cotensor: async_op_context::" + std::string(what) + "(" +
                            std::to_string(i) + ") of " + std::to_string(list.size()) +
                            " tensor(s)");
  }
  return list[i];
}

const async_op_context::buffer& async_op_context::typed(const std::vector<buffer>& list,
                                                        std::size_t i,
                                                        cotensor::dtype t,
                                                        const char* what) {
  const buffer& b = at(list, i, what);
  if (b.type != t) {
    throw std::invalid_argument(
        "cotensor: async_op_context::" + std::string(what) + "(" + std::to_string(i) + ") as " +
        std::string(name(t)) + " elements of a tensor of " + std::string(name(b.type)) +
        ": name its element type, " + what + "<T>(i), or take its bytes, " + what + "_bytes(i)");
  }
  return b;
}

std::exception_ptr async_op_done::make_error(const boost::system::error_code& ec) noexcept {
  try {
    throw boost::system::system_error(ec);
  } catch (...) {
    return std::current_exception();  // or std::bad_alloc's, out of memory
  }
}

namespace detail {

/// Builds the context and the completion an async op's start sees.
class async_op_access {
public:
  template <class Buffers>
  static void bind(async_op_context& ctx, const Buffers& reads, const Buffers& writes) {
    ctx.reads_.clear();
    ctx.writes_.clear();
    // Every buffer gets its memory here (raw() may allocate a delayed one, and throw).
    for (storage* s : reads) {
      ctx.reads_.push_back({s->raw(), static_cast<std::size_t>(s->numel()), s->dtype()});
    }
    for (storage* s : writes) {
      ctx.writes_.push_back({s->raw(), static_cast<std::size_t>(s->numel()), s->dtype()});
    }
  }
  static async_op_done done(op_completion c) noexcept { return async_op_done(std::move(c)); }
  static void complete_here(async_op_done& done, std::exception_ptr error) noexcept {
    std::exchange(done.completion_, op_completion()).complete_here(std::move(error));
  }
};

namespace {

void issue(std::span<const tensor> reads,
           std::span<const tensor> writes,
           std::unique_ptr<async_start> start,
           bool quick_start) {
  const char* what = "async_op";
  const tensor* first = nullptr;
  for (const auto* list : {&reads, &writes}) {
    for (const tensor& t : *list) {
      checked(t, what);
      if (first == nullptr) {
        first = &t;
      } else if (t.device() != first->device()) {
        throw_invalid(what, "tensors on different devices");
      }
    }
  }
  if (first != nullptr) {
    require_device(what, first->device());
    if (kernels_for(first->device()).host_chunks == nullptr) {
      throw_invalid(what, "the host cannot touch this device's memory");
    }
  }
  for (const tensor& r : reads) {
    for (const tensor& w : writes) {
      if (r.storage() == w.storage()) {
        throw_invalid(what, "a tensor both read and written (pass it in `writes` only, its "
                            "old values are in ctx.write(i))");
      }
    }
  }
  // The buffers, in the caller's order: the op node holds them alive until it retires.
  using buffers = boost::container::small_vector<storage*, 4>;
  buffers in;
  buffers out;
  for (const tensor& r : reads) {
    in.push_back(r.storage().get());
  }
  for (const tensor& w : writes) {
    out.push_back(w.storage().get());
  }
  // The op's name outlives `start` (errors and traces name the op after it returns): a copy,
  // unless it is a literal.
  auto name =
      start->name_is_static() ? nullptr : std::make_unique<const std::string>(start->name());
  auto op = make_op(name != nullptr ? name->c_str() : start->name(), {}, {});
  // Written in place (the old values are there in ctx.write(i)): a read-write, so that an
  // error in what it updates skips it and passes on, as for `+=`.
  for (const tensor& w : writes) {
    add_access(*op, w.storage(), access_mode::read_write);
  }
  for (const tensor& r : reads) {
    add_access(*op, r.storage(), access_mode::read);
  }
  op->runs_user_code = !quick_start;  // ours may run at the call, at any size (runs_inline)
  if (quick_start) {
    // cotensor's own starts reach every buffer through its storage: an empty
    // context, and a capture small enough for the kernel's inline buffer (no allocation).
    in.insert(in.end(), out.begin(), out.end());
    op->kernel.emplace_async([name = std::move(name), start = std::move(start),
                              buffers = std::move(in)](op_completion done) mutable {
      const auto callable = std::move(start);
      for (storage* s : buffers) {
        (void)s->raw();  // may allocate a delayed buffer and throw: the op then fails with that
      }
      async_op_context ctx;
      (*callable)(ctx, async_op_access::done(std::move(done)));
    });
  } else {
    op->kernel.emplace_async([name = std::move(name), start = std::move(start), in = std::move(in),
                              out = std::move(out),
                              ctx = async_op_context()](op_completion done) mutable {
      // `start` goes when it returns or throws: what the work needs later is owned by what
      // ends it, and a completion that `start` kept alive cannot keep its own op alive forever.
      const auto callable = std::move(start);
      // data() may allocate a delayed buffer and throw: the op then fails with that.
      async_op_access::bind(ctx, in, out);
      (*callable)(ctx, async_op_access::done(std::move(done)));
    });
  }
  current_engine().push(std::move(op));
}

}  // namespace

void issue_async_op(std::span<const tensor> reads,
                    std::span<const tensor> writes,
                    std::unique_ptr<async_start> start) {
  issue(reads, writes, std::move(start), false);
}

void complete_here(async_op_done& done, std::exception_ptr error) noexcept {
  async_op_access::complete_here(done, std::move(error));
}

void issue_quick_async_op(std::span<const tensor> reads,
                          std::span<const tensor> writes,
                          std::unique_ptr<async_start> start) {
  issue(reads, writes, std::move(start), true);
}

}  // namespace detail
}  // namespace cotensor
