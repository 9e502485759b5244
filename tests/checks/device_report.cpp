// Prints what cotensor says of cuda:0: the device count, whether it is available and why not.
// Used by tests/checks/cuda_library_test.sh.

#include <cotensor/cotensor.hpp>

#include <iostream>

int main() {
  const cotensor::device gpu = cotensor::device::cuda(0);
  std::cout << "cuda_device_count: " << cotensor::cuda_device_count() << '\n'
            << "available: " << cotensor::is_available(gpu) << '\n'
            << "reason: " << cotensor::unavailable_reason(gpu) << '\n';
  // The CPU never needs the CUDA backend's library.
  std::cout << "cpu sum: " << (cotensor::ones({4}) + 1.0F).sum().item() << '\n';
}
