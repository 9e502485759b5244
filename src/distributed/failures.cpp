// How a communicator fails (comm_state.hpp): an op past its deadline (check_timeouts) breaks it
// and fails every op in flight (mark_broken, break_all); before that, while an op is overdue,
// the stall probe lets the communication threads ask each other how many collectives they have
// started, on a duplicate of the group's MPI communicator, so that a timeout's error names the
// peers that stopped answering. Everything here runs on the communication thread, but
// mark_broken, which the NCCL watchdog calls too.

#include "distributed/comm_state.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace cotensor::dist::detail {

namespace {

// Questions go out once an op has been in flight for half the timeout, and again every quarter
// of it (check_timeouts). Tags on the probe's communicator: a question and its answer, each
// {collectives started, 0}.
constexpr int probe_ping = 1;
constexpr int probe_pong = 2;

}  // namespace

std::exception_ptr timed_out(const std::string& what) {
  return std::make_exception_ptr(
      std::system_error(std::make_error_code(std::errc::timed_out), what));
}

void comm_state::open_probe() {
  std::lock_guard lock(mpi_lock());
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  rank_ = rank;  // the world's become known here, after MPI_Init_thread
  size_ = size;
  if (size < 2) {
    return;
  }
  if (const int rc = MPI_Comm_dup(comm_, &probe_comm_); rc != MPI_SUCCESS) {
    probe_comm_ = MPI_COMM_NULL;
    std::rethrow_exception(mpi_error(rc, "cotensor::dist: MPI_Comm_dup (stall probe)"));
  }
  MPI_Comm_set_errhandler(probe_comm_, MPI_ERRORS_RETURN);
  if (size == 2) {  // fusion's exchanges (fusion.cpp), apart from the program's messages
    if (const int rc = MPI_Comm_dup(comm_, &pair_comm_); rc != MPI_SUCCESS) {
      pair_comm_ = MPI_COMM_NULL;
      std::rethrow_exception(mpi_error(rc, "cotensor::dist: MPI_Comm_dup (two-rank fusion)"));
    }
    MPI_Comm_set_errhandler(pair_comm_, MPI_ERRORS_RETURN);
  }
  // Each rank's host and process id, for the timeout's message.
  std::array<char, MPI_MAX_PROCESSOR_NAME> host{};
  int length = 0;
  MPI_Get_processor_name(host.data(), &length);
  std::array<char, MPI_MAX_PROCESSOR_NAME + 24> name{};
  std::snprintf(name.data(), name.size(), "%.*s, pid %ld", length, host.data(),
                static_cast<long>(::getpid()));
  std::vector<char> names(name.size() * static_cast<std::size_t>(size));
  MPI_Allgather(name.data(), static_cast<int>(name.size()), MPI_CHAR, names.data(),
                static_cast<int>(name.size()), MPI_CHAR, probe_comm_);
  for (int q = 0; q < size; ++q) {
    const char* theirs = names.data() + name.size() * static_cast<std::size_t>(q);
    hosts_.emplace_back(theirs, strnlen(theirs, name.size()));
  }
  heard_from_.assign(static_cast<std::size_t>(size), clock::time_point{});
  peer_started_.assign(static_cast<std::size_t>(size), 0);
  MPI_Irecv(probe_in_.data(), 2, MPI_UINT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, probe_comm_,
            &probe_recv_);
}

bool comm_state::close_probe() {
  if (probe_comm_ == MPI_COMM_NULL) {
    return true;
  }
  std::lock_guard lock(mpi_lock());
  if (pair_comm_ != MPI_COMM_NULL) {
    MPI_Comm_free(&pair_comm_);  // no exchange left in flight: the thread drained
  }
  if (probe_recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&probe_recv_);
    MPI_Wait(&probe_recv_, MPI_STATUS_IGNORE);  // a cancelled receive completes locally
  }
  for (auto& s : probe_sends_) {
    int done = 0;
    if (MPI_Test(&s.req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done == 0) {
      return false;  // a peer that never received it: the communicator stays
    }
  }
  probe_sends_.clear();
  MPI_Comm_free(&probe_comm_);
  return true;
}

void comm_state::send_probe(int to, int tag) {
  auto& s = probe_sends_.emplace_back();
  s.message = {coll_started_, 0};
  if (MPI_Isend(s.message.data(), 2, MPI_UINT64_T, to, tag, probe_comm_, &s.req) != MPI_SUCCESS) {
    probe_sends_.pop_back();  // not sent: that peer will not count as having answered
  }
}

void comm_state::poll_probe(clock::time_point now) {
  probe_polled_at_ = now;
  std::lock_guard lock(mpi_lock());
  for (int i = 0; i < 16 && probe_recv_ != MPI_REQUEST_NULL; ++i) {
    int arrived = 0;
    MPI_Status status{};
    if (MPI_Test(&probe_recv_, &arrived, &status) != MPI_SUCCESS) {
      probe_recv_ = MPI_REQUEST_NULL;  // the probe stops; the timeout still holds
      break;
    }
    if (arrived == 0) {
      break;
    }
    const int from = status.MPI_SOURCE;
    if (from >= 0 && from < size_) {
      heard_from_[static_cast<std::size_t>(from)] = now;
      peer_started_[static_cast<std::size_t>(from)] = probe_in_[0];
      if (status.MPI_TAG == probe_ping) {
        send_probe(from, probe_pong);
      }
    }
    if (MPI_Irecv(probe_in_.data(), 2, MPI_UINT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, probe_comm_,
                  &probe_recv_) != MPI_SUCCESS) {
      probe_recv_ = MPI_REQUEST_NULL;
    }
  }
  // Forget the sends that are done; those to a peer that stopped stay in MPI's hands.
  for (auto it = probe_sends_.begin(); it != probe_sends_.end();) {
    int done = 0;
    const int rc = MPI_Test(&it->req, &done, MPI_STATUS_IGNORE);
    it = rc != MPI_SUCCESS || done != 0 ? probe_sends_.erase(it) : std::next(it);
  }
}

void comm_state::ping_peers(clock::time_point now) {
  pinged_at_ = now;
  std::lock_guard lock(mpi_lock());
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) {
      send_probe(q, probe_ping);
    }
  }
}

// "; rank 2 (host) stopped answering; rank 1 (host) answers and has started it too", from what
// the peers said since `r` became overdue (comm_state.hpp).
std::string comm_state::stall_report(const request& r) const {
  if (probe_comm_ == MPI_COMM_NULL || pinged_at_ < r.started) {
    return {};
  }
  const auto since = r.started + clock::duration(timeout_.load()) / 2;
  std::ostringstream report;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) {
      continue;
    }
    const auto i = static_cast<std::size_t>(q);
    report << "; rank " << q << " (" << hosts_[i] << ") ";
    if (heard_from_[i] < since) {
      report << "stopped answering";
    } else if (!is_collective(r.kind)) {
      report << "answers";
    } else if (peer_started_[i] > r.coll_seq) {
      report << "answers and has started it too";
    } else {
      report << "answers but has not started it (it has started " << peer_started_[i]
             << " collectives)";
    }
  }
  return report.str();
}

void comm_state::check_timeouts(clock::time_point now) {
  if (in_flight_.empty()) {
    return;
  }
  const auto timeout = clock::duration(timeout_.load());
  for (const auto& r : in_flight_) {
    if (now > r->deadline) {
      std::ostringstream what;
      what << "cotensor::dist::" << kind_name(r->kind) << ": not complete after "
           << std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count() << " ms ("
           << (r->checking ? "MPI_Iallgather (check)" : r->call);
      if (is_collective(r->kind)) {
        what << ", collective #" << r->coll_seq;
      }
      if (!r->members.empty()) {
        what << " and the " << r->members.size() - 1 << " fused with it";
      }
      what << ", rank " << rank_ << " of " << size_ << ")" << stall_report(*r)
           << "; the communicator is broken";
      break_all(mark_broken(timed_out(what.str())));
      return;
    }
  }
  // The oldest op overdue: ask the peers how far they have got (again every quarter timeout).
  const auto& oldest =
      *std::min_element(in_flight_.begin(), in_flight_.end(),
                        [](const auto& a, const auto& b) { return a->started < b->started; });
  if (probe_comm_ != MPI_COMM_NULL && now - oldest->started >= timeout / 2 &&
      now - pinged_at_ >= timeout / 4) {
    ping_peers(now);
  }
}

std::exception_ptr comm_state::mark_broken(std::exception_ptr error) noexcept {
  if (!breaking_.exchange(true, std::memory_order_acq_rel)) {
    broken_error_ = std::move(error);  // written once, before the flag that publishes it
    broken_.store(true, std::memory_order_release);
    return broken_error_;
  }
  // Another thread (the NCCL watchdog) is publishing its error: wait for it.
  while (!broken_.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
  return broken_error_;
}

void comm_state::break_all(std::exception_ptr error) {
  // Every op in flight fails; MPI keeps their requests (there is no cancelling a collective),
  // so their buffers stay alive as zombies until MPI completes them, if ever.
  for (std::size_t i = 0; i < in_flight_.size(); ++i) {
    auto& r = in_flight_[i];
    if (r->checking) {
      checking_ = false;
      ++next_start_;
    }
    if (r->negotiating) {
      negotiating_ = false;  // its ops, still ready, fail as they start
    }
    r->complete(error);
    zombies_.push_back(std::move(r));
    zombie_reqs_.push_back(reqs_[i]);
  }
  in_flight_.clear();
  reqs_.clear();
  // What is ready fails at once as start_ready reaches it (broken() is set).
}

}  // namespace cotensor::dist::detail
