#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace cotensor {

/// The extents of a row-major tensor, outermost first: `shape{2, 3}` is 2 rows of 3.
///
/// Any rank is allowed; up to `inline_rank` extents are stored without a heap allocation. A
/// rank-0 shape (`shape{}`) has one element, like a scalar. Extents must be non-negative; a
/// negative extent throws `std::invalid_argument`.
class shape {
public:
  /// The most extents stored without a heap allocation.
  static constexpr std::size_t inline_rank = 6;

  /// The rank-0 shape: one element.
  shape() noexcept = default;
  /// A shape with these extents, outermost first: `shape{2, 3}` is 2 rows of 3.
  shape(std::initializer_list<std::int64_t> extents);
  /// A shape with these extents, outermost first.
  explicit shape(std::span<const std::int64_t> extents);

  /// Copies the extents.
  shape(const shape& other);
  /// Copies the extents.
  shape& operator=(const shape& other);
  /// Moves the extents; `other` is left valid but unspecified.
  shape(shape&& other) noexcept = default;
  /// Moves the extents; `other` is left valid but unspecified.
  shape& operator=(shape&& other) noexcept = default;
  ~shape() = default;

  /// Number of extents.
  std::size_t rank() const noexcept { return rank_; }
  /// The extent of dimension `i`; `i < rank()` is a precondition.
  std::int64_t operator[](std::size_t i) const noexcept { return data()[i]; }
  /// Number of elements: the product of the extents (1 for rank 0).
  std::int64_t numel() const noexcept { return numel_; }
  /// The extents as a contiguous range.
  std::span<const std::int64_t> extents() const noexcept { return {data(), rank_}; }
  /// The extents formatted as `[2, 3]`.
  std::string to_string() const;

  friend bool operator==(const shape& a, const shape& b) noexcept {
    return std::ranges::equal(a.extents(), b.extents());
  }

private:
  const std::int64_t* data() const noexcept {
    return rank_ <= inline_rank ? small_ : large_.data();
  }
  void assign(std::span<const std::int64_t> extents);

  std::int64_t small_[inline_rank] = {};
  std::vector<std::int64_t> large_;  // used only when rank_ > inline_rank
  std::size_t rank_ = 0;
  std::int64_t numel_ = 1;
};

/// Prints the extents as `[2, 3]`.
std::ostream& operator<<(std::ostream& os, const shape& s);

}  // namespace cotensor
