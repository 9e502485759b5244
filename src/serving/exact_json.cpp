#include "serving/exact_json.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include <charconv>
#include <string>

namespace cotensor::serving {
namespace {

namespace json = boost::json;
using boost::system::error_code;

// Boost.JSON's own value-building handler (detail/handler.hpp), but for doubles.
struct exact_handler {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  std::string number;  // the parts of a number split across writes

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) { return true; }
  bool on_object_end(std::size_t n, error_code&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t n, error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, error_code&) {
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view s, error_code&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, json::string_view, error_code&) {
    number.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, error_code&) {
    number.clear();
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, error_code&) {
    number.append(s.data(), s.size());
    double exact = 0;
    const auto* end = number.data() + number.size();
    const auto [p, ec] = std::from_chars(number.data(), end, exact);
    // Out of range: keep Boost.JSON's value (an infinity or a zero, as it rounds).
    st.push_double(ec == std::errc{} && p == end ? exact : d);
    number.clear();
    return true;
  }
  bool on_bool(bool b, error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, error_code&) { return true; }
  bool on_comment(json::string_view, error_code&) { return true; }
};

}  // namespace

json::value parse_exact_json(std::string_view text, error_code& ec) {
  json::basic_parser<exact_handler> p(json::parse_options{});
  p.handler().st.reset();
  const auto n = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size()) {
    ec = json::error::extra_data;
  }
  if (ec) {
    return nullptr;
  }
  return p.handler().st.release();
}

}  // namespace cotensor::serving
