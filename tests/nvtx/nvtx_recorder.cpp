// An NVTX injection library: the tool side of NVTX, loaded the way Nsight Systems loads its own.
// A process started with NVTX_INJECTION64_PATH naming this file loads it at its first NVTX call
// and calls InitializeInjectionNvtx2, which routes nvtxRangePushA and nvtxRangePop here (the
// other NVTX calls stay no-ops). Every such call is recorded; when the process exits, the
// records go to the file named by COTENSOR_NVTX_LOG, one line each, in the order they happened:
//
//   pid <pid>                   the process (on Linux its main thread's id is the same number)
//   push <tid> <depth> <name>   a range opened on kernel thread <tid>, at nesting <depth> (0: none
//                               open on that thread before it)
//   pop <tid> <depth>           the innermost range of <tid> closed; its depth, -1 if none was open
//   lost <n>                    only if n calls could not be recorded (out of memory)
//
// Without COTENSOR_NVTX_LOG the library declines (NVTX then unloads it and makes every call a
// no-op). Usage, from the build directory:
//
//   export NVTX_INJECTION64_PATH=$PWD/tests/nvtx/libcotensor_nvtx_recorder.so
//   COTENSOR_NVTX_LOG=ranges.log ./program

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#define NVTX_NO_IMPL  // a tool needs NVTX's types only, not the API's implementation
#include <nvtx3/nvToolsExt.h>

namespace {

struct range_event {
  bool push = false;
  pid_t tid = 0;
  int depth = 0;
  std::string name;  // push only
};

// Every range call of the process. NVTX calls C functions, so nothing here may throw.
class event_log {
public:
  void set_path(std::string path) {
    std::lock_guard lock(mutex_);
    path_ = std::move(path);
  }

  // Records a push (of `name`) or a pop on the calling thread. Returns what NVTX returns: the
  // nesting level of the range opened or closed, -1 for a pop with no range open.
  int add(bool push, const char* name) noexcept {
    try {
      const pid_t tid = ::gettid();
      std::lock_guard lock(mutex_);
      int& open = open_[tid];
      const int depth = push ? open++ : (open > 0 ? --open : -1);
      if (!written_) {
        events_.push_back({push, tid, depth, push && name != nullptr ? name : ""});
      }
      return depth;
    } catch (...) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
  }

  // Writes the log once and frees the records; calls after it are not recorded.
  void write() noexcept {
    std::lock_guard lock(mutex_);
    if (path_.empty() || written_) {
      return;
    }
    written_ = true;
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cotensor_nvtx_recorder: cannot write %s\n", path_.c_str());
      return;
    }
    std::fprintf(f, "pid %ld\n", static_cast<long>(::getpid()));
    for (const auto& e : events_) {
      if (e.push) {
        std::fprintf(f, "push %ld %d %s\n", static_cast<long>(e.tid), e.depth, e.name.c_str());
      } else {
        std::fprintf(f, "pop %ld %d\n", static_cast<long>(e.tid), e.depth);
      }
    }
    if (const auto lost = lost_.load(std::memory_order_relaxed); lost != 0) {
      std::fprintf(f, "lost %lu\n", static_cast<unsigned long>(lost));
    }
    std::fclose(f);
    std::vector<range_event>().swap(events_);
    std::unordered_map<pid_t, int>().swap(open_);
    std::string().swap(path_);
  }

private:
  std::mutex mutex_;  // guards all but lost_
  std::string path_;
  std::vector<range_event> events_;
  // Ranges open per thread. Not a thread_local: GCC 12's LeakSanitizer crashes now and then
  // ("Tracer caught signal 11") scanning the dynamic TLS of a dlopen'ed library.
  std::unordered_map<pid_t, int> open_;
  bool written_ = false;
  std::atomic<std::uint64_t> lost_{0};  // calls not recorded: no memory for them
};

// Never destroyed (a union does not destroy its member): the program's exit-time destructors,
// such as that of cotensor's default runtime, which waits for the ops still running, may open and
// close ranges after a static event_log's destructor would have run. Not on the heap either: when
// NVTX unloads a library that declined, that would be a leak.
union immortal_log {
  immortal_log() : value() {}
  ~immortal_log() {}  // leaves `value` alone (= default would be deleted)
  event_log value;
} storage;
event_log& events = storage.value;

int NVTX_API range_push_a(const char* message) noexcept { return events.add(true, message); }

int NVTX_API range_pop() noexcept { return events.add(false, nullptr); }

// After every exit-time destructor of the program (the dynamic linker's fini, at exit or unload).
[[gnu::destructor]] void write_log() { events.write(); }

bool install(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(
      get_export_table != nullptr ? get_export_table(NVTX_ETID_CALLBACKS) : nullptr);
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      callbacks->GetModuleFunctionTable == nullptr) {
    return false;
  }
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) == 0 ||
      table == nullptr || size <= NVTX_CBID_CORE_RangePop) {
    return false;
  }
  // A table entry points at the slot NVTX calls through; `void (*)(void)` is NVTX's generic
  // function pointer type.
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&range_push_a);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&range_pop);
  return true;
}

}  // namespace

/// NVTX's entry point for an injection library: returns 1 once our callbacks are installed, 0
/// (NVTX then makes every call a no-op) when there is nowhere to write the log.
extern "C" [[gnu::visibility("default")]] int
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) noexcept {
  try {
    const char* path = std::getenv("COTENSOR_NVTX_LOG");
    if (path == nullptr || *path == '\0') {
      std::fprintf(stderr, "cotensor_nvtx_recorder: COTENSOR_NVTX_LOG is not set; not recording\n");
      return 0;
    }
    events.set_path(path);
    return install(get_export_table) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
