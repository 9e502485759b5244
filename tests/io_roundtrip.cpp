// The Python round trip of <cotensor/io.hpp>: saves one tensor of each dtype with the values of
// tests/data/make_fixtures.py as a safetensors file and as .npy files, then runs
// tests/io_roundtrip.py, which loads them with the Python packages and compares.
//   cotensor_io_roundtrip PYTHON SCRIPT DIR
// Exits 77 (skipped) when PYTHON is empty or missing, or lacks the packages.

#include <cotensor/cotensor.hpp>
#include <cotensor/io.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <sys/wait.h>
#include <vector>

using namespace cotensor;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: cotensor_io_roundtrip PYTHON SCRIPT DIR\n";
    return 2;
  }
  const std::filesystem::path python = argv[1];
  if (python.empty() || !std::filesystem::exists(python)) {
    std::cout << "SKIPPED: no Python environment (COTENSOR_PYTHON='" << python.string()
              << "'; bench/peers/setup.sh makes .venv)\n";
    return 77;
  }
  const std::filesystem::path dir = argv[3];
  std::filesystem::create_directories(dir);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> floats = {0.0,
                                      -0.0,
                                      1.0,
                                      -1.5,
                                      0.25,
                                      1024.0,
                                      std::ldexp(1.0, -24),
                                      inf,
                                      -inf,
                                      std::numeric_limits<double>::quiet_NaN(),
                                      3.0,
                                      -7.0};
  const tensor f64 = from_vector(floats, shape{3, 4});
  const std::vector<std::pair<std::string, tensor>> tensors = {
      {"bool", from_vector(std::vector<bool>{true, false, false, true, true}, shape{5})},
      {"int32",
       from_vector(std::vector<std::int32_t>{0, 1, -1, INT32_MAX, INT32_MIN, 123456}, shape{2, 3})},
      {"int64", from_vector(std::vector<std::int64_t>{0, -1, std::int64_t{1} << 62, INT64_MIN,
                                                      INT64_MAX, 42},
                            shape{3, 2})},
      {"float16", f64.astype(dtype::float16)},
      {"bfloat16", f64.astype(dtype::bfloat16)},
      {"float32", f64.astype(dtype::float32)},
      {"float64", f64},
  };
  save_safetensors(dir / "ours.safetensors", tensors, {{"producer", "cotensor"}});
  for (const auto& [name, t] : tensors) {
    save_npy(dir / ("ours_" + name + ".npy"), t);
  }
  const std::string command =
      "'" + python.string() + "' '" + std::string(argv[2]) + "' '" + dir.string() + "'";
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) {
    std::cerr << "could not run " << command << "\n";
    return 1;
  }
  return WEXITSTATUS(status);
}
