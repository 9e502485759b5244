#include "cotensor/device.hpp"

#include <doctest/doctest.h>

#include <sstream>

using cotensor::device;

TEST_SUITE("device") {
  TEST_CASE("devices compare by kind and index and print as cpu or cuda:i") {
    static_assert(device::cpu() == device::cpu());
    static_assert(device::cuda(0) != device::cuda(1));
    static_assert(device::cuda() == device::cuda(0));
    CHECK(device::cpu().is_cpu());
    CHECK_FALSE(device::cuda(1).is_cpu());
    std::ostringstream os;
    os << device::cpu() << ' ' << device::cuda(1);
    CHECK(os.str() == "cpu cuda:1");
  }
}
