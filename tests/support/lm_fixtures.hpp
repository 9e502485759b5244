#pragma once

// Test support for the language-model tests: where tests/data/lm/ is, and the ids of an int64
// tensor of its expected-values files.

#include <cotensor/cotensor.hpp>

#include <cstdint>
#include <filesystem>
#include <vector>

namespace cotensor::test {

/// tests/data/lm/: the tiny models, tokenizers and what transformers computed for them.
inline const std::filesystem::path lm_data = std::filesystem::path(COTENSOR_TEST_DATA_DIR) / "lm";

/// The ids held by an int64 tensor, as int32 (the tokenizer's and the generator's type).
inline std::vector<std::int32_t> ids_of(const cotensor::tensor& t) {
  std::vector<std::int32_t> ids;
  for (const std::int64_t id : t.to_vector<std::int64_t>()) {
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

}  // namespace cotensor::test
