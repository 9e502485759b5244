// Nothing MPI-specific: the library initialises MPI on first use and finalises it at exit.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
