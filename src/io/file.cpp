#include "io/file.hpp"

#include "engine/engine.hpp"
#include "frontend/frontend.hpp"
#include "support/environment.hpp"

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <pthread.h>
#include <stdexcept>
#include <string_view>
#include <sys/stat.h>
#include <thread>
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

namespace {

// The threads that read tensors' bytes: a read may block on the disk for milliseconds, and a
// backend worker blocked there would hold back every op queued behind it (a model loading
// beside one being served). One pool per process, of COTENSOR_IO_THREADS threads (default 2),
// started by the first read; it lives until the process ends.
class read_threads {
public:
  struct job {
    std::shared_ptr<const read_only_file> file;
    std::string tensor;
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
    void* out = nullptr;
    op_completion done;
  };

  // Throws std::invalid_argument for a bad COTENSOR_IO_THREADS, std::system_error if no thread
  // can start; the read's op fails with it, and the next read tries again.
  // Never destroyed: a runtime destroyed at exit after it (the default one is created first)
  // still waits for reads that it queues.
  static read_threads& instance() {
    static read_threads* const pool = new read_threads;
    return *pool;
  }

  // hold_reads: while held, no read starts.
  void hold() {
    std::lock_guard lock(mu_);
    ++held_;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      --held_;
    }
    cv_.notify_all();
  }

  void submit(job j) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(j));
    }
    cv_.notify_one();
  }

  read_threads(const read_threads&) = delete;
  read_threads& operator=(const read_threads&) = delete;

private:
  read_threads() {
    const auto n = static_cast<unsigned>(
        whole_number_from_environment("COTENSOR_IO_THREADS", 1, 64).value_or(2));
    threads_.reserve(n);
    try {
      for (unsigned i = 0; i < n; ++i) {
        threads_.emplace_back([this] {
          ::pthread_setname_np(::pthread_self(), "cotensor-read");
          run();
        });
      }
    } catch (...) {
      if (threads_.empty()) {
        throw;
      }
      // Fewer threads than asked: enough to read.
    }
  }

  void run() noexcept {
    for (;;) {
      job j;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() && held_ == 0; });
        j = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        if (j.bytes > 0) {
          j.file->read_exactly(j.offset, j.out, j.bytes, j.tensor);
        }
      } catch (...) {
        error = std::current_exception();  // io_error, or std::bad_alloc building it
      }
      j.file.reset();  // closes the file after its last read, here, not on a backend thread
      // The engine's part (dependents dispatched, waiters completed) runs here: no user code
      // runs on this thread (a coroutine resumes on its own executor).
      j.done.complete_here(std::move(error));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  unsigned held_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace

hold_reads::hold_reads() { read_threads::instance().hold(); }
hold_reads::~hold_reads() { read_threads::instance().release(); }

tensor issue_read(std::shared_ptr<const read_only_file> file,
                  std::string tensor_name,
                  std::uint64_t offset,
                  const shape& s,
                  dtype t,
                  device d) {
  require_device(file->op(), d);
  auto out = allocate(file->op(), s, device::cpu(), t);
  const std::uint64_t bytes = static_cast<std::uint64_t>(s.numel()) * itemsize(t);
  // The op's start only queues the read for the read threads (it may run at the call, on an
  // Asio thread: it never blocks); the op ends when the bytes are in.
  auto op = make_op(file->op(), {}, {out});
  op->kernel.emplace_async([file = std::move(file), name = std::move(tensor_name), offset, bytes,
                            p = out.get()](op_completion done) mutable {
    read_threads::instance().submit(
        {std::move(file), std::move(name), offset, bytes, p->raw(), std::move(done)});
  });
  current_engine().push(std::move(op));
  tensor host(detail::internal, std::move(out), s);
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
