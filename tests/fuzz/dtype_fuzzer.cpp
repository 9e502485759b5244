// libFuzzer target for dtypes and casts: decodes its input into one or two tensors of any of
// the seven dtypes whose elements are the input's raw bytes (so every bit pattern: NaN
// payloads, infinities, subnormals, INT_MIN), runs casts, comparisons, maximum/minimum, where
// and reductions on cotensor, and checks every element against a scalar reference written here
// from the documented rules (docs/dtypes.md, DESIGN §7). Any difference prints the case and
// aborts.
//
// Input layout: byte 0 the first dtype, byte 1 the second (or the cast's target), byte 2 the
// op, byte 3 the element count (0-15) and whether the second operand broadcasts (a single
// element); then the elements of the first tensor and of the second, little-endian. Missing
// bytes read as 0.

#include <cotensor/cotensor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using cotensor::dtype;
using cotensor::tensor;

constexpr dtype dtypes[] = {dtype::boolean,  dtype::int32,   dtype::int64,  dtype::float16,
                            dtype::bfloat16, dtype::float32, dtype::float64};

/// One element as the reference sees it: exactly (long double holds every int64 and every
/// float of the seven dtypes).
struct value {
  bool is_float = false;
  std::int64_t i = 0;
  long double f = 0;

  bool is_nan() const { return is_float && std::isnan(f); }
  long double as_real() const { return is_float ? f : static_cast<long double>(i); }
};

value load(dtype t, const std::uint8_t* p) {
  value v;
  switch (t) {
  case dtype::boolean:
    v.i = p[0] != 0 ? 1 : 0;
    break;
  case dtype::int32: {
    std::int32_t x;
    std::memcpy(&x, p, 4);
    v.i = x;
    break;
  }
  case dtype::int64:
    std::memcpy(&v.i, p, 8);
    break;
  case dtype::float16:
  case dtype::bfloat16: {
    std::uint16_t b;
    std::memcpy(&b, p, 2);
    v.is_float = true;
    v.f = t == dtype::float16 ? static_cast<float>(cotensor::float16_t::from_bits(b))
                              : static_cast<float>(cotensor::bfloat16_t::from_bits(b));
    break;
  }
  case dtype::float32: {
    float x;
    std::memcpy(&x, p, 4);
    v.is_float = true;
    v.f = x;
    break;
  }
  case dtype::float64: {
    double x;
    std::memcpy(&x, p, 8);
    v.is_float = true;
    v.f = x;
    break;
  }
  }
  return v;
}

/// `v` converted to `to` as astype documents it: to bool `x != 0`; float to int saturating,
/// NaN to 0; int to int wrapping; to float rounded to nearest even, where int32, int64 and
/// float64 reach float16 and bfloat16 through float32 (as PyTorch; src/cpu/element.hpp).
value convert(value v, dtype to) {
  value r;
  if (to == dtype::boolean) {
    r.i = (v.is_float ? v.f != 0 : v.i != 0) ? 1 : 0;
    return r;
  }
  if (to == dtype::int32 || to == dtype::int64) {
    if (!v.is_float) {
      r.i = to == dtype::int32 ? static_cast<std::int32_t>(v.i) : v.i;
      return r;
    }
    const long double top = to == dtype::int32 ? 0x1p31L : 0x1p63L;
    if (std::isnan(v.f)) {
      r.i = 0;
    } else if (v.f >= top) {
      r.i = to == dtype::int32 ? INT32_MAX : INT64_MAX;
    } else if (v.f <= -top) {
      r.i = to == dtype::int32 ? INT32_MIN : INT64_MIN;
    } else {
      r.i = static_cast<std::int64_t>(v.f);  // truncation, in range
    }
    return r;
  }
  r.is_float = true;
  const long double x = v.as_real();
  if (to == dtype::float64) {
    r.f = static_cast<double>(x);
  } else if (to == dtype::float32) {
    r.f = static_cast<float>(x);
  } else {
    const float through = static_cast<float>(x);
    r.f = to == dtype::float16 ? static_cast<float>(cotensor::float16_t(through))
                               : static_cast<float>(cotensor::bfloat16_t(through));
  }
  return r;
}

bool same(value a, value b) {
  if (a.is_float != b.is_float) {
    return false;
  }
  if (a.is_float) {
    return (std::isnan(a.f) && std::isnan(b.f)) || a.f == b.f;
  }
  return a.i == b.i;
}

std::string show(value v) {
  char buf[64];
  if (v.is_float) {
    std::snprintf(buf, sizeof buf, "%La", v.f);
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v.i));
  }
  return buf;
}

/// The elements of a computed tensor, through its raw bytes.
std::vector<value> values_of(const tensor& t) {
  std::vector<value> out;
  const auto n = static_cast<std::size_t>(t.numel());
  std::vector<std::uint8_t> bytes(n * cotensor::itemsize(t.dtype()));
  const auto copy = [&](const auto& xs) {
    if constexpr (std::is_same_v<std::decay_t<decltype(xs)>, std::vector<bool>>) {
      for (std::size_t i = 0; i < n; ++i) {
        bytes[i] = xs[i] ? 1 : 0;
      }
    } else if (!bytes.empty()) {
      std::memcpy(bytes.data(), xs.data(), bytes.size());
    }
  };
  switch (t.dtype()) {
  case dtype::boolean:
    copy(t.to_vector<bool>());
    break;
  case dtype::int32:
    copy(t.to_vector<std::int32_t>());
    break;
  case dtype::int64:
    copy(t.to_vector<std::int64_t>());
    break;
  case dtype::float16:
    copy(t.to_vector<cotensor::float16_t>());
    break;
  case dtype::bfloat16:
    copy(t.to_vector<cotensor::bfloat16_t>());
    break;
  case dtype::float32:
    copy(t.to_vector<float>());
    break;
  case dtype::float64:
    copy(t.to_vector<double>());
    break;
  }
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(load(t.dtype(), bytes.data() + i * cotensor::itemsize(t.dtype())));
  }
  return out;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "dtype fuzzer: %s\n", what.c_str());
  std::abort();
}

void expect(bool ok, const std::string& what) {
  if (!ok) {
    fail(what);
  }
}

void check_values(const char* op, const tensor& got, dtype want, const std::vector<value>& ref) {
  expect(got.dtype() == want, std::string(op) + ": dtype " + std::string(name(got.dtype())) +
                                  ", expected " + std::string(name(want)));
  const auto v = values_of(got);
  expect(v.size() == ref.size(), std::string(op) + ": wrong element count");
  for (std::size_t i = 0; i < v.size(); ++i) {
    expect(same(v[i], ref[i]), std::string(op) + " (" + std::string(name(want)) + "): element " +
                                   std::to_string(i) + " is " + show(v[i]) + ", expected " +
                                   show(ref[i]));
  }
}

/// `a < b` on two values of one promoted dtype.
bool less(value a, value b) { return a.is_float ? a.f < b.f : a.i < b.i; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> in(data, data + size);
  in.resize(4 + 2 * 15 * 8, 0);  // missing bytes read as 0
  const dtype ta = dtypes[in[0] % 7];
  const dtype tb = dtypes[in[1] % 7];
  const int op = in[2] % 8;
  const auto n = static_cast<std::int64_t>(in[3] % 16);
  const bool broadcast = (in[3] & 0x10U) != 0;
  const std::int64_t nb = broadcast ? 1 : n;
  const std::uint8_t* pa = in.data() + 4;
  const std::uint8_t* pb = pa + n * static_cast<std::int64_t>(cotensor::itemsize(ta));

  const auto make = [](dtype t, const std::uint8_t* p, std::int64_t count,
                       std::vector<value>& ref) {
    std::vector<std::uint8_t> bytes(p,
                                    p + count * static_cast<std::int64_t>(cotensor::itemsize(t)));
    if (t == dtype::boolean) {
      for (auto& b : bytes) {
        b = b != 0 ? 1 : 0;  // a bool element is 0 or 1
      }
    }
    for (std::int64_t i = 0; i < count; ++i) {
      ref.push_back(load(t, bytes.data() + i * static_cast<std::int64_t>(cotensor::itemsize(t))));
    }
    return cotensor::detail::from_host(bytes.data(), static_cast<std::size_t>(count), t,
                                       cotensor::shape{count}, cotensor::device::cpu());
  };
  std::vector<value> ra;
  std::vector<value> rb;
  const tensor a = make(ta, pa, n, ra);
  const tensor b = make(tb, pb, nb, rb);
  const dtype tp = cotensor::promote_types(ta, tb);
  const auto b_at = [&](std::size_t i) { return rb[broadcast ? 0 : i]; };

  std::vector<value> ref;
  switch (op) {
  case 0:
  case 1: {  // astype, and a round trip through a wider dtype where that is exact
    const tensor c = a.astype(tb);
    for (const value v : ra) {
      ref.push_back(convert(v, tb));
    }
    check_values("astype", c, tb, ref);
    const bool widening = (ta == tb) || (ta == dtype::boolean) ||
                          (ta == dtype::int32 && (tb == dtype::int64 || tb == dtype::float64)) ||
                          ((ta == dtype::float16 || ta == dtype::bfloat16) &&
                           (tb == dtype::float32 || tb == dtype::float64)) ||
                          (ta == dtype::float32 && tb == dtype::float64);
    if (widening) {
      check_values("astype round trip", c.astype(ta), ta, ra);
    }
    break;
  }
  case 2:
  case 3: {  // comparisons: on the operands converted to the promoted dtype
    const tensor eq = a == b;
    const tensor lt = a < b;
    std::vector<value> req;
    for (std::size_t i = 0; i < ra.size(); ++i) {
      const value x = convert(ra[i], tp);
      const value y = convert(b_at(i), tp);
      value e;
      e.i = (x.is_float ? x.f == y.f : x.i == y.i) ? 1 : 0;
      req.push_back(e);
      value l;
      l.i = less(x, y) ? 1 : 0;
      ref.push_back(l);
    }
    check_values("==", eq, dtype::boolean, req);
    check_values("<", lt, dtype::boolean, ref);
    break;
  }
  case 4: {  // maximum and minimum: NaN propagates, bool is or/and
    const tensor mx = cotensor::maximum(a, b);
    std::vector<value> rmin;
    for (std::size_t i = 0; i < ra.size(); ++i) {
      const value x = convert(ra[i], tp);
      const value y = convert(b_at(i), tp);
      ref.push_back(x.is_nan() ? x : y.is_nan() ? y : less(x, y) ? y : x);
      rmin.push_back(x.is_nan() ? x : y.is_nan() ? y : less(y, x) ? y : x);
    }
    check_values("maximum", mx, tp, ref);
    check_values("minimum", cotensor::minimum(a, b), tp, rmin);
    break;
  }
  case 5: {  // where(a != 0, a, b)
    const tensor cond = a.astype(dtype::boolean);
    for (std::size_t i = 0; i < ra.size(); ++i) {
      ref.push_back(convert(convert(ra[i], dtype::boolean).i != 0 ? ra[i] : b_at(i), tp));
    }
    check_values("where", cotensor::where(cond, a, b), tp, ref);
    break;
  }
  default: {  // reductions: max/min/argmax/argmin exactly, sum of bool/int wrapping
    if (n == 0) {
      break;
    }
    value mx = ra[0];
    value mn = ra[0];
    std::int64_t imx = 0;
    std::int64_t imn = 0;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < ra.size(); ++i) {
      const value v = ra[i];
      total += static_cast<std::uint64_t>(v.i);
      if (mx.is_nan()) {
        continue;  // the first NaN wins, for max and min alike
      }
      if (v.is_nan()) {
        mx = mn = v;
        imx = imn = static_cast<std::int64_t>(i);
        continue;
      }
      if (less(mx, v)) {
        mx = v;
        imx = static_cast<std::int64_t>(i);
      }
      if (less(v, mn)) {
        mn = v;
        imn = static_cast<std::int64_t>(i);
      }
    }
    check_values("max", cotensor::max(a), ta, {mx});
    check_values("min", cotensor::min(a), ta, {mn});
    value am;
    am.i = imx;
    check_values("argmax", cotensor::argmax(a), dtype::int64, {am});
    am.i = imn;
    check_values("argmin", cotensor::argmin(a), dtype::int64, {am});
    if (!cotensor::is_floating(ta)) {
      value s;
      s.i = static_cast<std::int64_t>(total);
      check_values("sum", cotensor::sum(a), dtype::int64, {s});
    }
    break;
  }
  }
  return 0;
}
