// Generates random single-op programs over cotensor's seven dtypes, runs them on cotensor (CPU)
// and writes one JSON line per program: the op, its parameters, every input's dtype, shape and
// exact bytes (hex, little-endian, row-major), and cotensor's result (dtype, shape, bytes) or the
// exception it threw. tests/differential/compare.py replays each program in NumPy and PyTorch.
//
//   cotensor_dtype_programs SEED COUNT OUT.jsonl
//
// The same seed always writes the same programs (std::mt19937_64, no std:: distributions, whose
// results differ between standard libraries).

#include <cotensor/cotensor.hpp>

#include "program_maker.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using dtype_programs::program_maker;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SEED COUNT OUT.jsonl\n", argv[0]);
    return 2;
  }
  const std::uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const std::uint64_t count = std::strtoull(argv[2], nullptr, 10);
  std::FILE* out = std::fopen(argv[3], "w");
  if (out == nullptr) {
    std::perror(argv[3]);
    return 1;
  }
  program_maker maker(seed);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string line = maker.make(i);
    std::fputs(line.c_str(), out);
    std::fputc('\n', out);
  }
  return std::fclose(out) == 0 ? 0 : 1;
}
