"""Checks the Python environment that bench/peers/setup.sh builds: each package imports and does a
small computation on the CPU. Run by `bash bench/peers/setup.sh --check` (and at the end of every
build), with the environment's interpreter:

    .venv/bin/python3 bench/peers/check_env.py

Prints one line per package, `ok <name> <version>: <what ran>` or `FAIL <name>: <error>`, and
exits 1 if any failed. perf_analyzer cannot be installed on Debian 12 (requirements.txt says why);
its line says so and does not count as a failure.
"""
import os
import sys
import tempfile
import traceback

CHECKS = []


def check(name):
    def register(fn):
        CHECKS.append((name, fn))
        return fn
    return register


@check("python")
def _python():
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError(f"Python {sys.version.split()[0]}: requirements.txt is locked for 3.11")
    if sys.prefix == sys.base_prefix:
        raise RuntimeError(f"{sys.executable} is not a virtual environment's interpreter")
    return sys.version.split()[0], sys.prefix


@check("numpy")
def _numpy():
    import numpy as np
    if int(np.__version__.split(".")[0]) != 2:
        raise RuntimeError(f"numpy {np.__version__}, expected 2.x")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert (a @ a.T).tolist() == [[5.0, 14.0], [14.0, 50.0]]
    return np.__version__, "float32 matmul"


@check("ml_dtypes")
def _ml_dtypes():
    import ml_dtypes
    import numpy as np
    x = np.array([1.0, 1.00390625, 3.140625], dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert x.dtype.itemsize == 2
    # 1 + 2^-8 is halfway between two bfloat16 values and rounds to even (1.0).
    assert x.astype(np.float32).tolist() == [1.0, 1.0, 3.140625], x.astype(np.float32)
    return ml_dtypes.__version__, "float32 -> bfloat16 rounding"


@check("torch")
def _torch():
    import torch
    if int(torch.__version__.split(".")[0]) != 2:
        raise RuntimeError(f"torch {torch.__version__}, expected 2.x")
    a = torch.tensor([1.0, 2.0, 3.0])
    assert float(a @ a) == 14.0
    m = torch.randn(64, 64)
    assert torch.allclose(m @ torch.eye(64), m)
    return torch.__version__, f"CPU matmul, {torch.get_num_threads()} threads"


@check("safetensors")
def _safetensors():
    import numpy as np
    import safetensors
    import torch
    from safetensors.numpy import load_file as load_np, save_file as save_np
    from safetensors.torch import load_file as load_pt, save_file as save_pt
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.safetensors")
        save_np({"a": np.arange(4, dtype=np.float32).reshape(2, 2)}, p)
        assert load_np(p)["a"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
        save_pt({"b": torch.ones(3, dtype=torch.bfloat16)}, p)
        b = load_pt(p)["b"]
        assert b.dtype == torch.bfloat16 and b.tolist() == [1.0, 1.0, 1.0]
    return safetensors.__version__, "save and load (numpy float32, torch bfloat16)"


@check("jax")
def _jax():
    import jax
    import jax.numpy as jnp
    devices = jax.devices()
    if devices[0].platform != "cpu":
        raise RuntimeError(f"jax runs on {devices}, expected the CPU")
    a = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    r = jax.jit(lambda x: x @ x.T)(a).block_until_ready()
    assert r.tolist() == [[5.0, 14.0], [14.0, 50.0]]
    return jax.__version__, f"jit matmul on {devices[0]}"


@check("mlx")
def _mlx():
    import mlx.core as mx
    from importlib.metadata import version
    mx.set_default_device(mx.cpu)
    a = mx.arange(6, dtype=mx.float32).reshape(2, 3)
    r = a @ a.T
    mx.eval(r)
    assert r.tolist() == [[5.0, 14.0], [14.0, 50.0]]
    return version("mlx"), f"matmul on {mx.default_device()}, mx.eval"


@check("matplotlib")
def _matplotlib():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.loglog([1, 10, 100], [1, 5, 30])
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.png")
        fig.savefig(p)
        assert os.path.getsize(p) > 0
    return matplotlib.__version__, "log-log PNG"


@check("tritonclient")
def _tritonclient():
    import numpy as np
    import tritonclient.http as httpclient
    from importlib.metadata import version
    x = httpclient.InferInput("x", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32), binary_data=False)
    assert x._get_tensor()["data"] == [1.0, 2.0]
    return version("tritonclient"), "tritonclient.http InferInput"


@check("openai")
def _openai():
    import openai
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="none", max_retries=0)
    assert str(client.base_url).startswith("http://127.0.0.1:9/v1")
    return openai.__version__, "openai.OpenAI client made"


@check("kserve")
def _kserve():
    import kserve
    from importlib.metadata import version

    class Echo(kserve.Model):
        def predict(self, payload, headers=None):
            return payload

    m = Echo("echo")
    m.load()
    assert m.ready
    return version("kserve"), "kserve.Model subclass loads"


def main():
    failed = 0
    for name, fn in CHECKS:
        try:
            ver, what = fn()
            print(f"ok {name} {ver}: {what}", flush=True)
        except Exception as e:  # noqa: BLE001: report every failure, then carry on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            if not isinstance(e, ImportError):
                traceback.print_exc(limit=-2, file=sys.stderr)
    print("unavailable perf_analyzer: PyPI's wheels need glibc 2.38 (Debian 12 has 2.36); "
          "see bench/peers/requirements.txt", flush=True)
    if failed:
        print(f"check_env: {failed} of {len(CHECKS)} checks FAILED", flush=True)
    else:
        print(f"check_env: all {len(CHECKS)} checks ok", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
