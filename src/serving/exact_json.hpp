#pragma once

// JSON parsed as boost::json::parse parses it, except that every number with a fraction or an
// exponent is rounded correctly (std::from_chars on its text): Boost.JSON 1.81's own conversion
// can miss by an ulp, and a float64 tensor sent as JSON must arrive bit for bit.

#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <string_view>

namespace cotensor::serving {

boost::json::value parse_exact_json(std::string_view text, boost::system::error_code& ec);

}  // namespace cotensor::serving
