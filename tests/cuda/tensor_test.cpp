#include "cotensor/tensor.hpp"

#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// GPU tensors made, copied between devices, read back and printed: every value must arrive
// with its bits unchanged (signed zeros, denormals, infinities and NaN payloads included).

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

// Values whose bits a copy or a fill must keep, then uniform ones up to `n` in all.
std::vector<float> awkward_values(std::int64_t n) {
  std::vector<float> v = {0.0F,
                          -0.0F,
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::bit_cast<float>(0x7FC12345U),  // a NaN with a payload
                          std::numeric_limits<float>::max()};
  const auto rest = uniform(n - static_cast<std::int64_t>(v.size()), 3, -1e6F, 1e6F);
  v.insert(v.end(), rest.begin(), rest.end());
  return v;
}

}  // namespace

TEST_SUITE("cuda.tensor") {
  TEST_CASE("zeros ones full make GPU tensors of the right shape and bits" * doctest::timeout(20)) {
    const shape shapes[] = {{}, {1}, {3, 4}, {2, 3, 4}, {1 << 20}, {0}, {5, 0, 2}};
    const float fills[] = {2.5F, -0.0F, std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(),
                           std::bit_cast<float>(0x7FC12345U)};
    for (const auto& s : shapes) {
      CAPTURE(s);
      const tensor z = zeros(s, gpu);
      CHECK(z.defined());
      CHECK(z.device() == gpu);
      CHECK(z.shape() == s);
      CHECK(z.numel() == s.numel());
      check_ulps(z, zeros(s));
      check_ulps(ones(s, gpu), ones(s));
      for (const float f : fills) {
        CAPTURE(f);
        const auto got = read_back(full(s, f, gpu));
        CHECK(same_bits(got, full(s, f).to_vector()));
        CHECK(got.size() == static_cast<std::size_t>(s.numel()));
      }
    }
  }

  TEST_CASE("from_vector on the GPU keeps every bit and the row-major order" *
            doctest::timeout(20)) {
    for (const std::int64_t n : {std::int64_t{8}, std::int64_t{1000003}}) {
      CAPTURE(n);
      const auto values = awkward_values(n);
      const tensor t = from_vector(values, {n}, gpu);
      CHECK(same_bits(read_back(t), values));
    }
    const tensor m = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, gpu);
    CHECK(read_back(m) == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(read_back(transpose(m)) == std::vector<float>{1, 4, 2, 5, 3, 6});
    CHECK_THROWS_AS((void)from_vector({1, 2, 3}, {2, 2}, gpu), std::invalid_argument);
  }

  TEST_CASE("to copies cpu to cuda, cuda to cuda and cuda to cpu with every bit" *
            doctest::timeout(20)) {
    for (const std::int64_t n : {std::int64_t{8}, std::int64_t{1000003}}) {
      CAPTURE(n);
      const auto values = awkward_values(n);
      const tensor host = from_vector(values, {n});
      const tensor on_gpu = host.to(gpu);
      CHECK(on_gpu.device() == gpu);
      CHECK(on_gpu.shape() == host.shape());
      const tensor again = on_gpu.to(gpu);  // a copy on the same device
      CHECK(again.device() == gpu);
      const tensor back = again.to(device::cpu());
      CHECK(back.device() == device::cpu());
      CHECK(same_bits(back.to_vector(), values));
      CHECK(same_bits(read_back(on_gpu), values));
      CHECK(same_bits(read_back(again), values));
    }
    const tensor empty = zeros({0, 3}).to(gpu);
    CHECK(empty.shape() == shape{0, 3});
    CHECK(read_back(empty).empty());
  }

  TEST_CASE("a copy is a new buffer, made after earlier writes and before later ones" *
            doctest::timeout(20)) {
    auto src = full({1 << 16}, 1.0F, gpu);
    src += 1.0F;                      // before the copies: they see 2
    const tensor same = src.to(gpu);  // GPU to GPU
    const tensor host = src.to(device::cpu());
    src += 40.0F;  // after the copies: they must not see it
    auto dst = same;
    dst *= 3.0F;  // the copy's own buffer: src must not see it
    CHECK(read_back(src) == std::vector<float>(1 << 16, 42.0F));
    CHECK(read_back(same) == std::vector<float>(1 << 16, 6.0F));
    CHECK(host.to_vector() == std::vector<float>(1 << 16, 2.0F));
  }

  TEST_CASE("item reads one element straight from the GPU" * doctest::timeout(20)) {
    CHECK(full({}, -3.25F, gpu).item() == -3.25F);
    CHECK(full({1, 1, 1}, 7.0F, gpu).item() == 7.0F);
    CHECK(std::signbit(full({}, -0.0F, gpu).item()));
    const tensor x = from_vector({1, 2, 3}, {3}, gpu);
    CHECK((x * 2.0F).sum().item() == 12.0F);
    CHECK(sum(x, 0).item() == 6.0F);
    CHECK_THROWS_AS((void)x.item(), std::invalid_argument);
  }

  TEST_CASE("a GPU tensor prints the values and shape the same tensor on the CPU does" *
            doctest::timeout(20)) {
    const auto print = [](const tensor& t) {
      std::ostringstream os;
      os << t;
      return os.str();
    };
    // The CPU's printout, possibly with the device named before the closing parenthesis.
    const auto same_as_cpu = [&](const tensor& on_gpu, const tensor& on_cpu) {
      const std::string g = print(on_gpu);
      std::string c = print(on_cpu);
      CAPTURE(g);
      CAPTURE(c);
      REQUIRE(c.ends_with(')'));
      c.pop_back();
      CHECK((g == c + ")" || g == c + ", device=cuda:0)"));
    };
    const tensor m = from_vector({1, 2, 3, 4}, {2, 2}, gpu);
    CHECK(print(m).starts_with("tensor([[1, 2], [3, 4]], shape=[2, 2]"));
    same_as_cpu(m, from_vector({1, 2, 3, 4}, {2, 2}));
    same_as_cpu(m + 0.5F, from_vector({1.5F, 2.5F, 3.5F, 4.5F}, {2, 2}));
    // Over 1000 elements the printout is summarized: the first and last entries of each row.
    const auto values = uniform(3 * 1001, 5, -1.0F, 1.0F);
    same_as_cpu(from_vector(values, {3, 1001}, gpu), from_vector(values, {3, 1001}));
    same_as_cpu(full({}, 5.0F, gpu), full({}, 5.0F));
    std::ostringstream os;
    os << gpu;
    CHECK(os.str() == "cuda:0");
  }
}
