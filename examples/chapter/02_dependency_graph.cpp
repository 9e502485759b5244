// The dependency graph (d2l.ai, "Asynchronous Computation"): for `z = x * y + 2` the backend
// must run `*` before `+`, while the two producers of x and y, independent of each other, may
// run in parallel. The engine records what it tracked between cotensor::start_trace() and
// cotensor::stop_trace(). Every tensor lives on the --device (default: GPU 0 if there is one,
// as d2l's try_gpu(), else the CPU). Prints:
//
//   `device: <device>`
//   the values of x, y and z (printing blocks until each is computed)
//   `issue: <seconds> sec`   how long the frontend took to issue the four ops
//   `ready: <seconds> sec`   from the first issue until z was ready (z.wait())
//   one line per traced op: what it is, which ops it waited for, the thread that ran it
//   the graph as Graphviz DOT text: ops are boxes, buffers ellipses, reads and writes edges
//   (render it with `dot -Tsvg`)
//
// Usage: 02_dependency_graph [--device cpu|cuda[:N]]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  const chapter::options opts =
      chapter::parse(argc, argv, "02_dependency_graph [--device cpu|cuda[:N]]",
                     /*default_repeat=*/0, /*accepts_trace=*/false);
  chapter::print_device(opts.device);
  // Start the runtime, and the device's backend, before recording.
  cotensor::ones({1, 2}, opts.device).wait();

  using clock_type = std::chrono::steady_clock;
  cotensor::start_trace();
  const auto start = clock_type::now();
  const auto x = cotensor::ones({1, 2}, opts.device);
  const auto y = cotensor::ones({1, 2}, opts.device);
  const auto z = x * y + 2.0F;  // two ops: `*`, then `+` reading its result
  const auto issued = clock_type::now();
  z.wait();
  const auto ready = clock_type::now();
  const cotensor::trace trace = cotensor::stop_trace();

  std::cout << "x = " << x << "\ny = " << y << "\nz = " << z << '\n';
  std::printf("issue: %.6f sec\nready: %.6f sec\n",
              std::chrono::duration<double>(issued - start).count(),
              std::chrono::duration<double>(ready - start).count());

  for (const auto& op : trace.ops) {
    std::cout << "op #" << op.id << ' ' << op.name << " -> " << op.outputs.front()
              << ", waited for";
    if (op.depends_on.empty()) {
      std::cout << " nothing";
    }
    for (const auto dep : op.depends_on) {
      std::cout << " #" << dep << " (" << trace.ops[dep].name << ')';
    }
    const int thread = op.backend_thread;
    std::cout << ", ran on "
              << (thread >= 0 && static_cast<std::size_t>(thread) < trace.thread_names.size()
                      ? trace.thread_names[static_cast<std::size_t>(thread)]
                      : std::string("(no thread)"))
              << '\n';
  }
  std::cout << trace.to_dot();
  return 0;
}
