#include "cotensor/device.hpp"

#include <cotensor/cotensor.hpp>

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>

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

  TEST_CASE("is_available, unavailable_reason and cuda_device_count agree with what ops do") {
    CHECK(cotensor::is_available(device::cpu()));
    CHECK(cotensor::unavailable_reason(device::cpu()).empty());
    const int gpus = cotensor::cuda_device_count();
    CHECK(gpus >= 0);
    CHECK(cotensor::is_available(device::cuda(0)) == (gpus > 0));
    CHECK_FALSE(cotensor::is_available(device::cuda(gpus)));  // one past the last
    CHECK_FALSE(cotensor::is_available(device::cuda(-1)));
    const std::string why = cotensor::unavailable_reason(device::cuda(gpus));
    CHECK_FALSE(why.empty());
    try {
      (void)cotensor::zeros({1}, device::cuda(gpus));
      FAIL("an unavailable device was accepted");
    } catch (const std::system_error& e) {
      CHECK(e.code() == cotensor::errc::device_unavailable);
      CHECK(std::string(e.what()).find(why) != std::string::npos);  // the same reason
    }
  }

#if COTENSOR_HAVE_CUDA_RUNTIME
  TEST_CASE("a child forked after CUDA was initialised is refused CUDA devices, saying why") {
    (void)cotensor::cuda_device_count();  // initialises CUDA in this process
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      const bool refused =
          !cotensor::is_available(device::cuda(0)) &&
          cotensor::unavailable_reason(device::cuda(0)).find("forked") != std::string::npos;
      _exit(refused ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
#endif
}
