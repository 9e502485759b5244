#include "cotensor/shape.hpp"

#include <limits>
#include <ostream>
#include <sstream>
#include <stdexcept>

namespace cotensor {

shape::shape(std::initializer_list<std::int64_t> extents) {
  assign({extents.begin(), extents.size()});
}

shape::shape(std::span<const std::int64_t> extents) { assign(extents); }

shape::shape(const shape& other) { assign(other.extents()); }

shape& shape::operator=(const shape& other) {
  if (this != &other) {
    assign(other.extents());
  }
  return *this;
}

void shape::assign(std::span<const std::int64_t> extents) {
  std::int64_t n = 1;
  for (std::int64_t e : extents) {
    if (e < 0) {
      throw std::invalid_argument("cotensor::shape: negative extent " + std::to_string(e));
    }
    if (e != 0 && n > std::numeric_limits<std::int64_t>::max() / e) {
      throw std::invalid_argument("cotensor::shape: element count overflows");
    }
    n *= e;
  }
  rank_ = extents.size();
  numel_ = n;
  if (rank_ <= inline_rank) {
    large_.clear();
    std::ranges::copy(extents, small_);
  } else {
    large_.assign(extents.begin(), extents.end());
  }
}

std::string shape::to_string() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const shape& s) {
  os << '[';
  for (std::size_t i = 0; i < s.rank(); ++i) {
    os << (i ? ", " : "") << s[i];
  }
  return os << ']';
}

}  // namespace cotensor
