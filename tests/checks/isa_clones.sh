#!/usr/bin/env bash
# The kernels' tests on an older x86 CPU, emulated by qemu-user. The library picks its vector
# code when it loads and as it runs: GCC's function multi-versioning resolves each cloned loop
# (src/cpu/vector_clones.hpp, unary.cpp, randn.cpp) to its AVX-512, AVX2 or SSE2 clone, and the
# dispatchers pick the GEMM (gemm_dispatch.cpp) and attention (attention_avx512.cpp) kernels from
# CPUID. On a machine with AVX-512, as CI's are, the tests only ever run the widest; here
# `qemu-x86_64 -cpu MODEL` answers CPUID as MODEL does, so the same binary runs the narrower
# clones and the fallback kernels, and the same tests (bit-exact references included) judge them.
#
# Usage: bash tests/checks/isa_clones.sh TESTS_BINARY LEVEL
#   LEVEL avx2: -cpu Haswell-v4 (AVX2, FMA, F16C; no AVX-512)
#   LEVEL sse:  -cpu Nehalem-v2 (SSE4.2; no AVX: the baseline clones, no F16C)
# Exit 77 (ctest: skipped) when qemu-x86_64 (Debian's qemu-user) is not installed, saying so.
set -euo pipefail
tests=${1:?usage: isa_clones.sh TESTS_BINARY LEVEL}
level=${2:?usage: isa_clones.sh TESTS_BINARY LEVEL}
case $level in
  avx2) model=Haswell-v4 ;;
  sse) model=Nehalem-v2 ;;
  *) echo "isa_clones.sh: unknown level '$level' (avx2 or sse)" >&2; exit 2 ;;
esac
if ! command -v qemu-x86_64 >/dev/null; then
  echo "isa_clones.sh: qemu-x86_64 not found (apt-get install qemu-user): skipped"
  exit 77
fi

# The suites of the kernels that have clones or run-time picks: elementwise and unary ops,
# reductions, normalisations, conversions between dtypes, random numbers, GEMM (the OpenBLAS and
# converting paths), the language models' ops (attention, RoPE, sampling) and the models'
# logits. The first, "isa", fails unless the emulated CPU is the level asked for.
suites='isa,ops,ops_nn,ops_dtypes,ops.lm,dtype,random,gemm,lm.model'
# Left out: the stress test of OpenBLAS called from two workers at once (8,000 products), which
# tests the library's build of OpenBLAS, not a clone, and under emulation outruns its time limit.
excluded='matmuls on both workers at once are all exact*'
echo "isa_clones.sh: $tests -ts=$suites -tce='$excluded' under qemu-x86_64 -cpu $model"
# OPENBLAS_CORETYPE names the host's kernels (some machines set it for a CPU their OpenBLAS does
# not know); the emulated CPU lacks their instructions, so OpenBLAS picks its own from CPUID here.
unset OPENBLAS_CORETYPE
COTENSOR_TEST_EXPECT_ISA=$level exec qemu-x86_64 -cpu "$model" "$tests" -ts="$suites" -tce="$excluded"
