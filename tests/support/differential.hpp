#pragma once

// Random programs for differential tests of the engine: programs of tensor ops over a handful of
// live tensors (shapes of rank 0 to 3 with broadcasting, reshapes sharing a buffer, in-place
// writes, random waits), run by cotensor and by a plain sequential interpreter written here, which
// uses no cotensor call. Any mistake in the engine's ordering of reads and writes — a read
// that misses an earlier write, a write that overtakes a read — shows up as a different value.
//
// Comparison:
// - Elementwise ops must give bit-identical results: the kernels use plain float arithmetic
//   (no FMA contraction), and the reference computes exactly the same float expressions.
//   exp, tanh and sigmoid are the exception: cotensor computes them with glibc's vector math
//   library (within 4 ulp), the reference with libm (within 1), so they are compared with a
//   tolerance of 1e-5 relative (~80 ulp, far below any mistake in the data) plus 1e-30.
// - matmul (OpenBLAS), sum and mean (accumulated in double by the engine, in some order) are
//   compared with a tolerance of 1e-4 relative to the sum of the magnitudes of the terms, plus
//   1e-5 absolute (the error bound of a dot product or a sum, far above float rounding for our
//   sizes, far below any mistake in the data). So that the rest of the program stays
//   bit-comparable, the engine copies each such result as it is made (`r * 1.0F`, exact), and
//   the reference adopts that copy once it has checked it.
// - Every value is checked: the live handles at the end, reads in the middle, and the value of
//   each handle the program drops, through an exact copy made when it is dropped.
// - Values stay bounded (|x| <= 1e4, no division by a value near zero, exp only of small
//   values): programs never produce inf or NaN, which would make different values compare
//   alike.
// On a mismatch, the failure names the seed, the op index and the whole program: every program
// is a deterministic function of its seed (std::mt19937, no library distributions).

//
// Used by tests/differential_test.cpp (programs from seeds) and by the libFuzzer target
// tests/fuzz/program_fuzzer.cpp (programs drawn from the fuzzer's bytes).
//
// The parts, in tests/support/differential/: program.hpp (the program model), generator.hpp
// (random programs from a seed), runner.hpp (a program run on cotensor) and reference.hpp (the
// sequential reference that checks the run).

#include "differential/generator.hpp"
#include "differential/program.hpp"
#include "differential/reference.hpp"
#include "differential/runner.hpp"
