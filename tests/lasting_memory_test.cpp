// Lasting buffers (detail::buffer_lifetime::lasting, engine/storage.hpp): a model's weights laid
// out for its products. On the CPU, those of a MiB or more lie packed one after another in chunks
// of transparent huge pages (src/cpu/host_memory.cpp); any number of them, of any size, freed
// in any order and made again, keep their own bytes.

#include "cotensor/cotensor.hpp"

#include "engine/storage.hpp"
#include "frontend/packed_matmul.hpp"
#include "support/cpu_features.hpp"
#include "support/memory_maps.hpp"
#include "support/scoped_environment.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace {

using cotensor::detail::buffer_lifetime;
using cotensor::detail::storage;

// A lasting buffer of `bytes` (a multiple of 4).
std::shared_ptr<storage> lasting_bytes(std::int64_t bytes) {
  return storage::make(cotensor::shape{bytes / 4}, cotensor::device::cpu(), cotensor::dtype::int32,
                       buffer_lifetime::lasting);
}

// Fills a buffer with bytes derived from `seed`, or checks that it still holds them.
void fill(storage& s, unsigned seed) {
  auto* p = static_cast<unsigned char*>(s.raw());
  for (std::size_t i = 0; i < s.bytes(); ++i) {
    p[i] = static_cast<unsigned char>(seed * 131U + i * 7U);
  }
}
bool holds(storage& s, unsigned seed) {
  const auto* p = static_cast<const unsigned char*>(s.raw());
  for (std::size_t i = 0; i < s.bytes(); ++i) {
    if (p[i] != static_cast<unsigned char>(seed * 131U + i * 7U)) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_SUITE("engine") {
  // Under the sanitizers every block is the system allocator's own: nothing to pack.
#if !COTENSOR_TEST_SYSTEM_ALLOCATOR && defined(__linux__)
  TEST_CASE("lasting buffers of a MiB or more lie packed together in transparent huge pages") {
    constexpr std::int64_t bytes = 1536 * 1024;
    std::vector<std::shared_ptr<storage>> blocks;
    for (int i = 0; i < 4; ++i) {
      blocks.push_back(lasting_bytes(bytes));
      (void)blocks.back()->raw();  // its memory, now: in this order
    }
    // One after another, each behind a 64-byte header: a chunk of 32 MiB changes at most once.
    int adjacent = 0;
    for (std::size_t i = 1; i < blocks.size(); ++i) {
      const auto gap =
          static_cast<char*>(blocks[i]->raw()) - static_cast<char*>(blocks[i - 1]->raw());
      adjacent += gap == bytes + 64 ? 1 : 0;
    }
    CHECK(adjacent >= 2);
    if (cotensor::test::has_transparent_huge_pages()) {
      for (const auto& b : blocks) {
        CHECK(cotensor::test::in_huge_page_mapping(b->raw()));
        CHECK(cotensor::test::in_huge_page_mapping(static_cast<char*>(b->raw()) + bytes - 1));
      }
    } else {
      MESSAGE("no transparent huge pages in this kernel: their advice is not checked");
    }
  }

  TEST_CASE("a packed B lies in transparent huge pages") {
    if (!cotensor::test::cpu_has_avx512() || !cotensor::test::has_transparent_huge_pages()) {
      MESSAGE("no AVX-512 or no transparent huge pages: B is not packed or not advised");
      return;
    }
    const cotensor::test::scoped_environment forced("COTENSOR_GEMM_F32", "avx512");
    const cotensor::detail::packed_matrix b(cotensor::ones({768, 768}));  // 2.25 MiB
    REQUIRE(b.packed());
    b.data().wait();
    CHECK(cotensor::test::in_huge_page_mapping(b.data().storage()->raw()));
  }
#endif

  TEST_CASE("lasting buffers freed in any order and made again keep their own bytes") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int64_t> size(64 * 1024, 3 << 20);
    struct held {
      std::shared_ptr<storage> block;
      unsigned seed;
    };
    std::vector<held> live;
    unsigned next = 1;
    const auto make = [&](std::int64_t bytes) {
      live.push_back({lasting_bytes(bytes), next});
      fill(*live.back().block, next++);
    };
    for (int round = 0; round < 4; ++round) {
      while (live.size() < 40) {
        make(size(rng) / 4 * 4);
      }
      make(20 << 20);  // more than half a chunk: a chunk of its own
      std::shuffle(live.begin(), live.end(), rng);
      for (const held& h : live) {
        CHECK(holds(*h.block, h.seed));
      }
      live.resize(live.size() / 3);  // most freed, the rest kept across rounds
    }
    for (const held& h : live) {
      CHECK(holds(*h.block, h.seed));
    }
  }
}
