// The frontend of the collectives: validation at the call, a sequence number, an engine op
// whose start hands the request to the communicator's thread.

#include "cotensor/async_op.hpp"
#include "cotensor/distributed.hpp"

#include "distributed/comm_state.hpp"
#include "engine/storage.hpp"
#if COTENSOR_HAVE_NCCL
#include "distributed/nccl.hpp"
#endif
#include "frontend/frontend.hpp"

#include <climits>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cotensor::dist {

namespace {

using detail::op_kind;
using detail::request;

// `gpu_ok`: the op has an NCCL path, in builds with it.
void check_tensor(const char* what, const tensor& t, bool gpu_ok = true) {
  cotensor::detail::checked(t, what);
  if (!t.device().is_cpu()) {
    std::ostringstream where;
    where << t.device();
#if COTENSOR_HAVE_NCCL
    if (!gpu_ok) {
      cotensor::detail::throw_invalid(
          what, "a tensor on " + where.str() +
                    ": sends and receives take CPU tensors (copy with t.to(device::cpu())); "
                    "the collectives take GPU tensors");
    }
    cotensor::detail::require_device(what, t.device());
#else
    (void)gpu_ok;
    cotensor::detail::throw_invalid(
        what, "a tensor on " + where.str() +
                  ": this build has no NCCL (it needs the CUDA backend and MPI); copy to the "
                  "CPU with t.to(device::cpu())");
#endif
  }
  if (t.numel() > INT_MAX) {
    cotensor::detail::throw_invalid(what, "more than INT_MAX elements (MPI-3.1 counts are int)");
  }
}

// A reduction's dtype: every one but bool's avg (bool reduces as logical or and and).
void check_reduce(const char* what, const tensor& t, reduce_op op) {
  if (t.dtype() == dtype::boolean && op == reduce_op::avg) {
    cotensor::detail::throw_invalid(what, "reduce_op::avg on a bool tensor (bool reduces by sum "
                                          "or max, a logical or, and min, a logical and)");
  }
}

#if COTENSOR_HAVE_NCCL
bool on_gpu(const tensor& t) noexcept { return !t.device().is_cpu(); }
#endif

void check_rank(const char* what, const char* role, int r, const communicator& c) {
  if (r < 0 || r >= c.size()) {
    cotensor::detail::throw_invalid(what, std::string(role) + " " + std::to_string(r) +
                                              " is not a rank of a group of " +
                                              std::to_string(c.size()));
  }
}

// Owns a request until the op's start hands it to the communication thread. A request never
// handed over (the engine skipped the op for an error in its input, or issuing failed) goes
// as a phantom on zeroed scratch buffers, so that the other ranks' collective still matches.
class handoff {
public:
  handoff(std::shared_ptr<detail::comm_state> state, std::unique_ptr<request> r) noexcept
      : state_(std::move(state)), r_(std::move(r)) {}
  handoff(handoff&&) noexcept = default;
  handoff& operator=(handoff&&) = delete;
  handoff(const handoff&) = delete;
  handoff& operator=(const handoff&) = delete;
  ~handoff() {
    if (r_) {
      r_->make_phantom(state_->size());
      state_->post(std::move(r_));
    }
  }

  // The buffers, of any dtype, through the tensors kept (`keep`: the input first), whose memory
  // the engine gave them before this start.
  void operator()(async_op_context& /*ctx*/, async_op_done done) {
    const auto& keep = r_->keep;
    switch (r_->kind) {
    case op_kind::all_gather:
    case op_kind::reduce_scatter:
      r_->in = keep.at(0).storage()->raw();
      r_->out = keep.at(1).storage()->raw();
      break;
    case op_kind::send:
      r_->in = keep.at(0).storage()->raw();
      break;
    default:  // in place, or into t
      r_->out = keep.at(0).storage()->raw();
      break;
    }
    auto r = std::move(r_);
    r->done = std::move(done);
    state_->post(std::move(r));
  }

private:
  std::shared_ptr<detail::comm_state> state_;
  std::unique_ptr<request> r_;
};

// Issues the op: its start only hands the request over, so it runs at the call when the op is
// ready then (no hop through a backend thread before the communication thread's). `what` is a
// literal (the op points at it); `read` and `write` are the tensors, or null (pointers, not
// copies: each copy costs two atomic reference counts on the issuing thread).
void issue(const char* what, const tensor* read, const tensor* write, handoff start) {
  cotensor::detail::issue_quick_async_op(
      std::span<const tensor>(read, read != nullptr ? 1 : 0),
      std::span<const tensor>(write, write != nullptr ? 1 : 0),
      std::make_unique<cotensor::detail::async_start_for<handoff>>(
          cotensor::detail::static_name{what}, std::move(start)));
}

std::unique_ptr<request>
make_request(const communicator& c, op_kind kind, int count, const tensor& t) {
  auto r = std::make_unique<request>();
  r->kind = kind;
  r->count = count;
  r->type = t.dtype();
  r->seq = c.state()->next_seq(detail::is_collective(kind), r->coll_seq, r.get());
  return r;
}

// The request of a send or a recv of `t` with rank `peer`, after checking its arguments (`role`
// names `peer` in the message: "dest" or "source").
std::unique_ptr<request> point_to_point(const char* what,
                                        op_kind kind,
                                        const char* role,
                                        const tensor& t,
                                        int peer,
                                        int tag,
                                        const communicator& c) {
  check_tensor(what, t, false);
  check_rank(what, role, peer, c);
  if (tag < 0) {
    cotensor::detail::throw_invalid(what, "negative tag " + std::to_string(tag));
  }
  auto r = make_request(c, kind, static_cast<int>(t.numel()), t);
  r->peer = peer;
  r->tag = tag;
  r->keep.push_back(t);
  return r;
}

}  // namespace

#if COTENSOR_HAVE_NCCL
namespace detail {

std::atomic<void (*)(const gpu_collective&)> gpu_issue{nullptr};

void issue_on_gpu(const gpu_collective& g) {
  auto* const nccl = gpu_issue.load(std::memory_order_acquire);
  if (nccl == nullptr) {  // unreachable: a GPU tensor loaded libcotensor_cuda
    cotensor::detail::throw_invalid(g.what, "the CUDA backend's library is not loaded");
  }
  nccl(g);
}

}  // namespace detail
#endif

namespace {

// all_reduce and broadcast, their arguments checked: in place on `t`, through NCCL when it is on
// a GPU, else by the communication thread.
void in_place(
    const char* what, op_kind kind, reduce_op op, int root, tensor& t, const communicator& c) {
#if COTENSOR_HAVE_NCCL
  if (on_gpu(t)) {
    detail::issue_on_gpu(
        {c, what, kind, op, root, nullptr, t, static_cast<std::size_t>(t.numel())});
    return;
  }
#endif
  auto r = make_request(c, kind, static_cast<int>(t.numel()), t);
  r->op = op;
  r->peer = root;
  r->keep.push_back(t);
  issue(what, nullptr, &t, handoff(c.state(), std::move(r)));
}

}  // namespace

void all_reduce(tensor& t, reduce_op op, const communicator& c) {
  const char* what = "dist::all_reduce";
  check_tensor(what, t);
  check_reduce(what, t, op);
  in_place(what, op_kind::all_reduce, op, 0, t, c);
}

void broadcast(tensor& t, int root, const communicator& c) {
  const char* what = "dist::broadcast";
  check_tensor(what, t);
  check_rank(what, "root", root, c);
  in_place(what, op_kind::broadcast, reduce_op::sum, root, t, c);
}

tensor all_gather(const tensor& t, const communicator& c) {
  const char* what = "dist::all_gather";
  check_tensor(what, t);
  std::vector<std::int64_t> extents{c.size()};
  extents.insert(extents.end(), t.shape().extents().begin(), t.shape().extents().end());
  const shape s{std::span<const std::int64_t>(extents)};
  tensor out(cotensor::detail::internal, cotensor::detail::allocate(what, s, t.device(), t.dtype()),
             s);
#if COTENSOR_HAVE_NCCL
  if (on_gpu(t)) {
    detail::issue_on_gpu({c, what, op_kind::all_gather, reduce_op::sum, 0, &t, out,
                          static_cast<std::size_t>(t.numel())});
    return out;
  }
#endif
  auto r = make_request(c, op_kind::all_gather, static_cast<int>(t.numel()), t);
  r->keep.push_back(t);
  r->keep.push_back(out);
  issue(what, &t, &out, handoff(c.state(), std::move(r)));
  return out;
}

tensor reduce_scatter(const tensor& t, reduce_op op, const communicator& c) {
  const char* what = "dist::reduce_scatter";
  check_tensor(what, t);
  check_reduce(what, t, op);
  if (t.rank() == 0 || t.shape()[0] % c.size() != 0) {
    cotensor::detail::throw_invalid(what, "the first dimension of shape " + t.shape().to_string() +
                                              " does not divide by " + std::to_string(c.size()) +
                                              " ranks");
  }
  std::vector<std::int64_t> extents(t.shape().extents().begin(), t.shape().extents().end());
  extents[0] /= c.size();
  const shape s{std::span<const std::int64_t>(extents)};
  tensor out(cotensor::detail::internal, cotensor::detail::allocate(what, s, t.device(), t.dtype()),
             s);
#if COTENSOR_HAVE_NCCL
  if (on_gpu(t)) {
    detail::issue_on_gpu(
        {c, what, op_kind::reduce_scatter, op, 0, &t, out, static_cast<std::size_t>(s.numel())});
    return out;
  }
#endif
  auto r = make_request(c, op_kind::reduce_scatter, static_cast<int>(s.numel()), t);
  r->op = op;
  r->keep.push_back(t);
  r->keep.push_back(out);
  issue(what, &t, &out, handoff(c.state(), std::move(r)));
  return out;
}

void send(const tensor& t, int dest, int tag, const communicator& c) {
  const char* what = "dist::send";
  auto r = point_to_point(what, op_kind::send, "dest", t, dest, tag, c);
  issue(what, &t, nullptr, handoff(c.state(), std::move(r)));
}

void recv(tensor& t, int source, int tag, const communicator& c) {
  const char* what = "dist::recv";
  auto r = point_to_point(what, op_kind::recv, "source", t, source, tag, c);
  issue(what, nullptr, &t, handoff(c.state(), std::move(r)));
}

}  // namespace cotensor::dist
