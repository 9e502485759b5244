// Two ways for two ranks to all-reduce 16 small buffers as one, in raw MPI (no cotensor): the
// measurement behind two-rank fusion (src/distributed/fusion.cpp, docs/distributed.md#fusion).
//
//   mpirun -np 2 --bind-to core build/bench/cotensor_bench_raw_exchange [--quick]
//
//   agreement  MPI_Iallreduce of one count (MIN), copy the 16 into one buffer, MPI_Iallreduce
//              in place on it, copy back: what 3 or more ranks do
//   exchange   copy the 16 into one buffer, MPI_Irecv + MPI_Isend of it with the peer, then
//              MPI_Reduce_local, rank 0's values first: rank 1 into its buffers, rank 0 into the
//              received copy and back
//   p2p        the agreement's way with the count sent point to point instead
//
// Every request is spun to completion (MPI_Testall), as a spinning wait does. Prints, per way,
// the median over 5 runs (1 with --quick) of the time per round of 16 float32 sums of 4 KiB:
//   cotensor.dist.raw_exchange.{agreement,exchange,p2p}_us

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mpi.h>
#include <string_view>
#include <vector>

namespace {

constexpr int parts = 16;
constexpr int part_elements = 1024;  // 4 KiB of float32
constexpr int elements = parts * part_elements;

void spin(int n, MPI_Request* reqs) {
  int done = 0;
  while (done == 0) {
    MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
  }
}

struct rank_state {
  int rank = 0;
  int peer = 1;
  MPI_Comm pair = MPI_COMM_NULL;
  std::vector<std::vector<float>> buffers{parts, std::vector<float>(part_elements, 1.0F)};
  std::vector<float> fused = std::vector<float>(elements);
  std::vector<float> received = std::vector<float>(elements);

  void copy_in() {
    for (int j = 0; j < parts; ++j) {
      std::memcpy(fused.data() + j * part_elements, buffers[j].data(), part_elements * 4);
    }
  }
  void copy_out(const std::vector<float>& from) {
    for (int j = 0; j < parts; ++j) {
      std::memcpy(buffers[j].data(), from.data() + j * part_elements, part_elements * 4);
    }
  }
  void agree(bool p2p) {
    std::uint64_t mine = parts;
    std::uint64_t theirs = 0;
    std::array<MPI_Request, 2> r{};
    if (p2p) {
      MPI_Irecv(&theirs, 1, MPI_UINT64_T, peer, 2, pair, &r[0]);
      MPI_Isend(&mine, 1, MPI_UINT64_T, peer, 2, pair, &r[1]);
      spin(2, r.data());
    } else {
      MPI_Iallreduce(&mine, &theirs, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &r[0]);
      spin(1, r.data());
    }
  }
  void agreement_round(bool p2p) {
    agree(p2p);
    copy_in();
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, fused.data(), elements, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
    spin(1, &r);
    copy_out(fused);
  }
  void exchange_round() {
    copy_in();
    std::array<MPI_Request, 2> r{};
    MPI_Irecv(received.data(), elements, MPI_FLOAT, peer, 1, pair, &r[0]);
    MPI_Isend(fused.data(), elements, MPI_FLOAT, peer, 1, pair, &r[1]);
    spin(2, r.data());
    if (rank == 1) {
      for (int j = 0; j < parts; ++j) {
        MPI_Reduce_local(received.data() + j * part_elements, buffers[j].data(), part_elements,
                         MPI_FLOAT, MPI_SUM);
      }
    } else {
      MPI_Reduce_local(fused.data(), received.data(), elements, MPI_FLOAT, MPI_SUM);
      copy_out(received);
    }
  }
  void reset() {  // keeps the sums from growing without bound
    for (auto& b : buffers) {
      std::fill(b.begin(), b.end(), 1.0F);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const bool quick = argc > 1 && std::string_view(argv[1]) == "--quick";
  rank_state s;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (s.rank == 0) {
      std::fprintf(stderr, "cotensor_bench_raw_exchange: needs 2 ranks, has %d\n", size);
    }
    MPI_Finalize();
    return 2;
  }
  s.peer = 1 - s.rank;
  MPI_Comm_dup(MPI_COMM_WORLD, &s.pair);
  const int rounds = quick ? 200 : 20000;
  const int runs = quick ? 1 : 5;
  constexpr std::array<const char*, 3> names = {"agreement", "exchange", "p2p"};
  std::array<std::vector<double>, 3> us;
  for (int run = 0; run < runs; ++run) {
    for (std::size_t way = 0; way < names.size(); ++way) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < rounds; ++i) {
        if (way == 1) {
          s.exchange_round();
        } else {
          s.agreement_round(way == 2);
        }
        s.reset();
      }
      us[way].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          rounds);
    }
  }
  // Checks the last round's sums: 2 on every rank, either way.
  s.exchange_round();
  bool exact = true;
  for (const auto& b : s.buffers) {
    exact = exact && std::all_of(b.begin(), b.end(), [](float x) { return x == 2.0F; });
  }
  if (s.rank == 0) {
    for (std::size_t way = 0; way < names.size(); ++way) {
      auto& v = us[way];
      std::sort(v.begin(), v.end());
      std::printf("cotensor.dist.raw_exchange.%s_us: %.2f\n", names[way], v[v.size() / 2]);
    }
  }
  MPI_Comm_free(&s.pair);
  MPI_Finalize();
  if (!exact) {
    std::fprintf(stderr, "cotensor_bench_raw_exchange: rank %d: a sum is not 2\n", s.rank);
    return 1;
  }
  return 0;
}
