// cotensor's NVTX ranges as Nsight Systems would see them, with neither nsys nor a GPU: runs
// cotensor_nvtx_workload the way `nsys profile` runs a program, with NVTX_INJECTION64_PATH naming
// an injection library (here nvtx_recorder.cpp, which logs every range), and checks the log.

#include <doctest/doctest.h>

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <spawn.h>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the test.
class temp_dir {
public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "cotensor_nvtx_XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }

  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct workload_run {
  pid_t pid = -1;
  int status = -1;  // the exit status, or 128 + the signal that ended it
  std::string out;  // what it printed
  bool logged = false;
  std::string log;  // what the recorder wrote, if it wrote
};

// Runs the workload with the recorder injected, as nsys would: only through its environment.
workload_run run_workload(int iterations, const temp_dir& dir) {
  const fs::path out_path = dir.path() / "out.txt";
  const fs::path log_path = dir.path() / "ranges.log";
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("NVTX_INJECTION64_PATH=") && !entry.starts_with("COTENSOR_NVTX_LOG=")) {
      env.emplace_back(entry);
    }
  }
  env.push_back(std::string("NVTX_INJECTION64_PATH=") + COTENSOR_NVTX_RECORDER);
  env.push_back("COTENSOR_NVTX_LOG=" + log_path.string());
  std::vector<char*> envp;
  for (auto& e : env) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  std::string program = COTENSOR_NVTX_WORKLOAD;
  std::string count = std::to_string(iterations);
  char* argv[] = {program.data(), count.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  workload_run run;
  const int spawned = ::posix_spawn(&run.pid, argv[0], &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(spawned == 0, "cannot start " << program << ": errno " << spawned);
  int status = 0;
  while (::waitpid(run.pid, &status, 0) < 0) {
    REQUIRE(errno == EINTR);
  }
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_file(out_path);
  run.logged = fs::exists(log_path);
  if (run.logged) {
    run.log = read_file(log_path);
  }
  return run;
}

// "a=1 b=2": a multiset of names, readable in a failed check.
std::string to_string(const std::map<std::string, int>& counts) {
  std::string s;
  for (const auto& [name, n] : counts) {
    s += (s.empty() ? "" : " ") + name + "=" + std::to_string(n);
  }
  return s;
}

}  // namespace

TEST_SUITE("nvtx") {
  TEST_CASE("every op is one NVTX range named after it, opened and closed on a backend worker" *
            doctest::timeout(120)) {
    constexpr int iterations = 8;
    const temp_dir dir;
    const workload_run run = run_workload(iterations, dir);
    REQUIRE_MESSAGE(run.status == 0, "the workload failed; printed: " << run.out);
    REQUIRE_MESSAGE(run.logged, "no log: NVTX never loaded the recorder, so cotensor made no "
                                "NVTX call (COTENSOR_WITH_NVTX, or the engine's nvtxRangePushA?)");

    // The ops the runtime counted.
    std::istringstream out(run.out);
    std::string word;
    unsigned long long issued = 0;
    unsigned long long completed = 0;
    REQUIRE_MESSAGE((out >> word >> issued >> word >> completed), "printed: " << run.out);
    CHECK(issued == 4 * iterations);
    CHECK(completed == issued);

    // Replay the log: a stack of open ranges per thread.
    std::istringstream log(run.log);
    long pid = 0;
    REQUIRE((log >> word >> pid));
    REQUIRE(word == "pid");
    CHECK(pid == run.pid);  // this run's log, not a stale one
    std::map<long, std::vector<std::string>> open;
    std::map<std::string, int> ranges;
    unsigned long long pushes = 0;
    int on_main_thread = 0;
    std::string line;
    std::getline(log, line);
    while (std::getline(log, line)) {
      std::istringstream fields(line);
      std::string kind;
      long tid = 0;
      int depth = 0;
      fields >> kind >> tid >> depth;
      REQUIRE_MESSAGE((kind == "push" || kind == "pop"), "log line: " << line);
      auto& stack = open[tid];
      if (kind == "push") {
        std::string name;
        std::getline(fields >> std::ws, name);
        CHECK_MESSAGE(depth == static_cast<int>(stack.size()), "log line: " << line);
        stack.push_back(name);
        ++ranges[name];
        ++pushes;
        if (tid == pid) {  // Linux: the main thread's id is the process id
          ++on_main_thread;
        }
      } else {
        REQUIRE_MESSAGE(!stack.empty(), "a pop with no range open on its thread: " << line);
        CHECK_MESSAGE(depth == static_cast<int>(stack.size()) - 1, "log line: " << line);
        stack.pop_back();
      }
    }
    for (const auto& [tid, stack] : open) {
      CHECK_MESSAGE(stack.empty(), "thread " << tid << " left " << stack.size() << " ranges open");
    }
    CHECK(pushes == completed);  // one range per op run
    CHECK(
        to_string(ranges) ==
        to_string({{"matmul", iterations}, {"operator+", iterations}, {"randn", 2 * iterations}}));
    CHECK(on_main_thread == 0);  // every op ran on a worker: none is small enough to run inline
  }
}
