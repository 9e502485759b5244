#pragma once

// OpenBLAS, opened when the first GEMM needs it (dlopen), not when libcotensor loads: so that
// cotensor can choose the kernels OpenBLAS runs before its constructor picks them.
//
// Debian 12's OpenBLAS 0.3.21 (a DYNAMIC_ARCH build) picks its kernels by CPU model when it
// loads, and falls back to "Prescott" (SSE3) on a model it does not know, however wide the
// CPU's vectors: on a Sapphire Rapids Xeon it ran SGEMM at 65 GFLOP/s on 2 cores instead of the
// 280 its AVX-512 kernels reach (docs/performance.md, "OpenBLAS's kernels"). Its only switch is
// the environment variable OPENBLAS_CORETYPE, read in that constructor. When the variable is
// unset, cotensor sets it to the kernel set the CPU's instructions allow (openblas_coretype),
// opens the library and unsets it again, so that no child process inherits it. It does the same
// with OPENBLAS_NUM_THREADS=1, so that OpenBLAS starts no thread pool (oneTBB runs the tiles;
// the pool's thread would spin ~0.13 s of CPU after the load). A user's own variables are left
// alone, and a process that already has OpenBLAS loaded keeps the kernels it chose.
//
// The variables are set for the ~1.5 ms of the dlopen, on the thread that runs the first GEMM,
// under an exclusive lock of environment_mutex() (environment.hpp): cotensor's own threads
// neither read the environment nor start MPI, NCCL or a CUDA library meanwhile. A thread of the
// program that calls getenv, setenv, unsetenv or putenv at that moment races with it (glibc's
// setenv may free the array a concurrent getenv walks). A program that sets both variables
// itself, before it starts threads, changes nothing and runs no such risk.

#include <cblas.h>

#include <string>

namespace cotensor::detail::cpu {

/// The OpenBLAS functions cotensor calls, and what it runs.
struct openblas_library {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  /// The kernel set OpenBLAS runs ("Cooperlake", "SkylakeX", "Haswell", "Prescott", ...).
  std::string core;
  /// What cotensor set OPENBLAS_CORETYPE to while opening it; empty if it set nothing.
  std::string coretype_set;
  /// Whether cotensor set OPENBLAS_NUM_THREADS=1 while opening it (the user had not set it).
  bool num_threads_set = false;
};

/// Opens OpenBLAS once (thread-safe; later calls return the same object) and switches its own
/// threads off: oneTBB schedules the GEMM tiles. Throws std::runtime_error naming the library
/// and each path tried when it cannot be opened, which fails the op that needed it.
const openblas_library& openblas();

/// The OPENBLAS_CORETYPE for this CPU's instructions: "Cooperlake" with AVX-512 BF16,
/// "SkylakeX" with AVX-512 F/CD/BW/DQ/VL, "Haswell" with AVX2 and FMA, else null (OpenBLAS's own
/// choice stands).
const char* openblas_coretype() noexcept;

}  // namespace cotensor::detail::cpu
