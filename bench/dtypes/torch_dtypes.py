#!/usr/bin/env python3
"""PyTorch on the CPU timed as bench/dtypes/main.cpp times cotensor: `a * b + c` in ns per
element at 10^6 and 10^7 elements, and an n x n matmul in GFLOP/s at n = 1000, for float16,
bfloat16, float32 and float64, each the median of --repeat runs after a warm-up. Prints one
`torch.<name>: <value>` line per figure, with cotensor's names. --threads sets
torch.set_num_threads (bench/dtypes/compare.py passes cotensor's worker count); --quick is the
smoke size (10^5 elements, n = 200, one run).

Runs with the project's Python environment (bash bench/peers/setup.sh):
  .venv/bin/python3 bench/dtypes/torch_dtypes.py [--threads N] [--repeat N] [--quick]
"""
import argparse
import statistics
import time

import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}


def median_seconds(repeat, f):
    f()
    return statistics.median(f() for _ in range(repeat))


def elementwise_ns(repeat, dtype, n):
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(n, generator=g).to(dtype) for _ in range(3))
    count = max(1, 50_000_000 // n)

    def run():
        start = time.perf_counter()
        for _ in range(count):
            a * b + c
        return time.perf_counter() - start

    return median_seconds(repeat, run) / count / n * 1e9


def matmul_gflops(repeat, dtype, n):
    g = torch.Generator().manual_seed(2)
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))

    def run():
        start = time.perf_counter()
        torch.matmul(a, b)
        return time.perf_counter() - start

    return 2 * n**3 / median_seconds(repeat, run) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    repeat = 1 if args.quick else args.repeat
    sizes = [100_000] if args.quick else [1_000_000, 10_000_000]
    n = 200 if args.quick else 1000
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, median of {repeat} "
          "after 1 warm-up", flush=True)
    for name, dtype in DTYPES.items():
        for size in sizes:
            print(f"torch.dtypes_ew_ns.{name}.{size}: {elementwise_ns(repeat, dtype, size):.6f}",
                  flush=True)
        print(f"torch.dtypes_matmul_gflops.{name}.{n}: {matmul_gflops(repeat, dtype, n):.6f}",
              flush=True)


if __name__ == "__main__":
    main()
