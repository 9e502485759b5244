// Collectives on GPU tensors through NCCL. See nccl.hpp.

#include "dist/nccl.hpp"

#include "cotensor/error.hpp"
#include "cotensor/ops.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_context.hpp"
#include "cuda/library.hpp"
#include "engine/engine.hpp"
#include "frontend.hpp"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace cotensor::dist::detail {

namespace {

constexpr const char* library = "libnccl.so.2";

std::string name_of(device d) {
  std::ostringstream s;
  s << d;
  return s.str();
}

// The NCCL entry points we call, resolved from the library.
struct nccl_api {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
};

struct loaded_nccl {
  nccl_api api;
  std::string error;  // empty once loaded
};

loaded_nccl load() {
  loaded_nccl l;
  void* h = cotensor::detail::cuda::open_toolkit_library(library, l.error);
  if (h == nullptr) {
    l.error += " (NCCL, for collectives on GPU tensors)";
    return l;
  }
  using cotensor::detail::cuda::resolve;
  nccl_api& a = l.api;
  if (!resolve(h, "ncclGetUniqueId", a.get_unique_id) ||
      !resolve(h, "ncclCommInitRank", a.comm_init_rank) ||
      !resolve(h, "ncclCommAbort", a.comm_abort) ||
      !resolve(h, "ncclCommDestroy", a.comm_destroy) ||
      !resolve(h, "ncclCommGetAsyncError", a.comm_get_async_error) ||
      !resolve(h, "ncclGetErrorString", a.get_error_string) ||
      !resolve(h, "ncclAllReduce", a.all_reduce) || !resolve(h, "ncclBroadcast", a.broadcast) ||
      !resolve(h, "ncclAllGather", a.all_gather) ||
      !resolve(h, "ncclReduceScatter", a.reduce_scatter)) {
    l.error = std::string(library) + " lacks an NCCL entry point we call";
  }
  return l;
}

const loaded_nccl& loaded() {
  static const loaded_nccl l = load();
  return l;
}

/// NCCL, loaded on the first call. Throws std::system_error (errc::device_unavailable) if it
/// cannot be.
const nccl_api& nccl() {
  const auto& l = loaded();
  if (!l.error.empty()) {
    throw std::system_error(make_error_code(cotensor::errc::device_unavailable),
                            "cotensor::dist: " + l.error);
  }
  return l.api;
}

class nccl_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "nccl"; }
  std::string message(int code) const override {
    const auto& l = loaded();
    if (l.error.empty()) {
      return l.api.get_error_string(static_cast<ncclResult_t>(code));
    }
    return "NCCL error " + std::to_string(code);
  }
};

const std::error_category& nccl_category() {
  static const nccl_category_impl c;
  return c;
}

std::system_error nccl_error(ncclResult_t rc, const std::string& what) {
  return {static_cast<int>(rc), nccl_category(), "cotensor::dist: " + what};
}

void check(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) {
    throw nccl_error(rc, call);
  }
}

ncclRedOp_t nccl_op(reduce_op op) noexcept {
  switch (op) {
  case reduce_op::avg:
    return ncclAvg;
  case reduce_op::max:
    return ncclMax;
  case reduce_op::min:
    return ncclMin;
  case reduce_op::sum:
    break;
  }
  return ncclSum;
}

}  // namespace

/// A communicator's NCCL side: its NCCL communicator, stream, sequence tensor and watchdog.
class gpu_comm : public std::enable_shared_from_this<gpu_comm> {
public:
  gpu_comm(const std::shared_ptr<comm_state>& owner,
           device d,
           ncclComm_t comm,
           cudaStream_t stream,
           tensor sequence)
      : dev_(d), comm_(comm), stream_(stream), sequence_(std::move(sequence)), owner_(owner),
        timeout_(owner->timeout()) {
    watchdog_ = std::thread([this] { watch(); });
  }
  gpu_comm(const gpu_comm&) = delete;
  gpu_comm& operator=(const gpu_comm&) = delete;
  ~gpu_comm() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    watchdog_.join();
    // The last op holding us has ended: nothing of ours is queued on the stream.
    if (!aborted_) {
      if (const ncclResult_t rc = nccl().comm_destroy(comm_); rc != ncclSuccess) {
        std::fprintf(stderr, "cotensor::dist: ncclCommDestroy: %s\n", nccl().get_error_string(rc));
      }
    }
    const cotensor::detail::cuda::device_guard guard(dev_.index);
    COTENSOR_CUDA_LOG(cudaStreamDestroy(stream_));
  }

  device dev() const noexcept { return dev_; }
  const tensor& sequence() const noexcept { return sequence_; }

  /// On the device's launcher: enqueues the collective on our stream after the compute
  /// stream's work, and has the launch end it when that is done.
  void launch(op_kind kind, reduce_op op, int root, const float* in, float* out, std::size_t n) {
    auto& l = cotensor::detail::cuda::launch_here();
    if (std::exception_ptr e = error()) {
      std::rethrow_exception(e);  // aborted: the NCCL communicator is gone
    }
    l.device->order_after_compute(stream_);
    const nccl_api& api = nccl();
    l.stream = stream_;  // from here on, a failure waits for our stream before freeing
    switch (kind) {
    case op_kind::all_reduce:
      check(api.all_reduce(out, out, n, ncclFloat, nccl_op(op), comm_, stream_), "ncclAllReduce");
      break;
    case op_kind::broadcast:
      check(api.broadcast(out, out, n, ncclFloat, root, comm_, stream_), "ncclBroadcast");
      break;
    case op_kind::all_gather:
      check(api.all_gather(in, out, n, ncclFloat, comm_, stream_), "ncclAllGather");
      break;
    case op_kind::reduce_scatter:
      check(api.reduce_scatter(in, out, n, ncclFloat, nccl_op(op), comm_, stream_),
            "ncclReduceScatter");
      break;
    default:
      throw std::logic_error("cotensor::dist: no NCCL path for this op");
    }
    auto* started = new in_flight{shared_from_this(), 0};
    {
      std::lock_guard lock(mu_);
      started->id = next_id_++;
      deadlines_.emplace(started->id, clock::now() + timeout_);
    }
    cv_.notify_one();
    l.after = {&in_flight::finished, started};
  }

private:
  // A collective enqueued and not yet seen done by the event poller.
  struct in_flight {
    std::shared_ptr<gpu_comm> comm;
    std::uint64_t id;

    // On the poller, once the op's event completed (or the device failed): the op fails with
    // what the watchdog found, if anything.
    static std::exception_ptr finished(void* arg, bool /*ok*/) noexcept {
      std::unique_ptr<in_flight> self(static_cast<in_flight*>(arg));
      std::lock_guard lock(self->comm->mu_);
      self->comm->deadlines_.erase(self->id);
      return self->comm->error_;
    }
  };

  std::exception_ptr error() {
    std::lock_guard lock(mu_);
    return error_;
  }

  // While collectives are in flight: every millisecond, NCCL's asynchronous error and the
  // oldest one's deadline. Either aborts the NCCL communicator, which ends its kernels.
  void watch() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      if (deadlines_.empty() || aborted_) {
        cv_.wait(lock);
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(1));
      if (deadlines_.empty() || aborted_ || stopping_) {
        continue;
      }
      ncclResult_t async = ncclSuccess;
      const ncclResult_t rc = nccl().comm_get_async_error(comm_, &async);
      std::exception_ptr failure;
      if (rc != ncclSuccess) {
        failure = std::make_exception_ptr(nccl_error(rc, "ncclCommGetAsyncError"));
      } else if (async != ncclSuccess && async != ncclInProgress) {
        failure = std::make_exception_ptr(
            nccl_error(async, "NCCL failed during a collective on " + name_of(dev_)));
      } else if (clock::now() > deadlines_.begin()->second) {
        std::ostringstream what;
        what << "cotensor::dist: a collective on " << name_of(dev_) << " not complete after "
             << std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count()
             << " ms (NCCL); the communicator is broken";
        failure = std::make_exception_ptr(
            std::system_error(std::make_error_code(std::errc::timed_out), what.str()));
      }
      if (!failure) {
        continue;
      }
      error_ = failure;
      aborted_ = true;
      lock.unlock();
      if (auto owner = owner_.lock()) {
        owner->fail(failure);
      }
      (void)nccl().comm_abort(comm_);  // the kernels return; their events complete
      lock.lock();
    }
  }

  const device dev_;
  const ncclComm_t comm_;
  const cudaStream_t stream_;
  const tensor sequence_;
  const std::weak_ptr<comm_state> owner_;
  const clock::duration timeout_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, clock::time_point> deadlines_;  // by id
  std::uint64_t next_id_ = 0;
  std::exception_ptr error_;  // set once, by the watchdog, with aborted_
  bool aborted_ = false;
  bool stopping_ = false;
  std::thread watchdog_;
};

namespace {

// What rank 0 broadcasts: NCCL's id, or that it could not make one.
struct setup_message {
  int result = ncclSuccess;
  ncclUniqueId id{};
};

// Makes `c`'s NCCL side on `d`. Blocks until every rank has.
std::shared_ptr<gpu_comm> make_gpu_comm(comm_state& c, device d) {
  const nccl_api& api = nccl();  // throws before any collective if NCCL is missing
  std::promise<setup_message> sent;
  auto received = sent.get_future();
  auto r = std::make_unique<request>();
  r->kind = op_kind::setup;
  r->seq = c.next_seq(true, r->coll_seq);
  r->count = static_cast<int>(sizeof(setup_message));
  const bool root = c.rank() == 0;
  r->setup = [&sent, &api, root](MPI_Comm comm, std::exception_ptr error) {
    if (error) {
      sent.set_exception(error);
      return;
    }
    setup_message m;
    if (root) {
      m.result = api.get_unique_id(&m.id);
    }
    // Sent even when rank 0 failed, so that no rank waits for an id that never comes.
    const int rc = MPI_Bcast(&m, static_cast<int>(sizeof m), MPI_BYTE, 0, comm);
    if (rc != MPI_SUCCESS) {
      sent.set_exception(mpi_error(rc, "cotensor::dist: MPI_Bcast (NCCL's id)"));
      return;
    }
    sent.set_value(m);
  };
  c.post(std::move(r));
  const setup_message m = received.get();
  if (m.result != ncclSuccess) {
    throw nccl_error(static_cast<ncclResult_t>(m.result), "ncclGetUniqueId (on rank 0)");
  }
  const cotensor::detail::cuda::device_guard guard(d.index);
  ncclComm_t comm = nullptr;
  check(api.comm_init_rank(&comm, c.size(), m.id, c.rank()), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  try {
    COTENSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::make_shared<gpu_comm>(c.shared_from_this(), d, comm, stream, zeros({1}, d));
  } catch (...) {
    if (stream != nullptr) {
      COTENSOR_CUDA_LOG(cudaStreamDestroy(stream));
    }
    (void)api.comm_destroy(comm);
    throw;
  }
}

std::shared_ptr<gpu_comm> gpu_comm_for(comm_state& c, device d, const char* what) {
  std::lock_guard lock(c.gpu_mutex());
  if (auto g = c.gpu()) {
    if (g->dev() != d) {
      cotensor::detail::throw_invalid(
          what, "a tensor on " + name_of(d) +
                    ", but this rank's collectives on the "
                    "communicator run on " +
                    name_of(g->dev()) +
                    " (one device per rank per communicator; split the communicator for another)");
    }
    return g;
  }
  auto g = make_gpu_comm(c, d);
  c.set_gpu(g);
  return g;
}

}  // namespace

void issue_on_gpu(const communicator& c,
                  const char* what,
                  op_kind kind,
                  reduce_op op,
                  int root,
                  const tensor* in,
                  const tensor& out,
                  std::size_t count) {
  auto g = gpu_comm_for(*c.state(), out.device(), what);
  const auto& written = out.storage();
  const auto& sequence = g->sequence().storage();
  auto kernel = [g, kind, op, root, count, pin = in != nullptr ? in->storage().get() : nullptr,
                 pout = written.get()] {
    g->launch(kind, op, root, pin != nullptr ? pin->data() : nullptr, pout->data(), count);
  };
  // In place (all_reduce, broadcast): `out` is read and written. Every GPU collective writes
  // the sequence tensor: they launch in issue order.
  if (in != nullptr) {
    cotensor::detail::issue(what, {in->storage()}, {written, sequence}, std::move(kernel));
  } else {
    cotensor::detail::issue(what, {written}, {written, sequence}, std::move(kernel));
  }
}

}  // namespace cotensor::dist::detail
