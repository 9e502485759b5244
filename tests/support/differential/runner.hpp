#pragma once

// The differential tests' run on cotensor (tests/support/differential.hpp): a program's ops
// issued as cotensor calls, with what the run observed for the reference to check.

#include <cotensor/cotensor.hpp>

#include "program.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cotensor::test::differential {

// --- running on cotensor -----------------------------------------------------------------------

/// What a run on cotensor observed: values read in the middle of the program and copies of the
/// tolerance-compared results (by op index), and the final values of the live handles.
struct observations {
  std::map<std::size_t, std::vector<float>> at_op;
  std::vector<std::vector<float>> at_end;  // in the order of program::live_at_end
  std::vector<std::string> problems;       // a cancelled wait that misbehaved
};

/// Starts `t.async_wait` on a private io_context, cancels it at once with `type` and runs the
/// io_context until the handler has run. Returns "" or what went wrong: the handler must run
/// exactly once, with no error (the wait won) or operation_aborted (the cancellation won).
inline std::string cancelled_wait(const cotensor::tensor& t, boost::asio::cancellation_type type) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::cancellation_signal signal;
  int calls = 0;
  std::exception_ptr error;
  t.async_wait(asio::bind_cancellation_slot(signal.slot(),
                                            asio::bind_executor(io, [&](std::exception_ptr e) {
                                              ++calls;
                                              error = std::move(e);
                                            })));
  signal.emit(type);
  io.run();
  if (calls != 1) {
    return "a cancelled wait ran its handler " + std::to_string(calls) + " times";
  }
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const boost::system::system_error& e) {
      if (e.code() != asio::error::operation_aborted) {
        return std::string("a cancelled wait completed with ") + e.what();
      }
    } catch (const std::exception& e) {
      return std::string("a cancelled wait completed with ") + e.what();
    }
  }
  return {};
}

inline cotensor::shape to_shape(const extents& s) { return cotensor::shape(std::span(s)); }

/// a ⊗ b for tensor ⊗ tensor, tensor ⊗ float and float ⊗ tensor.
template <class L, class R>
inline cotensor::tensor arith_op(arith k, const L& a, const R& b) {
  switch (k) {
  case arith::add:
    return a + b;
  case arith::sub:
    return a - b;
  case arith::mul:
    return a * b;
  case arith::div:
    break;
  }
  return a / b;
}

inline void in_place_op(arith k, cotensor::tensor& a, const cotensor::tensor& b) {
  switch (k) {
  case arith::add:
    a += b;
    return;
  case arith::sub:
    a -= b;
    return;
  case arith::mul:
    a *= b;
    return;
  case arith::div:
    a /= b;
    return;
  }
}

inline void in_place_op(arith k, cotensor::tensor& a, float s) {
  switch (k) {
  case arith::add:
    a += s;
    return;
  case arith::sub:
    a -= s;
    return;
  case arith::mul:
    a *= s;
    return;
  case arith::div:
    a /= s;
    return;
  }
}

inline cotensor::tensor unary_op(elementwise k, const cotensor::tensor& a) {
  switch (k) {
  case elementwise::neg:
    return -a;
  case elementwise::relu:
    return cotensor::relu(a);
  case elementwise::exp:
    return cotensor::exp(a);
  case elementwise::tanh:
    return cotensor::tanh(a);
  case elementwise::sigmoid:
    break;
  }
  return cotensor::sigmoid(a);
}

/// The threads that end the async ops of programs, after their delay.
inline boost::asio::thread_pool& completers() {
  static auto* const pool = new boost::asio::thread_pool(2);  // lives until the process ends
  return *pool;
}

/// Issues `out = f(in)` elementwise as an async op that a completer thread computes and ends
/// `delay` after its start.
template <class F>
void async_elementwise(const char* name,
                       const cotensor::tensor* in,
                       const cotensor::tensor& out,
                       std::chrono::microseconds delay,
                       F f) {
  auto start = [delay, f](cotensor::async_op_context& ctx, cotensor::async_op_done done) {
    const std::span<const float> src = ctx.reads() == 1 ? ctx.read(0) : ctx.write(0);
    boost::asio::post(completers(),
                      [src, dst = ctx.write(0), delay, f, done = std::move(done)]() mutable {
                        std::this_thread::sleep_for(delay);
                        for (std::size_t i = 0; i < dst.size(); ++i) {
                          dst[i] = static_cast<float>(f(src[i]));
                        }
                        done();
                      });
  };
  if (in != nullptr) {
    cotensor::async_op(name, {*in}, {out}, std::move(start));
  } else {
    cotensor::async_op(name, {}, {out}, std::move(start));
  }
}

inline observations run_on_cotensor(const program& p) {
  std::vector<cotensor::tensor> t(static_cast<std::size_t>(p.slots));
  const auto slot = [&](int i) -> cotensor::tensor& { return t[static_cast<std::size_t>(i)]; };
  std::vector<std::pair<std::size_t, cotensor::tensor>> copies;
  observations seen;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const op& o = p.ops[i];
    switch (o.what) {
    case kind::from_values:
      slot(o.out) = cotensor::from_vector(o.values, to_shape(o.shape));
      break;
    case kind::filled:
      slot(o.out) = cotensor::full(to_shape(o.shape), o.scalar);
      break;
    case kind::binary:
      slot(o.out) = arith_op(o.arith_op, slot(o.a), slot(o.b));
      break;
    case kind::binary_scalar:
      slot(o.out) = o.scalar_left ? arith_op(o.arith_op, o.scalar, slot(o.a))
                                  : arith_op(o.arith_op, slot(o.a), o.scalar);
      break;
    case kind::unary:
      slot(o.out) = unary_op(o.unary_op, slot(o.a));
      break;
    case kind::map:
      slot(o.out) =
          with_map_function(o.function, [&](auto f) { return cotensor::map(slot(o.a), f); });
      break;
    case kind::in_place:
      in_place_op(o.arith_op, slot(o.a), slot(o.b));
      break;
    case kind::in_place_scalar:
      in_place_op(o.arith_op, slot(o.a), o.scalar);
      break;
    case kind::reshape:
      slot(o.out) = cotensor::reshape(slot(o.a), to_shape(o.shape));
      break;
    case kind::transpose:
      slot(o.out) = cotensor::transpose(slot(o.a));
      break;
    case kind::matmul:
      slot(o.out) = cotensor::matmul(slot(o.a), slot(o.b));
      break;
    case kind::sum_all:
      slot(o.out) = o.member_form ? slot(o.a).sum() : cotensor::sum(slot(o.a));
      break;
    case kind::mean_all:
      slot(o.out) = cotensor::mean(slot(o.a));
      break;
    case kind::sum_axis:
      slot(o.out) = cotensor::sum(slot(o.a), o.axis);
      break;
    case kind::mean_axis:
      slot(o.out) = cotensor::mean(slot(o.a), o.axis);
      break;
    case kind::drop:
      // The value the handle had is still checked, through an exact copy made now; the
      // buffer itself lives on while ops (or views) use it.
      copies.emplace_back(i, slot(o.a) * 1.0F);
      slot(o.a) = cotensor::tensor{};
      break;
    case kind::wait_one:
      slot(o.a).wait();
      break;
    case kind::wait_all:
      cotensor::wait_all();
      break;
    case kind::read_values:
      seen.at_op[i] = slot(o.a).to_vector();
      break;
    case kind::read_item:
      seen.at_op[i] = {slot(o.a).item()};
      break;
    case kind::async_map: {
      auto out = cotensor::zeros(slot(o.a).shape());
      with_map_function(o.function, [&](auto f) {
        async_elementwise("async_map", &slot(o.a), out, std::chrono::microseconds(o.delay_us), f);
      });
      slot(o.out) = std::move(out);
      break;
    }
    case kind::async_in_place:
      async_elementwise("async_in_place", nullptr, slot(o.a), std::chrono::microseconds(o.delay_us),
                        [k = o.arith_op, s = o.scalar](float x) { return apply(k, x, s); });
      break;
    case kind::cancelled_wait: {
      constexpr boost::asio::cancellation_type types[] = {boost::asio::cancellation_type::terminal,
                                                          boost::asio::cancellation_type::partial,
                                                          boost::asio::cancellation_type::total};
      std::string problem = cancelled_wait(slot(o.a), types[o.cancellation % 3]);
      if (!problem.empty()) {
        seen.problems.push_back("op #" + std::to_string(i) + ": " + problem);
      }
      break;
    }
    }
    if (tolerant(o)) {
      copies.emplace_back(i, slot(o.out) * 1.0F);  // x * 1 is exact: the result as made
    }
  }
  for (auto& [i, copy] : copies) {
    seen.at_op[i] = copy.to_vector();
  }
  for (int s : p.live_at_end) {
    seen.at_end.push_back(slot(s).to_vector());
  }
  return seen;
}

}  // namespace cotensor::test::differential
