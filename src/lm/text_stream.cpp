#include "cotensor/lm.hpp"

#include "lm/byte_level.hpp"
#include "lm/tokenizer_impl.hpp"

#include <utility>

namespace cotensor::lm {

text_stream::text_stream(tokenizer t) : tokenizer_(std::move(t)) {}

std::string text_stream::push(std::int32_t id) {
  std::string bytes = pending_;
  tokenizer_.impl_->append_bytes(id, bytes);  // throws before anything changes
  std::string out;
  const std::size_t done = detail::utf8_lossy_complete(bytes, out);
  pending_ = bytes.substr(done);
  return out;
}

std::string text_stream::finish() {
  std::string out = detail::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace cotensor::lm
