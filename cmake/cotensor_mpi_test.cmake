# cotensor_add_mpi_test(<name> <ranks> [ENV <var=value>...] COMMAND <command>...): a CTest test
# running <command> on <ranks> processes of this machine through mpirun, label `distributed`.
# --oversubscribe: more ranks than cores (CI has 2); --bind-to none: ranks share the cores
# with their own worker threads. Open MPI refuses root without the two variables.
# cotensor_mpi_test_environment(<out_var> [<var=value>...]): the environment of a test's ranks:
# 2 worker threads each, the given variables, the tests' own, and under ASan the suppressions of
# Open MPI's own allocations, never freed at MPI_Finalize (see the file).
function(cotensor_mpi_test_environment out_var)
  set(env COTENSOR_NUM_THREADS=2 ${ARGN})
  if(COTENSOR_TEST_ENVIRONMENT)
    list(APPEND env ${COTENSOR_TEST_ENVIRONMENT})
  endif()
  if(COTENSOR_SANITIZE MATCHES "address")
    list(APPEND env "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/distributed/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0")
  endif()
  set(${out_var} "${env}" PARENT_SCOPE)
endfunction()

function(cotensor_add_mpi_test name ranks)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "ENV;COMMAND")
  if(NOT MPIEXEC_EXECUTABLE)
    message(WARNING "cotensor: no mpirun found (Debian: openmpi-bin): test ${name} not added")
    return()
  endif()
  add_test(NAME ${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --oversubscribe --bind-to none
            ${MPIEXEC_PREFLAGS} ${arg_COMMAND} ${MPIEXEC_POSTFLAGS})
  cotensor_mpi_test_environment(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    ${arg_ENV})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 120 LABELS distributed
    PROCESSORS ${ranks})
endfunction()
