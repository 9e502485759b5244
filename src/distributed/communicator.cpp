// Communicators: MPI's initialisation and finalisation, world() and split().

#include "cotensor/distributed.hpp"

#include "distributed/comm_state.hpp"
#include "support/environment.hpp"
#include "support/error_category.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace cotensor::dist {
namespace detail {

namespace {

std::string mpi_message(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  {
    std::lock_guard lock(mpi_lock());
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
      return "MPI error " + std::to_string(code);
    }
  }
  return std::string(text, static_cast<std::size_t>(length));
}

// The environment's settings, refused with std::invalid_argument naming the variable when
// malformed (a typo must not fall back to a default silently), before MPI is initialised.
clock::duration timeout_from_env() {
  const auto s = ::cotensor::detail::environment_variable("COTENSOR_DIST_TIMEOUT_S");
  if (!s || s->empty()) {
    return std::chrono::seconds(300);
  }
  char* end = nullptr;
  const double seconds = std::strtod(s->c_str(), &end);
  // At most ten years: a clock::duration (nanoseconds) holds it.
  if (end == s->c_str() || *end != '\0' || !(seconds > 0) || seconds > 3.2e8) {
    ::cotensor::detail::bad_environment_variable("COTENSOR_DIST_TIMEOUT_S", *s,
                                                 "a positive number of seconds");
  }
  return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
}

std::size_t fusion_bytes_from_env() {
  const auto bytes =
      ::cotensor::detail::whole_number_from_environment("COTENSOR_DIST_FUSION_BYTES").value_or(0);
  return static_cast<std::size_t>(std::min<std::uint64_t>(bytes, std::uint64_t{1} << 30));
}

clock::duration fusion_cycle_from_env() {
  const auto us = ::cotensor::detail::whole_number_from_environment("COTENSOR_DIST_FUSION_CYCLE_US",
                                                                    0, 10'000'000)  // at most 10 s
                      .value_or(0);
  return std::chrono::microseconds(us);
}

bool tune_from_env() {
  return ::cotensor::detail::environment_variable("COTENSOR_DIST_TUNE").value_or("") != "0";
}

// Open MPI 4.1's non-blocking all-reduce (coll/libnbc) picks a binomial tree (a reduce, then a
// broadcast: every byte crosses twice) for fewer than 4 ranks and for every in-place call, which
// is every cotensor call; its blocking MPI_Allreduce does not. On 2 ranks of one machine that
// made cotensor's all-reduce of 1 MiB to 64 MiB take 2.2-2.5x the time of MPI_Allreduce
// (bench/results/2026-11-23-debian12-2core-dist.txt). Its Rabenseifner algorithm (a
// reduce-scatter, then an all-gather) brings it to 0.75-1.08x. Selected through the standard
// MPI tool interface, only when the user has not chosen an algorithm (the variable is still 0,
// "ignore") and COTENSOR_DIST_TUNE is not 0. Elsewhere (MPICH) the variable does not exist and
// nothing changes. Under the MPI lock.
void prefer_rabenseifner_all_reduce() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return;
  }
  int index = -1;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      int value = -1;
      if (count == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS && value == 0) {
        const int rabenseifner = 3;
        (void)MPI_T_cvar_write(handle, &rabenseifner);
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
}

bool check_from_env() {
  const auto s = ::cotensor::detail::environment_variable("COTENSOR_DIST_CHECK").value_or("");
  return !s.empty() && s != "0";
}

/// The process's MPI: the world's state and the splits, stopped at exit (splits first, then
/// the world, whose thread finalises MPI after draining).
class mpi_runtime {
public:
  mpi_runtime() {
    (void)mpi_category();  // constructed first, destroyed after the drain that may use it
    bool finalize = false;
    auto init = [&finalize] {
      std::lock_guard lock(mpi_lock());
      int initialized = 0;
      MPI_Initialized(&initialized);
      int provided = MPI_THREAD_SINGLE;
      if (initialized == 0) {
        // Open MPI reads its settings from the environment as it starts.
        const std::shared_lock environment(::cotensor::detail::environment_mutex());
        const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
          throw std::system_error(rc, mpi_category(), "cotensor::dist: MPI_Init_thread");
        }
        finalize = true;
      } else {
        MPI_Query_thread(&provided);
      }
      if (provided < MPI_THREAD_SERIALIZED) {
        if (finalize) {
          MPI_Finalize();
        }
        throw std::system_error(
            std::make_error_code(std::errc::not_supported),
            "cotensor::dist: MPI provides thread level " + std::to_string(provided) +
                ", less than MPI_THREAD_SERIALIZED, which the communication threads need");
      }
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      if (tune_from_env()) {
        prefer_rabenseifner_all_reduce();
      }
    };
    // MPI_Init_thread runs on the world's communication thread, which finalises MPI too
    // (MPI-3.1 §12.4.3: on the thread that initialised it).
    world_ =
        std::make_shared<comm_state>(MPI_COMM_WORLD, 0, 1, check_from_env(), timeout_from_env());
    world_->set_fusion(fusion_bytes_from_env(), fusion_cycle_from_env());
    world_->start_thread(init, [this] {
      std::lock_guard lock(mpi_lock());
      if (finalize_) {
        free_reduce_ops();
        MPI_Finalize();
      }
    });
    finalize_ = finalize;  // the world's rank and size were set on its thread (open_probe)
  }
  mpi_runtime(const mpi_runtime&) = delete;
  mpi_runtime& operator=(const mpi_runtime&) = delete;
  ~mpi_runtime() {
    std::vector<std::shared_ptr<comm_state>> splits;
    {
      std::lock_guard lock(mu_);
      splits.swap(splits_);
    }
    for (auto it = splits.rbegin(); it != splits.rend(); ++it) {
      (*it)->stop();
    }
    world_->stop();
  }

  const std::shared_ptr<comm_state>& world() const noexcept { return world_; }
  void add(std::shared_ptr<comm_state> s) {
    std::lock_guard lock(mu_);
    splits_.push_back(std::move(s));
  }

private:
  std::shared_ptr<comm_state> world_;
  bool finalize_ = false;  // set before any stop; read by the world's thread at stop
  std::mutex mu_;
  std::vector<std::shared_ptr<comm_state>> splits_;
};

mpi_runtime& runtime() {
  static mpi_runtime r;
  return r;
}

}  // namespace

std::recursive_mutex& mpi_lock() {
  static std::recursive_mutex m;
  return m;
}

const std::error_category& mpi_category() {
  static const ::cotensor::detail::message_category c("mpi", mpi_message);
  return c;
}

std::exception_ptr mpi_error(int code, const std::string& what) {
  try {
    const std::string message = mpi_category().message(code);
    throw std::system_error(std::error_code(code, mpi_category()), what + ": " + message);
  } catch (...) {
    return std::current_exception();
  }
}

std::shared_ptr<comm_state> world_state() { return runtime().world(); }

void register_split(std::shared_ptr<comm_state> s) { runtime().add(std::move(s)); }

}  // namespace detail

communicator communicator::world() { return communicator(detail::world_state()); }

int communicator::rank() const noexcept { return state_->rank(); }

int communicator::size() const noexcept { return state_->size(); }

bool communicator::broken() const noexcept { return state_->broken(); }

void communicator::set_timeout(std::chrono::milliseconds timeout) const {
  if (timeout.count() <= 0) {
    throw std::invalid_argument("cotensor::dist::communicator::set_timeout: not positive");
  }
  state_->set_timeout(timeout);
}

void communicator::set_fusion(std::size_t max_bytes, std::chrono::microseconds cycle) const {
  if (max_bytes > (std::size_t{1} << 30) || cycle.count() < 0) {
    throw std::invalid_argument("cotensor::dist::communicator::set_fusion: max_bytes over 1 GiB "
                                "or a negative cycle");
  }
  state_->set_fusion(max_bytes, cycle);
}

std::uint64_t communicator::fused_count() const noexcept { return state_->fused(); }

std::uint64_t communicator::helped_count() const noexcept { return state_->helped(); }

communicator communicator::split(int color, int key) const {
  if (color < 0) {
    throw std::invalid_argument("cotensor::dist::split: negative color (MPI_UNDEFINED is not "
                                "supported)");
  }
  if (state_->broken()) {
    std::rethrow_exception(state_->broken_error());
  }
  std::promise<std::shared_ptr<detail::comm_state>> result;
  auto made = result.get_future();
  auto r = std::make_unique<detail::request>();
  r->kind = detail::op_kind::split;
  r->seq = state_->next_seq(true, r->coll_seq);
  r->color = color;
  r->key = key;
  r->split_result = &result;
  state_->post(std::move(r));
  return communicator(made.get());
}

}  // namespace cotensor::dist
