#!/usr/bin/env python3
"""Writes the generated tables of docs/dtypes.md: cotensor's dtype rules beside NumPy 2's,
PyTorch's and JAX's, cell by cell.

cotensor's cells come from docs/tools/print_promotion.cpp (the target cotensor_print_promotion,
built with the tests), which runs each op in the library; the peers' cells from running the
same op in NumPy (with ml_dtypes for bfloat16), PyTorch and JAX (with jax_enable_x64, or it has
no int64 or float64). Runs with the Python environment of bench/peers/setup.sh:

    .venv/bin/python3 docs/tools/dtype_tables.py            # print the tables
    .venv/bin/python3 docs/tools/dtype_tables.py --write    # replace them in docs/dtypes.md
    .venv/bin/python3 docs/tools/dtype_tables.py --check    # exit 1 if docs/dtypes.md differs
                                                            # (77, skipped, off x86-64)

--printer PATH names the built printer (default: the newest build*/docs/tools/ one). The peers'
float -> int casts of NaN, infinities and out-of-range values are what this machine's CPU
(x86-64) gives; C++ leaves them undefined and other CPUs give other values.
"""

import argparse
import contextlib
import difflib
import math
import pathlib
import platform
import subprocess
import sys
import warnings
from fractions import Fraction

REPO = pathlib.Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "dtypes.md"
DTYPES = ["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
SHORT = {"bool": "b", "int32": "i32", "int64": "i64", "float16": "f16", "bfloat16": "bf16",
         "float32": "f32", "float64": "f64", "error": "error"}
PEERS = ["NumPy", "PyTorch", "JAX"]
MARK = {"NumPy": "N", "PyTorch": "T", "JAX": "J"}
SCALARS = {"bool": True, "int": 2, "float": 2.5}
NUMPY_BY_OP = set()  # the pairs np.result_type refuses; their NumPy cell is x + y's dtype
SPECIALS = ["nan", "inf", "-inf", "3e9", "-3e9", "1e19", "-1e19", "-2.7"]  # as the printer


def find_printer():
    found = sorted(REPO.glob("build*/docs/tools/cotensor_print_promotion"),
                   key=lambda p: p.stat().st_mtime)
    found += sorted(REPO.glob("build/*/docs/tools/cotensor_print_promotion"),
                    key=lambda p: p.stat().st_mtime)
    if not found:
        sys.exit("dtype_tables.py: build the target cotensor_print_promotion first "
                 "(cmake --build build --target cotensor_print_promotion) or give --printer")
    return max(found, key=lambda p: p.stat().st_mtime)


def ours(printer):
    out = subprocess.run([str(printer)], check=True, capture_output=True, text=True).stdout
    facts = {}
    for line in out.splitlines():
        key, value = line.split("\t")
        facts[key] = value
    return facts


class Peer:
    """One peer library: each method answers as that library does, in cotensor's spelling."""

    def __init__(self, name):
        self.name = name
        if name == "NumPy":
            import ml_dtypes
            import numpy as np
            self.np = np
            self.types = {"bool": np.bool_, "int32": np.int32, "int64": np.int64,
                          "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
                          "float32": np.float32, "float64": np.float64}
            self.version = f"NumPy {np.__version__} (ml_dtypes {ml_dtypes.__version__})"
        elif name == "PyTorch":
            import torch
            self.torch = torch
            self.types = {"bool": torch.bool, "int32": torch.int32, "int64": torch.int64,
                          "float16": torch.float16, "bfloat16": torch.bfloat16,
                          "float32": torch.float32, "float64": torch.float64}
            self.version = f"PyTorch {torch.__version__}"
        else:
            import jax
            jax.config.update("jax_enable_x64", True)
            jax.config.update("jax_platforms", "cpu")
            import jax.numpy as jnp
            self.jnp = jnp
            self.types = {"bool": jnp.bool_, "int32": jnp.int32, "int64": jnp.int64,
                          "float16": jnp.float16, "bfloat16": jnp.bfloat16,
                          "float32": jnp.float32, "float64": jnp.float64}
            self.version = f"JAX {jax.__version__} (jax_enable_x64)"
        self.names = {self.dtype_key(t): n for n, t in self.types.items()}

    def dtype_key(self, t):
        if self.name == "PyTorch":
            return t
        return self.np.dtype(t) if self.name == "NumPy" else self.jnp.dtype(t)

    def spell(self, t):
        return self.names.get(self.dtype_key(t), str(t))

    def ones(self, t):
        if self.name == "NumPy":
            return self.np.ones(2, dtype=self.types[t])
        if self.name == "PyTorch":
            return self.torch.ones(2, dtype=self.types[t])
        return self.jnp.ones(2, dtype=self.types[t])

    def array(self, values, t):
        if self.name == "NumPy":
            return self.np.array(values, dtype=self.types[t])
        if self.name == "PyTorch":
            return self.torch.tensor(values, dtype=self.types[t])
        return self.jnp.array(values, dtype=self.types[t])

    def astype(self, x, t):
        if self.name == "PyTorch":
            return x.to(self.types[t])
        return x.astype(self.types[t])

    def values(self, x):
        if self.name == "PyTorch":
            return x.double().tolist() if x.is_floating_point() else x.tolist()
        return [v.item() for v in x]

    def result(self, f):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self.spell(f().dtype)
        except Exception:  # the peer refuses the operands
            return "error"

    def promote(self, a, b):
        if self.name == "NumPy":
            try:
                return self.spell(self.np.result_type(self.types[a], self.types[b]))
            except self.np.exceptions.DTypePromotionError:
                # ml_dtypes registers casts, not promotions, between bfloat16 and the
                # integers and float16: an array op then takes the ufunc's loop.
                NUMPY_BY_OP.add((a, b))
                return self.result(lambda: self.ones(a) + self.ones(b))
        if self.name == "PyTorch":
            return self.spell(self.torch.promote_types(self.types[a], self.types[b]))
        return self.spell(self.jnp.promote_types(self.types[a], self.types[b]))

    def reduce(self, op, x):
        if self.name == "PyTorch":
            return getattr(self.torch, op)(x)
        return getattr(self.np if self.name == "NumPy" else self.jnp, op)(x)


def number(v):
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and v == int(v) and abs(v) < 2 ** 63:
        return str(int(v))
    return repr(v)


def nearest(x, mantissa_bits):
    """x rounded once, to nearest even, to a binary float of `mantissa_bits` stored bits."""
    q = Fraction(x)
    e = math.frexp(x)[1] - 1 - mantissa_bits  # the weight of the last kept bit
    scaled = q / Fraction(2) ** e
    n = math.floor(scaled)
    rest = scaled - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return float(n * Fraction(2) ** e)


def cell(mine, theirs):
    marks = "".join(MARK[p] for p in PEERS if theirs[p] != mine)
    return f"{SHORT.get(mine, mine)}<sup>{marks}</sup>" if marks else SHORT.get(mine, mine)


def promotion_tables(facts, peers):
    head = "| ⊗ | " + " | ".join(SHORT[d] for d in DTYPES) + " |"
    rows = [head, "|" + "---|" * (len(DTYPES) + 1)]
    diffs = []
    for a in DTYPES:
        cells = []
        for b in DTYPES:
            mine = facts[f"promote {a} {b}"]
            theirs = {p.name: p.promote(a, b) for p in peers}
            cells.append(cell(mine, theirs))
            if DTYPES.index(a) <= DTYPES.index(b) and any(v != mine for v in theirs.values()):
                diffs.append(f"| {a} ⊗ {b} | {mine} | "
                             + " | ".join(theirs[p] for p in PEERS) + " |")
        rows.append(f"| **{SHORT[a]}** | " + " | ".join(cells) + " |")
    rows += ["", "| tensor ⊗ tensor | cotensor | NumPy 2 | PyTorch | JAX |",
             "|---|---|---|---|---|"] + diffs
    if NUMPY_BY_OP:
        pairs = sorted({tuple(sorted(p, key=DTYPES.index)) for p in NUMPY_BY_OP},
                       key=lambda p: (DTYPES.index(p[0]), DTYPES.index(p[1])))
        rows += ["", "NumPy's `np.result_type` raises `DTypePromotionError` for "
                 + ", ".join(f"{a} ⊗ {b}" for a, b in pairs)
                 + " (ml_dtypes defines casts, not promotions, for bfloat16); their NumPy cells "
                 "are the dtype of `x + y` on arrays, which converts through the ufunc's loop."]
    return "\n".join(rows)


def scalar_tables(facts, peers):
    rows = ["| tensor | + `true` | + `2` | × `2.5` |", "|---|---|---|---|"]
    diffs = []
    for t in DTYPES:
        cells = []
        for kind, value in SCALARS.items():
            mine = facts[f"scalar {t} {kind}"]
            op = (lambda x, v=value: x * v) if kind == "float" else (lambda x, v=value: x + v)
            theirs = {p.name: p.result(lambda p=p: op(p.ones(t))) for p in peers}
            cells.append(cell(mine, theirs))
            if any(v != mine for v in theirs.values()):
                sym = "×" if kind == "float" else "+"
                diffs.append(f"| {t} {sym} {value} | {mine} | "
                             + " | ".join(theirs[p] for p in PEERS) + " |")
        rows.append(f"| **{t}** | " + " | ".join(cells) + " |")
    rows += ["", "| tensor ⊗ Python/C++ scalar | cotensor | NumPy 2 | PyTorch | JAX |",
             "|---|---|---|---|---|"] + diffs
    return "\n".join(rows)


def cast_tables(facts, peers):
    rows = ["| float32 value | → int32: cotensor | NumPy | PyTorch | JAX "
            "| → int64: cotensor | NumPy | PyTorch | JAX |",
            "|---|---|---|---|---|---|---|---|---|"]
    values = [float(s) for s in SPECIALS]
    peer_out = {}
    for p in peers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = p.array(values, "float32")
            for t in ("int32", "int64"):
                peer_out[p.name, t] = p.values(p.astype(x, t))
    for i, s in enumerate(SPECIALS):
        cells = []
        for t in ("int32", "int64"):
            cells.append(f"**{facts[f'cast float32 {s} {t}']}**")
            cells += [str(peer_out[p, t][i]) for p in PEERS]
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# Cells whose value depends on the CPU the peer runs on, rendered the same on every machine when
# the peer gives one of the values seen: XLA converts float64 to float16 in one rounding where the
# CPU has AVX512-FP16 (seen on a Sapphire Rapids VM, 2026-11-26) and through float32 (two
# roundings) where it has not (an earlier AVX-512 VM, 2026-11-25).
CPU_DEPENDENT = {
    ("float64", "float16", "JAX"): ({"1", "1.0009765625"},
                                   "1.0009765625 with AVX512-FP16, else 1"),
}


def rounding_tables(facts, peers):
    rows = ["| value | → | rounded once | cotensor | NumPy | PyTorch | JAX |",
            "|---|---|---|---|---|---|---|"]
    cases = []
    for key in facts:
        if key.startswith("round "):
            _, source, value, target = key.split(" ")
            cases.append((source, value, target, facts[key]))
    for source, value, target, mine in cases:
        x = int(value) if source == "int32" else float(value)
        once = nearest(float(x), 10 if target == "float16" else 7)
        theirs = []
        for p in peers:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    v = number(float(p.values(p.astype(p.array([x], source), target))[0]))
                seen, text = CPU_DEPENDENT.get((source, target, p.name), (set(), ""))
                theirs.append(text if v in seen else v)
            except Exception:
                theirs.append("error")
        rows.append(f"| {source} {value} | {target} | {number(once)} | **{mine}** | "
                    + " | ".join(theirs) + " |")
    return "\n".join(rows)


def reduction_tables(facts, peers):
    rows = ["| op | cotensor | NumPy 2 | PyTorch | JAX |", "|---|---|---|---|---|"]

    def line(label, mine, answer):
        rows.append(f"| {label} | **{mine}** | " + " | ".join(answer(p) for p in peers) + " |")

    line("int32 / int32", facts["div int32 int32"],
         lambda p: p.result(lambda: p.ones("int32") / p.ones("int32")))
    line("int64 / int64", facts["div int64 int64"],
         lambda p: p.result(lambda: p.ones("int64") / p.ones("int64")))
    line("bool / bool", facts["div bool bool"],
         lambda p: p.result(lambda: p.ones("bool") / p.ones("bool")))
    for t in ("bool", "int32", "int64", "float16", "bfloat16"):
        line(f"sum({t})", facts[f"sum {t}"], lambda p, t=t: p.result(lambda: p.reduce("sum", p.ones(t))))
    for t in ("bool", "int32", "int64", "float16"):
        line(f"mean({t})", facts[f"mean {t}"],
             lambda p, t=t: p.result(lambda: p.reduce("mean", p.ones(t))))
    line("argmax(float32)", facts["argmax float32"],
         lambda p: p.result(lambda: p.reduce("argmax", p.ones("float32"))))
    nan = [1.0, float("nan"), 3.0, float("nan")]

    def value(p, op):
        try:
            r = p.reduce(op, p.array(nan, "float32"))
            return number(float(r) if op == "max" else int(r))
        except Exception:
            return "error"

    for op in ("max", "argmax", "argmin"):
        line(f"{op}([1, nan, 3, nan])", facts[f"nan {op}"], lambda p, op=op: value(p, op))
    return "\n".join(rows)


TABLES = {
    "promotion": promotion_tables,
    "scalars": scalar_tables,
    "casts": cast_tables,
    "rounding": rounding_tables,
    "reductions": reduction_tables,
}


def generate(printer):
    facts = ours(printer)
    peers = [Peer(name) for name in PEERS]
    out = {name: f(facts, peers) for name, f in TABLES.items()}
    out["versions"] = "Peers: " + ", ".join(p.version for p in peers) + "."
    return out


def begin(name):
    return f"<!-- generated by docs/tools/dtype_tables.py: {name} -->"


def end(name):
    return f"<!-- end of {name} -->"


def replaced(text, tables):
    for name, body in tables.items():
        b, e = begin(name), end(name)
        if b not in text or e not in text:
            sys.exit(f"dtype_tables.py: {DOC} lacks the markers {b} ... {e}")
        head, rest = text.split(b, 1)
        _, tail = rest.split(e, 1)
        text = f"{head}{b}\n{body}\n{e}{tail}"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--printer", type=pathlib.Path, help="the built cotensor_print_promotion")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the tables in docs/dtypes.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/dtypes.md differs")
    args = ap.parse_args()
    if args.check and platform.machine() != "x86_64":
        # The peers' undefined casts are the CPU's: the page records x86-64's.
        print("dtype_tables.py: skipped, the tables record x86-64's peers", file=sys.stderr)
        return 77
    tables = generate(args.printer or find_printer())
    if not (args.write or args.check):
        for name, body in tables.items():
            print(f"{begin(name)}\n{body}\n{end(name)}\n")
        return 0
    text = DOC.read_text()
    new = replaced(text, tables)
    if args.check:
        if new != text:
            sys.stderr.writelines(difflib.unified_diff(
                text.splitlines(True), new.splitlines(True), "docs/dtypes.md", "generated"))
            print(f"dtype_tables.py: {DOC} is out of date: run docs/tools/dtype_tables.py "
                  "--write", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
