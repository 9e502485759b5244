// Fusion of small all-reduces on the communication thread (comm_state.hpp): the agreement on
// how many to fuse, and the fused operation; on two ranks, the exchange that is both.

#include "distributed/comm_state.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <sstream>
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

// The head of a two-rank exchange's message: what the sender's group is, so that the receiver
// takes the ops both sent and sees a peer that issued something else. 64 bytes: the data after
// it starts a cache line.
struct exchange_head {
  std::uint64_t count = 0;     // ops in the group
  std::uint64_t coll_seq = 0;  // the first one's place among the collectives
  std::uint64_t type = 0;      // their dtype
  std::uint64_t op = 0;        // and reduce_op
  std::uint64_t bytes = 0;     // of data after the head
  std::array<std::uint64_t, 3> unused{};
};
static_assert(sizeof(exchange_head) == 64);

// The head of a group of `count` ops from `first` on, `bytes` of data: what a rank sends, and
// what it checks the peer's against.
exchange_head head_of(const request& first, std::uint64_t count, std::size_t bytes) {
  exchange_head h;
  h.count = count;
  h.coll_seq = first.coll_seq;
  h.type = static_cast<std::uint64_t>(first.type);
  h.op = static_cast<std::uint64_t>(first.op);
  h.bytes = bytes;
  return h;
}

constexpr int exchange_tag = 1;  // on pair_comm_, which nothing else uses

// The largest group two ranks exchange. Up to it one message each way and a local reduction
// beat the agreement and a fused MPI_Iallreduce (2026-11-27, 2 vCPUs, shared memory: 16 x 16 KiB
// in flight 3.6-3.7 against 4.2 us per op, 16 KiB alone 7.7-8.0 against 11.6-11.8 us, 128 KiB
// alone 24.4-25.0 against 25.6-25.7); above it the exchange reduces twice the data and copies
// the group in and out while MPI's algorithm halves the work (1 MiB alone 263-271 against
// 161-165 us).
constexpr std::size_t exchange_bytes = std::size_t{256} << 10;

std::string describe(const exchange_head& h) {
  constexpr std::array<const char*, 4> ops = {"sum", "avg", "max", "min"};  // reduce_op's order
  std::ostringstream s;
  s << "collective #" << h.coll_seq << ", " << h.count << " all-reduce(s) of "
    << (h.type < dtype_count ? name(static_cast<dtype>(h.type)) : "?") << " by "
    << (h.op < ops.size() ? ops[h.op] : "?") << ", " << h.bytes << " bytes";
  return s.str();
}

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
  // Two ranks exchange groups up to exchange_bytes; a larger first op takes the agreement's
  // way (the same on both ranks: the first op is the same).
  const bool exchange = pair_comm_ != MPI_COMM_NULL && first.bytes() <= exchange_bytes;
  const std::size_t limit =
      exchange ? std::min(first.fusion_bytes, exchange_bytes) : first.fusion_bytes;
  std::uint64_t seq = next_start_;
  std::size_t bytes = 0;
  bool closed = false;
  for (const request* it = &first; it != nullptr; it = ready_.find(++seq)) {
    const request& r = *it;
    if (!fusable(r) || r.type != first.type || r.op != first.op || bytes + r.bytes() > limit) {
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
  if (exchange) {
    start_exchange(seq, bytes, now, limit);
    return true;
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

void comm_state::start_exchange(std::uint64_t end,
                                std::size_t bytes,
                                clock::time_point now,
                                std::size_t limit) {
  const request& first = *next_ready();
  const auto deadline = now + clock::duration(timeout_.load(std::memory_order_relaxed));
  const auto half = [&](exchange_half which, const char* call, raw_buffer& spare) {
    auto r = std::make_unique<request>();
    r->kind = op_kind::all_reduce;
    r->seq = first.seq;
    r->coll_seq = first.coll_seq;
    r->exchange = which;
    r->call = call;
    r->started = now;
    r->deadline = deadline;
    r->message = std::move(spare);
    return r;
  };
  auto out = half(exchange_half::send, "MPI_Isend (two-rank fused all-reduce)", exchange_out_);
  auto in = half(exchange_half::receive, "MPI_Irecv (two-rank fused all-reduce)", exchange_in_);
  in->negotiating = true;  // holds the start order until it is in
  in->fuse_mine = end - next_start_;
  // The peer's group is at most the same limit: every rank sets the fusion size alike.
  const std::size_t most = sizeof(exchange_head) + limit;
  const exchange_head head = head_of(first, end - next_start_, bytes);
  try {
    in->message.reserve(most);
    out->message.reserve(sizeof head + bytes);
  } catch (const std::bad_alloc&) {
    (void)mark_broken(std::current_exception());  // the group's ops fail as they start
    return;
  }
  std::memcpy(out->message.data(), &head, sizeof head);
  std::size_t at = sizeof head;
  for (std::uint64_t s = next_start_; s != end; ++s) {
    const request& r = *ready_.find(s);
    std::memcpy(out->message.data() + at, r.out, r.bytes());
    at += r.bytes();
  }
  coll_started_ = std::max(coll_started_, first.coll_seq + 1);
  const int peer = 1 - rank_;
  std::array<MPI_Request, 2> reqs{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int rc = MPI_SUCCESS;
  {
    std::lock_guard lock(mpi_lock());
    rc = MPI_Irecv(in->message.data(), static_cast<int>(most), MPI_BYTE, peer, exchange_tag,
                   pair_comm_, &reqs[0]);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Isend(out->message.data(), static_cast<int>(at), MPI_BYTE, peer, exchange_tag,
                     pair_comm_, &reqs[1]);
    }
  }
  if (rc != MPI_SUCCESS) {
    const char* call = reqs[0] == MPI_REQUEST_NULL ? in->call : out->call;
    if (reqs[0] != MPI_REQUEST_NULL) {  // MPI holds the receive: it goes as a zombie
      in_flight_.push_back(std::move(in));
      reqs_.push_back(reqs[0]);
    }
    break_all(mark_broken(mpi_error(rc, std::string("cotensor::dist::all_reduce: ") + call)));
    return;
  }
  negotiating_ = true;
  in_flight_.push_back(std::move(in));
  reqs_.push_back(reqs[0]);
  in_flight_.push_back(std::move(out));
  reqs_.push_back(reqs[1]);
}

// The peer's group is in: the ops both sent (the shorter group's) end with rank 0's values
// reduced with rank 1's, in that order on both ranks, so that both hold the same bits. The
// send may still be in flight: it reads its own copy.
void comm_state::exchange_done(std::unique_ptr<request> received) {
  negotiating_ = false;
  const request& first = *next_ready();
  exchange_head theirs;
  exchange_head mine = head_of(first, received->fuse_mine, 0);  // its bytes below
  if (received->received >= sizeof theirs) {
    std::memcpy(&theirs, received->message.data(), sizeof theirs);
  }
  const std::uint64_t n = std::min(mine.count, theirs.count);
  std::size_t bytes = 0;  // of the n ops here
  for (std::uint64_t i = 0; i < mine.count; ++i) {
    const std::size_t b = ready_.find(next_start_ + i)->bytes();
    mine.bytes += b;
    bytes += i < n ? b : 0;
  }
  // The peer issued the same ops in the same order: the same first one, dtype and op, and the
  // same sizes as far as both groups go (which only the lengths can show).
  if (received->received < sizeof theirs || received->received != sizeof theirs + theirs.bytes ||
      n == 0 || theirs.coll_seq != mine.coll_seq || theirs.type != mine.type ||
      theirs.op != mine.op || (n == theirs.count ? theirs.bytes != bytes : theirs.bytes < bytes)) {
    std::ostringstream what;
    what << "cotensor::dist::all_reduce: rank " << rank_ << " and rank " << 1 - rank_
         << " issued different collectives (two-rank fusion): here " << describe(mine) << "; rank "
         << 1 - rank_ << ": " << describe(theirs);
    // The ranks no longer agree on what comes next: nothing later on this group can match.
    exchange_in_ = std::move(received->message);
    break_all(mark_broken(std::make_exception_ptr(std::runtime_error(what.str()))));
    return;
  }
  std::vector<std::unique_ptr<request>> members;
  members.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    members.push_back(ready_.take(next_start_ + i));
  }
  next_start_ += n;
  coll_started_ = std::max(coll_started_, members.back()->coll_seq + 1);
  int rc = MPI_SUCCESS;
  {
    std::lock_guard lock(mpi_lock());
    const MPI_Datatype type = mpi_type(members.front()->type);
    MPI_Op op = MPI_OP_NULL;
    rc = mpi_op(members.front()->op, members.front()->type, op);
    std::byte* part = received->message.data() + sizeof theirs;
    for (auto it = members.begin(); it != members.end() && rc == MPI_SUCCESS; ++it) {
      request& m = **it;
      if (rank_ == 0) {  // into the peer's copy, then here
        rc = MPI_Reduce_local(m.out, part, m.count, type, op);
        std::memcpy(m.out, part, m.bytes());
      } else {
        rc = MPI_Reduce_local(part, m.out, m.count, type, op);
      }
      part += m.bytes();
    }
  }
  exchange_in_ = std::move(received->message);
  std::exception_ptr error;
  if (rc != MPI_SUCCESS) {
    error = mpi_error(rc, "cotensor::dist::all_reduce: MPI_Reduce_local");
  }
  if (n > 1) {
    fused_.fetch_add(n, std::memory_order_relaxed);
  }
  for (auto& m : members) {
    finish(std::move(m), error);
  }
}

}  // namespace cotensor::dist::detail
