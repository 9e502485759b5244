// The communication thread of a communicator: starts requests in issue order, keeps them in
// flight and completes them. See comm_state.hpp.

#include "distributed/comm_state.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <pthread.h>
#include <stdexcept>
#include <thread>
#include <utility>

namespace cotensor::dist::detail {

namespace {

std::uint64_t fnv1a(const std::array<std::uint64_t, 3>& words) noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  for (std::uint64_t w : words) {
    for (int i = 0; i < 8; ++i) {
      h ^= (w >> (8 * i)) & 0xffU;
      h *= 1099511628211ULL;
    }
  }
  return h;
}

// Open MPI moves a non-blocking collective on only inside MPI calls: while one is in flight the
// thread polls without pause (yielding the core between polls) for `busy_poll` after the last
// start or completion, then backs off to a poll every `slow_poll` (a peer that is still
// computing should not cost a core for long). New requests end a back-off sleep at once.
constexpr auto busy_poll = std::chrono::milliseconds(2);
constexpr auto slow_poll = std::chrono::microseconds(50);
// With nothing in flight, the thread keeps looking for new requests this long before it
// sleeps: a program that issues collectives back to back (a training step's gradients, a
// latency loop) then pays no wake-up per op.
constexpr auto linger = std::chrono::microseconds(200);
// The stall probe (comm_state.hpp, failures.cpp): a busy thread looks for questions every
// `probe_poll`; an idle one every sixteenth of the timeout, between 50 ms and 1 s. A stuck peer
// asks from half its timeout on, so the answer comes in time, and an idle communicator with
// the default timeout (300 s) wakes once a second, not twenty times.
constexpr auto probe_poll = std::chrono::milliseconds(1);

clock::duration probe_idle_poll(clock::duration timeout) noexcept {
  return std::clamp<clock::duration>(timeout / 16, std::chrono::milliseconds(50),
                                     std::chrono::seconds(1));
}

}  // namespace

comm_state::comm_state(MPI_Comm comm, int rank, int size, bool check, clock::duration timeout)
    : comm_(comm), rank_(rank), size_(size), check_(check), timeout_(timeout.count()) {}

comm_state::~comm_state() { stop(); }

void comm_state::set_timeout(clock::duration t) noexcept {
  timeout_.store(t.count(), std::memory_order_relaxed);
}

std::uint64_t comm_state::next_seq(bool collective, std::uint64_t& coll_seq, request* r) {
  std::lock_guard lock(issue_mu_);
  if (r != nullptr) {
    r->fusion_bytes = fusion_bytes_;
    r->fusion_cycle = fusion_cycle_;
  }
  coll_seq = coll_issued_;
  if (collective) {
    ++coll_issued_;
  }
  return issued_++;
}

void comm_state::post(std::unique_ptr<request> r) {
  {
    std::lock_guard lock(mu_);
    if (!exited_) {
      incoming_.push_back(std::move(r));
      mail_.store(true, std::memory_order_relaxed);
    }
  }
  cv_.notify_one();
  // Else `r` goes here, failing what waits on it.
}

std::exception_ptr comm_state::broken_error() const { return broken_error_; }

void comm_state::start_thread(std::function<void()> init, std::function<void()> fini) {
  fini_ = std::move(fini);
  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, init = std::move(init), started = std::move(started)]() mutable {
    ::pthread_setname_np(::pthread_self(), "cotensor-comm");  // as top -H and debuggers show it
    try {
      if (init) {
        init();
      }
      open_probe();
      started.set_value();
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    run();
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
  if (size_ > 1) {  // one rank's collectives never reach MPI
    cotensor::detail::add_progress_source(weak_from_this());
  }
}

void comm_state::stop() {
  // Later waits leave it alone (if it was ever added); one spinning now may still call help(),
  // which returns once stopping_ is set, and helper_leaves().
  cotensor::detail::remove_progress_source(this);
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !thread_.joinable()) {
      return;
    }
    stopping_ = true;
    mail_.store(true, std::memory_order_relaxed);
  }
  cv_.notify_one();
  thread_.join();
  std::shared_ptr<gpu_comm> gpu;
  {
    std::lock_guard lock(gpu_mu_);
    gpu.swap(gpu_);
  }
  // Dropped here, at exit at the latest, while CUDA is still up: NCCL's communicator goes with
  // the last op that holds it.
}

bool comm_state::drained(bool count_zombies) const {
  std::uint64_t issued = 0;
  {
    std::lock_guard lock(issue_mu_);
    issued = issued_;
  }
  return next_start_ == issued && in_flight_.empty() && (zombies_.empty() || !count_zombies) &&
         ready_.empty() && incoming_.empty();
}

void comm_state::take_incoming() {
  mail_.store(stopping_, std::memory_order_relaxed);
  if (incoming_.empty()) {
    return;
  }
  const auto arrived = clock::now();
  last_arrival_ = arrived;
  for (auto& r : incoming_) {
    r->ready_at = arrived;
    ready_.add(std::move(r));
  }
  incoming_.clear();
}

const request* comm_state::next_ready() const noexcept { return ready_.find(next_start_); }

bool comm_state::idle() const noexcept {
  return in_flight_.empty() && zombies_.empty() && (checking_ || next_ready() == nullptr);
}

bool comm_state::next_needs_thread() const noexcept {
  const request* r = next_ready();
  return r != nullptr && (r->kind == op_kind::split || r->kind == op_kind::setup);
}

bool comm_state::step(bool helping) {
  bool progress = start_ready(helping);
  progress = test_in_flight() || progress;
  const auto now = clock::now();
  check_timeouts(now);
  if (progress) {
    last_work_ = now;
  }
  if (probe_comm_ != MPI_COMM_NULL && now - probe_polled_at_ >= probe_poll) {
    poll_probe(now);
  }
  return progress;
}

void comm_state::run() {
  clock::time_point stop_deadline{};
  clock::time_point zombie_deadline{};
  unsigned polls = 0;
  // Held from the top of each round through its steps; released before every wait and yield,
  // so that helpers find it free whenever the thread is not working.
  std::unique_lock drive(drive_mu_, std::defer_lock);
  // The linger counts from this thread's own last work (or its wake-up by a request): after
  // helpers drove the ops, the thread sleeps at once instead of taking a core for the linger.
  auto own_work = clock::now();
  bool woken = false;
  for (;;) {
    drive.lock();
    if (std::exchange(woken, false)) {
      own_work = last_work_ = clock::now();
    }
    {
      std::unique_lock lock(mu_);
      take_incoming();
      wanted_ = false;
      handed_back_ = false;
      if (stopping_) {
        const auto now = clock::now();
        if (stop_deadline == clock::time_point{}) {
          stop_deadline = now + clock::duration(timeout_.load());
          zombie_deadline = now + std::min<clock::duration>(clock::duration(timeout_.load()),
                                                            std::chrono::seconds(1));
        }
        // Ops issued but never handed over (their engine never ran them) cannot hold the
        // exit forever; nor can the abandoned requests of a broken communicator for more than
        // a second (their peer may be dead).
        if (drained(true) || now > stop_deadline ||
            (broken() && drained(false) && now > zombie_deadline)) {
          break;
        }
      }
      // Spinning waiters drive the steps while they spin, unless the next request is one that
      // only this thread starts: the thread sleeps as if idle until they hand back.
      const bool driven = !stopping_ && helpers_ > 0 && !next_needs_thread();
      if (driven || idle()) {
        const bool lingering = !driven && clock::now() - own_work < linger;
        drive.unlock();
        const auto wake = [this] {
          return !incoming_.empty() || stopping_ || wanted_ || handed_back_;
        };
        if (stopping_) {
          cv_.wait_for(lock, std::chrono::milliseconds(1));  // for ops still to be handed over
        } else if (lingering) {
          lock.unlock();
          std::this_thread::yield();
        } else if (probe_comm_ == MPI_COMM_NULL) {
          cv_.wait(lock, wake);
          woken = true;
        } else if (cv_.wait_for(lock, probe_idle_poll(clock::duration(timeout_.load())), wake)) {
          woken = true;
        } else {
          // Asleep, but a peer that is stuck may ask how far this rank has got.
          lock.unlock();
          drive.lock();
          poll_probe(clock::now());
          drive.unlock();
        }
        continue;
      }
    }
    const bool progress = step(false);
    const auto now = clock::now();
    if (progress) {
      own_work = now;
    }
    const bool busy = now - last_work_ < busy_poll;
    drive.unlock();
    if (busy) {
      if (++polls % 16 == 0) {
        std::this_thread::yield();
      }
    } else {
      std::unique_lock lock(mu_);
      // Not woken by stopping_: a drain with work in flight polls like any other wait. A
      // helper that arrives meanwhile finds the steps free.
      cv_.wait_for(lock, slow_poll, [this] { return !incoming_.empty(); });
    }
  }
  // From here on post() drops what comes; what came and never started fails now (a setup or a
  // split waiting for it would wait forever).
  std::vector<std::unique_ptr<request>> unstarted;
  {
    std::lock_guard lock(mu_);
    exited_ = true;
    unstarted.swap(incoming_);
  }
  const std::size_t never_started = unstarted.size() + ready_.size();
  unstarted.clear();
  ready_.clear();
  // Zombies (timed out, never completed) are left to MPI: freeing their buffers would let a
  // late completion write to freed memory, so they and their tensors stay.
  if (!in_flight_.empty() || !zombies_.empty() || never_started != 0) {
    std::fprintf(stderr, "cotensor::dist: %zu op(s) still pending at exit\n",
                 in_flight_.size() + zombies_.size() + never_started);
    for (auto& r : in_flight_) {
      (void)r.release();
    }
    for (auto& z : zombies_) {
      (void)z.release();
    }
    fini_ = nullptr;  // finalising with requests pending would hang or crash
    std::fflush(stderr);
    return;
  }
  if (!close_probe()) {
    std::fprintf(stderr, "cotensor::dist: a stall probe message still pending at exit\n");
    std::fflush(stderr);
    return;
  }
  if (fini_) {
    fini_();
  }
}

bool comm_state::start_ready(bool helping) {
  bool progress = false;
  while (!checking_ && !negotiating_ && next_ready() != nullptr) {
    if (helping && next_needs_thread()) {
      return progress;  // it blocks: the thread starts it (run() stays awake for it)
    }
    if (fusable(*next_ready()) && !broken()) {
      return negotiate_fusion(helping) || progress;  // an agreement holds the start order
    }
    start(ready_.take(next_start_));
    progress = true;
  }
  return progress;
}

void comm_state::start(std::unique_ptr<request> r) {
  if (broken()) {
    ++next_start_;
    finish(std::move(r), broken_error_);
    return;
  }
  r->started = clock::now();
  r->deadline = r->started + clock::duration(timeout_.load(std::memory_order_relaxed));
  if (is_collective(r->kind)) {
    coll_started_ = std::max(coll_started_, r->coll_seq + 1);
  }
  if (r->kind == op_kind::split) {
    start_split(std::move(r));
    return;
  }
  if (check_ && is_collective(r->kind)) {
    // Everyone says what it is about to start; a difference fails the op instead of hanging.
    // The kind word holds the dtype too (above bit 8): ranks that differ in it fail as well.
    const std::array<std::uint64_t, 3> what{r->coll_seq,
                                            static_cast<std::uint64_t>(r->kind) |
                                                (static_cast<std::uint64_t>(r->type) << 8),
                                            static_cast<std::uint64_t>(r->count)};
    r->check_mine = {fnv1a(what), what[0], what[1], what[2]};
    r->check_all.assign(r->check_mine.size() * static_cast<std::size_t>(size_), 0);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    {
      std::lock_guard lock(mpi_lock());
      rc = MPI_Iallgather(r->check_mine.data(), 4, MPI_UINT64_T, r->check_all.data(), 4,
                          MPI_UINT64_T, comm_, &req);
    }
    if (rc != MPI_SUCCESS) {
      ++next_start_;
      finish(std::move(r), mpi_error(rc, "cotensor::dist: MPI_Iallgather (check)"));
      return;
    }
    r->checking = true;
    checking_ = true;
    in_flight_.push_back(std::move(r));
    reqs_.push_back(req);
    return;
  }
  ++next_start_;
  start_mpi(*r);
  if (r->call == nullptr) {  // failed to start: finished already
    return;
  }
  in_flight_.push_back(std::move(r));
}

bool comm_state::test_in_flight() {
  bool progress = false;
  if (!zombie_reqs_.empty()) {
    // Timed-out requests that MPI still holds: free them (and their tensors) once complete.
    int count = 0;
    poll_indices_.resize(std::max(poll_indices_.size(), zombie_reqs_.size()));
    {
      std::lock_guard lock(mpi_lock());
      MPI_Testsome(static_cast<int>(zombie_reqs_.size()), zombie_reqs_.data(), &count,
                   poll_indices_.data(), MPI_STATUSES_IGNORE);
    }
    if (count > 0 && count != MPI_UNDEFINED) {
      for (std::size_t i = zombie_reqs_.size(); i-- > 0;) {
        if (zombie_reqs_[i] == MPI_REQUEST_NULL) {
          zombie_reqs_.erase(zombie_reqs_.begin() + static_cast<std::ptrdiff_t>(i));
          zombies_.erase(zombies_.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
    }
  }
  if (reqs_.empty()) {
    return progress;
  }
  int count = 0;
  // Grown, never shrunk: this runs on every poll, which must not allocate.
  poll_indices_.resize(std::max(poll_indices_.size(), reqs_.size()));
  poll_statuses_.resize(std::max(poll_statuses_.size(), reqs_.size()));
  auto& indices = poll_indices_;
  auto& statuses = poll_statuses_;
  int rc = MPI_SUCCESS;
  {
    std::lock_guard lock(mpi_lock());
    rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &count, indices.data(),
                      statuses.data());
  }
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    break_all(mark_broken(mpi_error(rc, "cotensor::dist: MPI_Testsome")));
    return true;
  }
  if (count == 0 || count == MPI_UNDEFINED) {
    return false;
  }
  // Take the completed ones out (back to front, so indices stay valid), then finish them. The
  // status of indices[k] is statuses[k]: order the k's by index, not the indices alone.
  auto done = std::move(poll_done_);  // its capacity, reused: no allocation per completion
  done.clear();
  poll_order_.resize(static_cast<std::size_t>(count));
  std::iota(poll_order_.begin(), poll_order_.end(), 0);
  std::sort(poll_order_.begin(), poll_order_.end(), [&indices](int a, int b) {
    return indices[static_cast<std::size_t>(a)] < indices[static_cast<std::size_t>(b)];
  });
  for (std::size_t j = poll_order_.size(); j-- > 0;) {
    const auto k = static_cast<std::size_t>(poll_order_[j]);
    const auto i = static_cast<std::size_t>(indices[k]);
    const MPI_Status& status = statuses[k];
    std::exception_ptr error;
    auto& r = in_flight_[i];
    if (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
      error = mpi_error(status.MPI_ERROR,
                        std::string("cotensor::dist::") + kind_name(r->kind) + ": " + r->call);
    } else if (r->exchange == exchange_half::receive) {
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      r->received = static_cast<std::size_t>(std::max(got, 0));
    } else if (r->kind == op_kind::recv && !r->checking) {
      int got = 0;
      MPI_Get_count(&status, mpi_type(r->type), &got);
      if (got != r->count) {
        error = std::make_exception_ptr(
            std::runtime_error("cotensor::dist::recv: received " + std::to_string(got) +
                               " elements, expected " + std::to_string(r->count)));
      }
    }
    done.emplace_back(std::move(r), error);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    reqs_.erase(reqs_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  // Finish in start order (done holds them back to front).
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    if (it->first->checking) {
      if (it->second) {
        checking_ = false;
        ++next_start_;
        finish(std::move(it->first), it->second);
      } else {
        check_done(std::move(it->first));
      }
    } else if (it->first->negotiating) {
      if (it->second) {
        negotiating_ = false;  // its ops, still ready, fail as they start: broken
        (void)mark_broken(it->second);
      } else if (it->first->exchange == exchange_half::receive) {
        exchange_done(std::move(it->first));
      } else {
        fusion_agreed(std::move(it->first));
      }
    } else {
      finish(std::move(it->first), it->second);
    }
  }
  done.clear();
  poll_done_ = std::move(done);
  return true;
}

}  // namespace cotensor::dist::detail
