#pragma once

// Collectives and point-to-point transfers between processes, as engine ops: on MPI for CPU
// tensors, on NCCL for GPU tensors (all_reduce, broadcast, all_gather, reduce_scatter) in
// builds that have the CUDA backend too. Built only with COTENSOR_WITH_MPI
// (cotensor/config.hpp). See docs/distributed.md.

#include "cotensor/config.hpp"

#include "cotensor/tensor.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace cotensor::dist {

namespace detail {
class comm_state;
}  // namespace detail

/// A group of processes that talk to each other: MPI_COMM_WORLD, or a split of it.
///
/// Each communicator has one communication thread, which makes every MPI call for it: it
/// starts the collectives in the order they were issued (never in the order their inputs
/// became ready, so every rank starts them in the same order), keeps several in flight and
/// invokes their completions. Its GPU collectives go to an NCCL communicator over the same
/// ranks, made with the first of them, watched by a thread of its own for NCCL's asynchronous
/// errors and the timeout (either aborts it). Ops issued on one communicator from several
/// threads at once are ordered by whichever call comes first: issue collectives from one
/// thread, or order the threads yourself, as MPI demands.
///
/// Errors: an MPI failure fails the op with `std::system_error` naming MPI's message. An op not
/// complete within the communicator's timeout (`set_timeout`; initially `COTENSOR_DIST_TIMEOUT_S`
/// seconds from the environment, 300 without it) fails with `std::errc::timed_out` and marks
/// the communicator broken: every later op on it fails at once with the same error. With
/// `COTENSOR_DIST_CHECK=1` in the environment, each collective first all-gathers what every
/// rank is about to start (its position, kind, dtype and size) and fails with a message naming the
/// ranks that differ, instead of hanging.
///
/// Thread safety: a communicator is a cheap handle (copies share one group); every member
/// may be called from any thread.
class communicator {
public:
  /// Every process of the job (MPI_COMM_WORLD). The first call initialises MPI
  /// (MPI_Init_thread, MPI_THREAD_SERIALIZED) and starts its communication thread; MPI is
  /// finalised at exit, after every op issued on any communicator has ended. Under Open MPI it
  /// selects the Rabenseifner algorithm for non-blocking all-reduce unless the user chose one
  /// or COTENSOR_DIST_TUNE=0 (docs/distributed.md). Throws
  /// std::system_error if MPI cannot be initialised or provides less than
  /// MPI_THREAD_SERIALIZED, and std::invalid_argument, naming the variable, for a malformed
  /// COTENSOR_DIST_TIMEOUT_S, COTENSOR_DIST_FUSION_BYTES or COTENSOR_DIST_FUSION_CYCLE_US
  /// (then before MPI is initialised).
  static communicator world();

  /// This process's rank in the group, in [0, size()).
  int rank() const noexcept;
  /// The number of processes in the group.
  int size() const noexcept;

  /// A new group of the processes that pass the same `color`, ranked by `key` then by rank
  /// here (MPI_Comm_split). A collective: every rank of this group must call it, in the same
  /// order relative to this group's other collectives. Blocks until the group is made (after
  /// the collectives issued on this communicator before it have started). Throws
  /// std::system_error on an MPI error or on a broken communicator, std::invalid_argument for
  /// a negative color.
  communicator split(int color, int key) const;

  /// Sets how long an op on this group may take once started before it fails with
  /// `std::errc::timed_out` (and breaks the group). Applies to ops started from now on.
  void set_timeout(std::chrono::milliseconds timeout) const;
  /// True once an op on this group has timed out (or the group could not go on): later ops
  /// fail at once.
  bool broken() const noexcept;

  /// Fuses small CPU all-reduces issued from now on (Horovod's tensor fusion, DDP's buckets):
  /// when the next collective to start is an all-reduce of at most `max_bytes`, the
  /// communication thread gathers the all-reduces of the same dtype and op that follow it in
  /// issue order that are ready, up to `max_bytes` in all; with a `cycle` (default 0: none) it
  /// also waits up to that long for those already issued whose inputs are not ready yet, which
  /// gathers more when they come close together and delays the first when they do not. While
  /// ops still arrive less than 2 us apart the thread waits for the burst to end (up to 50 us;
  /// a spinning blocking wait that drives the collectives does not wait). On 3 or more ranks,
  /// and on 2 for all-reduces over 256 KiB, they agree on how many every one of them has (one small
  /// MPI_Iallreduce), and that many run as one MPI operation on a buffer that holds them end to
  /// end. On 2 ranks, for groups up to 256 KiB, the data is the agreement: each sends the other its
  /// group (one message each way, MPI_Isend and MPI_Irecv on a duplicate of this group's MPI
  /// communicator), both reduce the ops both sent with MPI_Reduce_local (rank 0's values first, so
  /// both ranks hold the same bits), and the rest wait for the next group; a message that shows the
  /// peer issued other all-reduces (another dtype, op or size) fails both ranks' ops with
  /// std::runtime_error and breaks the group. Results are those of separate all-reduces: bit for
  /// bit on 2 ranks for all values but NaNs and for exact values on any number; with 3 or more
  /// ranks MPI may add float values in another order for the fused size, as for any other size. On
  /// 3 or more ranks the agreement makes a lone all-reduce slower; on 2 a lone one up to 64 KiB
  /// gets faster (no MPI collective). Turn it on where many small all-reduces are in flight
  /// together (gradients), or on 2 ranks for small all-reduces at all. `max_bytes` 0 turns it off
  /// (the default, unless `COTENSOR_DIST_FUSION_BYTES` and `COTENSOR_DIST_FUSION_CYCLE_US` in the
  /// environment say otherwise; splits inherit their parent's). Like a collective, every rank must
  /// make the same call at the same point of its issue order. Not with `COTENSOR_DIST_CHECK=1`, nor
  /// for GPU tensors (NCCL). Throws std::invalid_argument for `max_bytes` over 1 GiB or a negative
  /// cycle.
  void set_fusion(std::size_t max_bytes,
                  std::chrono::microseconds cycle = std::chrono::microseconds(0)) const;
  /// How many all-reduces so far ran fused with others: in one MPI operation, or on 2 ranks in
  /// one exchange.
  std::uint64_t fused_count() const noexcept;
  /// How many times a blocking wait that spins (runtime_options::wait_spin) moved this
  /// communicator's MPI operations on from its own thread (started or ended one), while the
  /// communication thread slept: 0 unless waits spin.
  std::uint64_t helped_count() const noexcept;

  /// Internal: for cotensor's own implementation, not part of the API.
  explicit communicator(std::shared_ptr<detail::comm_state> state) noexcept
      : state_(std::move(state)) {}
  /// Internal: the group's state, for cotensor's own implementation, not part of the API.
  const std::shared_ptr<detail::comm_state>& state() const noexcept { return state_; }

private:
  std::shared_ptr<detail::comm_state> state_;
};

/// How `all_reduce` and `reduce_scatter` combine the ranks' values, elementwise. `avg` is the
/// sum divided by the group's size; on int32 and int64 the division truncates toward zero (as
/// NCCL's ncclAvg on integers). On bool, `sum` and `max` are a logical or, `min` a logical and,
/// and `avg` is refused. float16 and bfloat16 combine in float32 and round to their dtype at
/// each combine of two ranks' values (so a sum over n ranks rounds n - 1 times, in an order
/// the library chooses). The table is in docs/distributed.md.
enum class reduce_op { sum, avg, max, min };

// Every function below takes tensors of every dtype (one dtype per call, the same on every
// rank: MPI counts elements and cannot see a difference; COTENSOR_DIST_CHECK=1 does). It
// issues one engine op and returns at once. The op is ordered with the
// ops around it by the tensors it touches, like any op, and awaited like any op (`co_await
// t.ready()`, `wait`, `wait_all`, scopes).
//
// Completion: the op ends when its MPI operation has completed on this rank (for a GPU tensor:
// when the NCCL kernel has, seen by the device's event poller); its outputs are then released
// to their readers and waiters resume on their own executors. The communicator's thread ends
// CPU collectives itself.
//
// GPU tensors: the result stays on the tensor's device. The first GPU collective on a
// communicator blocks the calling thread until every rank has made its NCCL communicator (its
// id goes from rank 0 by MPI); later ones return at once. One device per rank per
// communicator. The work waits on the device for the work issued before it there (no host
// wait) and runs on a stream of the communicator's own, so compute on other tensors overlaps it.
//
// Errors: bad arguments throw std::invalid_argument at the call, with nothing issued: an empty
// tensor, a rank out of range, `avg` on a bool tensor, a GPU tensor in a build without NCCL or
// in `send`/`recv`, a second device on one communicator, a shape the op cannot split. NCCL
// missing or failing to set up throws std::system_error at the call (and breaks the
// communicator). A failure later fails the op and so every wait on what it writes: an MPI or
// NCCL error (std::system_error naming it, categories "mpi" and "nccl"), a timeout or a broken
// communicator (std::system_error, std::errc::timed_out), a mismatch found by
// COTENSOR_DIST_CHECK (std::runtime_error; CPU collectives only). An error in an input (from
// the op that computed it) passes on to the outputs; the collective still takes part with
// zeros, so that the other ranks do not hang.
//
// Cancellation: none: an op in flight runs to its end or its timeout.
//
// Thread safety: any thread; see `communicator` for ordering between threads.

/// Combines `t` across the group, in place: afterwards every rank holds the elementwise
/// `op` of every rank's `t`. Reads and writes `t`. Every rank passes the same element count.
void all_reduce(tensor& t,
                reduce_op op = reduce_op::sum,
                const communicator& c = communicator::world());

/// Copies rank `root`'s `t` into `t` on every other rank. Reads and writes `t` (written on
/// the other ranks, read on the root). Every rank passes the same element count and root.
void broadcast(tensor& t, int root, const communicator& c = communicator::world());

/// A new tensor of shape `{size, t's shape...}` holding every rank's `t`, rank r's at index r.
/// Reads `t`; writes the result. Every rank passes the same shape.
tensor all_gather(const tensor& t, const communicator& c = communicator::world());

/// The elementwise `op` of every rank's `t`, scattered: the result has `t`'s shape with the
/// first dimension divided by the group's size, and holds rank r's slice of the reduction.
/// Reads `t`; writes the result. `t`'s first dimension must divide by the size (else
/// std::invalid_argument); every rank passes the same shape.
tensor reduce_scatter(const tensor& t,
                      reduce_op op = reduce_op::sum,
                      const communicator& c = communicator::world());

/// Sends `t`'s elements to rank `dest`, matched by a `recv` there with this rank as source and
/// the same `tag` (non-negative). Reads `t`, a CPU tensor. Sends to one rank with one tag
/// arrive in order.
void send(const tensor& t, int dest, int tag, const communicator& c = communicator::world());

/// Receives into `t` the elements of a `send` from rank `source` with tag `tag` (the sender
/// sends exactly `t.numel()` elements; more is an MPI error). Writes `t`, a CPU tensor.
void recv(tensor& t, int source, int tag, const communicator& c = communicator::world());

}  // namespace cotensor::dist
