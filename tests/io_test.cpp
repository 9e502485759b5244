#include <cotensor/cotensor.hpp>
#include <cotensor/io.hpp>

#include "io/file.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace cotensor;

namespace {

const fs::path data_dir = COTENSOR_TEST_DATA_DIR;

// A fresh directory, removed with its files at the end of the test.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("cotensor_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path operator/(const std::string& name) const { return path / name; }
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A safetensors file: the 8-byte little-endian length, `header`, then `data`.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFFU);
  }
  return out + header + data;
}

// The values of tests/data/make_fixtures.py.
const std::vector<double> fixture_floats = {0.0,
                                            -0.0,
                                            1.0,
                                            -1.5,
                                            0.25,
                                            1024.0,
                                            std::ldexp(1.0, -24),
                                            std::numeric_limits<double>::infinity(),
                                            -std::numeric_limits<double>::infinity(),
                                            std::numeric_limits<double>::quiet_NaN(),
                                            3.0,
                                            -7.0};
const std::vector<std::int32_t> fixture_int32 = {0, 1, -1, INT32_MAX, INT32_MIN, 123456};
const std::vector<std::int64_t> fixture_int64 = {0,         -1,        std::int64_t{1} << 62,
                                                 INT64_MIN, INT64_MAX, 42};
const std::vector<bool> fixture_bools = {true, false, false, true, true};

// The element bits of `t`, with every NaN made the same pattern (NumPy's and ours may differ
// in the payload), compared with `expected` converted to T by the library's own conversions.
template <class T>
void check_floats(const tensor& t, const shape& s) {
  REQUIRE(t.dtype() == dtype_of<T>);
  CHECK(t.shape() == s);
  const auto got = t.to_vector<T>();
  REQUIRE(got.size() == fixture_floats.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double want = fixture_floats[i];
    CAPTURE(i);
    if (std::isnan(want)) {
      CHECK(std::isnan(static_cast<double>(got[i])));
      continue;
    }
    T expected_value;
    if constexpr (std::is_same_v<T, double>) {
      expected_value = want;
    } else if constexpr (std::is_same_v<T, float>) {
      expected_value = static_cast<float>(want);
    } else {
      expected_value = T(static_cast<float>(want));
    }
    CHECK(std::memcmp(&got[i], &expected_value, sizeof(T)) == 0);
  }
}

void check_fixture(const std::string& name, const tensor& t) {
  CAPTURE(name);
  if (name == "bool") {
    CHECK(t.dtype() == dtype::boolean);
    CHECK(t.shape() == shape{5});
    CHECK(t.to_vector<bool>() == fixture_bools);
  } else if (name == "int32") {
    CHECK(t.shape() == shape{2, 3});
    CHECK(t.to_vector<std::int32_t>() == fixture_int32);
  } else if (name == "int64") {
    CHECK(t.shape() == shape{3, 2});
    CHECK(t.to_vector<std::int64_t>() == fixture_int64);
  } else if (name == "float16") {
    check_floats<float16_t>(t, shape{3, 4});
  } else if (name == "bfloat16") {
    check_floats<bfloat16_t>(t, shape{3, 4});
  } else if (name == "float32") {
    check_floats<float>(t, shape{3, 4});
  } else if (name == "float64") {
    check_floats<double>(t, shape{3, 4});
  } else {
    FAIL("unexpected tensor ", name);
  }
}

// An op that occupies a backend worker until `gate` opens; returns once it runs.
tensor hold_the_worker(std::shared_future<void> gate) {
  auto started = std::make_shared<std::atomic<bool>>(false);
  tensor held = map(ones(shape{1}), [gate, started](float v) {
    started->store(true);
    gate.wait();
    return v;
  });
  while (!started->load()) {
    std::this_thread::yield();
  }
  return held;
}

const std::vector<std::string> dtype_names = {"bool",     "int32",   "int64",  "float16",
                                              "bfloat16", "float32", "float64"};

// One tensor of each dtype with the fixture's values.
std::vector<std::pair<std::string, tensor>> fixture_tensors() {
  std::vector<float> floats(fixture_floats.begin(), fixture_floats.end());
  const tensor f32 = from_vector(floats, shape{3, 4});
  return {
      {"bool", from_vector(fixture_bools, shape{5})},
      {"int32", from_vector(fixture_int32, shape{2, 3})},
      {"int64", from_vector(fixture_int64, shape{3, 2})},
      {"float16", f32.astype(dtype::float16)},
      {"bfloat16", f32.astype(dtype::bfloat16)},
      {"float32", f32},
      {"float64", from_vector(fixture_floats, shape{3, 4})},
  };
}

// Expects `f` to throw an io_error whose message names `file` and, if not empty, `tensor`.
template <class F>
void check_io_error(F&& f,
                    const fs::path& file,
                    const std::string& tensor_name,
                    const std::string& reason) {
  try {
    f();
    FAIL("no exception");
  } catch (const io_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find(file.string()) != std::string::npos);
    CHECK(e.path() == file);
    CHECK(e.tensor_name() == tensor_name);
    if (!tensor_name.empty()) {
      CHECK(what.find("\"" + tensor_name + "\"") != std::string::npos);
    }
    CHECK(what.find(reason) != std::string::npos);
  }
}

}  // namespace

TEST_SUITE("io") {

  TEST_CASE("load_safetensors reads a file of the Python package bit-exactly" *
            doctest::timeout(30)) {
    const auto file = load_safetensors(data_dir / "all_dtypes.safetensors");
    CHECK(file.metadata ==
          std::map<std::string, std::string>{{"producer", "make_fixtures.py"}, {"format", "np"}});
    REQUIRE(file.tensors.size() == 9);
    for (const auto& [name, t] : file.tensors) {
      if (name == "scalar") {
        CHECK(t.rank() == 0);
        CHECK(t.item<float>() == 3.5F);
      } else if (name == "empty") {
        CHECK(t.shape() == shape{0, 3});
        CHECK(t.to_vector<float>().empty());
      } else {
        check_fixture(name, t);
      }
    }
    // The file's order: by data offset (the package puts the widest dtypes first).
    CHECK(file.tensors.front().first == "int64");
    CHECK(file.contains("bfloat16"));
    CHECK_FALSE(file.contains("missing"));
    CHECK_THROWS_AS((void)file.at("missing"), std::out_of_range);
  }

  TEST_CASE("load_npy reads files of numpy.save bit-exactly, bfloat16 from ml_dtypes' <V2" *
            doctest::timeout(30)) {
    for (const auto& name : dtype_names) {
      check_fixture(name, load_npy(data_dir / (name + ".npy")));
    }
    const tensor s = load_npy(data_dir / "scalar.npy");
    CHECK(s.rank() == 0);
    CHECK(s.item<float>() == 3.5F);
  }

  TEST_CASE("load_npy refuses Fortran order and big-endian data, naming the file") {
    check_io_error([] { (void)load_npy(data_dir / "fortran.npy"); }, data_dir / "fortran.npy", "",
                   "Fortran order");
    check_io_error([] { (void)load_npy(data_dir / "big_endian.npy"); }, data_dir / "big_endian.npy",
                   "", "big-endian");
  }

  TEST_CASE("save then load keeps every dtype bit-exactly" * doctest::timeout(30)) {
    temp_dir dir;
    const auto tensors = fixture_tensors();
    SUBCASE("safetensors") {
      save_safetensors(dir / "x.safetensors", tensors, {{"k", "v \"quoted\"\n"}});
      const auto file = load_safetensors(dir / "x.safetensors");
      CHECK(file.metadata.at("k") == "v \"quoted\"\n");
      REQUIRE(file.tensors.size() == tensors.size());
      for (const auto& [name, t] : file.tensors) {
        check_fixture(name, t);
      }
      // And the same file again through the safetensors_file overload.
      save_safetensors(dir / "y.safetensors", file);
      CHECK(load_safetensors(dir / "y.safetensors").tensors.size() == tensors.size());
    }
    SUBCASE("npy") {
      for (const auto& [name, t] : tensors) {
        save_npy(dir / (name + ".npy"), t);
        check_fixture(name, load_npy(dir / (name + ".npy")));
      }
      save_npy(dir / "scalar.npy", full(shape{}, 2.5, dtype::float64));
      CHECK(load_npy(dir / "scalar.npy").item<double>() == 2.5);
    }
    SUBCASE("a tensor that a running op still computes is saved once computed") {
      const tensor big = ones(shape{1000, 100}) * 2.0F + 1.0F;
      save_npy(dir / "big.npy", big);
      const auto back = load_npy(dir / "big.npy").to_vector<float>();
      REQUIRE(back.size() == 100000);
      CHECK(back.front() == 3.0F);
      CHECK(back.back() == 3.0F);
    }
  }

  TEST_CASE("reads run on threads of their own: a load completes while every worker is busy" *
            doctest::timeout(60)) {
    // A read may block on the disk; on a backend worker it would hold back every op behind it.
    runtime rt({.worker_threads = 1});
    temp_dir dir;
    save_safetensors(dir / "w.safetensors", {{"w", arange(1000, dtype::float32)}}, {});
    // The only worker runs a kernel that does not return until released.
    std::atomic<bool> started{false};
    std::atomic<bool> release{false};
    const tensor held = map(full({1}, 1.0F), [&](float v) {
      started = true;
      while (!release) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return v;
    });
    while (!started) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto file = load_safetensors(dir / "w.safetensors");
    std::atomic<bool> loaded{false};
    std::thread waiter([&] {
      file.at("w").wait();
      loaded = true;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!loaded && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const bool loaded_while_busy = loaded;
    release = true;
    waiter.join();
    held.wait();
    CHECK(loaded_while_busy);
    const auto w = file.at("w").to_vector<float>();
    REQUIRE(w.size() == 1000);
    CHECK(w[999] == 999.0F);
  }

  TEST_CASE("save_safetensors refuses duplicate, reserved and empty names and empty handles") {
    temp_dir dir;
    const tensor x = ones(shape{2});
    CHECK_THROWS_AS(save_safetensors(dir / "a", {{"x", x}, {"x", x}}), std::invalid_argument);
    CHECK_THROWS_AS(save_safetensors(dir / "a", {{"__metadata__", x}}), std::invalid_argument);
    CHECK_THROWS_AS(save_safetensors(dir / "a", {{"", x}}), std::invalid_argument);
    CHECK_THROWS_AS(save_safetensors(dir / "a", {{"y", tensor{}}}), std::invalid_argument);
    CHECK_FALSE(fs::exists(dir / "a"));
  }

  TEST_CASE("load_safetensors validates the header at the call, naming the file and the tensor") {
    temp_dir dir;
    const fs::path p = dir / "bad.safetensors";
    const std::string eight(8, '\x01');
    auto load = [&] { (void)load_safetensors(p); };

    SUBCASE("missing file") {
      check_io_error([&] { (void)load_safetensors(dir / "none.safetensors"); },
                     dir / "none.safetensors", "", "cannot open");
    }
    SUBCASE("a directory") {
      check_io_error([&] { (void)load_safetensors(dir.path); }, dir.path, "", "not a regular file");
    }
    SUBCASE("truncated: the data ends before a tensor's") {
      const std::string whole =
          safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight);
      write_bytes(p, whole.substr(0, whole.size() - 3));
      check_io_error(load, p, "a", "beyond the file");
    }
    SUBCASE("truncated inside the header") {
      const std::string whole =
          safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight);
      write_bytes(p, whole.substr(0, 20));
      check_io_error(load, p, "", "header length");
    }
    SUBCASE("header length beyond the file") {
      write_bytes(p, std::string("\xFF\xFF\xFF\x00\x00\x00\x00\x00{}", 10));
      check_io_error(load, p, "", "header length");
    }
    SUBCASE("bad JSON") {
      write_bytes(p, safetensors_bytes(R"({"a":{"dtype":"F32",)", ""));
      check_io_error(load, p, "", "not valid JSON");
    }
    SUBCASE("overlapping offsets") {
      write_bytes(p, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                       eight));
      check_io_error(load, p, "b", "overlap");
    }
    SUBCASE("a gap between tensors") {
      write_bytes(p, safetensors_bytes(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                                       R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[6,8]}})",
                                       eight));
      check_io_error(load, p, "b", "gap");
    }
    SUBCASE("unknown dtype") {
      write_bytes(
          p, safetensors_bytes(R"({"q":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight));
      check_io_error(load, p, "q", "unknown dtype \"U8\"");
    }
    SUBCASE("size does not match shape times itemsize") {
      write_bytes(
          p, safetensors_bytes(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", eight));
      check_io_error(load, p, "w", "needs 16");
    }
    SUBCASE("duplicate names") {
      write_bytes(p, safetensors_bytes(R"({"d":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                       R"("d":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                       eight));
      check_io_error(load, p, "d", "twice");
    }
    SUBCASE("bytes after the last tensor") {
      write_bytes(
          p, safetensors_bytes(R"({"e":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight));
      check_io_error(load, p, "e", "after the last tensor");
    }
    SUBCASE("negative extent") {
      write_bytes(p, safetensors_bytes(R"({"n":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                                       eight));
      check_io_error(load, p, "n", "non-negative");
    }
  }

  TEST_CASE("load_npy validates the header at the call, naming the file") {
    temp_dir dir;
    const fs::path p = dir / "bad.npy";
    auto npy = [](const std::string& header, const std::string& data) {
      std::string out("\x93NUMPY\x01\x00", 8);
      out += static_cast<char>(header.size() & 0xFFU);
      out += static_cast<char>(header.size() >> 8U);
      return out + header + data;
    };
    auto load = [&] { (void)load_npy(p); };
    SUBCASE("not a .npy file") {
      write_bytes(p, "hello, world");
      check_io_error(load, p, "", "magic");
    }
    SUBCASE("truncated data") {
      write_bytes(p, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n",
                         std::string(8, '\0')));
      check_io_error(load, p, "", "needs 12");
    }
    SUBCASE("unknown descr") {
      write_bytes(p, npy("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }\n",
                         std::string(2, '\0')));
      check_io_error(load, p, "", "'<u2' is not supported");
    }
    SUBCASE("header without a shape") {
      write_bytes(p, npy("{'descr': '<f4', 'fortran_order': False, }\n", ""));
      check_io_error(load, p, "", "lacks");
    }
  }

  TEST_CASE("a file truncated after load returns fails the tensor's wait, not the process" *
            doctest::timeout(30)) {
    temp_dir dir;
    const fs::path p = dir / "t.safetensors";
    save_safetensors(p, {{"w", ones(shape{64})}});
    // The read threads held: the read waits while the file shrinks.
    auto held = std::make_unique<detail::io::hold_reads>();
    const auto file = load_safetensors(p);
    fs::resize_file(p, 100);
    held.reset();
    check_io_error([&] { file.at("w").wait(); }, p, "w", "changed size");
    // What is computed from it fails too.
    check_io_error([&] { (void)(file.at("w") + 1.0F).to_vector(); }, p, "w", "changed size");
  }

  TEST_CASE("load_safetensors returns before the bytes are read" * doctest::timeout(30)) {
    temp_dir dir;
    const fs::path p = dir / "t.safetensors";
    save_safetensors(p, {{"w", full(shape{4}, 7.0)}});
    runtime rt({.worker_threads = 1});
    test::gate gate;
    const tensor held = hold_the_worker(gate.future());
    const auto file = load_safetensors(p);  // returns although the only worker is busy
    gate.open();
    CHECK(file.at("w").to_vector() == std::vector<float>{7, 7, 7, 7});
  }

  TEST_CASE("loading onto a device this machine cannot serve throws at the call") {
    if (is_available(device::cuda(0))) {
      return;  // tests/cuda covers a GPU
    }
    CHECK_THROWS_AS((void)load_safetensors(data_dir / "all_dtypes.safetensors", device::cuda(0)),
                    std::system_error);
    CHECK_THROWS_AS((void)load_npy(data_dir / "float32.npy", device::cuda(0)), std::system_error);
  }

}  // TEST_SUITE("io")
