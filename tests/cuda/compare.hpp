#pragma once

// Support for the CUDA tests: inputs made on both devices, results read back from a GPU in
// both ways, and comparisons against the CPU backend's results in units in the last place or
// against an error bound.

#include <cotensor/cotensor.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cotensor::test::cuda {

/// The GPU every case runs on (main has checked that there is one).
inline constexpr device gpu = device::cuda(0);

/// `n` floats drawn uniformly from [lo, hi), a deterministic function of `seed`.
inline std::vector<float> uniform(std::int64_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 bits(seed);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto& v : out) {
    // 24 random bits: every value is exact in float and below 1.
    const float u = static_cast<float>(bits() >> 8) * 0x1p-24F;
    v = lo + (hi - lo) * u;
  }
  return out;
}

/// The same values on the CPU and on the GPU.
struct twin {
  tensor cpu;
  tensor gpu;
};

/// `values` in shape `s` on both devices, each made by `from_vector` on its own device.
inline twin make_twin(const std::vector<float>& values, const shape& s) {
  return {from_vector(values, s, device::cpu()), from_vector(values, s, gpu)};
}

/// Uniform values in [lo, hi) in shape `s` on both devices.
inline twin uniform_twin(const shape& s, std::uint32_t seed, float lo, float hi) {
  return make_twin(uniform(s.numel(), seed, lo, hi), s);
}

/// The distance between two floats in units in the last place: how many floats lie between
/// them, plus one. +0 and -0 are 0 apart; two NaNs are 0 apart; a NaN and a number are as far
/// apart as can be.
inline std::int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<std::int64_t>::max();
  }
  // Sign and magnitude to a line on which consecutive floats are consecutive integers.
  const auto ordered = [](float x) {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    const auto magnitude = static_cast<std::int64_t>(bits & 0x7FFFFFFFU);
    return (bits & 0x80000000U) != 0 ? -magnitude : magnitude;
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

/// `d` rounded to the nearest float, overflowing to an infinity as IEEE arithmetic does (a plain
/// conversion of a finite double beyond the float range is undefined behaviour).
inline float rounded(double d) {
  constexpr double largest = std::numeric_limits<float>::max();
  // Half an ulp above the largest float: from there on, d rounds to infinity.
  constexpr double overflow = largest + 0x1p103;
  if (std::isfinite(d) && std::fabs(d) > largest) {
    return std::copysign(std::fabs(d) >= overflow ? std::numeric_limits<float>::infinity()
                                                  : std::numeric_limits<float>::max(),
                         static_cast<float>(d > 0 ? 1 : -1));
  }
  return static_cast<float>(d);
}

/// True when both vectors hold the same bits.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Reads a GPU tensor's values in both ways the API offers: `to_vector()` on the GPU tensor
/// itself and `to(cpu).to_vector()`; checks that it lives on the GPU and that both give the same
/// bits. Returns the values.
inline std::vector<float> read_back(const tensor& t) {
  CHECK(t.device() == gpu);
  auto direct = t.to_vector();
  const auto host = t.to(device::cpu());
  CHECK(host.device() == device::cpu());
  CHECK(host.shape() == t.shape());
  const auto copied = host.to_vector();
  CHECK_MESSAGE(same_bits(direct, copied), "to_vector() and to(cpu).to_vector() differ");
  return direct;
}

/// Where two results differ.
struct differences {
  std::int64_t count = 0;  ///< elements outside the tolerance
  std::string first;       ///< the first of them, in words ("" if none)
};

/// Compares `got` with `want` element by element, allowing `max_ulps` units in the last place.
inline differences
compare_ulps(const std::vector<float>& got, const std::vector<float>& want, std::int64_t max_ulps) {
  differences out;
  if (got.size() != want.size()) {
    out.count = 1;
    out.first =
        "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
    return out;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto d = ulp_distance(got[i], want[i]);
    if (d > max_ulps) {
      if (out.count == 0) {
        std::ostringstream os;
        os.precision(9);
        os << "element " << i << ": got " << got[i] << ", want " << want[i] << " (" << d
           << " ulp apart, at most " << max_ulps << " allowed)";
        out.first = os.str();
      }
      ++out.count;
    }
  }
  return out;
}

/// Checks that the GPU result `on_gpu` has the CPU result's shape and, element by element, is
/// within `max_ulps` of it (0: the same value).
inline void check_ulps(const tensor& on_gpu, const tensor& on_cpu, std::int64_t max_ulps = 0) {
  REQUIRE(on_cpu.device() == device::cpu());
  CHECK(on_gpu.shape() == on_cpu.shape());
  const auto d = compare_ulps(read_back(on_gpu), on_cpu.to_vector(), max_ulps);
  CHECK_MESSAGE(d.count == 0, d.count, " elements differ; ", d.first);
}

/// Compares `got` with `want`, allowing `rel * bound[i] + abs` at element i: `bound` is the
/// sum of the magnitudes of the terms that make the element, so the tolerance is a multiple of
/// the rounding error of any order of summation.
inline differences compare_bounded(const std::vector<float>& got,
                                   const std::vector<float>& want,
                                   const std::vector<float>& bound,
                                   double rel,
                                   double abs) {
  differences out;
  if (got.size() != want.size() || got.size() != bound.size()) {
    out.count = 1;
    out.first = "sizes differ";
    return out;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    const double tol = rel * static_cast<double>(bound[i]) + abs;
    if (!(err <= tol)) {  // a NaN fails too
      if (out.count == 0) {
        std::ostringstream os;
        os.precision(9);
        os << "element " << i << ": got " << got[i] << ", want " << want[i] << ", |difference| "
           << err << " > tolerance " << tol;
        out.first = os.str();
      }
      ++out.count;
    }
  }
  return out;
}

/// The absolute values of `values`.
inline std::vector<float> magnitudes(std::vector<float> values) {
  std::ranges::transform(values, values.begin(), [](float v) { return std::fabs(v); });
  return values;
}

}  // namespace cotensor::test::cuda
