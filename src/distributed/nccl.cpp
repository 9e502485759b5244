// Collectives on GPU tensors through NCCL. See nccl.hpp.

#include "distributed/nccl.hpp"

#include "cotensor/error.hpp"
#include "cotensor/ops.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_context.hpp"
#include "distributed/nccl_library.hpp"
#include "engine/engine.hpp"
#include "frontend/frontend.hpp"
#include "support/environment.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <shared_mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace cotensor::dist::detail {

namespace {

std::string name_of(device d) {
  std::ostringstream s;
  s << d;
  return s.str();
}

}  // namespace

/// A communicator's NCCL side: its NCCL communicator, stream and watchdog.
class gpu_comm : public std::enable_shared_from_this<gpu_comm> {
public:
  gpu_comm(const std::shared_ptr<comm_state>& owner,
           device d,
           ncclComm_t comm,
           cudaStream_t stream,
           tensor sequence)
      : dev_(d), size_(owner->size()), comm_(comm), stream_(stream), sequence_(std::move(sequence)),
        owner_(owner), timeout_(owner->timeout()) {
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
    watchdog_.join();  // it finalizes and destroys the NCCL communicator as it ends
    const cotensor::detail::cuda::device_guard guard(dev_.index);
    COTENSOR_CUDA_LOG(cudaStreamDestroy(stream_));
  }

  device dev() const noexcept { return dev_; }
  const tensor& sequence() const noexcept { return sequence_; }

  /// On the device's launcher: enqueues the collective on our stream after the compute
  /// stream's work, and has the launch end it when that is done.
  void launch(
      op_kind kind, reduce_op op, dtype type, int root, const void* in, void* out, std::size_t n) {
    auto& l = cotensor::detail::cuda::launch_here();
    // Held across the enqueue: the watchdog aborts the NCCL communicator only between calls.
    std::lock_guard launching(launch_mu_);
    if (std::exception_ptr e = error()) {
      std::rethrow_exception(e);  // aborted: the NCCL communicator is gone
    }
    l.device->order_after_compute(stream_);
    // Tracked before the enqueue: from here on a failure syncs our stream before the buffers
    // go (launch_op does, for a launch with an `after` step), and the watchdog sees an enqueue
    // that hangs.
    l.stream = stream_;
    l.after = {&in_flight::finished, track()};
    enqueue(kind, op, type, root, in, out, n);
  }

  /// For a collective whose op was skipped (an error in its input) or dropped: takes part on
  /// zeroed scratch memory, so that the other ranks' collective does not hang. On the device's
  /// launcher, where the skipped op is retired; elsewhere (an op never issued) or on failure,
  /// breaks the communicator instead.
  void phantom(op_kind kind, reduce_op op, dtype type, int root, std::size_t n) noexcept {
    const auto* l = cotensor::detail::cuda::current_launch;
    try {
      if (l == nullptr || l->device->index() != dev_.index) {
        throw std::logic_error("a GPU collective dropped off its device's launcher");
      }
      std::lock_guard launching(launch_mu_);
      if (error()) {
        return;  // aborted already: the other ranks fail too
      }
      const auto ranks = static_cast<std::size_t>(size_);
      const std::size_t in_count =
          kind == op_kind::reduce_scatter ? n * ranks : (kind == op_kind::all_gather ? n : 0);
      const std::size_t out_count = kind == op_kind::all_gather ? n * ranks : n;
      void* scratch = nullptr;
      const std::size_t bytes = (in_count + out_count) * itemsize(type);
      COTENSOR_CUDA_CHECK(cudaMallocAsync(&scratch, bytes, stream_));
      COTENSOR_CUDA_CHECK(cudaMemsetAsync(scratch, 0, bytes, stream_));
      auto* base = static_cast<std::byte*>(scratch);
      try {
        enqueue(kind, op, type, root, base, base + in_count * itemsize(type), n);
      } catch (...) {
        COTENSOR_CUDA_LOG(cudaFreeAsync(scratch, stream_));
        throw;
      }
      COTENSOR_CUDA_CHECK(cudaFreeAsync(scratch, stream_));  // in stream order, after it
    } catch (...) {
      abort(std::current_exception());
    }
  }

private:
  // A collective enqueued and not yet seen done by the event poller.
  struct in_flight {
    std::shared_ptr<gpu_comm> comm;
    std::uint64_t id;

    // On the poller, once the op's event completed (or the device failed), or on the
    // launcher if the launch failed: the op fails with what the watchdog found, if anything.
    static std::exception_ptr finished(void* arg, bool /*ok*/) noexcept {
      std::unique_ptr<in_flight> self(static_cast<in_flight*>(arg));
      std::lock_guard lock(self->comm->mu_);
      self->comm->deadlines_.erase(self->id);
      return self->comm->error_;
    }
  };

  in_flight* track() {
    auto started = std::make_unique<in_flight>(in_flight{shared_from_this(), 0});
    {
      std::lock_guard lock(mu_);
      started->id = next_id_++;
      deadlines_.emplace(started->id, clock::now() + timeout_);
    }
    cv_.notify_one();
    return started.release();
  }

  // The NCCL call; launch_mu_ held.
  void enqueue(
      op_kind kind, reduce_op op, dtype type, int root, const void* in, void* out, std::size_t n) {
    const nccl_api& api = nccl();
    const ncclDataType_t t = nccl_type(type);
    switch (kind) {
    case op_kind::all_reduce:
      check(api.all_reduce(out, out, n, t, nccl_op(op, type), comm_, stream_), "ncclAllReduce");
      break;
    case op_kind::broadcast:
      check(api.broadcast(out, out, n, t, root, comm_, stream_), "ncclBroadcast");
      break;
    case op_kind::all_gather:
      check(api.all_gather(in, out, n, t, comm_, stream_), "ncclAllGather");
      break;
    case op_kind::reduce_scatter:
      check(api.reduce_scatter(in, out, n, t, nccl_op(op, type), comm_, stream_),
            "ncclReduceScatter");
      break;
    default:
      throw std::logic_error("cotensor::dist: no NCCL path for this op");
    }
  }

  std::exception_ptr error() {
    std::lock_guard lock(mu_);
    return error_;
  }

  // Fails what is in flight and what comes with `failure`, breaks the owner, and aborts the
  // NCCL communicator (its kernels return, so their events complete). Once.
  void abort(std::exception_ptr failure) noexcept {
    {
      std::lock_guard lock(mu_);
      if (aborted_) {
        return;
      }
      error_ = failure;
      aborted_ = true;
    }
    if (auto owner = owner_.lock()) {
      owner->fail(failure);
    }
    (void)nccl().comm_abort(comm_);
  }

  // On the watchdog's thread as it ends, which owns the NCCL communicator's teardown: whatever
  // thread drops the last reference (a user's, the event poller's), NCCL's last calls on it run
  // here, on the device, after every other. The last op holding us has ended: nothing of ours is
  // queued on the stream. ncclCommFinalize flushes what NCCL still has in flight (its proxy
  // thread's operations, the connections to the peers) and then ncclCommDestroy frees it; a
  // finalize that fails or outlasts the timeout aborts the communicator instead.
  void teardown() noexcept {
    {
      std::lock_guard lock(mu_);
      if (aborted_) {
        return;  // ncclCommAbort freed it
      }
    }
    const nccl_api& api = nccl();  // loaded (the communicator exists): does not throw
    ncclResult_t rc = ncclSuccess;
    if (api.comm_finalize != nullptr) {
      rc = api.comm_finalize(comm_);
      // A non-blocking communicator finalizes in the background: wait for it, up to the timeout.
      const auto give_up = clock::now() + timeout_;
      ncclResult_t state = rc;
      while (rc == ncclInProgress || (rc == ncclSuccess && state == ncclInProgress)) {
        if (clock::now() > give_up) {
          rc = ncclInProgress;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rc = api.comm_get_async_error(comm_, &state);
        if (rc == ncclSuccess && state != ncclInProgress) {
          rc = state;
          break;
        }
      }
    }
    if (rc != ncclSuccess) {
      std::fprintf(stderr, "cotensor::dist: ncclCommFinalize on %s: %s; aborting it\n",
                   name_of(dev_).c_str(), api.get_error_string(rc));
      (void)api.comm_abort(comm_);
      return;
    }
    if (rc = api.comm_destroy(comm_); rc != ncclSuccess) {
      std::fprintf(stderr, "cotensor::dist: ncclCommDestroy: %s\n", api.get_error_string(rc));
    }
  }

  // While collectives are in flight: every millisecond, NCCL's asynchronous error and the
  // oldest one's deadline. Either aborts the NCCL communicator. Ends with the teardown.
  void watch() noexcept {
    COTENSOR_CUDA_LOG(cudaSetDevice(dev_.index));  // NCCL's teardown runs here, on the device
    try {
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
          failure = timed_out(what.str());
        }
        if (!failure) {
          continue;
        }
        lock.unlock();
        // Between two launches (NCCL takes one thread at a time per communicator); a launch
        // stuck inside NCCL (its peers never came) is given a second before the abort goes
        // ahead regardless.
        std::unique_lock launching(launch_mu_, std::defer_lock);
        const auto give_up = clock::now() + std::chrono::seconds(1);
        while (!launching.try_lock() && clock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        abort(failure);
        if (launching.owns_lock()) {
          launching.unlock();
        }
        lock.lock();
      }
    } catch (...) {
      std::fprintf(stderr, "cotensor::dist: the NCCL watchdog on %s stopped: out of memory\n",
                   name_of(dev_).c_str());
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_; });  // the teardown still waits for the end
    }
    teardown();
  }

  const device dev_;
  const int size_;
  const ncclComm_t comm_;
  const cudaStream_t stream_;
  const tensor sequence_;
  const std::weak_ptr<comm_state> owner_;
  const clock::duration timeout_;

  std::mutex launch_mu_;  // one NCCL call on comm_ at a time: launches, phantoms, the abort
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, clock::time_point> deadlines_;  // by id
  std::uint64_t next_id_ = 0;
  std::exception_ptr error_;  // set once, with aborted_
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

// One "sequence" tensor per device, written by every GPU collective of every communicator on
// it: they launch in issue order across communicators too (NCCL can deadlock when two
// communicators' collectives start in different orders on different ranks). Never destroyed:
// freed at exit with the device's memory.
tensor sequence_for(device d) {
  static std::mutex mu;
  static auto* sequences = new std::map<int, tensor>;
  std::lock_guard lock(mu);
  auto it = sequences->find(d.index);
  if (it == sequences->end()) {
    it = sequences->emplace(d.index, zeros({1}, d)).first;
  }
  return it->second;
}

// Makes `c`'s NCCL side on `d`. Blocks until every rank has.
std::shared_ptr<gpu_comm> make_gpu_comm(comm_state& c, device d) {
  const nccl_api& api = nccl();  // throws before any collective if NCCL is missing
  auto message = std::make_shared<setup_message>();
  if (c.rank() == 0) {
    message->result = api.get_unique_id(&message->id);  // sent even if it failed
  }
  auto sent = std::make_shared<std::promise<void>>();
  auto received = sent->get_future();
  auto r = std::make_unique<request>();
  r->kind = op_kind::setup;
  r->seq = c.next_seq(true, r->coll_seq);
  r->count = static_cast<int>(sizeof(setup_message));
  r->raw = message.get();
  r->keep_raw = message;
  r->setup = [sent](std::exception_ptr error) {
    if (error) {
      sent->set_exception(error);
    } else {
      sent->set_value();
    }
  };
  c.post(std::move(r));
  received.get();  // MPI_Ibcast from rank 0, under the communicator's timeout
  if (message->result != ncclSuccess) {
    throw nccl_error(static_cast<ncclResult_t>(message->result), "ncclGetUniqueId (on rank 0)");
  }
  const cotensor::detail::cuda::device_guard guard(d.index);
  ncclComm_t comm = nullptr;
  {
    // NCCL reads its settings (NCCL_*) from the environment as a communicator starts.
    const std::shared_lock environment(cotensor::detail::environment_mutex());
    check(api.comm_init_rank(&comm, c.size(), message->id, c.rank()), "ncclCommInitRank");
  }
  cudaStream_t stream = nullptr;
  try {
    COTENSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::make_shared<gpu_comm>(c.shared_from_this(), d, comm, stream, sequence_for(d));
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
  if (auto e = c.gpu_error()) {
    std::rethrow_exception(e);
  }
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
  try {
    auto g = make_gpu_comm(c, d);
    c.set_gpu(g);
    return g;
  } catch (...) {
    // Some ranks may have made theirs: nothing later on the GPU path can match. For good.
    c.set_gpu_error(std::current_exception());
    c.fail(std::current_exception());
    throw;
  }
}

// An op's work: the collective, or, if the op never runs it (an error in its input), a
// phantom of it, so that the other ranks' collective completes.
class gpu_call {
public:
  gpu_call(std::shared_ptr<gpu_comm> comm,
           op_kind kind,
           reduce_op op,
           dtype type,
           int root,
           std::size_t count,
           cotensor::detail::storage* in,
           cotensor::detail::storage* out) noexcept
      : comm_(std::move(comm)), kind_(kind), op_(op), type_(type), root_(root), count_(count),
        in_(in), out_(out) {}
  gpu_call(gpu_call&& other) noexcept
      : comm_(std::move(other.comm_)), kind_(other.kind_), op_(other.op_), type_(other.type_),
        root_(other.root_), count_(other.count_), in_(other.in_), out_(other.out_),
        armed_(std::exchange(other.armed_, false)) {}
  gpu_call& operator=(gpu_call&&) = delete;
  gpu_call(const gpu_call&) = delete;
  gpu_call& operator=(const gpu_call&) = delete;
  ~gpu_call() {
    if (armed_ && comm_) {
      comm_->phantom(kind_, op_, type_, root_, count_);
    }
  }

  void operator()() {
    armed_ = false;
    comm_->launch(kind_, op_, type_, root_, in_ != nullptr ? in_->raw() : nullptr, out_->raw(),
                  count_);
  }

private:
  std::shared_ptr<gpu_comm> comm_;
  op_kind kind_;
  reduce_op op_;
  dtype type_;
  int root_;
  std::size_t count_;
  cotensor::detail::storage* in_;
  cotensor::detail::storage* out_;
  bool armed_ = true;
};

}  // namespace

namespace {

void issue_with_nccl(const gpu_collective& c) {
  auto g = gpu_comm_for(*c.c.state(), c.out.device(), c.what);
  const auto& written = c.out.storage();
  const auto& sequence = g->sequence().storage();
  gpu_call call(g, c.kind, c.op, c.out.dtype(), c.root, c.count,
                c.in != nullptr ? c.in->storage().get() : nullptr, written.get());
  // In place (all_reduce, broadcast): `out` is read and written. Every GPU collective writes
  // its device's sequence tensor: they launch in issue order.
  if (c.in != nullptr) {
    cotensor::detail::issue(c.what, {c.in->storage()}, {written, sequence}, std::move(call));
  } else {
    cotensor::detail::issue(c.what, {written}, {written, sequence}, std::move(call));
  }
}

// Set as libcotensor_cuda loads (see nccl.hpp).
[[maybe_unused]] const bool hooked = (gpu_issue.store(&issue_with_nccl), true);

}  // namespace

}  // namespace cotensor::dist::detail
