// cotensor_bench_dist: the time of one all-reduce, per message size, through cotensor's
// collectives and through a raw MPI_Allreduce loop, side by side in one run (OSU's method:
// warm-up iterations, then timed ones; each rank's average, the slowest rank's reported).
//
//   mpirun -np 2 build/bench/cotensor_bench_dist            # 4 B .. 64 MiB
//   mpirun -np 2 build/bench/cotensor_bench_dist --quick    # 4 B .. 64 KiB, fewer iterations
//   COTENSOR_BENCH_DIST_MAX_BYTES=65536 mpirun -np 2 ...    # 4 B .. 64 KiB, full iterations
//   COTENSOR_BENCH_DIST_MIN_BYTES=4096 COTENSOR_BENCH_DIST_MAX_BYTES=4096 ...  # 4 KiB only
//   COTENSOR_BENCH_DIST_ROUNDS=100000 ...  # rounds of the pipelined figure (default 1000)
//
// cotensor's figure is the round trip a program sees: `dist::all_reduce(t)` then `t.wait()`,
// so it includes the engine's dispatch, the hand-off to the communication thread, MPI's own
// progress and the wake-up of the waiting thread. The raw loop calls MPI_Allreduce on the
// main thread, MPI_IN_PLACE, like cotensor; it runs only while no cotensor op is in flight, so
// the two never call MPI at once (MPI_THREAD_SERIALIZED, which cotensor initialised).
//
// Prints, per size in bytes:
//   cotensor.dist.allreduce_us.<bytes>            cotensor: all_reduce(t), t.wait()
//   cotensor.dist.mpi_allreduce_us.<bytes>        raw MPI_Allreduce (blocking)
//   cotensor.dist.mpi_iallreduce_us.<bytes>       raw MPI_Iallreduce + MPI_Wait (the call
//                                                 cotensor makes, without cotensor)
//   cotensor.dist.allreduce_pipelined_us.<bytes>  cotensor: 16 all-reduces in flight, then
//                                                 wait_all, per all-reduce
//   cotensor.dist.pipelined_fused_fraction.<bytes> with fusion on (COTENSOR_DIST_FUSION_BYTES):
//                                                 the share of those run fused (rank 0's)
//   cotensor.dist.overhead_us.<bytes>             allreduce_us - mpi_allreduce_us
//   cotensor.dist.bandwidth_ratio.<bytes>         mpi_allreduce_us / allreduce_us (1: parity)
// then the same as a table of `#` lines.
#include <cotensor/cotensor.hpp>
#include <cotensor/distributed.hpp>

#include "../common.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <string>
#include <vector>

namespace {

namespace dist = cotensor::dist;
using cotensor_bench::clock_type;
using cotensor_bench::seconds_since;

// OSU's defaults: more iterations for small messages, where one is short and noisy.
constexpr std::size_t large_message = 8192;

struct iterations {
  int warmup;
  int timed;
};

iterations iterations_for(std::size_t bytes, bool quick) {
  if (quick) {
    return {2, 10};
  }
  if (bytes <= large_message) {
    return {200, 2000};
  }
  if (bytes <= (std::size_t{1} << 20)) {
    return {20, 200};
  }
  return {5, 30};
}

// The slowest rank's average, in microseconds (raw MPI: no cotensor op is in flight).
double slowest_us(double seconds, int timed) {
  double mine = seconds / timed * 1e6;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double time_cotensor(cotensor::tensor& t, iterations its) {
  for (int i = 0; i < its.warmup; ++i) {
    dist::all_reduce(t);
    t.wait();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = clock_type::now();
  for (int i = 0; i < its.timed; ++i) {
    dist::all_reduce(t);
    t.wait();
  }
  return slowest_us(seconds_since(start), its.timed);
}

// `depth` all-reduces on as many tensors issued back to back, then one wait_all: the engine
// keeps them in flight together, as a training step's gradients are. Per all-reduce.
constexpr int depth = 16;

// Up to 64 KiB a round takes tens of microseconds: 1000 rounds (tens of milliseconds), so that
// one hiccup of a shared machine (a few milliseconds) cannot decide the figure. Beyond, and
// with --quick, the timed iterations in rounds of `depth`. COTENSOR_BENCH_DIST_ROUNDS=N sets
// the number (e.g. to run the figure long enough under a profiler).
int pipelined_rounds(std::size_t bytes, iterations its, bool quick) {
  if (const char* rounds = std::getenv("COTENSOR_BENCH_DIST_ROUNDS")) {
    return std::max(1, std::atoi(rounds));
  }
  if (!quick && bytes <= (std::size_t{64} << 10)) {
    return 1000;
  }
  return std::max(1, its.timed / depth);
}

double time_cotensor_pipelined(std::vector<cotensor::tensor>& ts, iterations its, int rounds) {
  auto round = [&ts] {
    for (auto& t : ts) {
      dist::all_reduce(t);
    }
    cotensor::wait_all();
  };
  for (int i = 0; i < std::max(1, its.warmup / depth); ++i) {
    round();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = clock_type::now();
  for (int i = 0; i < rounds; ++i) {
    round();
  }
  return slowest_us(seconds_since(start), rounds * depth);
}

double time_mpi(std::vector<float>& buffer, iterations its) {
  const int count = static_cast<int>(buffer.size());
  for (int i = 0; i < its.warmup; ++i) {
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = clock_type::now();
  for (int i = 0; i < its.timed; ++i) {
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  return slowest_us(seconds_since(start), its.timed);
}

// The non-blocking call cotensor makes, driven to its end by MPI_Wait on the main thread:
// separates what Open MPI's non-blocking algorithm costs from what cotensor adds.
double time_mpi_nonblocking(std::vector<float>& buffer, iterations its) {
  const int count = static_cast<int>(buffer.size());
  auto once = [&] {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  };
  for (int i = 0; i < its.warmup; ++i) {
    once();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = clock_type::now();
  for (int i = 0; i < its.timed; ++i) {
    once();
  }
  return slowest_us(seconds_since(start), its.timed);
}

struct row {
  std::size_t bytes;
  double cotensor_us;
  double mpi_us;
  double mpi_nonblocking_us;
  double pipelined_us;
};

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_dist", argc, argv);
  const auto world = dist::communicator::world();  // initialises MPI on its thread
  const bool root = world.rank() == 0;
  std::size_t last = opts.quick ? (std::size_t{1} << 16) : (std::size_t{1} << 26);
  if (const char* max = std::getenv("COTENSOR_BENCH_DIST_MAX_BYTES")) {
    last = std::min<std::size_t>(last, std::strtoull(max, nullptr, 10));
  }
  std::size_t first = 4;
  if (const char* min = std::getenv("COTENSOR_BENCH_DIST_MIN_BYTES")) {
    first = std::max<std::size_t>(first, std::strtoull(min, nullptr, 10));
  }
  if (root) {
    std::printf(
        "# cotensor %d.%d.%d, %d ranks, all-reduce (sum) of float32, in place, %zu B .. %zu B%s\n",
        COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH, world.size(), first,
        last, opts.quick ? " (quick)" : "");
    std::fflush(stdout);
  }
  std::vector<row> rows;
  for (std::size_t bytes = first; bytes <= last; bytes *= 2) {
    const auto its = iterations_for(bytes, opts.quick);
    const auto n = static_cast<std::int64_t>(bytes / sizeof(float));
    // Alternate which goes first, so neither always meets a warmer (or colder) cache.
    double ours = 0;
    double raw = 0;
    double raw_nonblocking = 0;
    double pipelined = 0;
    double fused_fraction = 0;
    {
      cotensor::tensor t = cotensor::full({n}, 1.0F);
      std::vector<float> buffer(static_cast<std::size_t>(n), 1.0F);
      t.wait();
      if (rows.size() % 2 == 0) {
        ours = time_cotensor(t, its);
        raw = time_mpi(buffer, its);
        raw_nonblocking = time_mpi_nonblocking(buffer, its);
      } else {
        raw_nonblocking = time_mpi_nonblocking(buffer, its);
        raw = time_mpi(buffer, its);
        ours = time_cotensor(t, its);
      }
    }
    {
      std::vector<cotensor::tensor> ts;
      for (int i = 0; i < depth; ++i) {
        ts.push_back(cotensor::full({n}, 1.0F));
      }
      cotensor::wait_all();
      const auto fused_before = world.fused_count();
      const int rounds = pipelined_rounds(bytes, its, opts.quick);
      pipelined = time_cotensor_pipelined(ts, its, rounds);
      const auto ops = static_cast<double>(depth * (rounds + std::max(1, its.warmup / depth)));
      fused_fraction = static_cast<double>(world.fused_count() - fused_before) / ops;
    }
    rows.push_back({bytes, ours, raw, raw_nonblocking, pipelined});
    if (root) {
      const std::string b = std::to_string(bytes);
      cotensor_bench::print(("dist.allreduce_us." + b).c_str(), ours);
      cotensor_bench::print(("dist.mpi_allreduce_us." + b).c_str(), raw);
      cotensor_bench::print(("dist.mpi_iallreduce_us." + b).c_str(), raw_nonblocking);
      cotensor_bench::print(("dist.allreduce_pipelined_us." + b).c_str(), pipelined);
      if (world.fused_count() > 0) {
        cotensor_bench::print(("dist.pipelined_fused_fraction." + b).c_str(), fused_fraction);
      }
      cotensor_bench::print(("dist.overhead_us." + b).c_str(), ours - raw);
      cotensor_bench::print(("dist.bandwidth_ratio." + b).c_str(), raw / ours);
    }
  }
  if (root) {
    std::printf("# %10s %12s %12s %12s %12s %12s %9s\n", "bytes", "cotensor_us", "MPI_us",
                "MPI_I_us", "pipelined_us", "overhead_us", "MPI/ours");
    for (const auto& r : rows) {
      std::printf("# %10zu %12.2f %12.2f %12.2f %12.2f %12.2f %9.3f\n", r.bytes, r.cotensor_us,
                  r.mpi_us, r.mpi_nonblocking_us, r.pipelined_us, r.cotensor_us - r.mpi_us,
                  r.mpi_us / r.cotensor_us);
    }
  }
  return 0;
}
