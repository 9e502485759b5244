#pragma once

// A minimal reader and writer for NumPy `.npy` files holding little-endian float32 arrays in C
// order (versions 1.0 and 2.0), enough to load and save MLP weights.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace cotensor_server {

/// A float32 array read from a `.npy` file.
struct npy_array {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

/// Reads `path`; throws `std::runtime_error` naming the file for anything but a C-order `<f4`
/// array whose data size matches its shape.
inline npy_array load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const std::string& why) { return std::runtime_error(path + ": " + why); };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) {
    throw fail("not a .npy file");
  }
  const auto major = static_cast<unsigned char>(data[6]);
  std::size_t header_len = 0;
  std::size_t offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) |
                 (static_cast<std::size_t>(static_cast<unsigned char>(data[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) {
      throw fail("truncated header");
    }
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<std::size_t>(static_cast<unsigned char>(data[8 + i])) << (8 * i);
    }
    offset = 12;
  } else {
    throw fail("unsupported .npy version");
  }
  if (data.size() < offset + header_len) {
    throw fail("truncated header");
  }
  const std::string header = data.substr(offset, header_len);
  if (header.find("'descr': '<f4'") == std::string::npos) {
    throw fail("dtype must be '<f4' (float32, little-endian)");
  }
  if (header.find("'fortran_order': False") == std::string::npos) {
    throw fail("array must be in C order");
  }
  const auto open = header.find('(', header.find("'shape'"));
  const auto close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) {
    throw fail("no shape in header");
  }
  npy_array out;
  std::int64_t numel = 1;
  std::string dims = header.substr(open + 1, close - open - 1);
  std::size_t pos = 0;
  while (pos < dims.size()) {
    const auto comma = dims.find(',', pos);
    const std::string item =
        dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.find_first_not_of(" ") != std::string::npos) {
      const std::int64_t d = std::stoll(item);
      if (d < 0 || d > (std::int64_t{1} << 31)) {
        throw fail("bad extent");
      }
      out.shape.push_back(d);
      numel *= d;
    }
    if (comma == std::string::npos) {
      break;
    }
    pos = comma + 1;
  }
  const std::size_t body = offset + header_len;
  if (data.size() - body != static_cast<std::size_t>(numel) * sizeof(float)) {
    throw fail("data size does not match the shape");
  }
  out.values.resize(static_cast<std::size_t>(numel));
  std::memcpy(out.values.data(), data.data() + body, out.values.size() * sizeof(float));
  return out;
}

/// Writes a C-order `<f4` array (version 1.0).
inline void save_npy(const std::string& path,
                     const std::vector<std::int64_t>& shape,
                     const std::vector<float>& values) {
  std::string dims;
  for (auto d : shape) {
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() > 1) {
    dims.erase(dims.size() - 2);
  } else if (shape.size() == 1) {
    dims.erase(dims.size() - 1);
  }
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) {
    header += ' ';
  }
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff),
                       static_cast<char>((header.size() >> 8) & 0xff)};
  out.write(len, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) {
    throw std::runtime_error("cannot write " + path);
  }
}

}  // namespace cotensor_server
