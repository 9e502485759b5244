#pragma once

// What the loaders share: a file kept open for the ops that read it, the op that reads a
// tensor's bytes on the backend, and the blocking writer of the savers.

#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/io.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace cotensor::detail::io {

/// A file opened for reading, closed with the last op that reads it.
class read_only_file {
public:
  /// Opens `path`; throws io_error (naming `op`) if it cannot.
  read_only_file(const char* op, std::filesystem::path path);
  read_only_file(const read_only_file&) = delete;
  read_only_file& operator=(const read_only_file&) = delete;
  ~read_only_file();

  const char* op() const noexcept { return op_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  /// Its size when opened.
  std::uint64_t size() const noexcept { return size_; }
  /// Reads exactly `bytes` at `offset` into `out`; throws io_error about `tensor` if the file
  /// no longer has them (truncated) or has changed size since it was opened. Thread-safe.
  void read_exactly(std::uint64_t offset,
                    void* out,
                    std::uint64_t bytes,
                    const std::string& tensor) const;
  /// io_error(op, path, tensor, reason).
  [[noreturn]] void fail(const std::string& tensor, const std::string& reason) const;

private:
  const char* op_;
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// A tensor of shape `s` and dtype `t` on `d` whose bytes an op reads from `file` at `offset`
/// on the process's threads for blocking work (support/blocking_pool.hpp), through the
/// frontend's async-op seam, then copies to `d` if it is not the CPU. Returns at once.
tensor issue_read(std::shared_ptr<const read_only_file> file,
                  std::string tensor_name,
                  std::uint64_t offset,
                  const shape& s,
                  dtype t,
                  device d);

/// For tests: while one lives, the threads for blocking work start no read (queued ones wait
/// for its end). Starts those threads.
class hold_reads {
public:
  hold_reads();
  hold_reads(const hold_reads&) = delete;
  hold_reads& operator=(const hold_reads&) = delete;
  ~hold_reads();
};

/// The bytes of `t` on the host, after waiting for it (a GPU tensor is copied first).
std::string host_bytes(const tensor& t, const char* op);

/// Writes `parts` in order to `path`, replacing it; throws io_error naming `op` on failure.
void write_file(const char* op,
                const std::filesystem::path& path,
                std::initializer_list<std::string_view> parts);

}  // namespace cotensor::detail::io
