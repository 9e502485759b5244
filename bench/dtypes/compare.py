#!/usr/bin/env python3
"""float16, bfloat16, float32 and float64 throughput, cotensor beside PyTorch on the CPU, in
one table.

Runs `<build>/bench/cotensor_bench_dtypes` (bench/dtypes/main.cpp), then
bench/dtypes/torch_dtypes.py with torch.set_num_threads set to cotensor's worker count, and
prints a markdown table: per dtype, `a * b + c` in ns per element at 10^6 and 10^7 elements and
a 1000 x 1000 matmul in GFLOP/s, each with cotensor's time (or rate) relative to its float32
one and to PyTorch's. The issue's targets: float16/bfloat16 elementwise within 1.5x of float32
time per element, and their matmul at >= 0.8x our SGEMM rate.

Usage, with the project's Python environment (bash bench/peers/setup.sh), from the repository
root:
  .venv/bin/python3 bench/dtypes/compare.py [--build DIR] [--repeat N] [--quick]
"""
import argparse
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
DTYPES = ["float16", "bfloat16", "float32", "float64"]


def run(cmd):
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    out = subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout
    figures, header = {}, []
    for line in out.splitlines():
        if line.startswith("#"):
            header.append(line)
            continue
        key, value = line.rsplit(": ", 1)
        figures[key.split(".", 1)[1]] = float(value)
    return figures, header


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=pathlib.Path, default=REPO / "build")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smoke sizes, one run")
    args = ap.parse_args()
    binary = args.build / "bench" / "cotensor_bench_dtypes"
    if not binary.exists():
        sys.exit(f"compare.py: {binary} is missing: cmake --build {args.build} "
                 "--target cotensor_bench_dtypes")
    flags = ["--quick"] if args.quick else ["--repeat", str(args.repeat)]
    ours, header = run([binary] + flags)
    threads = int(re.search(r"(\d+) worker threads", header[0]).group(1))
    theirs, theirs_header = run([sys.executable, REPO / "bench/dtypes/torch_dtypes.py",
                                 "--threads", threads] + flags)
    sizes = sorted({int(k.rsplit(".", 1)[1]) for k in ours if k.startswith("dtypes_ew_ns.")})
    n = next(int(k.rsplit(".", 1)[1]) for k in ours if k.startswith("dtypes_matmul_gflops."))

    print("\n".join(header + theirs_header))
    print()
    cols = []
    for size in sizes:
        cols += [f"a*b+c ns/elem, n={size:g}", "÷ our f32", "÷ torch"]
    cols += [f"matmul GFLOP/s, {n}²", "÷ our f32", "÷ torch"]
    print("| dtype | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for dt in DTYPES:
        cells = []
        for size in sizes:
            key = f"dtypes_ew_ns.{dt}.{size}"
            base = f"dtypes_ew_ns.float32.{size}"
            cells += [f"{ours[key]:.3f}", f"{ours[key] / ours[base]:.2f}",
                      f"{ours[key] / theirs[key]:.2f}"]
        key = f"dtypes_matmul_gflops.{dt}.{n}"
        base = f"dtypes_matmul_gflops.float32.{n}"
        cells += [f"{ours[key]:.1f}", f"{ours[key] / ours[base]:.2f}",
                  f"{ours[key] / theirs[key]:.2f}"]
        print(f"| {dt} | " + " | ".join(cells) + " |")
    print()
    print("Time ratios (ns/elem) below 1 and rate ratios (GFLOP/s) above 1 favour the first. "
          "PyTorch's figures:")
    for dt in DTYPES:
        ew = ", ".join(f"{theirs[f'dtypes_ew_ns.{dt}.{s}']:.3f} ns/elem" for s in sizes)
        print(f"- torch {dt}: {ew}; matmul {theirs[f'dtypes_matmul_gflops.{dt}.{n}']:.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
