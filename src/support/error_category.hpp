#pragma once

// The one std::error_category class of cotensor's error codes (errc, batcher_errc, MPI, NCCL,
// CUDA, cuBLAS): they differ only in their name and in how they word a code, so each is an
// instance of `message_category` with its own message function.

#include <cstddef>
#include <string>
#include <system_error>

namespace cotensor::detail {

/// A std::error_category named `name` whose message for a code is `message_of(code)`.
class message_category final : public std::error_category {
public:
  using message_function = std::string (*)(int code);

  constexpr message_category(const char* name, message_function message_of) noexcept
      : name_(name), message_(message_of) {}

  const char* name() const noexcept override { return name_; }
  std::string message(int code) const override { return message_(code); }

private:
  const char* name_;
  message_function message_;
};

/// A code of an error enum and its message, an entry of a table that `message_in` reads.
template <class Code>
struct code_message {
  Code code;
  const char* text;
};

/// The text of `code` in `messages`, or `other` when no entry has that code.
template <class Code, std::size_t N>
std::string message_in(const code_message<Code> (&messages)[N], int code, std::string other) {
  for (const auto& m : messages) {
    if (static_cast<int>(m.code) == code) {
      return m.text;
    }
  }
  return other;
}

}  // namespace cotensor::detail
