# A CBLAS for CPU GEMM: OpenBLAS from Debian (libopenblas-dev, which ships a CMake config). Only
# its header is used at build time: libcotensor opens the library with the first GEMM
# (src/cpu/openblas.cpp), by its SONAME, then by the file found here, so that it can choose
# OpenBLAS's kernels before OpenBLAS's constructor does. Its own threading is switched off then,
# so that GEMM tiles are scheduled by oneTBB alone.
find_package(OpenBLAS CONFIG REQUIRED)
find_path(Random123_INCLUDE_DIR Random123/philox.h REQUIRED)
list(GET OpenBLAS_LIBRARIES 0 cotensor_openblas_file)
get_filename_component(cotensor_openblas_file "${cotensor_openblas_file}" REALPATH)
set(cotensor_openblas_soname "libopenblas.so.0")
find_program(COTENSOR_OBJDUMP NAMES objdump)
if(COTENSOR_OBJDUMP)
  execute_process(COMMAND ${COTENSOR_OBJDUMP} -p "${cotensor_openblas_file}"
    OUTPUT_VARIABLE cotensor_openblas_headers ERROR_QUIET)
  if(cotensor_openblas_headers MATCHES "SONAME +([^\n ]+)")
    set(cotensor_openblas_soname "${CMAKE_MATCH_1}")
  endif()
endif()
message(STATUS "cotensor: OpenBLAS ${cotensor_openblas_soname} (${cotensor_openblas_file}), opened at the first GEMM")
add_library(cotensor_blas INTERFACE)
target_include_directories(cotensor_blas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_compile_definitions(cotensor_blas INTERFACE
  COTENSOR_OPENBLAS_SONAME="${cotensor_openblas_soname}"
  COTENSOR_OPENBLAS_LIBRARY="${cotensor_openblas_file}")
target_link_libraries(cotensor_blas INTERFACE ${CMAKE_DL_LIBS})
