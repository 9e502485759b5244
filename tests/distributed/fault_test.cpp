// The rank program of the fault tests (faults.sh): every rank all-reduces in a loop, checking
// each result exactly, until an op fails or the iterations are done. One rank may kill itself
// midway (SIGKILL, nothing cleaned up), and rank 0 may leave a marker for the script that takes
// a link down. On a failure the rank judges it: a std::system_error with errc::timed_out, from
// the all-reduce, within the communicator's timeout (plus 3 s), whose message names the lost
// rank as the peer that stopped answering and no other (on the lost rank itself, when it lives
// on cut off: every other rank).
//
//   cotensor_dist_faults --report DIR [--iterations N] [--lost-rank R]
//                        [--die-after K] [--marker-after K] [--largest E]
//
//   --report        each rank writes DIR/rank<r>: "completed <n>", "expected <ms> <message>" or
//                   "unexpected <ms> <message>"
//   --iterations    all-reduces to run (0: until one fails; the default)
//   --lost-rank     the rank that dies or is cut off, which the error must name
//   --die-after     the lost rank kills itself after this many all-reduces
//   --marker-after  rank 0 creates DIR/marker after this many all-reduces
//   --largest       the elements of every third all-reduce (the others have 16 and 4096;
//                   default 262144)
//
// Exit: 0 when every iteration completed, 3 for the expected failure, 1 for anything else.
// The timeout comes from COTENSOR_DIST_TIMEOUT_S, as for any program.

#include "cotensor/cotensor.hpp"
#include "cotensor/distributed.hpp"

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>

namespace {

using namespace cotensor;
namespace d = cotensor::dist;

struct options {
  std::string report;
  long iterations = 0;
  int lost_rank = -1;
  long die_after = -1;
  long marker_after = -1;
  std::int64_t largest = 262144;
};

[[noreturn]] void usage(const char* why) {
  std::cerr << "cotensor_dist_faults: " << why
            << "\nusage: cotensor_dist_faults --report DIR [--iterations N] [--lost-rank R] "
               "[--die-after K] [--marker-after K] [--largest E]\n";
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      usage(("missing the value of " + arg).c_str());
    }
    const char* value = argv[++i];
    if (arg == "--report") {
      o.report = value;
    } else if (arg == "--iterations") {
      o.iterations = std::atol(value);
    } else if (arg == "--lost-rank") {
      o.lost_rank = std::atoi(value);
    } else if (arg == "--die-after") {
      o.die_after = std::atol(value);
    } else if (arg == "--marker-after") {
      o.marker_after = std::atol(value);
    } else if (arg == "--largest") {
      o.largest = std::atol(value);
      if (o.largest < 1) {
        usage("--largest must be positive");
      }
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  if (o.report.empty()) {
    usage("--report is required");
  }
  return o;
}

double timeout_ms() {
  const char* s = std::getenv("COTENSOR_DIST_TIMEOUT_S");
  return s != nullptr ? std::atof(s) * 1000.0 : 300'000.0;
}

// Why `what` is not the failure expected on `rank` (empty when it is).
std::string judge(const std::string& what, int rank, int size, int lost) {
  if (what.find("cotensor::dist::all_reduce") == std::string::npos) {
    return "does not name the all_reduce";
  }
  for (int q = 0; q < size; ++q) {
    if (q == rank) {
      continue;
    }
    // The report's part on rank q: "rank q (host) stopped answering" up to the next ';'.
    const auto at = what.find("; rank " + std::to_string(q) + " (");
    const auto part = at == std::string::npos ? std::string() : what.substr(at + 2);
    const bool named_stopped =
        part.substr(0, part.find(';')).find(") stopped answering") != std::string::npos;
    const bool should_stop = rank == lost || q == lost;
    if (named_stopped != should_stop) {
      return "rank " + std::to_string(q) + (should_stop ? " not named" : " wrongly named") +
             " as having stopped answering";
    }
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const auto world = d::communicator::world();
  const int rank = world.rank();
  const int size = world.size();
  const auto triangle = static_cast<float>(size * (size + 1) / 2);  // sum of rank + 1
  const std::array<std::int64_t, 3> sizes = {16, 4096, o.largest};
  std::ofstream report(o.report + "/rank" + std::to_string(rank));

  long done = 0;
  auto issued = std::chrono::steady_clock::now();
  try {
    for (; o.iterations == 0 || done < o.iterations; ++done) {
      if (rank == o.lost_rank && done == o.die_after) {
        std::raise(SIGKILL);
      }
      if (rank == 0 && done == o.marker_after) {
        std::ofstream(o.report + "/marker") << done << '\n';
      }
      const auto c = static_cast<float>(done % 7 + 1);
      tensor t = full({sizes[static_cast<std::size_t>(done) % sizes.size()]},
                      c * static_cast<float>(rank + 1));
      issued = std::chrono::steady_clock::now();
      d::all_reduce(t, d::reduce_op::sum, world);
      for (float x : t.to_vector()) {  // waits: rethrows the op's error
        if (x != c * triangle) {
          report << "unexpected 0 all-reduce #" << done << " gave " << x << ", not " << c * triangle
                 << '\n';
          return 1;
        }
      }
    }
  } catch (const std::exception& e) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - issued)
            .count();
    std::string why = judge(e.what(), rank, size, o.lost_rank);
    const auto* se = dynamic_cast<const std::system_error*>(&e);
    if (se == nullptr || se->code() != std::errc::timed_out) {
      why = "not a std::system_error with std::errc::timed_out";
    } else if (ms > timeout_ms() + 3000.0) {
      why = "later than the timeout plus 3 s";
    }
    report << (why.empty() ? "expected " : "unexpected ") << static_cast<long>(ms) << ' '
           << e.what() << (why.empty() ? "" : " [" + why + "]") << '\n';
    report.flush();
    std::printf("cotensor_dist_faults: rank %d after %ld all-reduces: %s\n", rank, done, e.what());
    std::fflush(stdout);
    return why.empty() ? 3 : 1;
  }
  report << "completed " << done << '\n';
  return 0;
}
