#include "cotensor/dtype.hpp"

#include "cpu/half_convert.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

using namespace cotensor;

namespace {

constexpr dtype all[] = {dtype::boolean,  dtype::int32,   dtype::int64,  dtype::float16,
                         dtype::bfloat16, dtype::float32, dtype::float64};

// The promotion table of docs/dtypes.md, row by row (b, i32, i64, f16, bf16, f32, f64).
constexpr dtype b = dtype::boolean, i32 = dtype::int32, i64 = dtype::int64, f16 = dtype::float16,
                bf = dtype::bfloat16, f32 = dtype::float32, f64 = dtype::float64;
constexpr dtype table[7][7] = {
    {b, i32, i64, f16, bf, f32, f64},     // bool
    {i32, i32, i64, f16, bf, f32, f64},   // int32
    {i64, i64, i64, f16, bf, f32, f64},   // int64
    {f16, f16, f16, f16, f32, f32, f64},  // float16
    {bf, bf, bf, f32, bf, f32, f64},      // bfloat16
    {f32, f32, f32, f32, f32, f32, f64},  // float32
    {f64, f64, f64, f64, f64, f64, f64},  // float64
};

float half_value(std::uint16_t bits) { return float16_t::from_bits(bits); }

}  // namespace

TEST_SUITE("dtype") {

  TEST_CASE("every dtype has NumPy's name and its size") {
    const char* names[] = {"bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
    const std::size_t sizes[] = {1, 4, 8, 2, 2, 4, 8};
    for (std::size_t i = 0; i < 7; ++i) {
      CHECK(name(all[i]) == names[i]);
      CHECK(itemsize(all[i]) == sizes[i]);
      std::ostringstream os;
      os << all[i];
      CHECK(os.str() == names[i]);
    }
    static_assert(dtype_of<bool> == dtype::boolean && dtype_of<std::int32_t> == dtype::int32 &&
                  dtype_of<std::int64_t> == dtype::int64 && dtype_of<float16_t> == dtype::float16 &&
                  dtype_of<bfloat16_t> == dtype::bfloat16 && dtype_of<float> == dtype::float32 &&
                  dtype_of<double> == dtype::float64);
    static_assert(!element_type<char> && !element_type<std::uint32_t> && element_type<bool>);
  }

  TEST_CASE("promote_types follows the documented table and is symmetric") {
    for (std::size_t i = 0; i < 7; ++i) {
      for (std::size_t j = 0; j < 7; ++j) {
        CAPTURE(name(all[i]));
        CAPTURE(name(all[j]));
        CHECK(promote_types(all[i], all[j]) == table[i][j]);
        CHECK(promote_types(all[i], all[j]) == promote_types(all[j], all[i]));
      }
    }
    static_assert(promote_types(dtype::int64, dtype::float16) == dtype::float16);
    static_assert(promote_types(dtype::float16, dtype::bfloat16) == dtype::float32);
  }

  TEST_CASE("float16 converts exactly back and forth for every finite half") {
    for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
      const auto h = static_cast<std::uint16_t>(bits);
      const float f = half_value(h);
      if (std::isnan(f)) {
        CHECK((h & 0x7C00) == 0x7C00);
        CHECK(std::isnan(static_cast<float>(float16_t(f))));
        continue;
      }
      REQUIRE(float16_t(f).bits == h);
    }
    CHECK(half_value(0x3C00) == 1.0F);
    CHECK(half_value(0x7BFF) == 65504.0F);
    CHECK(half_value(0x0001) == std::ldexp(1.0F, -24));  // the smallest subnormal
    CHECK(half_value(0xC000) == -2.0F);
  }

  TEST_CASE("float16 rounds to nearest, ties to even, between every pair of neighbours") {
    // Midpoints between neighbouring halves are floats: below one rounds down, above up, and
    // the midpoint itself to the half whose last bit is 0.
    for (std::uint32_t bits = 0; bits < 0x7BFF; ++bits) {
      const auto lo = static_cast<std::uint16_t>(bits);
      const auto hi = static_cast<std::uint16_t>(bits + 1);
      const float mid = (half_value(lo) + half_value(hi)) / 2.0F;
      REQUIRE(float16_t(std::nextafter(mid, 0.0F)).bits == lo);
      REQUIRE(float16_t(std::nextafter(mid, INFINITY)).bits == hi);
      REQUIRE(float16_t(mid).bits == ((lo & 1U) == 0 ? lo : hi));
      REQUIRE(float16_t(-mid).bits == static_cast<std::uint16_t>(0x8000U | float16_t(mid).bits));
    }
    CHECK(float16_t(65520.0F).bits == 0x7C00);  // halfway to 2^16 rounds to infinity
    CHECK(float16_t(65519.99F).bits == 0x7BFF);
    CHECK(float16_t(1e10F).bits == 0x7C00);
    CHECK(float16_t(-INFINITY).bits == 0xFC00);
    CHECK(float16_t(std::ldexp(1.0F, -26)).bits == 0);  // below half the smallest subnormal
  }

  TEST_CASE("bfloat16 rounds to nearest even and keeps NaN NaN") {
    for (std::uint32_t bits = 0; bits < 0x7F7F; ++bits) {
      const auto lo = static_cast<std::uint16_t>(bits);
      const float a = bfloat16_t::from_bits(lo);
      const float c = bfloat16_t::from_bits(static_cast<std::uint16_t>(bits + 1));
      REQUIRE(bfloat16_t(a).bits == lo);
      const float mid = std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) + 0x8000U));
      REQUIRE(mid > a);
      REQUIRE(mid < c);
      REQUIRE(bfloat16_t(mid).bits == ((lo & 1U) == 0 ? lo : lo + 1));
    }
    // 0x7F800001 is a NaN: plain rounding would carry it into +inf.
    CHECK(std::isnan(static_cast<float>(bfloat16_t(std::bit_cast<float>(0x7F800001U)))));
    CHECK(std::isnan(static_cast<float>(bfloat16_t(std::bit_cast<float>(0xFFC00000U)))));
    CHECK(bfloat16_t(INFINITY).bits == 0x7F80);
    CHECK(bfloat16_t(std::numeric_limits<float>::max()).bits == 0x7F80);  // rounds past max
    CHECK(static_cast<float>(bfloat16_t(1.0F)) == 1.0F);
  }

  TEST_CASE("the CPU's span conversions give the scalar conversions' bits") {
    // float16 goes through F16C where the CPU has it: every half, and floats around every
    // half's midpoints, across the range, and NaNs with payloads, in spans whose lengths leave
    // tails past the eight-lane vectors.
    std::vector<float> floats;
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
      const std::uint32_t w =
          std::bit_cast<std::uint32_t>(half_value(static_cast<std::uint16_t>(h)));
      for (std::uint32_t d : {0U, 1U, 0xFFFU, 0x1000U, 0x1001U, 0x7FFFU, 0x8000U, 0x8001U}) {
        floats.push_back(std::bit_cast<float>(w + d));
        floats.push_back(std::bit_cast<float>(w - d));
      }
    }
    for (std::uint64_t w = 0; w <= 0xFFFFFFFFU; w += 4099) {
      floats.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(w)));
    }
    for (std::uint32_t w : {0x7F800001U, 0x7FBFFFFFU, 0x7FC00001U, 0x7FFFFFFFU, 0xFF800001U,
                            0xFFC12345U, 0x7F802000U, 0x7FE00000U}) {
      floats.push_back(std::bit_cast<float>(w));
    }
    const auto n = static_cast<std::int64_t>(floats.size());
    std::vector<float16_t> halves(floats.size());
    std::vector<bfloat16_t> bhalves(floats.size());
    constexpr std::int64_t span = 1003;
    for (std::int64_t lo = 0; lo < n; lo += span) {
      const std::int64_t m = std::min(span, n - lo);
      detail::cpu::from_float_span(floats.data() + lo, halves.data() + lo, m);
      detail::cpu::from_float_span(floats.data() + lo, bhalves.data() + lo, m);
    }
    for (std::size_t i = 0; i < floats.size(); ++i) {
      CAPTURE(std::bit_cast<std::uint32_t>(floats[i]));
      REQUIRE(halves[i].bits == float16_t(floats[i]).bits);
      REQUIRE(bhalves[i].bits == bfloat16_t(floats[i]).bits);
    }

    std::vector<float16_t> every(0x10000);
    std::vector<bfloat16_t> bevery(0x10000);
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
      every[h] = float16_t::from_bits(static_cast<std::uint16_t>(h));
      bevery[h] = bfloat16_t::from_bits(static_cast<std::uint16_t>(h));
    }
    std::vector<float> back(0x10000);
    std::vector<float> bback(0x10000);
    for (std::int64_t lo = 0; lo < 0x10000; lo += span) {
      const std::int64_t m = std::min<std::int64_t>(span, 0x10000 - lo);
      detail::cpu::to_float_span(every.data() + lo, back.data() + lo, m);
      detail::cpu::to_float_span(bevery.data() + lo, bback.data() + lo, m);
    }
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
      CAPTURE(h);
      REQUIRE(std::bit_cast<std::uint32_t>(back[h]) ==
              std::bit_cast<std::uint32_t>(static_cast<float>(every[h])));
      REQUIRE(std::bit_cast<std::uint32_t>(bback[h]) ==
              std::bit_cast<std::uint32_t>(static_cast<float>(bevery[h])));
    }
  }

}  // TEST_SUITE("dtype")
