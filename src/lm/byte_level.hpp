#pragma once

// Byte-level BPE's alphabet (GPT-2's bytes_to_unicode: each byte a printable character) and the
// UTF-8 that decoding needs.

#include <string>
#include <string_view>

namespace cotensor::lm::detail {

/// The character (UTF-8) that stands for byte `b` in a byte-level vocabulary.
const std::string& byte_level_char(unsigned char b) noexcept;

/// Appends to `out` the bytes that `token`'s byte-level characters stand for, and says whether
/// every character of it was one (if not, `out` is as it was).
bool byte_level_to_bytes(std::string_view token, std::string& out);

/// `bytes` as UTF-8: each maximal ill-formed subpart (Unicode's "substitution of maximal
/// subparts", as Rust's String::from_utf8_lossy) replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

/// Appends to `out` what utf8_lossy gives for the bytes of `bytes` that no later byte can change
/// (all but a last sequence cut short), and returns how many bytes that was.
std::size_t utf8_lossy_complete(std::string_view bytes, std::string& out);

}  // namespace cotensor::lm::detail
