// cotensor::lm::model against Hugging Face `transformers`: the logits that transformers 5.24
// computed, in float32 on PyTorch's CPU, for tiny random GPT-2, Llama (grouped-query attention,
// an untied head) and Qwen2 (q/k/v biases, a tied head) models (tests/data/lm/make_models.py made
// the model folders and the expected logits).

#include "cotensor/cotensor.hpp"

#include "support/lm_fixtures.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using cotensor::lm::model;

const std::filesystem::path& data = cotensor::test::lm_data;
using cotensor::test::ids_of;

// The largest |got − want| over the largest |want|.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0;
  double scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
  }
  return diff / scale;
}

// The index of the largest logit of each row of a [rows, cols] matrix.
std::vector<std::size_t> argmax_rows(const std::vector<float>& m, std::size_t cols) {
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r * cols < m.size(); ++r) {
    const auto row = m.begin() + static_cast<std::ptrdiff_t>(r * cols);
    out.push_back(static_cast<std::size_t>(
        std::max_element(row, row + static_cast<std::ptrdiff_t>(cols)) - row));
  }
  return out;
}

}  // namespace

TEST_SUITE("lm.model") {
  TEST_CASE("logits are transformers' within 1e-4, for GPT-2, Llama and Qwen2") {
    const std::vector<std::pair<std::string, std::string>> models{
        {"gpt2-tiny", "GPT2LMHeadModel"},
        {"llama-tiny", "LlamaForCausalLM"},
        {"qwen2-tiny", "Qwen2ForCausalLM"}};
    for (const auto& [name, architecture] : models) {
      CAPTURE(name);
      const model m = model::load(data / name);
      CHECK(m.architecture() == architecture);
      CHECK(m.context_length() == 64);
      const auto expected = cotensor::load_safetensors(data / (name + "-expected.safetensors"));
      int texts = 0;
      for (int i = 0; expected.contains("ids_" + std::to_string(i)); ++i) {
        CAPTURE(i);
        const auto ids = ids_of(expected.at("ids_" + std::to_string(i)));
        const cotensor::tensor want = expected.at("logits_" + std::to_string(i));
        const cotensor::tensor got = m.logits(ids);
        REQUIRE(got.shape() == want.shape());
        CHECK(got.dtype() == cotensor::dtype::float32);
        CHECK(relative_error(got.to_vector<float>(), want.to_vector<float>()) < 1e-4);
        ++texts;
      }
      CHECK(texts == 4);
      // The folder's tokenizer gives the ids the fixture was computed from.
      CHECK(m.tokenizer().encode("Hello, world!") == ids_of(expected.at("ids_0")));
    }
  }

  TEST_CASE("bfloat16 and float16 weights give logits near float32's") {
    for (const std::string name : {"gpt2-tiny", "llama-tiny", "qwen2-tiny"}) {
      const auto expected = cotensor::load_safetensors(data / (name + "-expected.safetensors"));
      const auto ids = ids_of(expected.at("ids_1"));
      const auto want = expected.at("logits_1").to_vector<float>();
      for (const auto t : {cotensor::dtype::bfloat16, cotensor::dtype::float16}) {
        CAPTURE(name);
        CAPTURE(t);
        const model m = model::load(data / name, {.dtype = t});
        const auto got = m.logits(ids).to_vector<float>();
        // Weights rounded to 8 (bfloat16) or 11 (float16) bits, and every op's result too
        // (6.6e-3 to 7.6e-3, and 6.1e-4 to 9.5e-4, of the logits' scale measured on
        // 2026-11-27), and mostly the same next token.
        CHECK(relative_error(got, want) < (t == cotensor::dtype::bfloat16 ? 0.02 : 0.003));
        const auto a = argmax_rows(got, 1200);
        const auto b = argmax_rows(want, 1200);
        std::size_t same = 0;
        for (std::size_t r = 0; r < a.size(); ++r) {
          same += a[r] == b[r] ? 1 : 0;
        }
        CHECK(same * 10 >= a.size() * 8);
      }
    }
  }

  TEST_CASE("what a model cannot take is refused, naming it") {
    const model m = model::load(data / "gpt2-tiny");
    CHECK_THROWS_AS(m.logits({}), std::invalid_argument);
    const std::vector<std::int32_t> long_ids(65, 1);
    CHECK_THROWS_AS(m.logits(long_ids), std::invalid_argument);
    const std::vector<std::int32_t> past{1200};
    CHECK_THROWS_AS(m.logits(past), std::out_of_range);
    CHECK_THROWS_AS(model::load(data / "gpt2-tiny", {.dtype = cotensor::dtype::int32}),
                    std::invalid_argument);
    CHECK_THROWS_WITH(model::load(data / "no-such-model"), doctest::Contains("config.json"));
    // A folder whose config names another architecture.
    const auto dir = std::filesystem::temp_directory_path() / "cotensor-lm-bert";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << R"({"architectures": ["BertForMaskedLM"]})";
    CHECK_THROWS_WITH(model::load(dir), doctest::Contains("\"BertForMaskedLM\" is not supported"));
    std::filesystem::remove_all(dir);
  }
}
