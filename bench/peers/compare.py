#!/usr/bin/env python3
"""cotensor beside today's peers (NumPy 2, PyTorch 2, JAX, MLX) on the d2l.ai chapter
"Asynchronous Computation".

Runs, one after the other on this machine, cotensor's chapter benchmark
(`<build>/bench/cotensor_bench_chapter --repeat N`) and each peer's (bench/peers/peers.py
--peer P, one process per peer) in the project's Python environment (bash bench/peers/setup.sh;
its packages are pinned in requirements.txt), and prints one markdown table: each figure, its
unit, every value, the fastest peer and the ratio cotensor / fastest peer; then the targets
(met or not), the date (UTC), the machine and the versions. With --plot it draws the ratios of
cotensor to each peer into a PNG.

Ratios are cotensor / peer. For seconds (lower is better) a ratio below 1 means cotensor is
faster; for GFLOP/s (higher is better) a ratio above 1 means cotensor is faster.

With --rounds R (default 3) cotensor and the peers run alternately R times, in turn (cotensor,
NumPy, PyTorch, JAX, MLX), and each value is the median over the rounds of the per-round
medians: on a shared machine whose speed drifts within minutes, alternating exposes every side
to the same drift, where one run of each would compare different machines.

Usage (from the repository root, with the environment built):
  .venv/bin/python3 bench/peers/compare.py [--repeat N] [--rounds R] [--build DIR]
      [--peers numpy,torch,jax,mlx] [--python PY] [--quick] [--out FILE.md] [--plot FILE.png]

--python is the interpreter the peers run in (default: COTENSOR_PYTHON, else .venv/bin/python3);
the script itself needs only the standard library (and matplotlib for --plot).
"""
import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PEERS_SCRIPT = Path(__file__).resolve().parent / "peers.py"
PEER_NAMES = {"numpy": "NumPy", "torch": "PyTorch", "jax": "JAX", "mlx": "MLX"}

# (figure, unit, higher_is_better); the peer keys are `<peer>.<figure>`.
FIGURES = [
    ("matmul_loop_f32", "s", False),
    ("matmul_loop_enqueue", "s", False),
    ("dependency_graph_1000", "s", False),
    ("increment_10000", "s", False),
    ("increment_10000_sync", "s", False),
    ("numpy_conversion", "s", False),
    ("numpy_copy", "s", False),
    ("scalar_conversion", "s", False),
    ("sgemm_1000_gflops", "GFLOP/s", True),
    ("sgemm_2000_gflops", "GFLOP/s", True),
    ("sgemm_4000_gflops", "GFLOP/s", True),
    ("bf16_gemm_1000_gflops", "GFLOP/s", True),
    ("bf16_gemm_2000_gflops", "GFLOP/s", True),
    ("bf16_gemm_4000_gflops", "GFLOP/s", True),
]

# The targets: (figure, bound on cotensor / fastest peer, "<=" or ">="): the peers' issue's
# (increment_10000) and the GEMM issue's.
TARGETS = [
    ("matmul_loop_f32", 0.85, "<="),
    ("increment_10000", 0.5, "<="),
    ("numpy_conversion", 1.0, "<="),
    ("numpy_copy", 1.0, "<="),
    ("scalar_conversion", 1.0, "<="),
    ("sgemm_1000_gflops", 1.0, ">="),
    ("sgemm_2000_gflops", 1.0, ">="),
    ("sgemm_4000_gflops", 1.0, ">="),
    ("bf16_gemm_1000_gflops", 1.0, ">="),
    ("bf16_gemm_2000_gflops", 1.0, ">="),
    ("bf16_gemm_4000_gflops", 1.0, ">="),
]


def fail(message):
    print(f"compare.py: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd, env=None):
    """Runs `cmd`, echoing it to stderr; returns (figures, comment lines) parsed from stdout,
    whose lines are `# comment` or `<prefix>.<name>: <value>`."""
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        fail(f"{cmd[0]} exited with status {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    figures, comments = {}, []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("#"):
            comments.append(line.lstrip("# "))
        elif ":" in line:
            key, _, value = line.partition(":")
            try:
                figures[key.strip()] = float(value)
            except ValueError:
                pass
    return figures, comments


def peer_python(explicit=None):
    """The interpreter of the project's Python environment, checked to import the peers."""
    python = explicit or os.environ.get("COTENSOR_PYTHON") or str(REPO / ".venv" / "bin" /
                                                                  "python3")
    if not os.access(python, os.X_OK):
        fail(f"{python} not found: build the project's Python environment first "
             "(bash bench/peers/setup.sh), or pass --python")
    return python


def check_peers(python, peers):
    modules = {"numpy": "numpy", "torch": "torch", "jax": "jax", "mlx": "mlx.core"}
    code = "import " + ", ".join(modules[p] for p in peers)
    probe = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        fail(f"{python} cannot import the peers ({last}): rebuild the environment with "
             "bash bench/peers/setup.sh")


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_of(rounds):
    """Per key, the median of its values over the rounds that have it."""
    keys = {key for r in rounds for key in r}
    return {key: statistics.median(r[key] for r in rounds if key in r) for key in keys}


def fmt(value):
    if value is None:
        return "—"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def ratio(ours, theirs):
    if ours is None or theirs is None or theirs == 0:
        return "—"
    return f"{ours / theirs:.2f}"


def fastest(figures, peers, name, higher):
    """(peer, value) of the best peer on `name`, or (None, None) when none has it."""
    have = [(p, figures[f"{p}.{name}"]) for p in peers if f"{p}.{name}" in figures]
    if not have:
        return None, None
    return (max if higher else min)(have, key=lambda pv: pv[1])


def table(figures, peers):
    head = " | ".join(PEER_NAMES[p] for p in peers)
    rows = [f"| figure | unit | cotensor | {head} | fastest peer | cotensor/fastest |",
            "| --- | --- | ---: | " + " | ".join("---:" for _ in peers) + " | --- | ---: |"]
    for name, unit, higher in FIGURES:
        c = figures.get(f"cotensor.{name}")
        values = [figures.get(f"{p}.{name}") for p in peers]
        if c is None and all(v is None for v in values):
            continue
        best, best_value = fastest(figures, peers, name, higher)
        better = "higher is better" if higher else "lower is better"
        cells = " | ".join(fmt(v) for v in values)
        rows.append(f"| `{name}` | {unit} ({better}) | {fmt(c)} | {cells} "
                    f"| {PEER_NAMES.get(best, '—')} | {ratio(c, best_value)} |")
    return "\n".join(rows)


def targets(figures, peers):
    lines = []
    for name, bound, op in TARGETS:
        higher = op == ">="
        c = figures.get(f"cotensor.{name}")
        best, best_value = fastest(figures, peers, name, higher)
        if c is None or best_value is None:
            continue
        r = c / best_value
        met = r >= bound if higher else r <= bound
        lines.append(f"- `{name}`: cotensor / {PEER_NAMES[best]} = {r:.2f}, target {op} {bound}: "
                     + ("met" if met else "**not met**"))
    return "\n".join(lines)


def plot(figures, peers, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("--plot needs matplotlib (in the project's environment: bash bench/peers/setup.sh)")
    names = [(n, h) for n, _, h in FIGURES if f"cotensor.{n}" in figures]
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    width = 0.8 / len(peers)
    for i, peer in enumerate(peers):
        xs, ys = [], []
        for k, (name, higher) in enumerate(names):
            theirs = figures.get(f"{peer}.{name}")
            if theirs:
                ours = figures[f"cotensor.{name}"]
                # Speed-up of cotensor over the peer: above 1 is cotensor faster, for either unit.
                xs.append(k + (i - (len(peers) - 1) / 2) * width)
                ys.append(ours / theirs if higher else theirs / ours)
        ax.bar(xs, ys, width, label=PEER_NAMES[peer])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), [n for n, _ in names], rotation=30, ha="right",
                  fontsize=8)
    ax.set_ylabel("cotensor's speed-up over the peer (>1: cotensor faster)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"compare.py: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per figure (median)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate cotensor and the peers this many times (median over rounds)")
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="cotensor build directory (default: build)")
    ap.add_argument("--peers", default="numpy,torch,jax,mlx",
                    help="comma-separated peers among numpy, torch, jax, mlx")
    ap.add_argument("--python", help="the peers' interpreter (default: .venv/bin/python3)")
    ap.add_argument("--quick", action="store_true", help="one run each, no n = 4000 (a smoke test)")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--plot", help="draw cotensor's speed-up over each peer into this PNG")
    args = ap.parse_args()
    if args.repeat < 1 or args.rounds < 1:
        fail("--repeat and --rounds need positive integers")
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEER_NAMES]
    if unknown or not peers:
        fail(f"unknown peer(s) {', '.join(unknown) or '(none)'}: pick among numpy, torch, jax, mlx")

    bench = Path(args.build) / "bench" / "cotensor_bench_chapter"
    if not os.access(bench, os.X_OK):
        fail(f"{bench} not found: build it first (cmake --build {args.build})")
    python = peer_python(args.python)
    check_peers(python, peers)

    threads = os.cpu_count()
    tail = ["--quick"] if args.quick else ["--repeat", args.repeat]
    rounds = []
    notes = {}
    for _ in range(args.rounds):
        figures, notes["cotensor"] = run([bench, *tail])
        for peer in peers:
            theirs, notes[peer] = run([python, PEERS_SCRIPT, "--peer", peer, "--threads", threads,
                                       *tail])
            figures.update(theirs)
        rounds.append(figures)
    figures = median_of(rounds)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{cpu_model()} ({os.cpu_count()} logical cores, {platform.system()} " \
              f"{platform.release()})"
    versions = "; ".join(n for side in ["cotensor", *peers] for n in notes[side])
    runs = "one run" if args.quick else f"the median of {args.repeat} runs after a warm-up"
    text = (
        table(figures, peers) + "\n\n" + targets(figures, peers) + "\n\n"
        "Ratios are cotensor / peer: for seconds below 1 means cotensor is faster, for GFLOP/s "
        f"above 1 means cotensor is faster. Every value is the median over {args.rounds} "
        f"alternating rounds (cotensor, then each peer in its own process) of {runs}.\n\n"
        f"Measured {now} on {machine}; {versions}; Python {platform.python_version()}.\n")
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    if coretype:
        # A machine-wide setting: NumPy's OpenBLAS then runs that CPU's kernels, not the ones
        # it would pick for this CPU (env -u OPENBLAS_CORETYPE for a fair NumPy).
        text += (f"\nOPENBLAS_CORETYPE={coretype} was set: NumPy's OpenBLAS ran the {coretype} "
                 "kernels, not its own choice for this CPU.\n")
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    if args.plot:
        plot(figures, peers, args.plot, f"The chapter's workloads — {machine}, {now[:10]}")


if __name__ == "__main__":
    main()
