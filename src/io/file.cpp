#include "io/file.hpp"

#include "engine/engine.hpp"
#include "frontend.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace cotensor {

namespace {

std::string io_message(const char* op,
                       const std::filesystem::path& path,
                       const std::string& tensor_name,
                       const std::string& reason) {
  std::string m = std::string("cotensor::") + op + ": " + path.string() + ": ";
  if (!tensor_name.empty()) {
    m += "tensor \"" + tensor_name + "\": ";
  }
  return m + reason;
}

}  // namespace

io_error::io_error(const char* op,
                   const std::filesystem::path& path,
                   std::string tensor_name,
                   const std::string& reason)
    : std::runtime_error(io_message(op, path, tensor_name, reason)), path_(path),
      tensor_name_(std::move(tensor_name)) {}

namespace detail::io {

read_only_file::read_only_file(const char* op, std::filesystem::path path)
    : op_(op), path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    fail("", std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st {};
  const bool stat_failed = ::fstat(fd_, &st) != 0;
  if (stat_failed || !S_ISREG(st.st_mode)) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    fail("", stat_failed ? std::string("cannot stat: ") + std::strerror(e)
                         : std::string("not a regular file"));
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

read_only_file::~read_only_file() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void read_only_file::fail(const std::string& tensor, const std::string& reason) const {
  throw io_error(op_, path_, tensor, reason);
}

void read_only_file::read_exactly(std::uint64_t offset,
                                  void* out,
                                  std::uint64_t bytes,
                                  const std::string& tensor) const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    fail(tensor, std::string("cannot stat: ") + std::strerror(errno));
  }
  if (static_cast<std::uint64_t>(st.st_size) != size_) {
    fail(tensor, "the file changed size since it was opened (" + std::to_string(size_) +
                     " bytes, now " + std::to_string(st.st_size) + ")");
  }
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail(tensor, std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      fail(tensor, "the file ends at byte " + std::to_string(offset) + ", before its data does");
    }
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::uint64_t>(n);
  }
}

tensor issue_read(std::shared_ptr<const read_only_file> file,
                  std::string tensor_name,
                  std::uint64_t offset,
                  const shape& s,
                  dtype t,
                  device d) {
  require_device(file->op(), d);
  auto out = allocate(file->op(), s, device::cpu(), t);
  const std::uint64_t bytes = static_cast<std::uint64_t>(s.numel()) * itemsize(t);
  // Never run at the call (as a small op may be): a read may block on the disk, and the call
  // may be on an Asio thread.
  auto op = make_op(file->op(), {}, {out});
  op->runs_user_code = true;
  op->kernel.emplace(
      [file = std::move(file), name = std::move(tensor_name), offset, bytes, p = out.get()] {
        if (bytes > 0) {
          file->read_exactly(offset, p->raw(), bytes, name);
        }
      });
  current_engine().push(std::move(op));
  tensor host(std::move(out), s);
  return d.is_cpu() ? host : host.to(d);
}

std::string host_bytes(const tensor& t, const char* op) {
  checked(t, op);
  const tensor host = t.device().is_cpu() ? t : t.to(device::cpu());
  host.wait();
  const std::size_t bytes = static_cast<std::size_t>(host.numel()) * itemsize(host.dtype());
  if (bytes == 0) {
    return {};
  }
  return std::string(static_cast<const char*>(host.storage()->raw()), bytes);
}

void write_file(const char* op,
                const std::filesystem::path& path,
                std::initializer_list<std::string_view> parts) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw io_error(op, path, "", std::string("cannot open for writing: ") + std::strerror(errno));
  }
  for (const std::string_view part : parts) {
    out.write(part.data(), static_cast<std::streamsize>(part.size()));
  }
  out.close();
  if (!out) {
    throw io_error(op, path, "", "write failed");
  }
}

}  // namespace detail::io

}  // namespace cotensor
