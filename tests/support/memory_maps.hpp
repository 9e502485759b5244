#pragma once

// What Linux says of this process's memory (/proc/self/smaps): whether an address lies in a
// mapping advised for transparent huge pages.

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace cotensor::test {

/// Whether this kernel has transparent huge pages (madvise(MADV_HUGEPAGE) marks a mapping).
inline bool has_transparent_huge_pages() {
  return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled");
}

/// The VmFlags of the mapping that holds `p` ("rd wr mr mw me ac hg ..."; `hg`: advised for
/// huge pages), or "" where no mapping holds it or there is no /proc/self/smaps.
inline std::string mapping_flags(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t low = 0;
    std::uintptr_t high = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &low, &high) == 2) {
      inside = low <= address && address < high;
    } else if (inside && line.starts_with("VmFlags:")) {
      return line.substr(8) + " ";
    }
  }
  return "";
}

/// Whether the mapping that holds `p` is advised for transparent huge pages.
inline bool in_huge_page_mapping(const void* p) {
  return mapping_flags(p).find(" hg ") != std::string::npos;
}

}  // namespace cotensor::test
