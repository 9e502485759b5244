# cotensor_add_mpi_test(<name> <ranks> [ENV <var=value>...] COMMAND <command>...): a CTest test
# running <command> on <ranks> processes of this machine through mpirun, label `distributed`.
# --oversubscribe: more ranks than cores (CI has 2); --bind-to none: ranks share the cores
# with their own worker threads. Open MPI refuses root without the two variables.
function(cotensor_add_mpi_test name ranks)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "ENV;COMMAND")
  if(NOT MPIEXEC_EXECUTABLE)
    message(WARNING "cotensor: no mpirun found (Debian: openmpi-bin): test ${name} not added")
    return()
  endif()
  add_test(NAME ${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --oversubscribe --bind-to none
            ${MPIEXEC_PREFLAGS} ${arg_COMMAND} ${MPIEXEC_POSTFLAGS})
  set(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 COTENSOR_NUM_THREADS=2 ${arg_ENV})
  if(COTENSOR_TEST_ENVIRONMENT)
    list(APPEND env ${COTENSOR_TEST_ENVIRONMENT})
  endif()
  # Open MPI's own allocations, never freed at MPI_Finalize (see the file).
  if(COTENSOR_SANITIZE MATCHES "address")
    list(APPEND env "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/distributed/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0")
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 120 LABELS distributed
    PROCESSORS ${ranks})
endfunction()
