# A CBLAS for CPU GEMM. OpenBLAS from Debian (libopenblas-dev) ships a CMake config; its own
# threading is switched off at run time so that GEMM tiles are scheduled by oneTBB alone.
find_package(OpenBLAS CONFIG REQUIRED)
find_path(Random123_INCLUDE_DIR Random123/philox.h REQUIRED)
add_library(cotensor_blas INTERFACE)
target_include_directories(cotensor_blas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(cotensor_blas INTERFACE ${OpenBLAS_LIBRARIES})
