#pragma once

// The flat loops of the elementwise ops, one clone per x86 vector width: GCC's function
// multi-versioning picks AVX-512's sixteen lanes, AVX2's eight or SSE2's four when the library
// loads. Each element is the same IEEE operations in every clone, so every clone gives the
// same bits. Not in the TSan build: a clone's resolver runs before the TSan runtime has started
// (see randn.cpp).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define COTENSOR_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COTENSOR_VECTOR_CLONES
#endif

// On a cloned function whose loops sit in the functions it calls (an op's lambda, a loop
// template): inlines them all, so each clone compiles them for its own vector width. A callee
// left out of line is compiled for the baseline (SSE2) only.
#if defined(__GNUC__)
#define COTENSOR_FLATTEN __attribute__((flatten))
#else
#define COTENSOR_FLATTEN
#endif
