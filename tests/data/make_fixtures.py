#!/usr/bin/env python3
"""Writes the fixture files of tests/io_test.cpp with the Python `safetensors` and `numpy`
(+ `ml_dtypes`) packages, so that the test loads files those packages produced.

Run from the repository root with the environment of bench/peers/setup.sh:
    .venv/bin/python tests/data/make_fixtures.py
The values are the ones tests/io_test.cpp expects (its `expected_*` functions): keep the two in
step. Every float value is exact in float16, bfloat16, float32 and float64, so no rounding is
involved, and the special values (signed zero, a float16 subnormal, infinities, NaN) are there.
"""
import os

import ml_dtypes
import numpy as np
import safetensors.numpy

HERE = os.path.dirname(os.path.abspath(__file__))

FLOATS = [0.0, -0.0, 1.0, -1.5, 0.25, 1024.0, 2.0**-24, float("inf"), float("-inf"),
          float("nan"), 3.0, -7.0]  # shape (3, 4)
INT32 = [0, 1, -1, 2**31 - 1, -(2**31), 123456]  # shape (2, 3)
INT64 = [0, -1, 2**62, -(2**63), 2**63 - 1, 42]  # shape (3, 2)
BOOLS = [True, False, False, True, True]  # shape (5,)


def arrays():
    floats = np.array(FLOATS, dtype=np.float64).reshape(3, 4)
    return {
        "bool": np.array(BOOLS, dtype=np.bool_),
        "int32": np.array(INT32, dtype=np.int32).reshape(2, 3),
        "int64": np.array(INT64, dtype=np.int64).reshape(3, 2),
        "float16": floats.astype(np.float16),
        "bfloat16": floats.astype(ml_dtypes.bfloat16),
        "float32": floats.astype(np.float32),
        "float64": floats,
    }


def main():
    tensors = arrays()
    extra = {
        "scalar": np.array(3.5, dtype=np.float32),  # rank 0
        "empty": np.zeros((0, 3), dtype=np.float32),  # no elements
    }
    safetensors.numpy.save_file({**tensors, **extra},
                                os.path.join(HERE, "all_dtypes.safetensors"),
                                metadata={"producer": "make_fixtures.py", "format": "np"})
    for name, a in tensors.items():
        # np.save writes an ml_dtypes bfloat16 array with the descr '<V2'.
        np.save(os.path.join(HERE, name + ".npy"), a)
    np.save(os.path.join(HERE, "scalar.npy"), extra["scalar"])
    np.save(os.path.join(HERE, "fortran.npy"), np.asfortranarray(tensors["float32"]))
    np.save(os.path.join(HERE, "big_endian.npy"), tensors["float32"].astype(">f4"))


if __name__ == "__main__":
    main()
