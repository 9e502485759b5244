#include "cotensor/device.hpp"

#include <ostream>

namespace cotensor {

std::ostream& operator<<(std::ostream& os, const device& d) {
  if (d.is_cpu()) {
    return os << "cpu";
  }
  return os << "cuda:" << d.index;
}

}  // namespace cotensor
