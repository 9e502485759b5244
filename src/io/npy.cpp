#include "cotensor/io.hpp"

#include "frontend/frontend.hpp"
#include "io/file.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <stdexcept>

namespace cotensor {

namespace {

constexpr const char* load_op = "load_npy";
constexpr const char* save_op = "save_npy";

static_assert(std::endian::native == std::endian::little,
              "the .npy reader takes '<' as the native byte order");

struct descr_code {
  std::string_view descr;
  dtype type;
};
// '=' is native order and '|' "not applicable"; on this little-endian host both mean '<'. The
// first spelling of each dtype is the one save_npy writes.
constexpr std::array<descr_code, 19> descr_codes = {{
    {"|b1", dtype::boolean},        {"<b1", dtype::boolean},       {"=b1", dtype::boolean},
    {"<i4", dtype::int32},          {"=i4", dtype::int32},         {"<i8", dtype::int64},
    {"=i8", dtype::int64},          {"<f2", dtype::float16},       {"=f2", dtype::float16},
    {"<f4", dtype::float32},        {"=f4", dtype::float32},       {"<f8", dtype::float64},
    {"=f8", dtype::float64},        {"bfloat16", dtype::bfloat16}, {"<V2", dtype::bfloat16},
    {"|V2", dtype::bfloat16},       {"=V2", dtype::bfloat16},      {"<bfloat16", dtype::bfloat16},
    {"|bfloat16", dtype::bfloat16},
}};

// What save_npy writes for `t`: the first of its spellings in descr_codes.
std::string_view descr_of(dtype t) {
  const auto* code = std::find_if(descr_codes.begin(), descr_codes.end(),
                                  [t](const descr_code& c) { return c.type == t; });
  return code != descr_codes.end() ? code->descr : "?";
}

// The header: a Python dict literal with 'descr', 'fortran_order' and 'shape', as
// numpy.lib.format writes it.
class header_parser {
public:
  header_parser(const detail::io::read_only_file& f, std::string_view text) : f_(f), s_(text) {}

  struct result {
    std::string descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<std::int64_t>> extents;
  };

  result parse() {
    result r;
    bool has_descr = false;
    space();
    expect('{');
    for (;;) {
      space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const std::string key = string();
      space();
      expect(':');
      space();
      if (key == "descr") {
        if (peek() == '[') {
          fail("structured dtypes (a descr list) are not supported");
        }
        r.descr = string();
        has_descr = true;
      } else if (key == "fortran_order") {
        r.fortran_order = boolean();
      } else if (key == "shape") {
        r.extents = tuple();
      } else {
        fail("unknown header key '" + key + "'");
      }
      space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      space();
      expect('}');
      break;
    }
    space();
    if (pos_ != s_.size()) {
      fail("unexpected text after the header dict");
    }
    if (!has_descr || !r.fortran_order || !r.extents) {
      fail("the header lacks 'descr', 'fortran_order' or 'shape'");
    }
    return r;
  }

private:
  [[noreturn]] void fail(const std::string& why) const { f_.fail("", "bad header: " + why); }
  char peek() const noexcept { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void space() noexcept {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  void expect(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) {
      fail(std::string("expected '") + c + "' at byte " + std::to_string(pos_));
    }
    ++pos_;
  }
  std::string string() {
    const char q = peek();
    if (q != '\'' && q != '"') {
      fail("expected a string at byte " + std::to_string(pos_));
    }
    ++pos_;
    const auto end = s_.find(q, pos_);
    if (end == std::string_view::npos) {
      fail("unterminated string");
    }
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("'fortran_order' is not True or False");
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> out;
    expect('(');
    for (;;) {
      space();
      if (peek() == ')') {
        ++pos_;
        return out;
      }
      std::int64_t n = 0;
      const std::size_t start = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        if (n > (std::int64_t{1} << 50)) {
          fail("extent too large");
        }
        n = n * 10 + (s_[pos_] - '0');
        ++pos_;
      }
      // Python writes `2L` for longs in files from NumPy on Python 2.
      if (peek() == 'L') {
        ++pos_;
      }
      if (pos_ == start) {
        fail("shape extents must be non-negative integers");
      }
      out.push_back(n);
      space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(')');
      return out;
    }
  }

  const detail::io::read_only_file& f_;
  std::string_view s_;
  std::size_t pos_ = 0;
};

std::uint64_t little_endian(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8U) | p[i];
  }
  return v;
}

}  // namespace

tensor load_npy(const std::filesystem::path& path, device d) {
  detail::require_device(load_op, d);
  auto file = std::make_shared<const detail::io::read_only_file>(load_op, path);
  const auto& f = *file;
  unsigned char prefix[12] = {};
  if (f.size() < 10) {
    f.fail("", "too short for a .npy file (" + std::to_string(f.size()) + " bytes)");
  }
  f.read_exactly(0, prefix, std::min<std::uint64_t>(12, f.size()), "");
  if (std::string_view(reinterpret_cast<const char*>(prefix), 6) != "\x93NUMPY") {
    f.fail("", "not a .npy file (no \\x93NUMPY magic)");
  }
  const unsigned major = prefix[6];
  std::uint64_t header_len = 0;
  std::uint64_t header_start = 0;
  if (major == 1) {
    header_len = little_endian(prefix + 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (f.size() < 12) {
      f.fail("", "truncated header");
    }
    header_len = little_endian(prefix + 8, 4);
    header_start = 12;
  } else {
    f.fail("", "unsupported .npy format version " + std::to_string(major));
  }
  if (header_len > f.size() - header_start) {
    f.fail("", "header length " + std::to_string(header_len) + " runs beyond the file's " +
                   std::to_string(f.size()) + " bytes");
  }
  std::string header(header_len, '\0');
  f.read_exactly(header_start, header.data(), header_len, "");
  const auto h = header_parser(f, header).parse();
  const auto* code = std::find_if(descr_codes.begin(), descr_codes.end(),
                                  [&](const descr_code& c) { return c.descr == h.descr; });
  if (code == descr_codes.end()) {
    const bool big = !h.descr.empty() && h.descr[0] == '>';
    f.fail("", "descr '" + h.descr + "' is not supported" +
                   (big ? std::string(" (big-endian: byteswap it to '<' first)")
                        : std::string(" (cotensor reads |b1 <i4 <i8 <f2 <f4 <f8 and bfloat16)")));
  }
  if (*h.fortran_order) {
    f.fail("", "Fortran order (fortran_order: True) is not supported: save a C-order array");
  }
  std::uint64_t numel = 1;
  for (const auto n : *h.extents) {
    if (n != 0 && numel > (std::uint64_t{1} << 62U) / static_cast<std::uint64_t>(n)) {
      f.fail("", "shape too large");
    }
    numel *= static_cast<std::uint64_t>(n);
  }
  const std::uint64_t data_start = header_start + header_len;
  const std::uint64_t bytes = numel * itemsize(code->type);
  if (f.size() - data_start != bytes) {
    f.fail("", "the data has " + std::to_string(f.size() - data_start) + " bytes, but shape " +
                   shape(*h.extents).to_string() + " of '" + h.descr + "' needs " +
                   std::to_string(bytes));
  }
  return detail::io::issue_read(std::move(file), "", data_start, shape(*h.extents), code->type, d);
}

void save_npy(const std::filesystem::path& path, const tensor& t) {
  detail::checked(t, save_op);
  std::string extents;
  for (std::size_t i = 0; i < t.rank(); ++i) {
    extents += std::to_string(t.shape()[i]) + (t.rank() == 1 ? "," : i + 1 < t.rank() ? ", " : "");
  }
  std::string header = "{'descr': '" + std::string(descr_of(t.dtype())) +
                       "', 'fortran_order': False, 'shape': (" + extents + "), }";
  // As numpy.lib.format: padded with spaces and a newline so that the data starts 64-byte
  // aligned; version 2.0 (a 4-byte length) only if the header needs it.
  const bool v1 = header.size() + 1 + 10 <= 65535;
  const std::size_t prefix = v1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) {
    header += ' ';
  }
  header += '\n';
  std::string magic = std::string("\x93NUMPY", 6);
  magic += static_cast<char>(v1 ? 1 : 2);
  magic += '\0';
  std::uint64_t n = header.size();
  for (std::size_t i = 0; i < prefix - 8; ++i) {
    magic += static_cast<char>(n & 0xFFU);
    n >>= 8U;
  }
  const std::string data = detail::io::host_bytes(t, save_op);
  detail::io::write_file(save_op, path, {magic, header, data});
}

}  // namespace cotensor
