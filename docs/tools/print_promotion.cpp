// Prints what cotensor does with dtypes, one fact a line (`key<TAB>value`), for
// docs/tools/dtype_tables.py, which sets the peers' answers beside these and writes the tables
// of docs/dtypes.md. Every value comes from running the op, not from a table: the promotion of
// `a + b`, a weak C++ scalar's result, true division, the reductions' dtypes, and the casts
// whose C++ conversion would be undefined or rounds twice.
#include <cotensor/cotensor.hpp>

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace cotensor;

namespace {

constexpr dtype all[] = {dtype::boolean,  dtype::int32,   dtype::int64,  dtype::float16,
                         dtype::bfloat16, dtype::float32, dtype::float64};

void put(const std::string& key, const std::string& value) {
  std::cout << key << '\t' << value << '\n';
}

std::string dtype_name(const tensor& t) { return std::string(name(t.dtype())); }

// The result's dtype, or "error" where the op refuses the operands.
template <class F>
std::string result_of(F f) {
  try {
    return dtype_name(f());
  } catch (const std::invalid_argument&) {
    return "error";
  }
}

std::string number(double v) {
  if (std::isnan(v)) {
    return "nan";
  }
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

}  // namespace

int main() {
  for (dtype a : all) {
    const std::string an(name(a));
    const tensor x = ones({2}, a);
    for (dtype b : all) {
      const std::string bn(name(b));
      const tensor y = ones({2}, b);
      // promote_types and the op agree, or the table would not be the library's.
      const std::string added = result_of([&] { return x + y; });
      if (added != name(promote_types(a, b)) && added != "error") {
        std::cerr << "print_promotion: " << an << " + " << bn << " gives " << added
                  << " but promote_types says " << name(promote_types(a, b)) << '\n';
        return 1;
      }
      put("promote " + an + " " + bn, std::string(name(promote_types(a, b))));
      put("add " + an + " " + bn, added);
      put("div " + an + " " + bn, result_of([&] { return x / y; }));
    }
    put("scalar " + an + " bool", result_of([&] { return x + true; }));
    put("scalar " + an + " int", result_of([&] { return x + 2; }));
    put("scalar " + an + " float", result_of([&] { return x * 2.5; }));
    put("sum " + an, result_of([&] { return sum(x); }));
    put("mean " + an, result_of([&] { return mean(x); }));
    put("argmax " + an, result_of([&] { return argmax(x); }));
  }

  // float -> int: the values whose C++ conversion is undefined.
  const std::vector<float> specials = {std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       3e9F,
                                       -3e9F,
                                       1e19F,
                                       -1e19F,
                                       -2.7F};
  const tensor f = from_vector(specials, {static_cast<std::int64_t>(specials.size())});
  const auto i32 = f.astype(dtype::int32).to_vector<std::int32_t>();
  const auto i64 = f.astype(dtype::int64).to_vector<std::int64_t>();
  const char* labels[] = {"nan", "inf", "-inf", "3e9", "-3e9", "1e19", "-1e19", "-2.7"};
  for (std::size_t i = 0; i < specials.size(); ++i) {
    put(std::string("cast float32 ") + labels[i] + " int32", std::to_string(i32[i]));
    put(std::string("cast float32 ") + labels[i] + " int64", std::to_string(i64[i]));
  }

  // Rounding twice: float64 -> float16/bfloat16 and int -> bfloat16 go through float32.
  const double just_above_half_tie = 1.0 + 0x1p-11 + 0x1p-40;  // a float16 tie, plus a little
  const double just_above_bf16_tie = 1.0 + 0x1p-8 + 0x1p-40;   // a bfloat16 tie, plus a little
  const tensor d = from_vector(std::vector<double>{just_above_half_tie, just_above_bf16_tie}, {2});
  put("round float64 " + number(just_above_half_tie) + " float16",
      number(d.astype(dtype::float16).to_vector<double>()[0]));
  put("round float64 " + number(just_above_bf16_tie) + " bfloat16",
      number(d.astype(dtype::bfloat16).to_vector<double>()[1]));
  const std::int32_t big = (1 << 24) + (1 << 16) + 1;  // a bfloat16 tie, plus one
  const tensor n = from_vector(std::vector<std::int32_t>{big}, {1});
  put("round int32 " + std::to_string(big) + " bfloat16",
      number(n.astype(dtype::bfloat16).item<double>()));

  // NaN in max and argmax.
  const tensor nan = from_vector({1.0F, NAN, 3.0F, NAN}, {4});
  put("nan max", number(max(nan).item<double>()));
  put("nan argmax", std::to_string(argmax(nan).item<std::int64_t>()));
  put("nan argmin", std::to_string(argmin(nan).item<std::int64_t>()));
  return 0;
}
