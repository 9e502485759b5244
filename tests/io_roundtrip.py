#!/usr/bin/env python3
"""Loads the files tests/io_roundtrip.cpp saved with cotensor into the Python `safetensors`
(through PyTorch, whose loader knows BF16) and `numpy` (+ `ml_dtypes`) packages, and compares
them with the values of tests/data/make_fixtures.py: dtypes, shapes, every value (NaN as NaN,
the sign of zero kept). Exits 77 (skipped) when a package is missing, 1 on a mismatch.

    python tests/io_roundtrip.py DIR
"""
import os
import sys

try:
    import ml_dtypes
    import numpy as np
    import safetensors.torch
    import torch
except ImportError as e:  # no virtual environment: skipped, not passed
    print(f"SKIPPED: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
import make_fixtures  # noqa: E402

failures = []


def same(name, got, want):
    if got.dtype != want.dtype or got.shape != want.shape:
        failures.append(f"{name}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
        return
    g = got.astype(np.float64) if got.dtype != np.bool_ else got
    w = want.astype(np.float64) if want.dtype != np.bool_ else want
    if got.dtype.kind in "iub":
        ok = np.array_equal(got, want)
    else:
        ok = np.array_equal(g, w, equal_nan=True) and np.array_equal(np.signbit(g), np.signbit(w))
    if not ok:
        failures.append(f"{name}: got {got!r}, want {want!r}")


def to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def main():
    d = sys.argv[1]
    want = make_fixtures.arrays()
    path = os.path.join(d, "ours.safetensors")
    loaded = safetensors.torch.load_file(path)
    if sorted(loaded) != sorted(want):
        failures.append(f"safetensors names: {sorted(loaded)}")
    for name, w in want.items():
        if name in loaded:
            same(f"safetensors {name}", to_numpy(loaded[name]), w)
    with safetensors.safe_open(path, framework="pt") as f:
        if f.metadata() != {"producer": "cotensor"}:
            failures.append(f"safetensors metadata: {f.metadata()}")
    for name, w in want.items():
        same(f"npy {name}", np.load(os.path.join(d, f"ours_{name}.npy")), w)
    for f in failures:
        print("MISMATCH", f)
    print(f"{len(want)} dtypes checked in both formats: {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
