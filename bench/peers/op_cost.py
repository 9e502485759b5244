#!/usr/bin/env python3
"""Per-op cost against tensor size: cotensor, NumPy and PyTorch on `y = x + 1`, and on exp,
log, tanh and sigmoid.

Runs `<build>/bench/cotensor_bench_op_cost --repeat N` (cotensor, issued asynchronously and
waited once, and waited after each op), then times NumPy and PyTorch on the same float32
vectors in the project's Python environment (bash bench/peers/setup.sh: NumPy 2, PyTorch 2; both are synchronous: each op has finished when it
returns), and prints a markdown table of microseconds per op with the ratios, then a second
one for `y = f(x)` with f in exp, log, tanh and sigmoid at 10^4 and 10^6 elements (cotensor
waited after each op; NumPy has no sigmoid: 1 / (1 + exp(-x)), three ops). With --plot it also
draws the four curves of the first table, log-log, into a PNG (matplotlib, in the same environment).

The peers are timed like cotensor: the median of N runs after a warm-up, each run
max(100, min(10000, 2*10^7 / n)) ops. Torch runs with its default threads.

Usage (from the repository root, with the environment built):
  .venv/bin/python3 bench/peers/op_cost.py [--repeat N] [--build DIR] [--python PY]
      [--plot FILE.png] [--out FILE.md]
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import REPO, check_peers, cpu_model, fail, fmt, peer_python, ratio, run  # noqa: E402

SIZES = [10**k for k in range(8)]
UNARY_SIZES = [10**4, 10**6]
FUNCTIONS = ["exp", "log", "tanh", "sigmoid"]

# Runs in the peers' interpreter: prints `numpy.add_us.<n>: <us>` and `torch.add_us.<n>: <us>`.
PEER_CODE = r"""
import statistics, sys, time
import numpy as np
import torch
repeat = int(sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split(",")]
UNARY_SIZES = [int(s) for s in sys.argv[3].split(",")]
print(f"# numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
def ops(n):
    return max(100, min(10000, 20_000_000 // n))
def per_op_us(make, n):
    x = make(n)
    count = ops(n)
    def once():
        start = time.perf_counter()
        for _ in range(count):
            y = x + 1
        return time.perf_counter() - start
    once()
    return statistics.median(once() for _ in range(repeat)) / count * 1e6
for n in sizes:
    print(f"numpy.add_us.{n}: {per_op_us(lambda k: np.ones(k, dtype=np.float32), n):.6f}")
    print(f"torch.add_us.{n}: {per_op_us(lambda k: torch.ones(k, dtype=torch.float32), n):.6f}")
    sys.stdout.flush()
def function_us(f, x, n):
    count = ops(n)
    def once():
        start = time.perf_counter()
        for _ in range(count):
            f(x)
        return time.perf_counter() - start
    once()
    return statistics.median(once() for _ in range(repeat)) / count * 1e6
numpy_functions = {"exp": np.exp, "log": np.log, "tanh": np.tanh,
                   "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
torch_functions = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh,
                   "sigmoid": torch.sigmoid}
for n in UNARY_SIZES:
    xn = np.exp(np.random.default_rng(0).standard_normal(n, dtype=np.float32) * 0.5)
    xt = torch.from_numpy(xn.copy())
    for name in numpy_functions:
        print(f"numpy.{name}_us.{n}: {function_us(numpy_functions[name], xn, n):.6f}")
        print(f"torch.{name}_us.{n}: {function_us(torch_functions[name], xt, n):.6f}")
    sys.stdout.flush()
"""


def table(figures):
    rows = [
        "| elements | cotensor async µs/op | cotensor sync µs/op | NumPy µs/op | PyTorch µs/op "
        "| async/NumPy | async/PyTorch |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in SIZES:
        a = figures.get(f"cotensor.add_async_us.{n}")
        s = figures.get(f"cotensor.add_sync_us.{n}")
        p = figures.get(f"numpy.add_us.{n}")
        t = figures.get(f"torch.add_us.{n}")
        rows.append(f"| {n:,} | {fmt(a)} | {fmt(s)} | {fmt(p)} | {fmt(t)} | {ratio(a, p)} "
                    f"| {ratio(a, t)} |")
    return "\n".join(rows)


def function_table(figures):
    rows = [
        "| f(x) | elements | cotensor µs/op | NumPy µs/op | PyTorch µs/op | cotensor/NumPy "
        "| cotensor/PyTorch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in UNARY_SIZES:
        for name in FUNCTIONS:
            c = figures.get(f"cotensor.{name}_us.{n}")
            p = figures.get(f"numpy.{name}_us.{n}")
            t = figures.get(f"torch.{name}_us.{n}")
            rows.append(f"| {name} | {n:,} | {fmt(c)} | {fmt(p)} | {fmt(t)} | {ratio(c, p)} "
                        f"| {ratio(c, t)} |")
    return "\n".join(rows)


def plot(figures, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("--plot needs matplotlib (in the project's environment: bash bench/peers/setup.sh)")
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    series = [
        ("cotensor.add_async_us", "cotensor, waited once", "-o"),
        ("cotensor.add_sync_us", "cotensor, waited each op", "--o"),
        ("numpy.add_us", "NumPy", "-s"),
        ("torch.add_us", "PyTorch", "-^"),
    ]
    for key, label, style in series:
        xs = [n for n in SIZES if f"{key}.{n}" in figures]
        ax.plot(xs, [figures[f"{key}.{n}"] for n in xs], style, label=label, markersize=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("elements in x (float32)")
    ax.set_ylabel("µs per `y = x + 1`")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"op_cost.py: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per figure (median)")
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="cotensor build directory (default: build)")
    ap.add_argument("--python", help="the peers' interpreter (default: .venv/bin/python3)")
    ap.add_argument("--plot", help="write the curves to this PNG")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    if args.repeat < 1:
        fail("--repeat needs a positive integer")
    bench = Path(args.build) / "bench" / "cotensor_bench_op_cost"
    if not os.access(bench, os.X_OK):
        fail(f"{bench} not found: build it first (cmake --build {args.build})")
    python = peer_python(args.python)
    check_peers(python, ["numpy", "torch"])

    ours, our_notes = run([bench, "--repeat", args.repeat])
    peers, peer_notes = run([python, "-c", PEER_CODE, args.repeat,
                             ",".join(map(str, SIZES)), ",".join(map(str, UNARY_SIZES))])
    figures = {**ours, **peers}

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{cpu_model()} ({os.cpu_count()} logical cores)"
    text = (table(figures) + "\n\n" + function_table(figures) + "\n\n"
            f"Microseconds per op, median of {args.repeat} runs after a warm-up. Measured {now} "
            f"on {machine}; " + "; ".join(our_notes + peer_notes) + ".\n")
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    if args.plot:
        plot(figures, args.plot, f"y = x + 1, per op — {machine}, {now[:10]}")


if __name__ == "__main__":
    main()
