#include "cotensor/shape.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <stdexcept>
#include <vector>

using cotensor::shape;

TEST_SUITE("shape") {
  TEST_CASE("a shape reports its rank, extents and element count") {
    shape s{2, 3, 4};
    CHECK(s.rank() == 3);
    CHECK(s[0] == 2);
    CHECK(s[2] == 4);
    CHECK(s.numel() == 24);
    CHECK(shape{}.rank() == 0);
    CHECK(shape{}.numel() == 1);
    CHECK(shape{5, 0}.numel() == 0);
  }

  TEST_CASE("shapes compare by extents and print as a list") {
    CHECK(shape{2, 3} == shape{2, 3});
    CHECK(shape{2, 3} != shape{3, 2});
    CHECK(shape{6} != shape{1, 6});
    std::ostringstream os;
    os << shape{2, 3};
    CHECK(os.str() == "[2, 3]");
    CHECK(shape{}.to_string() == "[]");
  }

  TEST_CASE("a shape of any rank keeps its extents beyond the inline capacity") {
    std::vector<std::int64_t> extents{1, 2, 1, 2, 1, 2, 1, 2, 3};
    shape s{std::span<const std::int64_t>(extents)};
    CHECK(s.rank() == 9);
    CHECK(s.numel() == 48);
    shape copy = s;
    CHECK(copy == s);
    CHECK(copy[8] == 3);
    shape small{4};
    small = s;
    CHECK(small.rank() == 9);
    s = shape{7};
    CHECK(s.rank() == 1);
    CHECK(s[0] == 7);
  }

  TEST_CASE("a negative extent or an overflowing size is rejected at construction") {
    CHECK_THROWS_AS(shape({2, -1}), std::invalid_argument);
    CHECK_THROWS_AS(shape({1LL << 40, 1LL << 40}), std::invalid_argument);
  }
}
