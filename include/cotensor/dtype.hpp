#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace cotensor {

/// The element type of a tensor. The numeric order of the enumerators is the promotion order
/// of `promote_types` (bool < int32 < int64 < float16, bfloat16 < float32 < float64).
enum class dtype : std::uint8_t { boolean, int32, int64, float16, bfloat16, float32, float64 };

/// The number of dtypes.
inline constexpr std::size_t dtype_count = 7;

/// NumPy's spelling: `"bool"`, `"int32"`, `"int64"`, `"float16"`, `"bfloat16"`, `"float32"`,
/// `"float64"`.
std::string_view name(dtype t) noexcept;

/// The bytes of one element: 1, 4, 8, 2, 2, 4, 8.
constexpr std::size_t itemsize(dtype t) noexcept {
  constexpr std::size_t sizes[dtype_count] = {1, 4, 8, 2, 2, 4, 8};
  return sizes[static_cast<std::size_t>(t)];
}

/// True for float16, bfloat16, float32 and float64.
constexpr bool is_floating(dtype t) noexcept { return t >= dtype::float16; }
/// True for int32 and int64.
constexpr bool is_integral(dtype t) noexcept { return t == dtype::int32 || t == dtype::int64; }

/// The dtype of `a ⊗ b` for two tensors, as PyTorch and JAX promote: the wider of the two in
/// `bool < int32 < int64 < {float16, bfloat16} < float32 < float64`, float16 with bfloat16 is
/// float32, and an integer with a float is that float (`int64 ⊗ float16` is float16). The
/// table, and where NumPy 2, PyTorch and JAX differ, is in docs/dtypes.md.
constexpr dtype promote_types(dtype a, dtype b) noexcept {
  if (a == b) {
    return a;
  }
  if ((a == dtype::float16 && b == dtype::bfloat16) ||
      (a == dtype::bfloat16 && b == dtype::float16)) {
    return dtype::float32;
  }
  return a > b ? a : b;
}

/// Prints `name(t)`.
std::ostream& operator<<(std::ostream& os, dtype t);

namespace detail {

constexpr float float_from_bits(std::uint32_t u) noexcept { return std::bit_cast<float>(u); }
constexpr std::uint32_t bits_of(float f) noexcept { return std::bit_cast<std::uint32_t>(f); }

// All ones when `c`, else zero: a select written as a mask, which GCC 12 vectorises where it
// gives up on a branch or a conditional expression in the loop.
constexpr std::uint32_t mask_if(bool c) noexcept { return 0U - static_cast<std::uint32_t>(c); }

// IEEE binary16 from binary32, rounded to nearest even, NaN kept NaN (quiet). Branch-free (masks,
// not selects), so loops of it vectorise. The float arithmetic does the rounding: scaling by
// 2^112 and back by 2^-110 leaves the bits a half keeps, and adding a power of two chosen from
// the exponent rounds the mantissa at the half's precision (its subnormals included).
constexpr std::uint16_t half_bits_from_float(float f) noexcept {
  const std::uint32_t w = bits_of(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000U;
  const float magnitude = float_from_bits(w & 0x7FFFFFFFU);
  float base = (magnitude * float_from_bits(0x77800000U)) * float_from_bits(0x08800000U);
  const std::uint32_t exponent = shl1_w & 0xFF000000U;
  const std::uint32_t low = mask_if(exponent < 0x71000000U);
  const std::uint32_t bias = (low & 0x71000000U) | (~low & exponent);
  base = float_from_bits((bias >> 1) + 0x07800000U) + base;
  const std::uint32_t bits = bits_of(base);
  const std::uint32_t exp_bits = (bits >> 13) & 0x00007C00U;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFU;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  const std::uint32_t nan = mask_if(shl1_w > 0xFF000000U);
  return static_cast<std::uint16_t>((sign >> 16) | (nan & 0x7E00U) | (~nan & nonsign));
}

// binary32 from binary16, exactly. Normal halves are rebiased by a multiplication, subnormals
// are made from a float whose mantissa holds them, minus the implicit bit.
constexpr float float_from_half_bits(std::uint16_t h) noexcept {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000U;
  const std::uint32_t two_w = w + w;
  const float normalized =
      float_from_bits((two_w >> 4) + (0xE0U << 23)) * float_from_bits(0x07800000U);
  const float denormalized = float_from_bits((two_w >> 17) | (126U << 23)) - 0.5F;
  const std::uint32_t sub = mask_if(two_w < (1U << 27));
  return float_from_bits(sign | (sub & bits_of(denormalized)) | (~sub & bits_of(normalized)));
}

// bfloat16 from binary32, rounded to nearest even; NaN stays a quiet NaN of the same sign
// (without that branch 0x7F800001 would round to +inf).
constexpr std::uint16_t bfloat16_bits_from_float(float f) noexcept {
  const std::uint32_t u = bits_of(f);
  if ((u & 0x7FFFFFFFU) > 0x7F800000U) {
    return static_cast<std::uint16_t>((u >> 16) | 0x0040U);
  }
  return static_cast<std::uint16_t>((u + 0x7FFFU + ((u >> 16) & 1U)) >> 16);
}

constexpr float float_from_bfloat16_bits(std::uint16_t b) noexcept {
  return float_from_bits(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

/// IEEE 754 binary16 storage: 1 sign, 5 exponent, 10 mantissa bits. Converts from `float`
/// explicitly (rounded to nearest even, NaN kept NaN, beyond ±65504 to ±inf) and to `float`
/// implicitly (exactly). Arithmetic goes through `float`. Named after C++23's `std::float16_t`,
/// which g++ 12 lacks.
struct float16_t {
  /// The raw bits.
  std::uint16_t bits = 0;

  constexpr float16_t() noexcept = default;
  /// `f` rounded to the nearest float16 (ties to even).
  constexpr explicit float16_t(float f) noexcept : bits(detail::half_bits_from_float(f)) {}
  /// The value, exactly.
  constexpr operator float() const noexcept { return detail::float_from_half_bits(bits); }
  /// A float16 with these bits.
  static constexpr float16_t from_bits(std::uint16_t b) noexcept {
    float16_t h;
    h.bits = b;
    return h;
  }
};

/// bfloat16 storage: the upper 16 bits of a binary32 (1 sign, 8 exponent, 7 mantissa bits).
/// Converts from `float` explicitly (rounded to nearest even, NaN kept NaN) and to `float`
/// implicitly (exactly). Named after C++23's `std::bfloat16_t`, which g++ 12 lacks.
struct bfloat16_t {
  /// The raw bits.
  std::uint16_t bits = 0;

  constexpr bfloat16_t() noexcept = default;
  /// `f` rounded to the nearest bfloat16 (ties to even).
  constexpr explicit bfloat16_t(float f) noexcept : bits(detail::bfloat16_bits_from_float(f)) {}
  /// The value, exactly.
  constexpr operator float() const noexcept { return detail::float_from_bfloat16_bits(bits); }
  /// A bfloat16 with these bits.
  static constexpr bfloat16_t from_bits(std::uint16_t b) noexcept {
    bfloat16_t h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2);

namespace detail {

template <class T>
struct dtype_of_t;
template <>
struct dtype_of_t<bool> {
  static constexpr dtype value = dtype::boolean;
};
template <>
struct dtype_of_t<std::int32_t> {
  static constexpr dtype value = dtype::int32;
};
template <>
struct dtype_of_t<std::int64_t> {
  static constexpr dtype value = dtype::int64;
};
template <>
struct dtype_of_t<float16_t> {
  static constexpr dtype value = dtype::float16;
};
template <>
struct dtype_of_t<bfloat16_t> {
  static constexpr dtype value = dtype::bfloat16;
};
template <>
struct dtype_of_t<float> {
  static constexpr dtype value = dtype::float32;
};
template <>
struct dtype_of_t<double> {
  static constexpr dtype value = dtype::float64;
};

}  // namespace detail

/// The dtype whose elements are `T`: `bool`, `std::int32_t`, `std::int64_t`, `float16_t`,
/// `bfloat16_t`, `float` or `double`; any other `T` does not compile.
template <class T>
constexpr dtype dtype_of = detail::dtype_of_t<T>::value;

/// True for the seven element types of `dtype_of`.
template <class T>
concept element_type = requires {
  detail::dtype_of_t<T>::value;
};

}  // namespace cotensor
