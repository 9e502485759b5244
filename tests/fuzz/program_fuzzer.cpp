// libFuzzer target: decodes its input into a random op program (tests/support/differential.hpp)
// with waits, reads and cancelled waits, runs it on cotensor under a runtime configuration also
// taken from the input, and checks every value against the sequential reference. Any difference
// prints the program and aborts.
//
// Input layout: byte 0 picks the runtime (workers, inline small ops, in-flight bound,
// synchronous mode), bytes 1-2 the program's size and features; the rest feeds the generator's
// choices as little-endian 32-bit words. When the bytes run out, the words continue from a
// std::mt19937 seeded with the input's hash, so every input decodes to a whole program and the
// same input always to the same one.

#include <cotensor/cotensor.hpp>

#include "support/differential.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>

namespace {

using namespace cotensor::test::differential;

class byte_source {
public:
  byte_source(const std::uint8_t* data, std::size_t size)
      : data_(data), size_(size), fallback_(hash(data, size)) {}

  std::uint8_t byte() {
    return pos_ < size_ ? data_[pos_++] : static_cast<std::uint8_t>(fallback_());
  }
  std::uint32_t word() {
    if (pos_ + 4 > size_) {
      pos_ = size_;
      return static_cast<std::uint32_t>(fallback_());
    }
    std::uint32_t w = 0;
    for (int i = 0; i < 4; ++i) {
      w |= static_cast<std::uint32_t>(data_[pos_++]) << (8 * i);
    }
    return w;
  }
  std::uint32_t seed() const { return hash(data_, size_); }

private:
  static std::uint32_t hash(const std::uint8_t* data, std::size_t size) {
    std::uint32_t h = 2166136261U;  // FNV-1a
    for (std::size_t i = 0; i < size; ++i) {
      h = (h ^ data[i]) * 16777619U;
    }
    return h;
  }

  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::mt19937 fallback_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  byte_source in(data, size);
  const std::uint8_t setup = in.byte();
  const std::uint8_t features = in.byte();
  const std::uint8_t length = in.byte();

  constexpr std::size_t bounds[] = {0, 2, 8, 1024};
  cotensor::runtime_options options;
  options.worker_threads = 1U + setup % 3U;
  options.inline_small_ops = (setup & 0x04U) != 0;
  options.max_in_flight = bounds[(setup >> 3U) & 3U];
  options.synchronous = ((setup >> 5U) & 7U) == 0;  // one input in eight

  generator::options shape;
  shape.length = 1 + length % 80;
  shape.waits = (features & 0x01U) != 0;
  shape.cancellations = shape.waits && (features & 0x02U) != 0;
  shape.max_live = 1 + (features >> 2U) % 10;
  shape.async_ops = (features & 0x80U) != 0;

  // One runtime per input, so that every configuration is fuzzed. COTENSOR_FUZZ_ONE_RUNTIME=1
  // keeps the first input's for the whole run instead, for long runs that count programs.
  static const bool one_runtime = std::getenv("COTENSOR_FUZZ_ONE_RUNTIME") != nullptr;
  static std::optional<cotensor::runtime> shared;
  std::optional<cotensor::runtime> own;
  if (one_runtime) {
    if (!shared) {
      shared.emplace(options);
    }
    options = shared->options();
  } else {
    own.emplace(options);
  }
  const program p = generator(in.seed(), shape, [&in] { return in.word(); }).make();
  const observations seen = run_on_cotensor(p);
  const std::string failure = reference(p, seen).check();
  if (!failure.empty()) {
    std::fprintf(stderr,
                 "cotensor differs from the sequential reference (workers %u, inline %d, "
                 "max_in_flight %zu, synchronous %d):\n%s\n",
                 options.worker_threads, options.inline_small_ops ? 1 : 0, options.max_in_flight,
                 options.synchronous ? 1 : 0, failure.c_str());
    std::abort();
  }
  return 0;
}
