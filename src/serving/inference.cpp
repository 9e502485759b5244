// An inference: the request decoded, its tensors run through the model (alone or in a batch)
// and the response encoded, with the model version's counters (serving/handler_state.hpp).

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <cotensor/batcher.hpp>
#include <cotensor/ops.hpp>
#include <cotensor/scope.hpp>

#include "core/visit_dtype.hpp"
#include "serving/handler_state.hpp"
#include "serving/protocol.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>

#include <atomic>
#include <cstring>

namespace cotensor::serving::detail {

namespace {

constexpr std::string_view header_length_field = "Inference-Header-Content-Length";

}  // namespace

std::unique_ptr<batcher> handler_state::make_batcher(served_model& s) {
  const auto& c = s.m->config();
  const auto width = [](const tensor_spec& t) {
    std::int64_t n = 1;
    for (const auto e : t.dims) {
      n *= e;
    }
    return n;
  };
  const std::int64_t in_width = width(c.inputs.front());
  const std::int64_t out_width = width(c.outputs.front());
  std::vector<std::int64_t> in_shape = c.inputs.front().dims;
  in_shape.insert(in_shape.begin(), 0);
  auto fn = [m = s.m, in_shape, out_width](const tensor& x) mutable {
    const std::int64_t rows = x.shape()[0];
    auto in = in_shape;
    in[0] = rows;
    std::vector<tensor> y = m->forward({reshape(x, shape(in))});
    if (y.size() != 1 || y.front().numel() != rows * out_width) {
      throw std::runtime_error("model '" + m->config().name + "' returned the wrong outputs");
    }
    return reshape(y.front(), {rows, out_width});
  };
  batcher_options o;
  o.max_batch_rows = static_cast<std::size_t>(c.max_batch_size);
  o.window = c.dynamic_batching->max_queue_delay;
  o.max_queue_rows = std::max(options_.max_queue_rows, o.max_batch_rows);
  o.max_running_batches = options_.max_running_batches;
  o.start_when_idle = true;
  o.in_dtype = c.inputs.front().datatype;
  o.in_device = s.m->placement();
  return std::make_unique<batcher>(executor_, static_cast<std::size_t>(in_width),
                                   static_cast<std::size_t>(out_width), std::move(fn), o);
}

namespace {

// A computed output's host bytes, as the protocol lays them out.
std::vector<std::byte> host_bytes(const tensor& t) {
  return cotensor::detail::visit_dtype(t.dtype(), [&]<class T>(cotensor::detail::type_tag<T>) {
    std::vector<std::byte> out(static_cast<std::size_t>(t.numel()) * sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      const auto v = t.to_vector<bool>();
      for (std::size_t i = 0; i < v.size(); ++i) {
        out[i] = std::byte{v[i] ? std::uint8_t{1} : std::uint8_t{0}};
      }
    } else {
      const auto v = t.to_vector<T>();
      std::memcpy(out.data(), v.data(), out.size());
    }
    return out;
  });
}

std::uint64_t ns(clock_type::duration d) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

bool is_aborted(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& s) {
    return s.code() == asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

// The request's input tensors, on the model's device.
std::vector<tensor> input_tensors(const protocol::decoded_request& request, const model& m) {
  std::vector<tensor> inputs;
  for (std::size_t i = 0; i < request.inputs.size(); ++i) {
    const auto& in = request.inputs[i];
    const auto& spec = m.config().inputs[i];
    const std::size_t count = in.bytes.size() / itemsize(spec.datatype);
    inputs.push_back(cotensor::detail::from_host(in.bytes.data(), count, spec.datatype,
                                                 shape(in.shape), m.placement()));
  }
  return inputs;
}

// Output `index` of `outputs`, computed and on the host, as the response carries it.
protocol::computed_output computed(const model_config& config,
                                   const std::vector<tensor>& outputs,
                                   const protocol::requested_output& want) {
  const tensor& y = outputs.at(want.index);
  if (y.dtype() != config.outputs[want.index].datatype) {
    throw std::runtime_error("model '" + config.name + "' returned output '" +
                             config.outputs[want.index].name + "' as " +
                             std::string(cotensor::name(y.dtype())));
  }
  protocol::computed_output o;
  o.index = want.index;
  o.binary = want.binary;
  for (std::size_t d = 0; d < y.rank(); ++d) {
    o.shape.push_back(y.shape()[d]);
  }
  o.bytes = host_bytes(y);  // computed: does not block
  return o;
}

}  // namespace

void handler_state::count_failure(served_model& s, clock_type::time_point start) {
  ++s.counters.failure;
  s.counters.fail_ns += ns(clock_type::now() - start);
}

handler::response handler_state::failure(const handler::request& req,
                                         served_model& s,
                                         const std::exception_ptr& failed,
                                         clock_type::time_point start) const {
  count_failure(s, start);
  try {
    std::rethrow_exception(failed);
  } catch (const std::system_error& e) {
    if (e.code() == batcher_errc::queue_full || e.code() == batcher_errc::closed) {
      auto res = error(req, http::status::service_unavailable, e.what());
      res.set(http::field::retry_after, "1");
      return res;
    }
    return error(req, http::status::internal_server_error, e.what());
  } catch (const std::exception& e) {
    return error(req, http::status::internal_server_error, e.what());
  } catch (...) {
    return error(req, http::status::internal_server_error, "unknown error");
  }
}

handler::response handler_state::success(const handler::request& req,
                                         served_model& s,
                                         const protocol::decoded_request& request,
                                         const std::vector<protocol::computed_output>& outputs,
                                         clock_type::time_point start,
                                         clock_type::time_point decoded) const {
  const auto encoding = clock_type::now();
  auto encoded = protocol::encode_infer_response(s.m->config(), s.version, request.id, outputs);
  const auto end = clock_type::now();
  ++s.counters.success;
  s.counters.inferences += static_cast<std::uint64_t>(request.batch);
  s.counters.request_ns += ns(end - start);
  s.counters.input_ns += ns(decoded - start);
  s.counters.output_ns += ns(end - encoding);
  s.counters.last_inference_ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  auto res = reply(req, http::status::ok, std::move(encoded.body),
                   encoded.header_length ? "application/octet-stream" : "application/json");
  if (encoded.header_length) {
    res.set(header_length_field, std::to_string(*encoded.header_length));
  }
  return res;
}

asio::awaitable<handler::response> handler_state::infer(const handler::request& req,
                                                        served_model& s) {
  const auto start = clock_type::now();
  const auto& config = s.m->config();
  std::optional<std::string_view> header_length;
  if (const auto it = req.find(header_length_field); it != req.end()) {
    header_length = std::string_view(it->value().data(), it->value().size());
  }
  std::variant<protocol::decoded_request, protocol::request_error> decoded;
  try {
    decoded = protocol::decode_infer_request(req.body(), header_length, config);
  } catch (const std::bad_alloc&) {
    decoded = protocol::request_error{400, "the request does not fit in memory"};
  } catch (const std::exception& e) {
    // The decoder checks what it reads; this is a bug there, not a reason to drop the
    // connection.
    decoded = protocol::request_error{400, std::string("malformed request: ") + e.what()};
  }
  if (auto* e = std::get_if<protocol::request_error>(&decoded)) {
    count_failure(s, start);
    co_return error(req, static_cast<http::status>(e->status), e->message);
  }
  const auto decoded_at = clock_type::now();
  const auto& request = std::get<protocol::decoded_request>(decoded);
  if (!ready_) {
    count_failure(s, start);
    co_return error(req, http::status::service_unavailable, "the server is shutting down");
  }
  // Unbatched requests are bounded as the batcher bounds its queue: by rows being computed.
  struct admission {
    std::atomic<std::int64_t>& rows;
    std::int64_t n;
    ~admission() { rows -= n; }
  };
  const auto admitted = s.counters.running_rows += request.batch;
  const admission guard{s.counters.running_rows, request.batch};
  if (!s.batch && admitted > static_cast<std::int64_t>(options_.max_queue_rows)) {
    co_return failure(req, s, std::make_exception_ptr(std::system_error(batcher_errc::queue_full)),
                      start);
  }
  // An exception from an await here is the caller's cancellation (operation_aborted): it
  // propagates. Every other failure is the request's, answered with a status.
  std::vector<tensor> outputs;
  std::exception_ptr failed;
  try {
    std::vector<tensor> inputs = input_tensors(request, *s.m);
    if (s.batch) {
      const auto rows = request.batch;
      tensor x = reshape(inputs.front(), {rows, inputs.front().numel() / rows});
      auto done = co_await s.batch->async_submit(std::move(x), asio::as_tuple(asio::use_awaitable));
      failed = std::get<0>(done);
      if (!failed) {
        std::vector<std::int64_t> out = config.outputs.front().dims;
        out.insert(out.begin(), rows);
        outputs.push_back(reshape(std::get<1>(done), shape(out)));
      }
    } else {
      cotensor::scope scope;
      const auto issued = clock_type::now();
      outputs = scope.run([&] { return s.m->forward(inputs); });
      failed = std::get<0>(co_await scope.async_wait(asio::as_tuple(asio::use_awaitable)));
      ++s.counters.executions;
      s.counters.compute_ns += ns(clock_type::now() - issued);
      if (!failed && outputs.size() != config.outputs.size()) {
        throw std::runtime_error("model '" + config.name +
                                 "' returned the wrong number of outputs");
      }
    }
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed && is_aborted(failed)) {
    std::rethrow_exception(failed);
  }
  std::vector<protocol::computed_output> computed_outputs;
  for (const auto& want : request.outputs) {
    if (failed) {
      break;
    }
    tensor y = outputs.at(want.index);
    if (y.device() != device::cpu()) {
      y = y.to(device::cpu());
      outputs[want.index] = y;
    }
    co_await y.ready();  // the copy to the host
    try {
      computed_outputs.push_back(computed(config, outputs, want));
    } catch (...) {
      failed = std::current_exception();
    }
  }
  if (failed) {
    co_return failure(req, s, failed, start);
  }
  co_return success(req, s, request, computed_outputs, start, decoded_at);
}

}  // namespace cotensor::serving::detail
