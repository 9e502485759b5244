// The CPU the tests run on, as the library's run-time picks see it. tests/checks/isa_clones.sh
// runs the kernels' tests under qemu-user emulating an older x86 CPU and sets
// COTENSOR_TEST_EXPECT_ISA to the level it asked for: this case then proves the emulated CPUID is
// that level's, so that the vector clones GCC's resolvers pick (AVX2, or the SSE2 baseline) and
// the GEMM and attention kernels the dispatchers pick (OpenBLAS, the converting bfloat16 path,
// the generic attention) are the ones those tests ran.
#include "support/cpu_features.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string_view>

TEST_SUITE("isa") {
  TEST_CASE("the CPU's vector level is the one the run asked for (COTENSOR_TEST_EXPECT_ISA)") {
    using namespace cotensor::test;
    const bool avx = cpu_has_avx();
    const bool avx2 = cpu_has_avx2();
    const bool avx512 = cpu_has_avx512f();
    // Each level implies the one below it, as the clones' resolvers assume.
    CHECK((!avx512 || avx2));
    CHECK((!avx2 || avx));
    CHECK((!cpu_has_avx512_bf16() || cpu_has_avx512()));

    const char* expected = std::getenv("COTENSOR_TEST_EXPECT_ISA");
    if (expected == nullptr) {
      MESSAGE("COTENSOR_TEST_EXPECT_ISA unset: the native CPU (avx512f " << avx512 << ", avx2 "
                                                                         << avx2 << ")");
      return;
    }
    const std::string_view level = expected;
    if (level == "avx2") {
      CHECK(avx2);
      CHECK_FALSE(avx512);
    } else if (level == "sse") {
      CHECK_FALSE(avx);
      CHECK(cpu_has_sse42());
    } else if (level == "avx512") {
      CHECK(avx512);
    } else {
      FAIL("COTENSOR_TEST_EXPECT_ISA='" << level << "': avx512, avx2 or sse");
    }
  }
}
