#pragma once

// The tables of a tokenizer (<cotensor/lm.hpp>), shared by src/lm/tokenizer.cpp, which reads and
// uses them, and src/lm/text_stream.cpp.

#include "cotensor/lm.hpp"

#include "io/json.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unicode/regex.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cotensor::lm {

namespace json = ::cotensor::detail::json;

struct tokenizer::impl {
  struct added {
    std::string content;
    std::int32_t id;
    bool special;
  };

  std::unordered_map<std::string, std::int32_t> vocab;  // vocabulary and added tokens
  std::vector<std::string> token_of;                    // by id ("" where no id)
  std::vector<bool> special;                            // by id
  std::vector<added> added_tokens;                      // longest first
  // For each first byte, the added tokens starting with it (indices into added_tokens, longest
  // first): encode looks only there at each place of the text.
  std::array<std::vector<std::uint32_t>, 256> added_by_first_byte;
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges;  // rank, id
  bool ignore_merges = false;
  bool nfc = false;
  std::vector<std::shared_ptr<const icu::RegexPattern>> splits;
  std::vector<std::int32_t> prefix;  // the post-processor's ids before the sequence
  std::vector<std::int32_t> suffix;  // and after it
  std::size_t count = 0;             // ids in use

  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }

  // BPE merges of one piece's symbols, in place (src/lm/tokenizer.cpp).
  void merge_all(std::vector<std::int32_t>& symbols) const;
  void read_model(const std::filesystem::path& file, const json::value& model);
  void read_pre_tokenizer(const std::filesystem::path& file, const json::value& pre);
  void read_post_processor(const std::filesystem::path& file, const json::value& post);
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<std::int32_t>& out) const;
  // Appends the bytes of `id` (none for a special token) to `out`; throws std::out_of_range
  // for an id past the vocabulary.
  void append_bytes(std::int32_t id, std::string& out) const;
};

}  // namespace cotensor::lm
