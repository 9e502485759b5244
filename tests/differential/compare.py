#!/usr/bin/env python3
"""Replays cotensor's dtype programs (tests/differential/dtype_programs.cpp) in NumPy 2
(+ml_dtypes for bfloat16) and in PyTorch on the CPU, and compares the results.

    python3 compare.py PROGRAMS.jsonl [--verbose]

Integer and bool results must be identical; float results must lie within TOLERANCES ulps.
Where cotensor's semantics deliberately differ from a peer, the difference is an entry of
DEVIATIONS: the peer is then run on inputs prepared as that entry says (cast to cotensor's
dtype, say), the entry's counter goes up, and the comparison stays exact. A difference not in
the table is a failure. Exit status: 0 when every program agrees with both peers, 1 otherwise.
"""

import json
import math
import sys
import warnings
from collections import Counter

import ml_dtypes
import numpy as np
import torch

# ------------------------------------------------------------------------------------------
# The expected differences, one line each: where cotensor's defined semantics differ from a
# peer, and how the peer is run instead. Printed with how often each applied.
DEVIATIONS = {
    "numpy-promotion": (
        "NumPy", "int32/int64 (and bool with bfloat16) ⊗ a float promote to float64 or fail "
        "in NumPy (NEP 50, ml_dtypes), float16 ⊗ bfloat16 fails; cotensor follows "
        "PyTorch/JAX (the float; float16 ⊗ bfloat16 → float32), DESIGN §7. NumPy runs on the "
        "operands cast to cotensor's dtype."),
    "numpy-true-division": (
        "NumPy", "int/bool ÷ int/bool is float64 in NumPy, float32 in cotensor and PyTorch. "
        "NumPy divides the operands cast to float32."),
    "numpy-weak-float-scalar": (
        "NumPy", "a float scalar with an int/bool array gives float64 in NumPy, the default "
        "float32 in cotensor and PyTorch (clamp's bounds too). NumPy runs on the array cast "
        "to float32."),
    "numpy-unary-int": (
        "NumPy", "exp/log/sqrt/tanh/sigmoid/gelu of int32/int64 give float64 in NumPy (of bool: "
        "float16); cotensor and PyTorch give float32. NumPy runs on the input cast to float32."),
    "numpy-mean-int": (
        "NumPy", "mean of int/bool is float64 in NumPy, float32 in cotensor. NumPy runs on the "
        "input cast to float32."),
    "torch-mean-int": (
        "PyTorch", "mean of int/bool raises in PyTorch; cotensor gives float32. PyTorch runs on "
        "the input cast to float32."),
    "torch-softmax-int": (
        "PyTorch", "softmax/log_softmax of int/bool raise in PyTorch; cotensor computes in "
        "float32. PyTorch runs on the input cast to float32."),
    "cast-through-float32": (
        "NumPy", "int32/int64/float64 → float16/bfloat16 round through float32 in cotensor, as "
        "PyTorch (src/cpu/element.hpp), so a value just off a tie can round twice; NumPy and "
        "ml_dtypes round once. NumPy casts through float32 (counted where that changes a bit)."),
    "float-to-int-cast": (
        "NumPy, PyTorch", "float → int32/int64 of NaN, ±inf or out of range is undefined in C "
        "and INT_MIN on x86 in both peers; cotensor saturates and takes NaN to 0 (DESIGN §7). "
        "Those elements are expected saturated, the others as the peer casts."),
    "torch-int-scalar-overflow": (
        "PyTorch", "an int scalar that does not fit an int32 tensor wraps in PyTorch; cotensor "
        "raises, as NumPy does (OverflowError). Only the raise is checked."),
    "bool-unary-refused": (
        "NumPy, PyTorch", "cotensor refuses neg/abs/relu on bool tensors (PyTorch refuses neg "
        "and abs; NumPy's abs is the identity and relu is int64). Only the raise is checked."),
    "torch-bool-sub": (
        "PyTorch", "PyTorch refuses − whenever an operand is bool (a bool scalar, or a bool "
        "tensor with an int scalar); cotensor refuses only bool − bool, as NumPy. PyTorch "
        "runs on the bool operand cast to cotensor's result dtype."),
    "torch-scalar-rounding": (
        "PyTorch", "PyTorch's float16/bfloat16 kernels use a Python float scalar unrounded in "
        "float32 in some ops (×, ÷) and rounded to the dtype in others (+, −); cotensor "
        "always rounds it to the tensor's dtype first, as NumPy (NEP 50). PyTorch runs with "
        "the scalar rounded to the dtype."),
    "torch-rdiv": (
        "PyTorch", "PyTorch computes scalar / tensor as scalar · (1/tensor), rounding 1/x to the "
        "dtype first; cotensor divides once. PyTorch runs it as a tensor ÷ tensor division."),
    "numpy-take-empty": (
        "NumPy", "np.take checks no index when the result is empty; cotensor (as PyTorch's "
        "index_select) refuses an index out of range whatever the other extents. Only the "
        "raise is checked."),
    "torch-argmax-bool": (
        "PyTorch", "argmax/argmin of bool raise in PyTorch; cotensor (as NumPy) takes False < "
        "True. PyTorch runs on the input cast to int32."),
    "torch-zero-dim-weak": (
        "PyTorch", "a 0-d tensor of the same kind (float with float) does not promote a "
        "tensor with dimensions in PyTorch; cotensor promotes 0-d tensors like any other, as "
        "NumPy 2 and JAX. PyTorch runs on the operands cast to cotensor's dtype."),
    "numpy-bfloat16-weak-scalar": (
        "NumPy", "ml_dtypes' bfloat16 takes a Python float scalar as float64 and gives float32 "
        "(clip too), not NEP 50's weak bfloat16. NumPy runs with the scalar given as a "
        "bfloat16 (exact: these scalars are bfloat16 values)."),
    "torch-gelu-tail": (
        "PyTorch", "PyTorch's gelu loses relative accuracy for x ≪ 0 (1 + erf(x/√2) cancels); "
        "against PyTorch gelu is compared in ulps of max(|reference|, 1), against NumPy's "
        "float64 reference in plain ulps."),
    "numpy-int-scalar-compare": (
        "NumPy", "NumPy 2 compares an array with a Python int outside its dtype exactly "
        "(arithmetic raises OverflowError); cotensor raises for comparisons too. Only the "
        "raise is checked."),
    "mean-empty": (
        "NumPy, PyTorch", "mean of an empty tensor, or over an empty axis, raises in cotensor "
        "(no value to divide); NumPy and PyTorch return NaN. Only the raise is checked."),
    "clamp-empty-range": (
        "NumPy, PyTorch", "clamp with lo > hi raises in cotensor; NumPy and PyTorch return hi "
        "everywhere. Only the raise is checked."),
}

# Float tolerances in ulps of the result's dtype, per op family and dtype. "elementwise" ops
# are compared in ulps of the reference value itself; "accumulating" ones in ulps of the
# magnitude they accumulate (Σ|x| for sum, Σ|x|/n for mean, Σ|a·b| for matmul, and
# max(|reference|, 1) for the row-wise softmax, log_softmax and layer_norm), since their
# summation order is not fixed. Integer and bool results: always exact.
F16, BF16, F32, F64 = "float16", "bfloat16", "float32", "float64"
TOLERANCES = {
    # exactly rounded ops (float16/bfloat16 compute in float32 and round once, which is exact
    # for + − × ÷ √ since float32 has more than 2p + 2 bits).
    "exact": {F16: 0, BF16: 0, F32: 0, F64: 0},
    "sqrt": {F16: 0, BF16: 0, F32: 0, F64: 0},
    # glibc's vector math: within 4 ulp in float32 (ops.hpp); the peers add their own.
    "exp": {F16: 1, BF16: 1, F32: 4, F64: 2},
    "log": {F16: 1, BF16: 1, F32: 4, F64: 2},
    "tanh": {F16: 1, BF16: 1, F32: 4, F64: 2},
    "sigmoid": {F16: 1, BF16: 1, F32: 4, F64: 2},
    "gelu": {F16: 1, BF16: 1, F32: 8, F64: 4},
    "gelu_tanh": {F16: 1, BF16: 1, F32: 8, F64: 4},
    "mean_scalar": {F16: 1, BF16: 1, F32: 1, F64: 1},
    # accumulating ops (ulps of the accumulated magnitude)
    "sum": {F16: 1, BF16: 1, F32: 8, F64: 8},
    "mean": {F16: 1, BF16: 1, F32: 8, F64: 8},
    "matmul": {F16: 1, BF16: 1, F32: 8, F64: 8},
    "softmax": {F16: 1, BF16: 1, F32: 8, F64: 8},
    "log_softmax": {F16: 1, BF16: 1, F32: 8, F64: 8},
    "layer_norm": {F16: 2, BF16: 2, F32: 16, F64: 16},
}

# Where one peer is less accurate than cotensor's and the other peer's reference: that peer's
# tolerance (the other keeps TOLERANCES).
PEER_TOLERANCES = {
    # PyTorch's float32 and float64 sqrt on the CPU are not always correctly rounded (1 ulp
    # off, where NumPy's agree with cotensor's).
    ("PyTorch", "sqrt"): {F16: 0, BF16: 0, F32: 1, F64: 1},
}

NP_DTYPES = {
    "bool": np.dtype(np.bool_), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
}
TORCH_DTYPES = {
    "bool": torch.bool, "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
ORDER = ["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
FLOATS = {F16, BF16, F32, F64}
INTS = {"int32", "int64"}
MANTISSA = {F16: 10, BF16: 7, F32: 23, F64: 52}
EMIN = {F16: -14, BF16: -126, F32: -126, F64: -1022}


def np_name(dt):
    for k, v in NP_DTYPES.items():
        if v == dt:
            return k
    raise KeyError(str(dt))


def torch_name(dt):
    for k, v in TORCH_DTYPES.items():
        if v == dt:
            return k
    raise KeyError(str(dt))


def promote(a, b):
    """cotensor's promote_types (include/cotensor/dtype.hpp)."""
    if a == b:
        return a
    if {a, b} == {F16, BF16}:
        return F32
    return a if ORDER.index(a) > ORDER.index(b) else b


class Refused(Exception):
    """The peer raises for this program (the message says why)."""


class Skip(Exception):
    """A deviation says only cotensor's raise is checked."""


def decode(inp):
    return np.frombuffer(bytes.fromhex(inp["hex"]), dtype=NP_DTYPES[inp["dtype"]]).reshape(
        inp["shape"]).copy()


def to_torch(a):
    if a.dtype == NP_DTYPES[BF16]:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def from_torch(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def scalar_value(p):
    if p["kind"] == "float":
        return float.fromhex(p["value"])
    if p["kind"] == "bool":
        return bool(p["value"])
    return int(p["value"])


def scalar_result(t, kind):
    """The dtype of a tensor of dtype t with a weak scalar of `kind` (src/frontend/ops.cpp)."""
    if kind == "float" and t not in FLOATS:
        return F32
    if kind == "int" and t == "bool":
        return "int64"
    return t


def f64(a):
    return a.astype(np.float64)


def erfc(a):
    return np.asarray(np.frompyfunc(math.erfc, 1, 1)(a), dtype=np.float64)


GELU_C = math.sqrt(2.0 / math.pi)


def gelu_mp(v, tanh_form):
    """gelu of float64 values at 40 digits (mpmath comes with PyTorch, through sympy)."""
    import mpmath
    mpmath.mp.dps = 40

    def one(x):
        if math.isnan(x) or math.isinf(x):
            return 0.5 * x * (1.0 + math.tanh(x)) if tanh_form else 0.5 * x * math.erfc(-x)
        if x < -1e3:  # below float64's smallest subnormal (and too deep for mpmath's float())
            return -0.0
        m = mpmath.mpf(x)
        if tanh_form:
            u = mpmath.sqrt(2 / mpmath.pi) * (m + mpmath.mpf("0.044715") * m**3)
            return float(m / (1 + mpmath.exp(-2 * u)))
        return float(m * mpmath.erfc(-m / mpmath.sqrt(2)) / 2)

    return np.asarray(np.frompyfunc(one, 1, 1)(v), dtype=np.float64)


class Case:
    """One program: its inputs decoded, cotensor's result, and the deviations that applied."""

    def __init__(self, line):
        self.raw = line
        self.op = line["op"]
        self.p = line["params"]
        self.inputs = [decode(i) for i in line["inputs"]]
        self.dtypes = [i["dtype"] for i in line["inputs"]]
        self.ours = None if "error" in line else decode(line["out"])
        self.ours_dtype = None if "error" in line else line["out"]["dtype"]
        self.error = line.get("error")
        self.used = []

    def deviate(self, key):
        assert key in DEVIATIONS, key
        self.used.append(key)

    @property
    def name(self):
        return self.p.get("name", self.op)


# ------------------------------------------------------------------------------------------
# NumPy. Float ops that do not round once per element (transcendentals, gelu, softmax,
# layer_norm, reductions, matmul) are computed in float64 and rounded to the result's dtype:
# the correctly rounded reference, up to float64's own error.

NP_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
}


def np_call(f, *args):
    try:
        with np.errstate(all="ignore"):
            return f(*args)
    except (TypeError, ValueError, OverflowError, IndexError,
            np.exceptions.DTypePromotionError) as e:
        raise Refused(f"{type(e).__name__}: {e}") from e


def np_cast(c, a, to):
    """a cast to dtype name `to` as cotensor casts (through float32 into float16/bfloat16)."""
    src = np_name(a.dtype)
    with np.errstate(all="ignore"):
        if src in ("int32", "int64", F64) and to in (F16, BF16):
            via = a.astype(np.float32).astype(NP_DTYPES[to])
            if not np.array_equal(via, a.astype(NP_DTYPES[to]), equal_nan=True):
                c.deviate("cast-through-float32")
            return via
        return a.astype(NP_DTYPES[to])


def np_promoted(c, a, b):
    """a and b as NumPy should combine them for cotensor's promotion."""
    ta, tb = np_name(a.dtype), np_name(b.dtype)
    want = promote(ta, tb)
    try:
        natural = np_name(np.result_type(a.dtype, b.dtype))
    except (TypeError, np.exceptions.DTypePromotionError, KeyError):
        natural = None
    if natural != want:
        mixed = ({ta, tb} & FLOATS) and ({ta, tb} - FLOATS) or {ta, tb} == {F16, BF16}
        if not mixed:
            raise AssertionError(f"unlisted promotion difference {ta}, {tb}: NumPy {natural}, "
                                 f"cotensor {want}")
        c.deviate("numpy-promotion")
        a, b = np_cast(c, a, want), np_cast(c, b, want)
    return a, b


def np_unary_float(c, x):
    """x as the float dtype cotensor computes a float-valued unary op in."""
    t = np_name(x.dtype)
    if t not in FLOATS:
        c.deviate("numpy-unary-int")
        return x.astype(np.float32)
    return x


def round_to(values64, dt):
    return values64.astype(NP_DTYPES[dt])


def float_to_int_expected(c, src, dst, peer_cast):
    """astype float → int: the peer's cast where defined, saturation and NaN → 0 elsewhere."""
    x = f64(src)
    top = 2.0**31 if dst == "int32" else 2.0**63
    info = np.iinfo(NP_DTYPES[dst])
    bad = np.isnan(x) | (x >= top) | (x <= -top)
    if bad.any():
        c.deviate("float-to-int-cast")
    safe = np.where(bad, 0, src)
    out = peer_cast(safe.astype(src.dtype))
    out = np.where(np.isnan(x), 0, out)
    out = np.where(x >= top, info.max, out)
    out = np.where(x <= -top, info.min, out)
    return out.astype(NP_DTYPES[dst])


def numpy_run(c):
    x = c.inputs[0] if c.inputs else None
    if c.op == "binary":
        a, b = c.inputs
        if c.name == "div" and np_name(a.dtype) not in FLOATS and np_name(b.dtype) not in FLOATS:
            c.deviate("numpy-true-division")
            a, b = a.astype(np.float32), b.astype(np.float32)
        elif c.name not in ("logical_and", "logical_or"):
            a, b = np_promoted(c, a, b)
        return np_call(NP_BINARY[c.name], a, b)
    if c.op == "scalar":
        s = scalar_value(c.p)
        t = np_name(x.dtype)
        want = scalar_result(t, c.p["kind"])
        if c.name == "div" and want not in FLOATS:
            c.deviate("numpy-true-division")
            x, want = x.astype(np.float32), F32
        elif want != t:
            if c.p["kind"] == "float":
                c.deviate("numpy-weak-float-scalar")
            x = np_cast(c, x, want)
        f = NP_BINARY[c.name]
        if c.p["kind"] == "int" and t == "int32" and not -2**31 <= s < 2**31 and c.name in (
                "eq", "ne", "lt", "le", "gt", "ge"):
            c.deviate("numpy-int-scalar-compare")
            raise Skip()
        if c.p["kind"] == "float" and want == BF16:
            c.deviate("numpy-bfloat16-weak-scalar")
            s = np.array(s, dtype=NP_DTYPES[BF16])
        return np_call(f, s, x) if c.p["left"] else np_call(f, x, s)
    if c.op == "unary":
        n = c.name
        if n in ("neg", "abs", "relu") and np_name(x.dtype) == "bool":
            c.deviate("bool-unary-refused")
            raise Skip()
        if n == "neg":
            return np_call(np.negative, x)
        if n == "abs":
            return np_call(np.abs, x)
        if n == "relu":
            return np_call(np.maximum, x, np.zeros((), x.dtype))
        if n == "logical_not":
            return np.logical_not(x)
        x = np_unary_float(c, x)
        dt = np_name(x.dtype)
        with np.errstate(all="ignore"):
            v = f64(x)
            if n == "exp":
                r = np.exp(v)
            elif n == "log":
                r = np.log(v)
            elif n == "sqrt":
                r = np.sqrt(v)
            elif n == "tanh":
                r = np.tanh(v)
            elif n == "sigmoid":
                r = 1.0 / (1.0 + np.exp(-v))
            elif dt == F64:  # float64 itself is not precise enough a reference: mpmath
                r = gelu_mp(v, n == "gelu_tanh")
            elif n == "gelu":  # x·Φ(x) = x·erfc(−x/√2)/2: no cancellation for x ≪ 0
                r = 0.5 * v * erfc(-v / math.sqrt(2.0))
            else:  # x·(1 + tanh u)/2 = x / (1 + e^(−2u))
                r = v / (1.0 + np.exp(-2.0 * GELU_C * (v + 0.044715 * v**3)))
        return round_to(r, dt)
    if c.op == "clamp":
        lo, hi = float.fromhex(c.p["lo"]), float.fromhex(c.p["hi"])
        if lo > hi:
            c.deviate("clamp-empty-range")
            raise Skip()
        t = np_name(x.dtype)
        bounds = [b if not (t not in FLOATS and b == int(b)) else int(b) for b in (lo, hi)]
        if t not in FLOATS and any(isinstance(b, float) for b in bounds):
            c.deviate("numpy-weak-float-scalar")
            x = x.astype(np.float32)
        if t == BF16:  # np.clip has no bfloat16 loop: the same with maximum and minimum
            c.deviate("numpy-bfloat16-weak-scalar")
            lo_b, hi_b = (np.array(b, dtype=NP_DTYPES[BF16]) for b in bounds)
            return np.minimum(np.maximum(x, lo_b), hi_b)
        return np_call(np.clip, x, bounds[0], bounds[1])
    if c.op == "where":
        cond, a, b = c.inputs
        a, b = np_promoted(c, a, b)
        return np_call(np.where, cond, a, b)
    if c.op == "astype":
        to = c.p["to"]
        if np_name(x.dtype) in FLOATS and to in INTS:
            return float_to_int_expected(c, x, to, lambda v: v.astype(NP_DTYPES[to]))
        return np_cast(c, x, to)
    if c.op == "reduce":
        return numpy_reduce(c, x)
    if c.op == "softmax":
        x = np_unary_float(c, x)
        dt = np_name(x.dtype)
        v = f64(x)
        if v.size == 0:
            return v.astype(NP_DTYPES[dt])
        m = np.max(v, axis=-1, keepdims=True)
        with np.errstate(all="ignore"):
            e = np.exp(v - m)
            s = np.sum(e, axis=-1, keepdims=True)
            r = e / s if c.name == "softmax" else (v - m) - np.log(s)
        return round_to(r, dt)
    if c.op == "layer_norm":
        v = f64(x)
        dt = np_name(x.dtype)
        if v.size == 0:
            return x.copy()
        mean = v.mean(axis=-1, keepdims=True)
        var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
        r = (v - mean) / np.sqrt(var + float.fromhex(c.p["eps"]))
        if c.p["affine"]:
            r = r * f64(c.inputs[1]) + f64(c.inputs[2])
        return round_to(r, dt)
    if c.op == "concat":
        return np_call(np.concatenate, c.inputs, c.p["axis"])
    if c.op == "slice":
        ax = c.p["axis"] % x.ndim
        idx = (slice(None),) * ax + (slice(c.p["start"], c.p["stop"]),)
        return x[idx].copy()
    if c.op == "index_select":
        idx = c.inputs[1]
        extent = x.shape[c.p["axis"]]
        if idx.size and ((idx < 0) | (idx >= extent)).any() and x.size * idx.size == 0:
            c.deviate("numpy-take-empty")
            raise Skip()
        return np_call(lambda a, i: np.take(a, i, axis=c.p["axis"]), x, idx)
    if c.op == "matmul":
        a, b = c.inputs
        dt = np_name(a.dtype)
        if dt in FLOATS:
            return round_to(np.matmul(f64(a), f64(b)), dt)
        return np.matmul(a, b)
    raise AssertionError(f"unknown op {c.op}")


def numpy_reduce(c, x):
    n, axis = c.name, c.p["axis"]
    keep = c.p.get("keepdims", False)
    t = np_name(x.dtype)
    if n in ("max", "min", "argmax", "argmin"):
        f = {"max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}[n]
        return np_call(lambda v: f(v, axis=axis, keepdims=keep) if axis is not None else f(v), x)
    if n == "sum":
        if t in FLOATS:
            return round_to(np.sum(f64(x), axis=axis, keepdims=keep), t)
        return np.sum(x, axis=axis, keepdims=keep, dtype=np.int64)
    # mean
    if t not in FLOATS:
        c.deviate("numpy-mean-int")
        x, t = x.astype(np.float32), F32
    if (x.size == 0) if axis is None else (x.shape[axis] == 0):
        c.deviate("mean-empty")
        raise Skip()
    return round_to(np.mean(f64(x), axis=axis, keepdims=keep), t)


# ------------------------------------------------------------------------------------------
# PyTorch, on the CPU, in the result's own dtype.

T_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
}
T_SCALAR = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


def t_call(f, *args):
    try:
        return f(*args)
    except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError) as e:
        raise Refused(f"{type(e).__name__}: {str(e).splitlines()[0]}") from e


def torch_run(c):
    ts = [to_torch(a) for a in c.inputs]
    x = ts[0] if ts else None
    if c.op == "binary":
        a, b = ts
        if c.name not in ("logical_and", "logical_or"):
            want = promote(*c.dtypes)
            try:
                natural = torch_name(torch.result_type(a, b))
            except RuntimeError:
                natural = None
            if natural != want and (a.dim() == 0) != (b.dim() == 0):
                c.deviate("torch-zero-dim-weak")
                a, b = a.to(TORCH_DTYPES[want]), b.to(TORCH_DTYPES[want])
        want = promote(*c.dtypes)
        if c.name == "sub" and "bool" in c.dtypes and want != "bool":
            c.deviate("torch-bool-sub")
            a, b = a.to(TORCH_DTYPES[want]), b.to(TORCH_DTYPES[want])
        return t_call(T_BINARY[c.name], a, b)
    if c.op == "scalar":
        s = scalar_value(c.p)
        if (c.p["kind"] == "int" and x.dtype == torch.int32 and not -2**31 <= s < 2**31
                and c.name != "div"):  # ÷ is float32's: the scalar need not fit int32
            c.deviate("torch-int-scalar-overflow")
            raise Skip()
        f = T_SCALAR[c.name]
        want = scalar_result(c.dtypes[0], c.p["kind"])
        if c.p["kind"] == "float" and want in (F16, BF16):
            rounded = torch.tensor(s, dtype=torch.float64).to(torch.float32).to(
                TORCH_DTYPES[want]).item()
            if rounded != s:
                c.deviate("torch-scalar-rounding")
                s = rounded
        if c.name == "sub" and (x.dtype == torch.bool or c.p["kind"] == "bool") and want != "bool":
            c.deviate("torch-bool-sub")
            x = x.to(TORCH_DTYPES[want])
            if c.p["kind"] == "bool":
                s = int(s) if want in INTS else float(s)
        if c.name == "div" and c.p["left"]:
            c.deviate("torch-rdiv")
            out = TORCH_DTYPES[want] if want in FLOATS else torch.float32
            x = x.to(out)
            return t_call(lambda: torch.full_like(x, s) / x)
        return t_call(lambda: f(s, x) if c.p["left"] else f(x, s))
    if c.op == "unary":
        n = c.name
        if n in ("neg", "abs", "relu") and x.dtype == torch.bool:
            c.deviate("bool-unary-refused")
            raise Skip()
        fs = {
            "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
            "sqrt": torch.sqrt, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
            "relu": torch.relu, "logical_not": torch.logical_not,
            "gelu": lambda v: torch.nn.functional.gelu(v),
            "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"),
        }
        if n in ("gelu", "gelu_tanh") and not x.is_floating_point():
            x = x.to(torch.float32)  # PyTorch's gelu refuses ints; its exp etc. give float32
        return t_call(fs[n], x)
    if c.op == "clamp":
        lo, hi = float.fromhex(c.p["lo"]), float.fromhex(c.p["hi"])
        if lo > hi:
            c.deviate("clamp-empty-range")
            raise Skip()
        if not x.is_floating_point():
            lo, hi = (int(b) if b == int(b) else b for b in (lo, hi))
        return t_call(torch.clamp, x, lo, hi)
    if c.op == "where":
        a, b = ts[1], ts[2]
        want = promote(c.dtypes[1], c.dtypes[2])
        if torch_name(torch.result_type(a, b)) != want and (a.dim() == 0) != (b.dim() == 0):
            c.deviate("torch-zero-dim-weak")
            a, b = a.to(TORCH_DTYPES[want]), b.to(TORCH_DTYPES[want])
        return t_call(torch.where, ts[0], a, b)
    if c.op == "astype":
        to = c.p["to"]
        if x.is_floating_point() and to in INTS:
            return float_to_int_expected(
                c, c.inputs[0], to,
                lambda v: from_torch(to_torch(v).to(TORCH_DTYPES[to])))
        return x.to(TORCH_DTYPES[to])
    if c.op == "reduce":
        n, axis = c.name, c.p["axis"]
        keep = c.p.get("keepdims", False)
        if n == "mean" and ((x.numel() == 0) if axis is None else (x.shape[axis] == 0)):
            c.deviate("mean-empty")
            raise Skip()
        if n == "mean" and not x.is_floating_point():
            c.deviate("torch-mean-int")
            x = x.to(torch.float32)
        if n in ("max", "min"):
            f = torch.amax if n == "max" else torch.amin
            if axis is None:
                return t_call(lambda: torch.max(x) if n == "max" else torch.min(x))
            return t_call(f, x, axis, keep)
        if n in ("argmax", "argmin") and x.dtype == torch.bool:
            c.deviate("torch-argmax-bool")
            x = x.to(torch.int32)
        f = {"sum": torch.sum, "mean": torch.mean, "argmax": torch.argmax,
             "argmin": torch.argmin}[n]
        if axis is None:
            return t_call(f, x)
        return t_call(f, x, axis, keep)
    if c.op == "softmax":
        if not x.is_floating_point():
            c.deviate("torch-softmax-int")
            x = x.to(torch.float32)
        f = torch.softmax if c.name == "softmax" else torch.log_softmax
        return t_call(f, x, -1)
    if c.op == "layer_norm":
        w, b = (ts[1], ts[2]) if c.p["affine"] else (None, None)
        return t_call(torch.nn.functional.layer_norm, x, (x.shape[-1],), w, b,
                      float.fromhex(c.p["eps"]))
    if c.op == "concat":
        return t_call(torch.cat, ts, c.p["axis"])
    if c.op == "slice":
        ax = c.p["axis"] % x.dim()
        idx = (slice(None),) * ax + (slice(c.p["start"], c.p["stop"]),)
        return x[idx]
    if c.op == "index_select":
        return t_call(torch.index_select, x, c.p["axis"], ts[1])
    if c.op == "matmul":
        return t_call(torch.matmul, ts[0], ts[1])
    raise AssertionError(f"unknown op {c.op}")


# ------------------------------------------------------------------------------------------
# Comparison.


def tolerance_family(c):
    if c.op == "unary" and c.name in TOLERANCES:
        return c.name
    if c.op == "reduce" and c.name in ("sum", "mean"):
        return c.name
    if c.op in ("softmax",):
        return c.name
    if c.op in ("layer_norm", "matmul"):
        return c.op
    return "exact"


def ulp_of(scale, dt):
    """The spacing of dtype dt's floats at magnitude `scale` (elementwise, float64)."""
    s = np.abs(np.asarray(scale, dtype=np.float64))
    _, e = np.frexp(np.where(s > 0, s, 1.0))
    e = np.maximum(e - 1, EMIN[dt])
    return np.ldexp(1.0, e - MANTISSA[dt])


def ordinal(a):
    """Float bits mapped to integers that are consecutive for consecutive floats."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    out = []
    for b in a.view(bits).reshape(-1).tolist():
        out.append(b if b >= 0 else -(b & ((1 << (8 * a.dtype.itemsize - 1)) - 1)))
    return out


def accumulated_scale(c, ref):
    """The magnitude an accumulating op's result is compared in, per element."""
    if c.op == "reduce":
        v = np.abs(f64(c.inputs[0]))
        axis, keep = c.p["axis"], c.p.get("keepdims", False)
        s = np.sum(v, axis=axis, keepdims=keep) if axis is not None else np.sum(v)
        if c.name == "mean":
            n = v.size if axis is None else v.shape[axis]
            s = s / max(n, 1)
        return s
    if c.op == "matmul":
        return np.matmul(np.abs(f64(c.inputs[0])), np.abs(f64(c.inputs[1])))
    if c.op == "layer_norm":
        # (x − mean)/σ is as accurate as x − mean: its error scales with max|x|/σ.
        v = f64(c.inputs[0])
        sd = np.sqrt(v.var(axis=-1, keepdims=True) + float.fromhex(c.p["eps"]))
        s = np.max(np.abs(v), axis=-1, keepdims=True) / sd
        if c.p["affine"]:
            s = s * np.maximum(np.abs(f64(c.inputs[1])), 1.0) + np.abs(f64(c.inputs[2]))
        return np.maximum(np.maximum(s, np.abs(f64(ref))), 1.0)
    return np.maximum(np.abs(f64(ref)), 1.0)


def compare_values(c, ours, ref):
    """'' or why ours and ref (same dtype and shape) differ."""
    dt = c.ours_dtype
    if dt not in FLOATS:
        bad = np.flatnonzero(ours.reshape(-1) != ref.reshape(-1))
        if bad.size:
            i = bad[0]
            return (f"{bad.size} element(s) differ, first at flat index {i}: cotensor "
                    f"{ours.reshape(-1)[i]!r}, peer {ref.reshape(-1)[i]!r}")
        return ""
    fam = tolerance_family(c)
    tol = PEER_TOLERANCES.get((c.peer, fam), TOLERANCES[fam])[dt]
    o64, r64 = f64(ours).reshape(-1), f64(ref).reshape(-1)
    on, rn = np.isnan(o64), np.isnan(r64)
    scaled = fam in ("sum", "mean", "matmul", "softmax", "log_softmax", "layer_norm")
    if fam in ("gelu", "gelu_tanh") and c.peer == "PyTorch":
        c.deviate("torch-gelu-tail")
        scaled = True
    if scaled:
        scale = np.broadcast_to(accumulated_scale(c, ref), ref.shape).reshape(-1)
        limit = tol * ulp_of(scale, dt)
    tols = np.full(o64.size, float(tol))
    if fam in ("gelu", "gelu_tanh") and dt == F64 and not scaled:
        # float64 gelu: cotensor's rounding of x/√2 (or u) is amplified by erfc's conditioning,
        # about x² + 1 (the tanh form's e^(−2u): about |x|³/4); the reference is mpmath's.
        x = np.abs(f64(c.inputs[0])).reshape(-1)
        tols += np.nan_to_num(2 * x**2 if fam == "gelu" else x**3 / 2, posinf=0.0)
    oo, ro = ordinal(ours), ordinal(ref)
    for i in range(o64.size):
        if on[i] or rn[i]:
            if on[i] != rn[i]:
                break
            continue
        if np.isinf(o64[i]) or np.isinf(r64[i]):
            if o64[i] != r64[i]:
                break
            continue
        if scaled:
            if abs(o64[i] - r64[i]) > limit[i]:
                break
        elif abs(oo[i] - ro[i]) > tols[i]:
            break
    else:
        return ""
    what = f"ulps of the accumulated magnitude ({fam})" if scaled else f"ulps ({fam})"
    return (f"flat index {i}: cotensor {o64[i]!r}, peer {r64[i]!r} ({dt}); allowed {tol} {what}, "
            f"distance {abs(oo[i] - ro[i])} ulps")


def check_peer(c, peer, run):
    c.peer = peer
    """'' or the difference between cotensor and this peer."""
    try:
        r = run(c)
    except Skip:
        if c.error is None:
            return f"cotensor returned a value where it should raise ({c.used[-1]})"
        return ""
    except Refused as e:
        if c.error is None:
            return f"{peer} raises ({e}) but cotensor returned a value"
        return ""
    if isinstance(r, torch.Tensor):
        r = from_torch(r)
    r = np.asarray(r)
    if c.error is not None:
        return f"cotensor raised ({c.error}) but {peer} returned {np_name(r.dtype)} {r.shape}"
    rd = np_name(r.dtype)
    if rd != c.ours_dtype:
        return f"dtype: cotensor {c.ours_dtype}, {peer} {rd}"
    if tuple(r.shape) != tuple(c.ours.shape):
        return f"shape: cotensor {list(c.ours.shape)}, {peer} {list(r.shape)}"
    return compare_values(c, c.ours, r)


def describe(c):
    ins = ", ".join(f"{d}{list(a.shape)}" for d, a in zip(c.dtypes, c.inputs))
    res = c.error if c.error is not None else f"{c.ours_dtype}{list(c.ours.shape)}"
    return f"#{c.raw['id']} {c.op} {json.dumps(c.p)} ({ins}) -> {res}"


def main(argv):
    warnings.simplefilter("ignore")  # NumPy's overflow/invalid warnings on purpose-made inputs
    path = argv[1]
    verbose = "--verbose" in argv
    used = Counter()
    failures = []
    ops = Counter()
    errors = 0
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    for line in lines:
        c = Case(line)
        ops[c.op if c.op not in ("binary", "scalar", "unary", "reduce", "softmax") else
            f"{c.op}.{c.name}"] += 1
        errors += c.error is not None
        for peer, run in (("NumPy", numpy_run), ("PyTorch", torch_run)):
            c.used = []
            try:
                why = check_peer(c, peer, run)
            except Exception as e:  # a bug of this script or an unexpected peer error
                why = f"comparison error: {type(e).__name__}: {e}"
            used.update(set(f"{k} [{peer}]" for k in c.used))
            if why:
                failures.append(f"{describe(c)}\n    {peer}: {why}")
                if verbose:
                    ins = "\n".join(f"    input {k}: {a!r}" for k, a in enumerate(c.inputs))
                    failures[-1] += f"\n{ins}\n    cotensor: {c.ours!r}"
    print(f"{len(lines)} programs ({errors} raised in cotensor), {len(ops)} op kinds, "
          f"compared with NumPy {np.__version__} (ml_dtypes {ml_dtypes.__version__}) and "
          f"PyTorch {torch.__version__}")
    print("Expected differences (DEVIATIONS), with how many programs each applied to:")
    for key, (peer, text) in DEVIATIONS.items():
        n = sum(v for k, v in used.items() if k.startswith(key + " "))
        print(f"  {key:28s} {n:5d}  [{peer}] {text}")
    if failures:
        print(f"\n{len(failures)} difference(s):")
        for fl in failures[:60]:
            print(fl)
        if len(failures) > 60:
            print(f"... and {len(failures) - 60} more")
        return 1
    print("All programs agree with NumPy and PyTorch.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
