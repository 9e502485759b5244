"""The chapter's workloads in one peer: NumPy, PyTorch, JAX or MLX, on the CPU.

Run by bench/peers/compare.py with the project's Python environment (bench/peers/setup.sh),
one process per peer, so that no peer's thread pools run beside another's. Prints
`# <peer> <version>, ...` and one line per figure, `<peer>.<figure>: <value>`, each the median of
--repeat runs after one warm-up run; the figures and their names are those of
bench/chapter/main.cpp (cotensor_bench_chapter):

  matmul_loop_f32        s        10 x (randn 1000 x 1000 + matmul(a, a)), then wait for all
  matmul_loop_enqueue    s        the same loop's time to return (asynchronous peers only)
  dependency_graph_1000  s        1,000 x (x, y = ones((1, 2)); z = x * y + 2; read z)
  increment_10000        s        10,000 x `y = x + 1` on a (1, 2) array, one wait at the end
  increment_10000_sync   s        the same, waiting for each y
  numpy_conversion       s        matmul(a, a) to a NumPy array that shares the result's memory
                                  where the peer can (PyTorch's .numpy(), JAX's np.asarray; MLX
                                  copies); not NumPy itself
  numpy_copy             s        matmul(a, a) to a NumPy array of its own (a copy); not NumPy
  scalar_conversion      s        matmul(a, a).sum() to a Python float
  sgemm_<n>_gflops       GFLOP/s  2 n^3 / the time of one n x n float32 matmul, waited
  bf16_gemm_<n>_gflops   GFLOP/s  the same for bfloat16 (PyTorch and JAX; NumPy has no
                                  bfloat16 matmul and MLX's Linux build runs the reference BLAS)

How each peer waits, as its documentation recommends: NumPy and PyTorch on the CPU run each op
before returning (nothing to wait for); JAX dispatches asynchronously and is waited with
`jax.block_until_ready` (every result of the loop, not only the last); MLX builds a lazy graph
that `mx.eval` runs and waits for and `mx.async_eval` starts without waiting (every result of
the loop is evaluated: a lazy graph whose results are dropped would run nothing).

Threads: --threads T (default: the machine's logical cores) is set before the peer is imported:
OPENBLAS_NUM_THREADS and OMP_NUM_THREADS (NumPy's OpenBLAS, PyTorch's OpenMP),
torch.set_num_threads, and XLA_FLAGS' intra_op_parallelism_threads for JAX. MLX's CPU backend
has no thread setting; it runs as it comes.

Usage: python3 bench/peers/peers.py --peer {numpy,torch,jax,mlx} [--repeat N] [--threads T]
       [--quick]  (--quick: one run, no n = 4000)
"""
import argparse
import os
import statistics
import sys
import time

PEERS = ("numpy", "torch", "jax", "mlx")
N = 1000


def timed(fn, repeat, times_itself=False):
    """Median seconds of `repeat` calls of fn after one warm-up; with times_itself, fn returns
    the seconds to count."""
    fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        runs.append(float(result) if times_itself else time.perf_counter() - start)
    return statistics.median(runs)


def gemm_figures(fig, sizes, repeat, time_one, notes, figure="sgemm"):
    """<figure>_<n>_gflops for each n, `time_one(n)` giving the median seconds of one n x n matmul.
    A size whose runs would take over a minute at the previous size's rate (MLX's Linux CPU
    build, whose BLAS is the reference one) is skipped, with a note saying so."""
    previous = None
    for n in sizes:
        if previous is not None:
            estimate = previous[1] * (n / previous[0]) ** 3
            if estimate * (repeat + 1) > 60:
                notes.append(f"{figure}_{n} skipped: about {estimate:.0f} s a run at the "
                             f"{figure}_{previous[0]} rate")
                continue
        s = time_one(n)
        fig[f"{figure}_{n}_gflops"] = 2 * n**3 / s / 1e9
        previous = (n, s)


def numpy_figures(repeat, sizes):
    import numpy as np

    rng = np.random.default_rng(0)
    fig = {}

    def loop():
        for _ in range(10):
            a = rng.standard_normal(size=(N, N), dtype=np.float32)
            np.dot(a, a)
    fig["matmul_loop_f32"] = timed(loop, repeat)

    def graph():
        for _ in range(1000):
            x = np.ones((1, 2), dtype=np.float32)
            y = np.ones((1, 2), dtype=np.float32)
            x * y + 2
    fig["dependency_graph_1000"] = timed(graph, repeat)

    x = np.ones((1, 2), dtype=np.float32)
    def incr():
        for _ in range(10000):
            x + 1
    fig["increment_10000"] = timed(incr, repeat)
    fig["increment_10000_sync"] = fig["increment_10000"]  # each op is done when it returns

    a = rng.standard_normal(size=(N, N), dtype=np.float32)
    fig["scalar_conversion"] = timed(lambda: float(np.dot(a, a).sum()), repeat)
    def gemm(n):
        m = rng.standard_normal(size=(n, n), dtype=np.float32)
        return timed(lambda: np.dot(m, m), repeat)
    notes = []
    gemm_figures(fig, sizes, repeat, gemm, notes)
    return f"numpy {np.__version__}", fig, notes


def torch_figures(repeat, sizes, threads):
    import torch

    torch.set_num_threads(threads)
    fig = {}

    def loop():
        for _ in range(10):
            a = torch.randn(size=(N, N))
            torch.mm(a, a)
    fig["matmul_loop_f32"] = timed(loop, repeat)

    def graph():
        for _ in range(1000):
            x = torch.ones((1, 2))
            y = torch.ones((1, 2))
            x * y + 2
    fig["dependency_graph_1000"] = timed(graph, repeat)

    x = torch.ones((1, 2))
    def incr():
        for _ in range(10000):
            x + 1
    fig["increment_10000"] = timed(incr, repeat)
    fig["increment_10000_sync"] = fig["increment_10000"]  # eager on the CPU: done on return

    a = torch.randn(size=(N, N))
    fig["numpy_conversion"] = timed(lambda: torch.mm(a, a).numpy(), repeat)
    fig["numpy_copy"] = timed(lambda: torch.mm(a, a).numpy().copy(), repeat)
    fig["scalar_conversion"] = timed(lambda: torch.mm(a, a).sum().item(), repeat)
    def gemm(n):
        m = torch.randn(size=(n, n))
        return timed(lambda: torch.mm(m, m), repeat)
    notes = []
    gemm_figures(fig, sizes, repeat, gemm, notes)
    def bf16_gemm(n):
        m = torch.randn(size=(n, n)).to(torch.bfloat16)
        return timed(lambda: torch.mm(m, m), repeat)
    gemm_figures(fig, sizes, repeat, bf16_gemm, notes, "bf16_gemm")
    return f"torch {torch.__version__}, {torch.get_num_threads()} threads", fig, notes


def jax_figures(repeat, sizes):
    import jax
    import jax.numpy as jnp
    import numpy as np

    key = jax.random.key(0)
    fig = {}

    def issue():
        nonlocal key
        out = []
        for _ in range(10):
            key, sub = jax.random.split(key)
            a = jax.random.normal(sub, (N, N), dtype=jnp.float32)
            out.append(jnp.dot(a, a))
        return out
    fig["matmul_loop_f32"] = timed(lambda: jax.block_until_ready(issue()), repeat)

    def enqueue():
        start = time.perf_counter()
        out = issue()
        issued = time.perf_counter() - start
        jax.block_until_ready(out)
        return issued
    fig["matmul_loop_enqueue"] = timed(enqueue, repeat, times_itself=True)

    def graph():
        for _ in range(1000):
            x = jnp.ones((1, 2), dtype=jnp.float32)
            y = jnp.ones((1, 2), dtype=jnp.float32)
            (x * y + 2).block_until_ready()
    fig["dependency_graph_1000"] = timed(graph, repeat)

    x = jnp.ones((1, 2), dtype=jnp.float32).block_until_ready()
    fig["increment_10000"] = timed(lambda: jax.block_until_ready([x + 1 for _ in range(10000)]),
                                   repeat)

    def incr_sync():
        for _ in range(10000):
            (x + 1).block_until_ready()
    fig["increment_10000_sync"] = timed(incr_sync, repeat)

    a = jax.random.normal(key, (N, N), dtype=jnp.float32).block_until_ready()
    fig["numpy_conversion"] = timed(lambda: np.asarray(jnp.dot(a, a)), repeat)
    fig["numpy_copy"] = timed(lambda: np.array(jnp.dot(a, a)), repeat)
    fig["scalar_conversion"] = timed(lambda: jnp.dot(a, a).sum().item(), repeat)
    def gemm(n, dtype=jnp.float32):
        m = jax.random.normal(key, (n, n), dtype=dtype).block_until_ready()
        return timed(lambda: jnp.dot(m, m).block_until_ready(), repeat)
    notes = []
    gemm_figures(fig, sizes, repeat, gemm, notes)
    gemm_figures(fig, sizes, repeat, lambda n: gemm(n, jnp.bfloat16), notes, "bf16_gemm")
    return f"jax {jax.__version__} ({jax.devices()[0].platform})", fig, notes


def mlx_figures(repeat, sizes):
    import mlx.core as mx
    import numpy as np

    mx.set_default_device(mx.cpu)
    mx.random.seed(0)
    fig = {}

    def issue():
        out = []
        for _ in range(10):
            a = mx.random.normal((N, N), dtype=mx.float32)
            out.append(mx.matmul(a, a))
        return out
    fig["matmul_loop_f32"] = timed(lambda: mx.eval(issue()), repeat)

    def enqueue():
        start = time.perf_counter()
        out = issue()
        mx.async_eval(out)
        issued = time.perf_counter() - start
        mx.eval(out)
        return issued
    fig["matmul_loop_enqueue"] = timed(enqueue, repeat, times_itself=True)

    def graph():
        for _ in range(1000):
            x = mx.ones((1, 2), dtype=mx.float32)
            y = mx.ones((1, 2), dtype=mx.float32)
            mx.eval(x * y + 2)
    fig["dependency_graph_1000"] = timed(graph, repeat)

    x = mx.ones((1, 2), dtype=mx.float32)
    mx.eval(x)
    fig["increment_10000"] = timed(lambda: mx.eval([x + 1 for _ in range(10000)]), repeat)

    def incr_sync():
        for _ in range(10000):
            mx.eval(x + 1)
    fig["increment_10000_sync"] = timed(incr_sync, repeat)

    a = mx.random.normal((N, N), dtype=mx.float32)
    mx.eval(a)
    fig["numpy_conversion"] = timed(lambda: np.array(mx.matmul(a, a)), repeat)
    fig["numpy_copy"] = fig["numpy_conversion"]  # np.array copies already
    fig["scalar_conversion"] = timed(lambda: mx.matmul(a, a).sum().item(), repeat)
    def gemm(n):
        m = mx.random.normal((n, n), dtype=mx.float32)
        mx.eval(m)
        return timed(lambda: mx.eval(mx.matmul(m, m)), repeat)
    notes = []
    gemm_figures(fig, sizes, repeat, gemm, notes)
    return f"mlx {mx.__version__} ({mx.default_device()})", fig, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", required=True, choices=PEERS)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per figure (median)")
    ap.add_argument("--threads", type=int, default=0, help="threads (0: the logical cores)")
    ap.add_argument("--quick", action="store_true", help="one run, no n = 4000")
    args = ap.parse_args()
    if args.repeat < 1 or args.threads < 0:
        ap.error("--repeat needs a positive integer, --threads a non-negative one")
    threads = args.threads or os.cpu_count()
    repeat = 1 if args.quick else args.repeat
    sizes = (1000, 2000) if args.quick else (1000, 2000, 4000)

    # Before the peer's import: its thread pools read these when they start.
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_cpu_multi_thread_eigen=true"
                               f" intra_op_parallelism_threads={threads}").strip()

    if args.peer == "numpy":
        version, fig, notes = numpy_figures(repeat, sizes)
    elif args.peer == "torch":
        version, fig, notes = torch_figures(repeat, sizes, threads)
    elif args.peer == "jax":
        version, fig, notes = jax_figures(repeat, sizes)
    else:
        version, fig, notes = mlx_figures(repeat, sizes)
    print(f"# {version}, {threads} threads asked, median of {repeat} after 1 warm-up")
    for note in notes:
        print(f"# {args.peer}: {note}")
    for name, value in fig.items():
        print(f"{args.peer}.{name}: {value:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
