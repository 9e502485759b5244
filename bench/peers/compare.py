#!/usr/bin/python3
"""cotensor beside NumPy and PyTorch on the d2l.ai chapter "Asynchronous Computation".

Runs, one after the other on this machine, cotensor's chapter benchmark
(`<build>/bench/cotensor_bench_chapter --repeat N`) and the workspace's peer script
(`/usr/bin/python3 shared/peers/chapter.py --repeat N`), and prints one markdown table: each
figure, its unit, the three values and the ratios cotensor / peer, then a line naming the date
(UTC), the machine and the versions.

Ratios are cotensor / peer. For seconds (lower is better) a ratio below 1 means cotensor is
faster; for GFLOP/s (higher is better) a ratio above 1 means cotensor is faster.

Standard library only. The peers need Debian's python3-numpy and python3-torch for
/usr/bin/python3:  apt-get install -y python3-numpy python3-torch

With --rounds R (default 3) the two run alternately R times, cotensor first, and each value
is the median over the rounds of the per-round medians: on a shared machine whose speed drifts
by ±30 % within minutes, alternating exposes both sides to the same drift, where one run of
each would compare two different machines.

Usage (from the repository root):
  bench/peers/compare.py [--repeat N] [--rounds R] [--build DIR] [--peers PATH] [--out FILE]

The project's Python environment (bash bench/peers/setup.sh; bench/README.md) runs this script
too (.venv/bin/python3 bench/peers/compare.py), but the peers are still timed in PEER_PYTHON,
Debian's /usr/bin/python3, not in that environment's NumPy 2 and PyTorch 2.
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
PEER_PYTHON = "/usr/bin/python3"

# (figure, unit, higher_is_better); the peer keys are `numpy.<figure>` and `torch.<figure>`.
FIGURES = [
    ("matmul_loop_f32", "s", False),
    ("increment_10000", "s", False),
    ("increment_10000_sync", "s", False),
    ("numpy_conversion", "s", False),
    ("scalar_conversion", "s", False),
    ("sgemm_1000_gflops", "GFLOP/s", True),
    ("sgemm_2000_gflops", "GFLOP/s", True),
    ("sgemm_4000_gflops", "GFLOP/s", True),
]


def fail(message):
    print(f"compare.py: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    """Runs `cmd`, echoing it to stderr; returns (figures, comment lines) parsed from stdout,
    whose lines are `# comment` or `<prefix>.<name>: <value>`."""
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
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


def check_peer_python():
    if not os.access(PEER_PYTHON, os.X_OK):
        fail(f"{PEER_PYTHON} not found: the peers run with Debian's python3 and its packages "
             "python3-numpy and python3-torch (apt-get install -y python3 python3-numpy "
             "python3-torch)")
    probe = subprocess.run([PEER_PYTHON, "-c", "import numpy, torch"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        fail(f"{PEER_PYTHON} cannot import numpy and torch ({last}).\n"
             "Install Debian's packages python3-numpy and python3-torch:\n"
             "  apt-get install -y python3-numpy python3-torch")


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


def table(ours, peers):
    rows = [
        "| figure | unit | cotensor | NumPy | PyTorch | cotensor/NumPy | cotensor/PyTorch |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, unit, higher in FIGURES:
        c = ours.get(f"cotensor.{name}")
        n = peers.get(f"numpy.{name}")
        t = peers.get(f"torch.{name}")
        if c is None and n is None and t is None:
            continue
        better = "higher is better" if higher else "lower is better"
        rows.append(f"| `{name}` | {unit} ({better}) | {fmt(c)} | {fmt(n)} | {fmt(t)} "
                    f"| {ratio(c, n)} | {ratio(c, t)} |")
    # Figures only a peer has (e.g. NumPy's float64 loop), for reference.
    known = {name for name, _, _ in FIGURES}
    for key in sorted(peers):
        peer, _, name = key.partition(".")
        if name not in known:
            n = peers[key] if peer == "numpy" else None
            t = peers[key] if peer == "torch" else None
            rows.append(f"| `{name}` | s (lower is better) | — | {fmt(n)} | {fmt(t)} | — | — |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per figure (median)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate the two this many times (median over rounds)")
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="cotensor build directory (default: build)")
    ap.add_argument("--peers", default=str(REPO.parent / "shared" / "peers" / "chapter.py"),
                    help="the peer script (default: ../shared/peers/chapter.py)")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    if args.repeat < 1:
        fail("--repeat needs a positive integer")
    if args.rounds < 1:
        fail("--rounds needs a positive integer")

    bench = Path(args.build) / "bench" / "cotensor_bench_chapter"
    if not os.access(bench, os.X_OK):
        fail(f"{bench} not found: build it first (cmake --build {args.build})")
    peer_script = Path(args.peers)
    if not peer_script.is_file():
        fail(f"peer script {peer_script} not found (use --peers PATH)")
    check_peer_python()

    our_rounds, peer_rounds = [], []
    for _ in range(args.rounds):
        ours, our_notes = run([bench, "--repeat", args.repeat])
        peers, peer_notes = run([PEER_PYTHON, peer_script, "--repeat", args.repeat])
        our_rounds.append(ours)
        peer_rounds.append(peers)
    ours, peers = median_of(our_rounds), median_of(peer_rounds)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = "; ".join(our_notes + peer_notes + [f"Python {platform.python_version()}"])
    text = (
        table(ours, peers) + "\n\n"
        "Ratios are cotensor / peer: for seconds below 1 means cotensor is faster, for GFLOP/s "
        "above 1 means cotensor is faster. Every value is the median over "
        f"{args.rounds} alternating rounds (cotensor, then the peers) of the median of "
        f"{args.repeat} runs after a warm-up.\n\n"
        f"Measured {now} on {cpu_model()} ({os.cpu_count()} logical cores, "
        f"{platform.system()} {platform.release()}); {versions}.\n")
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
