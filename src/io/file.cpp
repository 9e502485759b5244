#include "io/file.hpp"

#include "frontend/frontend.hpp"
#include "support/blocking_pool.hpp"
#include "support/environment.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

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

hold_reads::hold_reads() { blocking_pool::instance().hold(); }
hold_reads::~hold_reads() { blocking_pool::instance().release(); }

namespace {

// A read op's start: queues the read on the process's threads for blocking work (a read may
// wait on the disk for milliseconds, and a backend worker blocked there would hold back every
// op queued behind it: a model loading beside one being served). The start may run at the
// call, on an Asio thread: it never blocks. The op ends when the bytes are in, on that thread.
struct read_start {
  std::shared_ptr<const read_only_file> file;
  std::string tensor_name;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  tensor target;  // its memory is allocated when the op starts, before this runs

  void operator()(async_op_context& /*ctx*/, async_op_done done) {
    blocking_pool::instance().submit_work(
        [file = std::move(file), name = std::move(tensor_name), offset = offset, bytes = bytes,
         out = target.storage()->raw(), done = std::move(done)]() mutable noexcept {
          std::exception_ptr error;
          try {
            if (bytes > 0) {
              file->read_exactly(offset, out, bytes, name);
            }
          } catch (...) {
            error = std::current_exception();  // io_error, or std::bad_alloc building it
          }
          file.reset();  // closes the file after its last read, here, not on a backend thread
          // The engine's part (dependents dispatched, waiters completed) runs here: no user
          // code runs on this thread (a coroutine resumes on its own executor).
          complete_here(done, std::move(error));
        });
  }
};

}  // namespace

tensor issue_read(std::shared_ptr<const read_only_file> file,
                  std::string tensor_name,
                  std::uint64_t offset,
                  const shape& s,
                  dtype t,
                  device d) {
  const char* op = file->op();
  require_device(op, d);
  const tensor host(detail::internal, allocate(op, s, device::cpu(), t), s);
  const std::uint64_t bytes = static_cast<std::uint64_t>(s.numel()) * itemsize(t);
  issue_quick_async_op({}, {&host, 1},
                       std::make_unique<async_start_for<read_start>>(
                           static_name{op}, read_start{std::move(file), std::move(tensor_name),
                                                       offset, bytes, host}));
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
