#pragma once

// A communicator's state and its communication thread: the only code that calls MPI.
//
// The frontend (collectives.cpp) gives each op a sequence number when it is issued and issues
// an engine op (`async_op`) whose start hands a `request` to the communication thread. That
// thread (or, while one spins, a blocking waiter lending its own: see "Helpers" below) starts
// requests strictly in sequence order (op n after op n-1, even if n's inputs were ready first:
// MPI matches collectives by their order on a communicator, so every rank must start them in
// the order the program issued them, not in the order of readiness), keeps the started ones in
// flight (MPI_Testsome), and invokes their completions. An op that
// the engine skips (an error in its input) still reaches the thread, as a "phantom" on a
// zeroed scratch buffer, so that the other ranks' collectives do not hang.
//
// MPI is initialised with MPI_THREAD_SERIALIZED: every MPI call of every communication thread
// holds `mpi_lock()`.
//
// Fusion (opt-in, communicator::set_fusion): when the next op to start is a small all-reduce,
// the thread gathers the small all-reduces of the same dtype and op that follow it in issue
// order and are ready (waiting while they still arrive less than 2 us apart, up to 50 us, and,
// with a cycle time, up to it for those already issued: fusion.cpp). On 3 or more ranks (and
// on 2 for all-reduces over 256 KiB) it agrees with the others on how many of them every rank has
// (an MPI_Iallreduce of the count, MIN), and runs that many as one MPI_Iallreduce on a buffer that
// concatenates them. On 2 ranks, for groups up to 256 KiB, the data is the agreement: each sends
// the other its group, behind a head that says what the group is (one message each way, on a
// duplicate of the group's communicator), and both reduce the ops they have in common
// (MPI_Reduce_local, rank 0's values first); the rest wait for the next group. Whether an op is
// fused depends only on what every rank issued (its kind, size, dtype and the fusion settings when
// it was issued), so every rank takes part in the same agreements and exchanges.
//
// The stall probe: each communicator has a duplicate of its MPI communicator on which the
// threads ask each other, once an op is overdue (in flight for half the timeout), how many
// collectives they have started. A rank that answers is alive; one that does not has stopped or
// cannot be reached. The timeout's error names both kinds, so that the error on every surviving
// rank names the peer that stopped answering. Busy threads look for questions every
// millisecond, idle ones every sixteenth of the timeout (50 ms to 1 s).
//
// Helpers (engine/progress.hpp): a blocking wait that spins (runtime_options::wait_spin) calls
// help(), which does one step of the thread's loop if no other thread is in one (`drive_mu_`
// guards everything the loop owns). While any waiter spins, the thread sleeps, unless the next
// request to start is one that blocks (a split, a GPU setup), which only the thread starts: a
// rank then keeps one busy thread per wait instead of two, which on a machine with no core to
// spare is the difference between MPI's own latency and a reschedule on every op.

#include "cotensor/async_op.hpp"
#include "cotensor/distributed.hpp"
#include "cotensor/tensor.hpp"

#include "engine/progress.hpp"
#include "frontend/frontend.hpp"

#include <boost/container/small_vector.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mpi.h>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace cotensor::dist::detail {

using clock = std::chrono::steady_clock;

/// The lock every MPI call holds (MPI_THREAD_SERIALIZED).
std::recursive_mutex& mpi_lock();
/// The category of MPI error codes; its messages are MPI_Error_string's.
const std::error_category& mpi_category();
/// std::system_error for MPI's `code`, from the call `what`. Takes `mpi_lock()`.
std::exception_ptr mpi_error(int code, const std::string& what);
/// std::system_error(errc::timed_out, `what`): how an op past its communicator's timeout fails.
std::exception_ptr timed_out(const std::string& what);

enum class op_kind : std::uint8_t {
  all_reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  send,
  recv,
  split,
  setup  // a blocking step of the GPU path's setup (NCCL's id, broadcast), in issue order
};
const char* kind_name(op_kind k) noexcept;

/// The MPI type that carries `t`'s elements: float16 and bfloat16 as MPI_UINT16_T, bool as
/// MPI_UINT8_T (reduce_ops.cpp).
MPI_Datatype mpi_type(dtype t) noexcept;
/// The MPI op that reduces `t` by `op`, into `out`; MPI's error code. float16 and bfloat16
/// reduce by ops of our own, made on first use: under `mpi_lock()`.
int mpi_op(reduce_op op, dtype t, MPI_Op& out);
/// Divides the sums of `n` elements at `p` by `size`, in place: what `reduce_op::avg` adds.
void average(dtype t, void* p, int n, int size);
/// Frees the MPI ops made for float16 and bfloat16 reductions (MPI_Op_create), if any; under
/// `mpi_lock()`, before MPI_Finalize.
void free_reduce_ops() noexcept;
inline bool is_collective(op_kind k) noexcept { return k != op_kind::send && k != op_kind::recv; }

class comm_state;
class gpu_comm;

/// Memory kept from use to use and never zero-filled: a receive reserves room for the largest
/// message it may get and touches only what arrives.
class raw_buffer {
public:
  raw_buffer() = default;
  raw_buffer(raw_buffer&& o) noexcept
      : data_(std::move(o.data_)), size_(std::exchange(o.size_, 0)) {}
  raw_buffer& operator=(raw_buffer&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }
  raw_buffer(const raw_buffer&) = delete;
  raw_buffer& operator=(const raw_buffer&) = delete;
  ~raw_buffer() = default;

  std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  /// At least `n` bytes; what it held is lost when it grows.
  void reserve(std::size_t n) {
    if (n > size_) {
      data_.reset();
      data_.reset(new std::byte[n]);
      size_ = n;
    }
  }

private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
};

/// A half of a two-rank fused all-reduce (fusion.cpp): the group sent, or the peer's received.
enum class exchange_half : std::uint8_t { none, send, receive };

/// One op for the communication thread.
struct request {
  std::uint64_t seq = 0;       // issue order on the communicator
  std::uint64_t coll_seq = 0;  // issue order among its collectives (the check's position)
  op_kind kind = op_kind::all_reduce;
  reduce_op op = reduce_op::sum;
  int peer = 0;  // root, dest or source
  int tag = 0;
  int count = 0;                          // elements per rank: t.numel(), reduce_scatter's block
  cotensor::dtype type = dtype::float32;  // of every tensor of the op
  const void* in = nullptr;               // null: in place on `out`
  void* out = nullptr;
  std::optional<cotensor::async_op_done> done;  // empty for a phantom
  std::vector<std::byte> scratch;               // a phantom's buffers
  // The tensors MPI touches, alive while it may (timeouts); no allocation for one or two.
  boost::container::small_vector<tensor, 2> keep;
  // split
  int color = 0;
  int key = 0;
  std::promise<std::shared_ptr<comm_state>>* split_result = nullptr;
  // setup: `raw` (`count` bytes, kept alive by `keep_raw`) is broadcast from rank 0
  // (MPI_Ibcast, in issue order, under the timeout); then `setup` is called once, with null or
  // the error that ended it.
  std::function<void(std::exception_ptr)> setup;
  void* raw = nullptr;
  std::shared_ptr<void> keep_raw;
  // on the communication thread
  bool checking = false;  // in flight: the COTENSOR_DIST_CHECK all-gather
  std::array<std::uint64_t, 4> check_mine{};
  std::vector<std::uint64_t> check_all;
  clock::time_point started{};  // when it was started (the timeout counts from here)
  clock::time_point deadline{};
  const char* call = "";         // the MPI function in flight, for errors
  clock::time_point ready_at{};  // handed to the thread
  // Fusion: the settings when it was issued; and for the agreement, what this rank has and
  // what every rank has (MIN); and for a fused op, the ops it runs for.
  std::size_t fusion_bytes = 0;
  clock::duration fusion_cycle{};
  bool negotiating = false;
  std::uint64_t fuse_mine = 0;
  std::uint64_t fuse_agreed = 0;
  std::vector<std::unique_ptr<request>> members;
  // Two ranks' fusion: a half of the exchange, its message (head and group), and for the
  // receive, the bytes that came.
  exchange_half exchange = exchange_half::none;
  raw_buffer message;
  std::size_t received = 0;

  request() = default;
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  /// A request dropped unfinished (the thread stopped first) ends what waits on it, failed.
  ~request();

  /// The bytes of `count` elements: one rank's part.
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(count) * itemsize(type); }

  /// Ends the op (once; a phantom has none), or the setup: failed with `error` unless null. A
  /// fused op fails its members with it (comm_state::finish ends them on success).
  void complete(std::exception_ptr error) noexcept {
    if (error) {
      for (auto& m : members) {
        m->complete(error);
      }
    }
    if (done) {
      auto d = std::move(*done);
      done.reset();
      cotensor::detail::complete_here(d, std::move(error));  // no hop: this thread is ours
    }
    if (setup) {
      auto s = std::move(setup);
      setup = nullptr;
      s(std::move(error));
    }
  }
  /// Makes this a phantom: zeroed scratch buffers of the sizes its op needs on `size` ranks.
  void make_phantom(int size);
};

/// The requests handed to the thread and not yet started, by sequence number: one slot per
/// number from the next to start on (null until it arrives), in a deque that grows at the back
/// and is taken from the front, as requests start strictly in sequence order. No allocation
/// per request (a std::map's node was one).
class ready_queue {
public:
  void add(std::unique_ptr<request> r) {
    const auto at = static_cast<std::size_t>(r->seq - base_);
    if (at >= slots_.size()) {
      slots_.resize(at + 1);
    }
    slots_[at] = std::move(r);
    ++count_;
  }
  /// Null unless request `seq` is here.
  request* find(std::uint64_t seq) const noexcept {
    const auto at = seq - base_;
    return seq >= base_ && at < slots_.size() ? slots_[static_cast<std::size_t>(at)].get()
                                              : nullptr;
  }
  /// The request `seq`, which is here and the lowest one here.
  std::unique_ptr<request> take(std::uint64_t seq) noexcept {
    auto r = std::move(slots_[static_cast<std::size_t>(seq - base_)]);
    --count_;
    while (!slots_.empty() && slots_.front() == nullptr && base_ <= seq) {
      slots_.pop_front();
      ++base_;
    }
    return r;
  }
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  void clear() noexcept {
    base_ += slots_.size();
    slots_.clear();
    count_ = 0;
  }

private:
  std::deque<std::unique_ptr<request>> slots_;
  std::uint64_t base_ = 0;  // slots_.front()'s sequence number
  std::size_t count_ = 0;   // slots that hold one
};

/// A communicator: its MPI handle, its queue and its communication thread.
class comm_state final : public std::enable_shared_from_this<comm_state>,
                         public cotensor::detail::progress_source {
public:
  /// Takes `comm` (MPI_COMM_WORLD or a split), whose rank and size are given. A split's
  /// communicator is freed by the `fini` step its thread runs (start_thread).
  comm_state(MPI_Comm comm, int rank, int size, bool check, clock::duration timeout);
  comm_state(const comm_state&) = delete;
  comm_state& operator=(const comm_state&) = delete;
  ~comm_state();

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool broken() const noexcept { return broken_.load(std::memory_order_acquire); }
  void set_timeout(clock::duration t) noexcept;

  /// The next sequence number (under the issue lock): the op's place in the start order. With
  /// `r`, also the fusion settings at this point of the issue order, into it.
  std::uint64_t next_seq(bool collective, std::uint64_t& coll_seq, request* r = nullptr);
  /// Fusion of small all-reduces issued from now on (0 bytes: none).
  void set_fusion(std::size_t bytes, clock::duration cycle);
  /// All-reduces run as part of a fused MPI operation so far.
  std::uint64_t fused() const noexcept { return fused_.load(std::memory_order_relaxed); }
  /// Steps of the thread's loop that a spinning waiter made, which started or ended something.
  std::uint64_t helped() const noexcept { return helped_.load(std::memory_order_relaxed); }

  // progress_source: for blocking waits that spin (see "Helpers" at the top of this file).
  void helper_arrives() noexcept override;
  void help() noexcept override;
  void helper_leaves() noexcept override;
  /// Hands a request to the communication thread; from any thread.
  void post(std::unique_ptr<request> r);
  /// Starts the communication thread; `init` runs first on it (the world's MPI_Init_thread),
  /// then the stall probe's set-up (a collective on the group), which also sets the rank and
  /// size from MPI. Returns once both are done; throws what they threw.
  void start_thread(std::function<void()> init, std::function<void()> fini);
  /// Runs every op issued so far to its end (or its timeout), then stops the thread (which
  /// frees the communicator, or finalises MPI for the world). Idempotent.
  void stop();

  /// The error every op fails with once the communicator is broken.
  std::exception_ptr broken_error() const;
  /// Marks the communicator broken with `error` (the first caller's error stays); any thread.
  void fail(std::exception_ptr error) noexcept { (void)mark_broken(std::move(error)); }
  /// How long an op may take once started.
  clock::duration timeout() const noexcept {
    return clock::duration(timeout_.load(std::memory_order_relaxed));
  }

  /// The GPU path (NCCL) of this communicator, made by its first GPU collective: `gpu_mutex`
  /// serialises the making; `set_gpu` once.
  std::mutex& gpu_mutex() noexcept { return gpu_mu_; }
  std::shared_ptr<gpu_comm> gpu() const noexcept { return gpu_; }
  void set_gpu(std::shared_ptr<gpu_comm> g) noexcept { gpu_ = std::move(g); }
  /// Why the GPU path could not be made, for every later GPU collective (under gpu_mutex).
  std::exception_ptr gpu_error() const noexcept { return gpu_error_; }
  void set_gpu_error(std::exception_ptr e) noexcept { gpu_error_ = std::move(e); }

private:
  void run();
  void take_incoming();     // under mu_: what was posted joins ready_
  bool step(bool helping);  // one round of starting, testing and timeouts; true on progress
  // Starts what may start in order; true on progress. A helper leaves what blocks to the thread.
  bool start_ready(bool helping);
  const request* next_ready() const noexcept;  // the request that starts next, if handed over
  bool idle() const noexcept;                  // nothing in flight, and nothing that may start now
  bool next_needs_thread() const noexcept;     // the next request to start blocks (split, setup)
  bool test_in_flight();
  void check_timeouts(clock::time_point now);
  void start(std::unique_ptr<request> r);
  void start_split(std::unique_ptr<request> r);
  void start_mpi(request& r);
  void finish(std::unique_ptr<request> r, std::exception_ptr error);
  void check_done(std::unique_ptr<request> r);
  // Fusion (see the top of this file).
  bool fusable(const request& r) const noexcept;
  bool negotiate_fusion(bool helping);  // false while it waits for the group to grow
  void fusion_agreed(std::unique_ptr<request> agreement);
  void start_fused(std::vector<std::unique_ptr<request>> members);
  // Two ranks: sends this rank's group of the ops [next_start_, end), `bytes` of data, and
  // receives the peer's; then reduces the ops both sent.
  void
  start_exchange(std::uint64_t end, std::size_t bytes, clock::time_point now, std::size_t limit);
  void exchange_done(std::unique_ptr<request> received);
  void break_all(std::exception_ptr error);
  // The stall probe (on the thread; see the top of this file).
  void open_probe();
  bool close_probe();  // false while a probe message is still in MPI's hands
  void poll_probe(clock::time_point now);
  void ping_peers(clock::time_point now);
  void send_probe(int to, int tag);
  std::string stall_report(const request& r) const;
  // Marks the communicator broken; returns the error it is broken with (the first caller's).
  std::exception_ptr mark_broken(std::exception_ptr error) noexcept;
  bool drained(bool count_zombies) const;  // under mu_ and drive_mu_; zombies count or not

  MPI_Comm comm_;
  int rank_;
  int size_;
  bool check_;
  std::atomic<clock::rep> timeout_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> breaking_{false};  // claimed by the one caller that sets broken_error_
  std::exception_ptr broken_error_;    // set once, before broken_

  std::mutex gpu_mu_;
  std::shared_ptr<gpu_comm> gpu_;  // guarded by gpu_mu_; dropped by stop()
  std::exception_ptr gpu_error_;   // guarded by gpu_mu_: the setup failed, for good

  mutable std::mutex issue_mu_;
  std::uint64_t issued_ = 0;       // sequence numbers handed out
  std::uint64_t coll_issued_ = 0;  // ... to collectives
  std::size_t fusion_bytes_ = 0;   // the fusion settings, under issue_mu_
  clock::duration fusion_cycle_{};
  std::atomic<std::uint64_t> fused_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<request>> incoming_;  // posted, not yet seen by the thread
  bool stopping_ = false;
  bool exited_ = false;  // the thread has left run(): post() drops what comes
  // Set under mu_ with what help() must look at under it (a post, stopping_), so that a
  // helper's step takes mu_ only then. Cleared by take_incoming, never once stopping_.
  std::atomic<bool> mail_{false};
  int helpers_ = 0;           // waiters spinning now (progress_source)
  bool wanted_ = false;       // a helper found a request that only the thread starts
  bool handed_back_ = false;  // the last helper left with work in flight or ready

  // Held by the thread, or by one helper, while it runs the loop's steps: guards what follows.
  std::mutex drive_mu_;
  std::atomic<std::uint64_t> helped_{0};
  clock::time_point last_work_ = clock::now();  // the last start or completion
  clock::time_point last_arrival_{};            // the last take_incoming that found some

  // The communication thread's own (or a helper's, under drive_mu_).
  ready_queue ready_;
  std::uint64_t next_start_ = 0;  // the seq that starts next
  // A finished fused op's buffer, lent to the next one: no allocation nor zeroing per fused op
  // once it is as large as the largest (at most the fusion size).
  std::vector<std::byte> fusion_buffer_;
  // Two ranks: the exchange's messages, lent the same way; its duplicate of comm_.
  raw_buffer exchange_out_;
  raw_buffer exchange_in_;
  MPI_Comm pair_comm_ = MPI_COMM_NULL;
  std::vector<std::unique_ptr<request>> in_flight_;
  std::vector<MPI_Request> reqs_;                  // in_flight_'s, same index
  std::vector<std::unique_ptr<request>> zombies_;  // timed out, still in MPI's hands
  std::vector<MPI_Request> zombie_reqs_;
  std::vector<int> poll_indices_;  // MPI_Testsome's outputs, kept from poll to poll
  std::vector<MPI_Status> poll_statuses_;
  std::vector<int> poll_order_;  // the completed ones' places in those, by request index
  std::vector<std::pair<std::unique_ptr<request>, std::exception_ptr>> poll_done_;
  bool checking_ = false;     // a check in flight holds the start order
  bool negotiating_ = false;  // so does a fusion agreement

  // The stall probe's, on the communication thread (or a helper, under drive_mu_).
  struct probe_send {
    std::array<std::uint64_t, 2> message{};
    MPI_Request req = MPI_REQUEST_NULL;
  };
  MPI_Comm probe_comm_ = MPI_COMM_NULL;  // a duplicate of comm_; null for one rank
  std::array<std::uint64_t, 2> probe_in_{};
  MPI_Request probe_recv_ = MPI_REQUEST_NULL;
  std::list<probe_send> probe_sends_;          // stable addresses while MPI sends them
  std::vector<std::string> hosts_;             // each rank's "host, pid N"
  std::vector<clock::time_point> heard_from_;  // each rank's last probe message
  std::vector<std::uint64_t> peer_started_;    // ... and how many collectives it had started
  std::uint64_t coll_started_ = 0;             // collectives started here
  clock::time_point pinged_at_{};
  clock::time_point probe_polled_at_{};

  std::thread thread_;
  std::function<void()> fini_;
};

/// The world communicator's state, initialising MPI on first use.
std::shared_ptr<comm_state> world_state();
/// Keeps a split's state until exit, when it is stopped before MPI is finalised.
void register_split(std::shared_ptr<comm_state> s);

}  // namespace cotensor::dist::detail
