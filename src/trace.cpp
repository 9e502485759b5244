#include "cotensor/trace.hpp"

#include "engine/engine.hpp"
#include "engine/recorder.hpp"

#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace cotensor {
namespace {

// Microseconds, as trace-event JSON wants them.
std::string micros(std::int64_t ns) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << static_cast<double>(ns) / 1000.0;
  return os.str();
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += c;
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

std::string trace::to_chrome_json() const {
  std::ostringstream os;
  bool first = true;
  auto event = [&](const std::string& body) {
    os << (first ? "\n  " : ",\n  ") << '{' << body << '}';
    first = false;
  };
  auto where = [](int thread) { return "\"pid\":1,\"tid\":" + std::to_string(thread); };
  os << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  event("\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"cotensor\"}");
  for (std::size_t i = 0; i < thread_names.size(); ++i) {
    event("\"ph\":\"M\"," + where(static_cast<int>(i)) +
          ",\"name\":\"thread_name\",\"args\":{\"name\":\"" + json_escape(thread_names[i]) + "\"}");
    event("\"ph\":\"M\"," + where(static_cast<int>(i)) +
          ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" + std::to_string(i) + "}");
  }
  std::uint64_t flow = 0;
  for (const auto& op : ops) {
    const std::string name = json_escape(op.name);
    const std::int64_t issued = op.issued >= 0 ? op.issued : op.enqueued;
    // The frontend's issue call, then the op on its worker, joined by a flow arrow.
    event("\"ph\":\"X\",\"cat\":\"enqueue\",\"name\":\"enqueue " + name + "\"," +
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
    const std::string id = std::to_string(++flow);
    event("\"ph\":\"s\",\"cat\":\"enqueue\",\"name\":\"enqueue\",\"id\":" + id + "," +
          where(op.frontend_thread) + ",\"ts\":" + micros(op.enqueued));
    event("\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"enqueue\",\"name\":\"enqueue\",\"id\":" + id + "," +
          where(op.backend_thread) + ",\"ts\":" + micros(op.started));
    for (auto d : op.depends_on) {
      const traced_op& producer = ops[d];
      if (producer.backend_thread < 0 || producer.ended < 0) {
        continue;
      }
      const std::string dep_id = std::to_string(++flow);
      event("\"ph\":\"s\",\"cat\":\"dependency\",\"name\":\"dependency\",\"id\":" + dep_id + "," +
            where(producer.backend_thread) +
            ",\"ts\":" + micros(std::max(producer.started, producer.ended - 1)));
      event("\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dependency\",\"name\":\"dependency\",\"id\":" +
            dep_id + "," + where(op.backend_thread) + ",\"ts\":" + micros(op.started));
    }
  }
  for (const auto& w : waits) {
    if (w.resumed < 0) {
      continue;
    }
    event("\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"" + json_escape(w.kind) + "\"," +
          where(w.thread) + ",\"ts\":" + micros(w.suspended) +
          ",\"dur\":" + micros(std::max<std::int64_t>(w.resumed - w.suspended, 0)) +
          ",\"args\":{\"resumed_on\":" + std::to_string(w.resumed_on) + "}");
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

void start_trace() { detail::current_engine().start_trace(); }

trace stop_trace() {
  auto r = detail::current_engine().stop_trace();
  if (!r) {
    throw std::logic_error("cotensor::stop_trace: no trace is recording");
  }
  return r->snapshot();
}

namespace detail {

traced_wait_handle trace_wait_begin(const char* kind) {
  engine& e = current_engine();
  if (e.tracing() == nullptr) [[likely]] {
    return {};
  }
  auto r = e.current_recorder();
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
}  // namespace cotensor
