# A CBLAS for CPU GEMM: OpenBLAS from Debian, which ships a CMake config. GEMM tiles are
# scheduled by oneTBB alone, each one a single-threaded SGEMM call, so the single-threaded build
# (libopenblas-serial-dev) is preferred: the pthread build (libopenblas-dev's default) starts a
# thread pool of its own when the library loads, which spins in sched_yield for its first
# ~0.1 s of CPU beside the oneTBB workers. Any other OpenBLAS build works too: its threading is
# switched off at run time (cpu::init_backend).
find_package(OpenBLAS CONFIG REQUIRED
  HINTS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-serial/cmake/openblas)
find_path(Random123_INCLUDE_DIR Random123/philox.h REQUIRED)
add_library(cotensor_blas INTERFACE)
target_include_directories(cotensor_blas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(cotensor_blas INTERFACE ${OpenBLAS_LIBRARIES})
