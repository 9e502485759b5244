#include "cotensor/trace.hpp"

#include "cotensor/detail/async_wait.hpp"

#include "engine/engine.hpp"
#include "engine/observer.hpp"
#include "frontend/frontend.hpp"
#include "frontend/recorder.hpp"

#include <atomic>
#include <cerrno>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace cotensor {
namespace {

// Microseconds with three decimals, as trace-event JSON wants them: exact to the nanosecond,
// and built from integers so that no global locale can turn the point into a comma.
std::string micros(std::int64_t ns) {
  const std::uint64_t magnitude =
      ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  const std::string fraction = std::to_string(magnitude % 1000);
  return (ns < 0 ? "-" : "") + std::to_string(magnitude / 1000) + '.' +
         std::string(3 - fraction.size(), '0') + fraction;
}

// Escapes for a JSON string (also fine inside a DOT label). Control characters other than the
// common three become '?': Perfetto's JSON tokenizer rejects a raw one, and older versions of it
// reject \u escapes too, either way failing the whole file.
std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '"':
    case '\\':
      out += '\\';
      out += c;
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    }
  }
  return out;
}

std::string shapes_of(const traced_op& op) {
  std::ostringstream os;
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    os << (i ? " " : "") << op.outputs[i];
  }
  return os.str();
}

}  // namespace

std::string trace::to_dot() const {
  std::ostringstream os;
  os << "digraph cotensor {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n";
  std::map<std::uint64_t, std::string> buffers;  // id -> label
  for (const auto& op : ops) {
    os << "  op" << op.id << " [shape=box, label=\"" << json_escape(op.name) << "\\n#" << op.id
       << (op.failed ? " (failed)" : "") << "\"];\n";
    for (auto b : op.reads) {
      buffers.try_emplace(b, "t" + std::to_string(b));
      os << "  t" << b << " -> op" << op.id << ";\n";
    }
    for (std::size_t i = 0; i < op.writes.size(); ++i) {
      std::ostringstream label;
      label << 't' << op.writes[i] << "\\n" << op.outputs[i];
      buffers.insert_or_assign(op.writes[i], label.str());
      os << "  op" << op.id << " -> t" << op.writes[i] << ";\n";
    }
  }
  for (const auto& [id, label] : buffers) {
    os << "  t" << id << " [shape=ellipse, label=\"" << label << "\"];\n";
  }
  // Orderings the engine enforced that no buffer edge shows: write-after-read and
  // write-after-write on a buffer.
  for (const auto& op : ops) {
    for (auto dep : op.depends_on) {
      bool via_buffer = false;
      for (auto w : ops[dep].writes) {
        for (auto r : op.reads) {
          via_buffer = via_buffer || (w == r);
        }
      }
      if (!via_buffer) {
        os << "  op" << dep << " -> op" << op.id << " [style=dashed, label=\"before\"];\n";
      }
    }
  }
  os << "}\n";
  return os.str();
}

// Chrome trace-event JSON, written so that three importers agree on it: Perfetto's (trace
// processor: src/trace_processor/importers/json), chrome://tracing's (catapult's
// trace_event_importer) and the DevTools Performance panel's (models/trace, the viewer Chromium
// still ships). What each needs:
//  - No "displayTimeUnit": older trace processors read "ns" there as "ts is in nanoseconds" and
//    squeezed the whole timeline 1000x; current ones ignore it.
//  - tid 0 is not used: Perfetto reserves thread 0 for the idle (swapper) thread.
//  - Slices on one thread nest or are disjoint: Perfetto and DevTools drop a complete ("X")
//    slice that starts inside another and ends after it. Waits that do not block their thread
//    (`async_wait`: the thread runs other work meanwhile) are therefore async slices ("b"/"e"
//    with an id) on the process, not slices on the thread.
//  - Each flow event ("s", "f") has the timestamp, thread and category of the slice it belongs
//    to, that slice being the innermost one starting there: DevTools binds a flow event only to
//    a slice with exactly those; Perfetto binds it to the innermost open slice on its thread;
//    catapult to the innermost slice containing its timestamp ("bp":"e" for the end).
//    Enqueue and op slices share the category "op" so that a flow can join them.
std::string trace::to_chrome_json() const {
  std::ostringstream os;
  bool first = true;
  auto event = [&](const std::string& body) {
    os << (first ? "\n  " : ",\n  ") << '{' << body << '}';
    first = false;
  };
  auto where = [](int thread) { return "\"pid\":1,\"tid\":" + std::to_string(thread + 1); };
  auto thread_name = [this](int thread) {
    return thread >= 0 && static_cast<std::size_t>(thread) < thread_names.size()
               ? json_escape(thread_names[static_cast<std::size_t>(thread)])
               : std::string("?");
  };
  os << "{\"traceEvents\":[";
  event("\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"cotensor\"}");
  for (std::size_t i = 0; i < thread_names.size(); ++i) {
    event("\"ph\":\"M\"," + where(static_cast<int>(i)) +
          ",\"name\":\"thread_name\",\"args\":{\"name\":\"" + json_escape(thread_names[i]) + "\"}");
    event("\"ph\":\"M\"," + where(static_cast<int>(i)) +
          ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" + std::to_string(i) + "}");
  }
  // A flow from the slice starting at `from_ts` on `from_thread` to the one at `to_ts`.
  std::uint64_t flow = 0;
  auto arrow = [&](const char* name, int from_thread, std::int64_t from_ts, int to_thread,
                   std::int64_t to_ts) {
    const std::string head = std::string("\"cat\":\"op\",\"name\":\"") + name +
                             "\",\"id\":" + std::to_string(++flow) + ",";
    event("\"ph\":\"s\"," + head + where(from_thread) + ",\"ts\":" + micros(from_ts));
    event("\"ph\":\"f\",\"bp\":\"e\"," + head + where(to_thread) + ",\"ts\":" + micros(to_ts));
  };
  for (const auto& op : ops) {
    const std::string name = json_escape(op.name);
    const std::int64_t issued = op.issued >= 0 ? op.issued : op.enqueued;
    // The frontend's issue call, then the op on its worker, joined by a flow arrow.
    event("\"ph\":\"X\",\"cat\":\"op\",\"name\":\"enqueue " + name + "\"," +
          where(op.frontend_thread) + ",\"ts\":" + micros(op.enqueued) +
          ",\"dur\":" + micros(std::max<std::int64_t>(issued - op.enqueued, 0)) +
          ",\"args\":{\"op\":" + std::to_string(op.id) + "}");
    if (op.started < 0 || op.backend_thread < 0) {
      continue;
    }
    std::string deps;
    for (auto d : op.depends_on) {
      deps += (deps.empty() ? "" : ",") + std::to_string(d);
    }
    event("\"ph\":\"X\",\"cat\":\"op\",\"name\":\"" + name + "\"," + where(op.backend_thread) +
          ",\"ts\":" + micros(op.started) +
          ",\"dur\":" + micros(std::max<std::int64_t>(op.ended - op.started, 0)) +
          ",\"args\":{\"op\":" + std::to_string(op.id) + ",\"shapes\":\"" + shapes_of(op) +
          "\",\"bytes\":" + std::to_string(op.bytes) + ",\"depends_on\":[" + deps +
          "],\"ready_us\":" + micros(op.ready) + ",\"failed\":" + (op.failed ? "true" : "false") +
          "}");
    arrow("enqueue", op.frontend_thread, op.enqueued, op.backend_thread, op.started);
    for (auto d : op.depends_on) {
      const traced_op& producer = ops[d];
      if (producer.started >= 0 && producer.backend_thread >= 0) {
        arrow("dependency", producer.backend_thread, producer.started, op.backend_thread,
              op.started);
      }
    }
  }
  for (std::size_t i = 0; i < waits.size(); ++i) {
    const traced_wait& w = waits[i];
    if (w.resumed < 0) {
      continue;
    }
    const std::string head = "\"cat\":\"wait\",\"name\":\"" + json_escape(w.kind) + "\",";
    const std::string args = ",\"args\":{\"resumed_on\":\"" + thread_name(w.resumed_on) + "\"}";
    if (std::string_view(w.kind).starts_with("async")) {
      // The thread was free meanwhile: an async slice, from the suspension to the resumption.
      const std::string id = "\"id\":" + std::to_string(i + 1) + ",";
      event("\"ph\":\"b\"," + head + id + where(w.thread) + ",\"ts\":" + micros(w.suspended) +
            args);
      event("\"ph\":\"e\"," + head + id + where(w.resumed_on) + ",\"ts\":" + micros(w.resumed));
      continue;
    }
    event("\"ph\":\"X\"," + head + where(w.thread) + ",\"ts\":" + micros(w.suspended) +
          ",\"dur\":" + micros(std::max<std::int64_t>(w.resumed - w.suspended, 0)) + args);
  }
  os << "\n]}\n";
  return os.str();
}

void trace::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) {
    out << to_chrome_json();
    out.close();
  }
  if (!out) {
    throw std::system_error(errno ? errno : EIO, std::generic_category(),
                            "cotensor::trace::save: cannot write '" + path + "'");
  }
}

namespace detail {
namespace {

// The traces recording now, one per engine at most; `recording` counts them, so that a wait
// pays one load when none is.
struct recording_trace {
  const engine* owner;
  std::shared_ptr<recorder> r;
};

// Never destroyed: a runtime may stop its trace during static destruction.
std::mutex& recordings_mutex() {
  static auto* const m = new std::mutex;
  return *m;
}
std::vector<recording_trace>& recordings() {
  static auto* const v = new std::vector<recording_trace>;
  return *v;
}
std::atomic<int> recording{0};

std::shared_ptr<recorder> recording_of(const engine& e) {
  if (recording.load(std::memory_order_acquire) == 0) [[likely]] {
    return nullptr;
  }
  std::lock_guard lock(recordings_mutex());
  for (const auto& t : recordings()) {
    if (t.owner == &e) {
      return t.r;
    }
  }
  return nullptr;
}

}  // namespace

void start_recording(engine& e) {
  std::lock_guard lock(recordings_mutex());
  for (const auto& t : recordings()) {
    if (t.owner == &e) {
      throw std::logic_error("cotensor::start_trace: a trace is already recording");
    }
  }
  auto r = std::make_shared<recorder>(&e);
  recordings().push_back({&e, r});
  try {
    attach_observer(std::move(r));
  } catch (...) {
    recordings().pop_back();
    throw;
  }
  recording.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<recorder> stop_recording(engine& e) {
  if (!recording_of(e)) {
    return nullptr;
  }
  blocking_waiter all;  // the ops in flight end first, recorded
  e.wait_all(all);
  all.wait();
  std::lock_guard lock(recordings_mutex());
  auto& v = recordings();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->owner == &e) {
      auto r = std::move(it->r);
      v.erase(it);
      detach_observer(r.get());
      recording.fetch_sub(1, std::memory_order_release);
      return r;
    }
  }
  return nullptr;
}

traced_wait_handle trace_wait_begin(const char* kind) {
  if (recording.load(std::memory_order_acquire) == 0) [[likely]] {
    return {};
  }
  auto r = recording_of(current_engine());
  if (!r) {
    return {};
  }
  const auto index = r->on_wait_begin(kind);
  return {std::move(r), index};
}

void trace_wait_end(const traced_wait_handle& handle) noexcept {
  if (handle.recorder) [[unlikely]] {
    try {
      static_cast<recorder*>(handle.recorder.get())->on_wait_end(handle.index);
    } catch (...) {
      // Out of memory while tracing: lose this one event rather than the wait.
    }
  }
}

}  // namespace detail

void start_trace() { detail::start_recording(detail::current_engine()); }

trace stop_trace() {
  auto r = detail::stop_recording(detail::current_engine());
  if (!r) {
    throw std::logic_error("cotensor::stop_trace: no trace is recording");
  }
  return r->snapshot();
}

}  // namespace cotensor
