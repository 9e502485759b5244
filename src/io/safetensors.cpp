#include "cotensor/io.hpp"

#include "frontend/frontend.hpp"
#include "io/file.hpp"
#include "io/json.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <stdexcept>

namespace cotensor {

namespace {

constexpr const char* load_op = "load_safetensors";
constexpr const char* save_op = "save_safetensors";
// The Python package refuses headers above 100 MB; so do we, before allocating one.
constexpr std::uint64_t max_header_bytes = 100'000'000;

struct dtype_code {
  std::string_view code;
  dtype type;
};
constexpr std::array<dtype_code, dtype_count> dtype_codes = {{
    {"BOOL", dtype::boolean},
    {"I32", dtype::int32},
    {"I64", dtype::int64},
    {"F16", dtype::float16},
    {"BF16", dtype::bfloat16},
    {"F32", dtype::float32},
    {"F64", dtype::float64},
}};

std::string_view code_of(dtype t) {
  for (const auto& c : dtype_codes) {
    if (c.type == t) {
      return c.code;
    }
  }
  return "?";
}

// One tensor's entry in a header, validated on its own.
struct entry {
  std::string name;
  dtype type;
  std::vector<std::int64_t> extents;
  std::uint64_t begin;
  std::uint64_t end;
};

entry parse_entry(const detail::io::read_only_file& f,
                  const std::string& name,
                  const detail::json::value& v) {
  using kind = detail::json::value::kind;
  if (v.type != kind::object) {
    f.fail(name, "its header entry is not an object");
  }
  entry e{name, dtype::float32, {}, 0, 0};
  const auto* dt = v.find("dtype");
  if (dt == nullptr || dt->type != kind::string) {
    f.fail(name, "no \"dtype\" string");
  }
  const auto* known = std::find_if(dtype_codes.begin(), dtype_codes.end(),
                                   [&](const dtype_code& c) { return c.code == dt->text; });
  if (known == dtype_codes.end()) {
    f.fail(name,
           "unknown dtype \"" + dt->text + "\" (cotensor reads BOOL I32 I64 F16 BF16 F32 F64)");
  }
  e.type = known->type;
  const auto* sh = v.find("shape");
  if (sh == nullptr || sh->type != kind::array) {
    f.fail(name, "no \"shape\" array");
  }
  std::uint64_t numel = 1;
  for (const auto& d : sh->items) {
    const auto n = d.as_index();
    if (!n) {
      f.fail(name, "shape extents must be non-negative integers");
    }
    // Products beyond 2^62 bytes cannot be in any file: refuse them before they overflow.
    if (*n != 0 && numel > (std::uint64_t{1} << 62U) / static_cast<std::uint64_t>(*n)) {
      f.fail(name, "shape too large");
    }
    numel *= static_cast<std::uint64_t>(*n);
    e.extents.push_back(*n);
  }
  const auto* off = v.find("data_offsets");
  if (off == nullptr || off->type != kind::array || off->items.size() != 2) {
    f.fail(name, "no \"data_offsets\" pair");
  }
  const auto b = off->items[0].as_index();
  const auto en = off->items[1].as_index();
  if (!b || !en || *b > *en) {
    f.fail(name, "data_offsets must be non-negative integers [begin, end] with begin <= end");
  }
  e.begin = static_cast<std::uint64_t>(*b);
  e.end = static_cast<std::uint64_t>(*en);
  const std::uint64_t expected = numel * itemsize(e.type);
  if (e.end - e.begin != expected) {
    f.fail(name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     ") hold " + std::to_string(e.end - e.begin) + " bytes, but shape " +
                     shape(e.extents).to_string() + " of " + std::string(code_of(e.type)) +
                     " needs " + std::to_string(expected));
  }
  return e;
}

}  // namespace

const tensor& safetensors_file::at(std::string_view name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) {
      return t;
    }
  }
  throw std::out_of_range("cotensor::safetensors_file::at: no tensor named \"" + std::string(name) +
                          "\"");
}

bool safetensors_file::contains(std::string_view name) const noexcept {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& nt) { return nt.first == name; });
}

safetensors_file load_safetensors(const std::filesystem::path& path, device d) {
  detail::require_device(load_op, d);
  auto file = std::make_shared<const detail::io::read_only_file>(load_op, path);
  const auto& f = *file;
  if (f.size() < 8) {
    f.fail("", "too short for a safetensors file (" + std::to_string(f.size()) + " bytes)");
  }
  unsigned char len_bytes[8];
  f.read_exactly(0, len_bytes, 8, "");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8U) | len_bytes[i];
  }
  if (header_len > max_header_bytes) {
    f.fail("", "header length " + std::to_string(header_len) + " is beyond the limit of 100 MB");
  }
  if (header_len > f.size() - 8) {
    f.fail("", "header length " + std::to_string(header_len) + " runs beyond the file's " +
                   std::to_string(f.size()) + " bytes");
  }
  std::string header(header_len, '\0');
  f.read_exactly(8, header.data(), header_len, "");
  detail::json::value root;
  try {
    root = detail::json::parse(header);
  } catch (const std::runtime_error& e) {
    f.fail("", std::string("header is not valid JSON: ") + e.what());
  }
  if (root.type != detail::json::value::kind::object) {
    f.fail("", "header is not a JSON object");
  }
  safetensors_file out;
  std::vector<entry> entries;
  std::set<std::string> names;
  for (const auto& [name, v] : root.members) {
    if (!names.insert(name).second) {
      f.fail(name, "the name appears twice in the header");
    }
    if (name == "__metadata__") {
      if (v.type != detail::json::value::kind::object) {
        f.fail("", "__metadata__ is not an object");
      }
      for (const auto& [key, value] : v.members) {
        if (value.type != detail::json::value::kind::string) {
          f.fail("", "__metadata__ value of \"" + key + "\" is not a string");
        }
        out.metadata[key] = value.text;
      }
      continue;
    }
    entries.push_back(parse_entry(f, name, v));
  }
  // The data section is tiled exactly: sorted by offset, each tensor starts where the one
  // before it ends, and the last ends at the end of the file (as the Python package checks).
  std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_bytes = f.size() - data_start;
  std::uint64_t expected_begin = 0;
  for (const auto& e : entries) {
    if (e.begin < expected_begin) {
      f.fail(e.name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                         ") overlap the tensor before it, which ends at " +
                         std::to_string(expected_begin));
    }
    if (e.begin > expected_begin) {
      f.fail(e.name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                         ") leave a gap after byte " + std::to_string(expected_begin));
    }
    if (e.end > data_bytes) {
      f.fail(e.name, "data ends at byte " + std::to_string(data_start + e.end) +
                         ", beyond the file's " + std::to_string(f.size()) + " bytes");
    }
    expected_begin = e.end;
  }
  if (expected_begin != data_bytes) {
    f.fail(entries.empty() ? "" : entries.back().name,
           "the data section has " + std::to_string(data_bytes - expected_begin) +
               " bytes after the last tensor's data");
  }
  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    tensor t =
        detail::io::issue_read(file, e.name, data_start + e.begin, shape(e.extents), e.type, d);
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> names;
  std::vector<const std::pair<std::string, tensor>*> order;
  for (const auto& nt : tensors) {
    if (nt.first.empty() || nt.first == "__metadata__") {
      detail::throw_invalid(save_op, "tensor name \"" + nt.first + "\" is reserved or empty");
    }
    if (!names.insert(nt.first).second) {
      detail::throw_invalid(save_op, "tensor name \"" + nt.first + "\" appears twice");
    }
    detail::checked(nt.second, save_op);
    order.push_back(&nt);
  }
  // The Python package's layout: by decreasing alignment (itemsize), then by name.
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const auto ia = itemsize(a->second.dtype());
    const auto ib = itemsize(b->second.dtype());
    return ia != ib ? ia > ib : a->first < b->first;
  });
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + detail::json::quote(k) + ":" + detail::json::quote(v);
      first = false;
    }
    header += "}";
  }
  std::string data;
  for (const auto* nt : order) {
    const tensor& t = nt->second;
    std::string bytes = detail::io::host_bytes(t, save_op);
    std::string extents;
    for (std::size_t i = 0; i < t.rank(); ++i) {
      extents += (i == 0 ? "" : ",") + std::to_string(t.shape()[i]);
    }
    header += (header.size() > 1 ? "," : "") + detail::json::quote(nt->first) + ":{\"dtype\":\"" +
              std::string(code_of(t.dtype())) + "\",\"shape\":[" + extents +
              "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes.size()) + "]}";
    data += bytes;
  }
  header += "}";
  // Padded with spaces so that the data starts 8-byte aligned, as the Python package pads it.
  while (header.size() % 8 != 0) {
    header += ' ';
  }
  char len[8];
  std::uint64_t n = header.size();
  for (char& c : len) {
    c = static_cast<char>(n & 0xFFU);
    n >>= 8U;
  }
  detail::io::write_file(save_op, path, {std::string_view(len, 8), header, data});
}

void save_safetensors(const std::filesystem::path& path, const safetensors_file& file) {
  save_safetensors(path, file.tensors, file.metadata);
}

}  // namespace cotensor
