// A request outside the communication thread's loop (comm_thread.cpp): its name, its MPI call
// per kind (start_mpi), a split's (start_split), the order check's verdict (check_done), its
// completion (finish), and what becomes of it when its communicator stops first.

#include "cotensor/error.hpp"

#include "distributed/comm_state.hpp"
#include "support/enum_table.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace cotensor::dist::detail {

const char* kind_name(op_kind k) noexcept {
  static constexpr const char* names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                          "send",       "recv",      "split",      "gpu_setup"};
  static_assert(std::size(names) == static_cast<std::size_t>(op_kind::setup) + 1);
  return ::cotensor::detail::entry_for(names, k, "?");
}

request::~request() {
  if (!done && !setup && split_result == nullptr) {
    return;
  }
  auto error = std::make_exception_ptr(std::system_error(
      make_error_code(cotensor::errc::op_abandoned),
      std::string("cotensor::dist::") + kind_name(kind) + ": the communicator stopped first"));
  if (split_result != nullptr) {
    split_result->set_exception(error);
  }
  complete(error);
}

void request::make_phantom(int size) {
  const std::size_t n = bytes();  // per rank
  const auto ranks = static_cast<std::size_t>(size);
  switch (kind) {
  case op_kind::all_gather:
    scratch.assign(n + n * ranks, std::byte{0});
    in = scratch.data();
    out = scratch.data() + n;
    break;
  case op_kind::reduce_scatter:
    scratch.assign(n * ranks + n, std::byte{0});
    in = scratch.data();
    out = scratch.data() + n * ranks;
    break;
  case op_kind::send:
    scratch.assign(n, std::byte{0});
    in = scratch.data();
    out = nullptr;
    break;
  default:  // in place, or into `out`
    scratch.assign(n, std::byte{0});
    in = nullptr;
    out = scratch.data();
    break;
  }
  keep.clear();
  done.reset();
}

// Starts `r`'s MPI operation and pushes its request onto reqs_; on failure finishes `r` (its
// owner then sees r.call == nullptr after the move).
void comm_state::start_mpi(request& r) {
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  {
    std::lock_guard lock(mpi_lock());
    const MPI_Datatype type = mpi_type(r.type);
    MPI_Op op = MPI_OP_NULL;
    switch (r.kind) {
    case op_kind::all_reduce:
      r.call = "MPI_Iallreduce";
      rc = mpi_op(r.op, r.type, op);
      if (rc == MPI_SUCCESS) {
        rc = MPI_Iallreduce(MPI_IN_PLACE, r.out, r.count, type, op, comm_, &req);
      }
      break;
    case op_kind::broadcast:
      r.call = "MPI_Ibcast";
      rc = MPI_Ibcast(r.out, r.count, type, r.peer, comm_, &req);
      break;
    case op_kind::all_gather:
      r.call = "MPI_Iallgather";
      rc = MPI_Iallgather(r.in, r.count, type, r.out, r.count, type, comm_, &req);
      break;
    case op_kind::reduce_scatter:
      r.call = "MPI_Ireduce_scatter_block";
      rc = mpi_op(r.op, r.type, op);
      if (rc == MPI_SUCCESS) {
        rc = MPI_Ireduce_scatter_block(r.in, r.out, r.count, type, op, comm_, &req);
      }
      break;
    case op_kind::send:
      r.call = "MPI_Isend";
      rc = MPI_Isend(r.in, r.count, type, r.peer, r.tag, comm_, &req);
      break;
    case op_kind::recv:
      r.call = "MPI_Irecv";
      rc = MPI_Irecv(r.out, r.count, type, r.peer, r.tag, comm_, &req);
      break;
    case op_kind::setup:
      r.call = "MPI_Ibcast";
      rc = MPI_Ibcast(r.raw, r.count, MPI_BYTE, 0, comm_, &req);
      break;
    case op_kind::split:
      break;  // started by start()
    }
  }
  if (rc != MPI_SUCCESS) {
    // The caller still owns `r` by unique_ptr: build the error, complete, mark not started.
    auto error = mpi_error(rc, std::string("cotensor::dist::") + kind_name(r.kind) + ": " + r.call);
    r.complete(error);
    r.call = nullptr;
    return;
  }
  reqs_.push_back(req);
}

void comm_state::check_done(std::unique_ptr<request> r) {
  checking_ = false;
  ++next_start_;
  r->checking = false;
  std::ostringstream differ;
  bool mismatch = false;
  for (int q = 0; q < size_; ++q) {
    const std::uint64_t* theirs = r->check_all.data() + static_cast<std::size_t>(q) * 4;
    if (!std::equal(theirs, theirs + 4, r->check_mine.begin())) {
      mismatch = true;
      const std::uint64_t kind = theirs[2] & 0xffU;
      const std::uint64_t type = theirs[2] >> 8;
      differ << "; rank " << q << " starts collective #" << theirs[1] << ", "
             << (kind <= static_cast<std::uint64_t>(op_kind::setup)
                     ? kind_name(static_cast<op_kind>(kind))
                     : "?")
             << " of " << theirs[3] << " "
             << (type < dtype_count ? name(static_cast<dtype>(type)) : "?") << " elements";
    }
  }
  if (mismatch) {
    std::ostringstream what;
    what << "cotensor::dist: collectives issued in different orders (COTENSOR_DIST_CHECK): rank "
         << rank_ << " starts collective #" << r->coll_seq << ", " << kind_name(r->kind) << " of "
         << r->count << " " << name(r->type) << " elements" << differ.str();
    // The ranks no longer agree on what comes next: nothing later on this group can match.
    auto error = mark_broken(std::make_exception_ptr(std::runtime_error(what.str())));
    finish(std::move(r), error);
    break_all(error);
    return;
  }
  start_mpi(*r);
  if (r->call == nullptr) {
    return;
  }
  in_flight_.push_back(std::move(r));
}

// A split: the new communicator, with a state and thread of its own, for the caller of split().
void comm_state::start_split(std::unique_ptr<request> r) {
  ++next_start_;
  // MPI-3.1 has no non-blocking split: the other ranks reach it in the same order. It blocks
  // while holding the process-wide MPI lock, so other communicators' threads start nothing
  // until every rank of this group has reached it: a program that makes one group's split
  // wait for another group's collective (through its data) can stall here.
  MPI_Comm out = MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  int rank = 0;
  int size = 0;
  {
    std::lock_guard lock(mpi_lock());
    rc = MPI_Comm_split(comm_, r->color, r->key, &out);
    if (rc == MPI_SUCCESS) {
      MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
      MPI_Comm_rank(out, &rank);
      MPI_Comm_size(out, &size);
    }
  }
  if (rc != MPI_SUCCESS) {
    std::exchange(r->split_result, nullptr)
        ->set_exception(mpi_error(rc, "cotensor::dist::split: MPI_Comm_split"));
    return;
  }
  try {
    auto child =
        std::make_shared<comm_state>(out, rank, size, check_, clock::duration(timeout_.load()));
    {
      std::lock_guard issue(issue_mu_);  // the split inherits the fusion settings
      child->set_fusion(fusion_bytes_, fusion_cycle_);
    }
    child->start_thread(nullptr, [out]() mutable {
      std::lock_guard lock(mpi_lock());
      MPI_Comm_free(&out);
    });
    register_split(child);
    std::exchange(r->split_result, nullptr)->set_value(std::move(child));
  } catch (...) {
    std::exchange(r->split_result, nullptr)->set_exception(std::current_exception());
  }
}

void comm_state::finish(std::unique_ptr<request> r, std::exception_ptr error) {
  if (r->exchange == exchange_half::send) {  // the other half ended the ops
    if (error) {
      (void)mark_broken(std::move(error));  // the peer's receive cannot complete
    }
    if (r->message.size() > exchange_out_.size()) {
      exchange_out_ = std::move(r->message);  // MPI is done with it: the next exchange's
    }
    return;
  }
  if (!r->members.empty()) {  // a fused op: each member gets its part of the buffer
    const auto* part = static_cast<const std::byte*>(r->out);
    for (auto& m : r->members) {
      const std::size_t bytes = m->bytes();
      if (!error) {
        std::memcpy(m->out, part, bytes);
      }
      part += bytes;
      finish(std::move(m), error);
    }
    r->members.clear();
    if (r->scratch.size() > fusion_buffer_.size()) {
      fusion_buffer_ = std::move(r->scratch);  // MPI is done with it: the next fused op's
    }
    return;
  }
  if (!error && (r->op == reduce_op::avg) &&
      (r->kind == op_kind::all_reduce || r->kind == op_kind::reduce_scatter)) {
    average(r->type, r->out, r->count, size_);
  }
  if (r->split_result != nullptr) {
    std::exchange(r->split_result, nullptr)->set_exception(error);  // only when it fails
    return;
  }
  r->keep.clear();  // before the op ends: its tensors may be freed by then
  r->complete(std::move(error));
}

}  // namespace cotensor::dist::detail
