#include "frontend/recorder.hpp"

#include "engine/engine.hpp"

#include <algorithm>

namespace cotensor::detail {

recorder::recorder(const engine* e) : engine_(e), start_(std::chrono::steady_clock::now()) {}

std::int64_t recorder::now() const noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start_)
      .count();
}

int recorder::thread_index() {
  auto [it, inserted] = threads_.try_emplace(std::this_thread::get_id(),
                                             static_cast<int>(trace_.thread_names.size()));
  if (inserted) {
    const bool worker = on_backend_thread();
    int same_kind = 0;
    for (const auto& name : trace_.thread_names) {
      same_kind += name.starts_with(worker ? "worker" : "frontend") ? 1 : 0;
    }
    trace_.thread_names.push_back((worker ? "worker " : "frontend ") + std::to_string(same_kind));
  }
  return it->second;
}

recorder::buffer_state& recorder::buffer(const std::shared_ptr<storage>& s) {
  buffer_state& b = buffers_[s.get()];
  if (b.alive.expired()) {
    b = buffer_state{s, next_buffer_id_++, -1, {}};
  }
  return b;
}

traced_op* recorder::find(std::uint64_t seq) {
  auto it = ids_.find(seq);
  return it == ids_.end() ? nullptr : &trace_.ops[it->second];
}

void recorder::on_push(const op_node& op) noexcept {
  if (op.owner != engine_) {
    return;
  }
  const auto t = now();
  std::lock_guard lock(mutex_);
  try {
    issue(op, t);
  } catch (...) {
    // Out of memory while tracing: the op goes untraced rather than failing.
  }
}

void recorder::issue(const op_node& op, std::int64_t enqueued) {
  const std::uint64_t id = trace_.ops.size();
  traced_op& t = trace_.ops.emplace_back();
  ids_.emplace(op.seq, id);
  t.id = id;
  t.name = op.name;
  t.enqueued = enqueued;
  t.frontend_thread = thread_index();
  auto depend = [&t](std::uint64_t on) {
    if (std::ranges::find(t.depends_on, on) == t.depends_on.end()) {
      t.depends_on.push_back(on);
    }
  };
  for (const auto& a : op.accesses) {
    buffer_state& b = buffer(a.buffer);
    t.bytes += static_cast<std::uint64_t>(a.buffer->numel()) * sizeof(float);
    if (b.last_writer >= 0) {
      depend(static_cast<std::uint64_t>(b.last_writer));  // read after write, write after write
    }
    if (a.mode == access_mode::read) {
      t.reads.push_back(b.id);
      b.readers.push_back(id);
      continue;
    }
    if (a.mode == access_mode::read_write) {
      t.reads.push_back(b.id);
    }
    t.writes.push_back(b.id);
    t.outputs.push_back(a.buffer->shape());
    for (std::uint64_t reader : b.readers) {
      depend(reader);  // write after read
    }
    b.readers.clear();
    b.last_writer = static_cast<std::int64_t>(id);
  }
  std::ranges::sort(t.depends_on);
}

void recorder::on_issued(std::uint64_t seq) noexcept {
  const auto t = now();
  std::lock_guard lock(mutex_);
  if (traced_op* op = find(seq)) {
    op->issued = t;
  }
}

void recorder::on_ready(std::uint64_t seq) noexcept {
  const auto t = now();
  std::lock_guard lock(mutex_);
  if (traced_op* op = find(seq)) {
    op->ready = t;
  }
}

void recorder::on_start(const op_node& op) noexcept {
  const auto t = now();
  std::lock_guard lock(mutex_);
  if (traced_op* traced = find(op.seq)) {
    traced->started = t;
    try {
      traced->backend_thread = thread_index();
    } catch (...) {
      // Out of memory: the op stays on the thread it had.
    }
  }
}

void recorder::on_end(const op_node& op, bool failed) noexcept {
  const auto t = now();
  std::lock_guard lock(mutex_);
  if (traced_op* traced = find(op.seq)) {
    traced->ended = t;
    traced->failed = failed;
  }
}

std::uint64_t recorder::on_wait_begin(const char* kind) {
  const auto t = now();
  std::lock_guard lock(mutex_);
  traced_wait& w = trace_.waits.emplace_back();
  w.kind = kind;
  w.thread = thread_index();
  w.suspended = t;
  return trace_.waits.size() - 1;
}

void recorder::on_wait_end(std::uint64_t handle) {
  const auto t = now();
  std::lock_guard lock(mutex_);
  trace_.waits[handle].resumed = t;
  trace_.waits[handle].resumed_on = thread_index();
}

trace recorder::snapshot() const {
  std::lock_guard lock(mutex_);
  return trace_;
}

}  // namespace cotensor::detail
