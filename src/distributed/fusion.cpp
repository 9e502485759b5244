// Fusion of small all-reduces on the communication thread (comm_state.hpp): the agreement on
// how many to fuse, and the fused operation.

#include "distributed/comm_state.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace cotensor::dist::detail {

namespace {

// A group still growing: ops that a program issues back to back reach the thread a fraction of
// a microsecond apart. The thread (not a spinning waiter, whose program has stopped issuing to
// wait) waits until none came for `burst_gap` before it agrees on a group, up to `burst_cap`
// (or the cycle, if longer) after the group's first op. Without it, a thread that shares a
// core with another rank's program and runs while its own program is still issuing agrees on
// the first few ops, and the rest follow in groups of their own.
constexpr auto burst_gap = std::chrono::microseconds(2);
constexpr auto burst_cap = std::chrono::microseconds(50);

}  // namespace

void comm_state::set_fusion(std::size_t bytes, clock::duration cycle) {
  std::lock_guard lock(issue_mu_);
  fusion_bytes_ = bytes;
  fusion_cycle_ = cycle;
}

bool comm_state::fusable(const request& r) const noexcept {
  // Not under COTENSOR_DIST_CHECK, whose check of each collective would come between.
  return r.kind == op_kind::all_reduce && r.fusion_bytes > 0 && r.bytes() <= r.fusion_bytes &&
         !check_ && size_ > 1;
}

// The group: the ready ops from next_start_ on, in issue order, while they are fusable, of the
// first one's dtype and op, and fit in its fusion size. Waits (false) while the group could
// still grow: ops are still arriving (burst_gap), or an op issued after it has not reached this
// thread and the first one has waited less than its cycle; then starts the agreement on the
// group's length.
bool comm_state::negotiate_fusion(bool helping) {
  const request& first = *next_ready();
  std::uint64_t seq = next_start_;
  std::size_t bytes = 0;
  bool closed = false;
  for (const request* it = &first; it != nullptr; it = ready_.find(++seq)) {
    const request& r = *it;
    if (!fusable(r) || r.type != first.type || r.op != first.op ||
        bytes + r.bytes() > first.fusion_bytes) {
      closed = true;
      break;
    }
    bytes += r.bytes();
  }
  const auto now = clock::now();
  if (!closed && !helping && now - last_arrival_ < burst_gap &&
      now - first.ready_at < std::max<clock::duration>(first.fusion_cycle, burst_cap)) {
    return false;  // more are arriving
  }
  if (!closed && now - first.ready_at < first.fusion_cycle) {
    std::uint64_t issued = 0;
    {
      std::lock_guard lock(issue_mu_);
      issued = issued_;
    }
    if (issued > seq) {
      return false;  // more are on their way
    }
  }
  auto agreement = std::make_unique<request>();
  agreement->negotiating = true;
  agreement->kind = op_kind::all_reduce;
  agreement->seq = first.seq;
  agreement->coll_seq = first.coll_seq;
  agreement->call = "MPI_Iallreduce (fusion agreement)";
  agreement->fuse_mine = seq - next_start_;
  agreement->started = now;
  agreement->deadline = now + clock::duration(timeout_.load(std::memory_order_relaxed));
  coll_started_ = std::max(coll_started_, first.coll_seq + 1);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  {
    std::lock_guard lock(mpi_lock());
    rc = MPI_Iallreduce(&agreement->fuse_mine, &agreement->fuse_agreed, 1, MPI_UINT64_T, MPI_MIN,
                        comm_, &req);
  }
  if (rc != MPI_SUCCESS) {
    (void)mark_broken(mpi_error(rc, "cotensor::dist::all_reduce: " + std::string(agreement->call)));
    return true;  // the group's ops fail as they start
  }
  negotiating_ = true;
  in_flight_.push_back(std::move(agreement));
  reqs_.push_back(req);
  return true;
}

void comm_state::fusion_agreed(std::unique_ptr<request> agreement) {
  negotiating_ = false;
  // Every rank has at least the first op, and this rank at least `fuse_agreed` of them ready.
  const std::uint64_t n = std::max<std::uint64_t>(agreement->fuse_agreed, 1);
  std::vector<std::unique_ptr<request>> members;
  members.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    if (ready_.find(next_start_ + i) == nullptr) {  // cannot happen: this rank said it had them
      break_all(mark_broken(std::make_exception_ptr(
          std::logic_error("cotensor::dist::all_reduce: fusion lost an op"))));
      return;
    }
    members.push_back(ready_.take(next_start_ + i));
  }
  if (n == 1) {
    start(std::move(members.front()));
    return;
  }
  start_fused(std::move(members));
}

// One MPI_Iallreduce, in place, on the members' buffers laid end to end; finish() copies the
// result back into each and ends them.
void comm_state::start_fused(std::vector<std::unique_ptr<request>> members) {
  const request& first = *members.front();
  auto fused = std::make_unique<request>();
  fused->kind = op_kind::all_reduce;
  fused->op = first.op;
  fused->type = first.type;
  fused->seq = first.seq;
  fused->coll_seq = first.coll_seq;
  std::size_t bytes = 0;
  for (const auto& m : members) {
    bytes += m->bytes();
  }
  fused->scratch = std::move(fusion_buffer_);
  if (fused->scratch.size() < bytes) {
    fused->scratch.resize(bytes);
  }
  std::size_t at = 0;
  for (const auto& m : members) {
    std::memcpy(fused->scratch.data() + at, m->out, m->bytes());
    at += m->bytes();
  }
  fused->count = static_cast<int>(bytes / itemsize(first.type));
  fused->out = fused->scratch.data();
  fused->started = clock::now();
  fused->deadline = fused->started + clock::duration(timeout_.load(std::memory_order_relaxed));
  coll_started_ = std::max(coll_started_, members.back()->coll_seq + 1);
  next_start_ += members.size();
  fused_.fetch_add(members.size(), std::memory_order_relaxed);
  fused->members = std::move(members);
  start_mpi(*fused);
  if (fused->call == nullptr) {  // failed to start: its members failed with it
    return;
  }
  in_flight_.push_back(std::move(fused));
}

}  // namespace cotensor::dist::detail
