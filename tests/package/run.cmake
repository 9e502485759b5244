# Installs the build in BUILD_DIR to a private prefix, then configures, builds and runs the
# consumer project in SOURCE_DIR against it with find_package(cotensor CONFIG).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
set(config_args)
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} ${config_args})
# The consumer is built with the same generator, build tool and compiler as cotensor: a
# machine set up by cmake/install-deps.sh has Ninja but no make. Against a sanitizer build of
# cotensor it is built with the same sanitizers: their runtime must come first in the program.
set(sanitize_args)
if(SANITIZE)
  set(sanitize_args "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}"
                    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G "${GENERATOR}"
    -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DEXPECT_SERVING=${EXPECT_SERVING}
    ${sanitize_args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(EXPECT_SERVING)
  # The consumer's Boost.JSON and the library's hidden copy are two sets of globals by design;
  # ASan's ODR check matches globals by name across modules and reports these too. Level 1
  # still reports a same-named global whose size differs.
  if(DEFINED ENV{ASAN_OPTIONS} AND NOT "$ENV{ASAN_OPTIONS}" STREQUAL "")
    set(ENV{ASAN_OPTIONS} "$ENV{ASAN_OPTIONS}:detect_odr_violation=1")
  else()
    set(ENV{ASAN_OPTIONS} "detect_odr_violation=1")
  endif()
  run(${WORK_DIR}/build/serving_consumer)
endif()
