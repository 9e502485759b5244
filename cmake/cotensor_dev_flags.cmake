# Warnings and sanitizers for every target cotensor builds, linked PRIVATE; never global flags.
add_library(cotensor_dev_flags INTERFACE)
# C++ only: nvcc takes host-compiler flags through -Xcompiler (the CUDA files get theirs below).
target_compile_options(cotensor_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual -Wcast-qual
  $<$<BOOL:${COTENSOR_WARNINGS_AS_ERRORS}>:-Werror>>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra
  $<$<BOOL:${COTENSOR_WARNINGS_AS_ERRORS}>:-Werror=all-warnings>>)
# Debug information: the libraries (cotensor, cotensor::serving: what gets installed and what a
# user debugs into) keep the build type's full -g; the tests, examples and benchmarks get line
# tables only (-g1), which is what backtraces and sanitizer reports use (file:line, inlined
# frames) and costs about 27 % less compile time than -g (measured on wait_test.cpp and
# cotensor_server.cpp, docs/performance.md "Build"). A target that sets the property
# COTENSOR_FULL_DEBUG_INFO keeps -g; -DCOTENSOR_FULL_DEBUG_INFO=ON keeps it everywhere, for
# stepping through a test in a debugger.
option(COTENSOR_FULL_DEBUG_INFO "Full -g in tests, examples and benchmarks too" OFF)
if(NOT COTENSOR_FULL_DEBUG_INFO AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(cotensor_dev_flags INTERFACE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:RelWithDebInfo,Debug>,$<NOT:$<BOOL:$<TARGET_PROPERTY:COTENSOR_FULL_DEBUG_INFO>>>>:-g1>)
endif()
# clang (the fuzzer build) does not know some GCC warning names that our sources silence with
# `#pragma GCC diagnostic`.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(cotensor_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-warning-option>)
endif()
if(COTENSOR_SANITIZE)
  target_compile_options(cotensor_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:
    -fsanitize=${COTENSOR_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(cotensor_dev_flags INTERFACE -fsanitize=${COTENSOR_SANITIZE})
  # GCC 12 warns (-Wtsan) that TSan does not model atomic_thread_fence, which Asio's
  # std_fenced_block uses around every handler it runs. Those fences sit next to the mutex
  # hand-offs of Asio's queues, which TSan does model: a race the fences alone would order shows
  # up as a report, not as silence. The warning is about Asio's headers, not our code.
  if(COTENSOR_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(cotensor_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
  endif()
  # GCC's manual: "sanitizers tend to increase the rate of false positive warnings, most notably
  # those around -Wmaybe-uninitialized". Seen here inside GCC's own AVX-512 intrinsics (their
  # `__m512i __Y = __Y;` idiom). These two stay warnings, not errors, in sanitizer builds only;
  # the default build keeps them errors.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(cotensor_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:
      -Wno-error=maybe-uninitialized -Wno-error=uninitialized>)
  endif()
endif()

# What every test needs in its environment in a sanitizer build, carried by the test itself
# (ctest's ENVIRONMENT property) so that plain `ctest` passes, not only the presets: ASan must
# return null for the 16 TiB allocation test instead of aborting; TSan needs our suppressions.
# One variable per build, so that it passes through doctest_discover_tests' PROPERTIES.
set(COTENSOR_TEST_ENVIRONMENT "")
if(COTENSOR_SANITIZE MATCHES "address")
  set(COTENSOR_TEST_ENVIRONMENT
    "ASAN_OPTIONS=detect_leaks=1:strict_init_order=1:check_initialization_order=1:allocator_may_return_null=1")
elseif(COTENSOR_SANITIZE MATCHES "thread")
  set(COTENSOR_TEST_ENVIRONMENT
    "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp")
endif()
# The ctest properties every test of ours gets: `set_tests_properties(t PROPERTIES
# ${COTENSOR_TEST_PROPERTIES} ...)`, or doctest_discover_tests(... PROPERTIES ...).
set(COTENSOR_TEST_PROPERTIES)
if(COTENSOR_TEST_ENVIRONMENT)
  set(COTENSOR_TEST_PROPERTIES ENVIRONMENT "${COTENSOR_TEST_ENVIRONMENT}")
endif()

# What runs the backend's work: a oneTBB arena (tbb), or a plain std::thread pool (std) whose
# synchronisation ThreadSanitizer can see. Debian's libtbb is not instrumented, so TSan cannot
# see the happens-before edges of a task_arena hand-off and reports races that are not there:
# a TSan build always uses std. Reaches the code as COTENSOR_STD_THREADS in cotensor/config.hpp.
set(COTENSOR_THREAD_BACKEND "tbb" CACHE STRING "Backend threads: tbb or std (forced in TSan builds)")
set_property(CACHE COTENSOR_THREAD_BACKEND PROPERTY STRINGS tbb std)
if(COTENSOR_SANITIZE MATCHES "thread" AND NOT COTENSOR_THREAD_BACKEND STREQUAL "std")
  message(STATUS "cotensor: COTENSOR_SANITIZE=${COTENSOR_SANITIZE}: using the std thread backend")
  set(COTENSOR_THREAD_BACKEND "std" CACHE STRING "Backend threads: tbb or std" FORCE)
endif()
if(COTENSOR_THREAD_BACKEND STREQUAL "std")
  set(COTENSOR_STD_THREADS ON)
elseif(COTENSOR_THREAD_BACKEND STREQUAL "tbb")
  set(COTENSOR_STD_THREADS OFF)
else()
  message(FATAL_ERROR "COTENSOR_THREAD_BACKEND must be tbb or std, not '${COTENSOR_THREAD_BACKEND}'")
endif()

# The fuzzer build: coverage instrumentation for libFuzzer in everything we build, so that the
# engine's branches guide it (tests/fuzz links -fsanitize=fuzzer itself).
if(COTENSOR_FUZZ)
  target_compile_options(cotensor_dev_flags INTERFACE -fsanitize=fuzzer-no-link)
endif()
