#!/usr/bin/env python3
"""Exports a PyTorch `nn.Sequential` into cotensor_server's model repository: Triton's layout,
with the configuration as JSON and the weights as safetensors.

    DIR/<name>/config.json
    DIR/<name>/<version>/model.safetensors

config.json names one input and one output, `max_batch_size` (> 0: dimension 0 is the batch and
is not listed in `dims`; 0: `dims` is the full shape), the optional `dynamic_batching`, and
`layers`: the modules in order, each naming its tensors by their `state_dict` keys. Supported:
Linear, ReLU, GELU ("none"/"tanh"), Tanh, Sigmoid, Softmax(dim=-1), LayerNorm (over the last
dimension, with weight and bias) and Embedding (first layer only, integer ids); no layers is the
identity. All weights share one dtype (float16, bfloat16, float32 or float64), the model's.

Writes the shipped example model `mlp` (seeded: 16 FP32 -> Linear(16,32) ReLU Linear(32,4)) and
checks it by recomputing its forward in NumPy from what was written:

    .venv/bin/python3 examples/server/export_model.py examples/server/models

As a module (tests add examples/server to sys.path): `export(model, repo, name, dims, dtype)`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
from torch import nn

INPUT_NAME = "INPUT0"
OUTPUT_NAME = "OUTPUT0"

# torch dtype -> Triton config data_type; the v2 datatype is the same without "TYPE_".
DATA_TYPES = {
    torch.bool: "TYPE_BOOL",
    torch.int32: "TYPE_INT32",
    torch.int64: "TYPE_INT64",
    torch.float16: "TYPE_FP16",
    torch.bfloat16: "TYPE_BF16",
    torch.float32: "TYPE_FP32",
    torch.float64: "TYPE_FP64",
}
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

DEFAULT_DYNAMIC_BATCHING = {"max_queue_delay_microseconds": 100}


class ExportError(ValueError):
    """A model, or an export argument, that the server's format cannot express."""


def _refuse(index: int, module: nn.Module, why: str):
    raise ExportError(f"layer {index} ({type(module).__name__}): {why}")


def _layer(index: int, module: nn.Module) -> dict | None:
    """The config.json entry of `module` (index `index` of the Sequential), or None to skip."""
    key = str(index)
    if isinstance(module, nn.Identity):
        return None
    if isinstance(module, nn.Linear):
        entry = {"op": "linear", "weight": f"{key}.weight"}
        if module.bias is not None:
            entry["bias"] = f"{key}.bias"
        return entry
    if isinstance(module, nn.ReLU):
        return {"op": "relu"}
    if isinstance(module, nn.GELU):
        if module.approximate not in ("none", "tanh"):
            _refuse(index, module, f"approximate={module.approximate!r} is not 'none' or 'tanh'")
        return {"op": "gelu", "approximate": module.approximate}
    if isinstance(module, nn.Tanh):
        return {"op": "tanh"}
    if isinstance(module, nn.Sigmoid):
        return {"op": "sigmoid"}
    if isinstance(module, nn.Softmax):
        if module.dim != -1:
            _refuse(index, module, f"dim={module.dim}; only the last axis (dim=-1) is supported")
        return {"op": "softmax"}
    if isinstance(module, nn.LayerNorm):
        if len(module.normalized_shape) != 1:
            _refuse(index, module, f"normalized_shape={tuple(module.normalized_shape)}; "
                    "only the last dimension is supported")
        if not module.elementwise_affine or module.weight is None or module.bias is None:
            _refuse(index, module, "weight and bias are required (elementwise_affine=True, "
                    "bias=True)")
        return {"op": "layer_norm", "weight": f"{key}.weight", "bias": f"{key}.bias",
                "eps": float(module.eps)}
    if isinstance(module, nn.Embedding):
        if module.padding_idx is not None:
            _refuse(index, module, "padding_idx is not supported")
        if module.max_norm is not None:
            _refuse(index, module, "max_norm is not supported")
        return {"op": "embedding", "weight": f"{key}.weight"}
    _refuse(index, module, "unsupported module; supported: Linear, ReLU, GELU, Tanh, Sigmoid, "
            "Softmax(dim=-1), LayerNorm, Embedding, Identity")
    return None  # unreachable


def export(model: nn.Sequential,
           repo: Path,
           name: str,
           input_dims: list[int],
           input_dtype: torch.dtype,
           max_batch_size: int = 8,
           version: int = 1,
           dynamic_batching: dict | None = DEFAULT_DYNAMIC_BATCHING) -> Path:
    """Writes `model` as version `version` of model `name` under `repo`; returns the model folder.

    `input_dims` excludes the batch dimension when `max_batch_size` > 0. The output dims come
    from running the model on a zero input. `dynamic_batching` None (or `max_batch_size` 0)
    leaves the section out. Raises ExportError naming the layer index and type of a module the
    server does not support, or a mixture of weight dtypes."""
    if not isinstance(model, nn.Sequential):
        raise ExportError(f"model is a {type(model).__name__}, not an nn.Sequential")
    if input_dtype not in DATA_TYPES:
        raise ExportError(f"input dtype {input_dtype} is not one of {list(DATA_TYPES)}")
    if max_batch_size < 0 or version < 1:
        raise ExportError(f"max_batch_size={max_batch_size} must be >= 0 and version={version} "
                          ">= 1")
    if any(d < 1 for d in input_dims):
        raise ExportError(f"input dims {input_dims} must be positive")

    state = model.state_dict()
    dtypes = {t.dtype for t in state.values()}
    if len(dtypes) > 1:
        raise ExportError(f"weights of several dtypes {sorted(map(str, dtypes))}; "
                          "one model has one")
    compute_dtype = next(iter(dtypes)) if dtypes else input_dtype
    if dtypes and compute_dtype not in WEIGHT_DTYPES:
        raise ExportError(f"weights are {compute_dtype}, not one of {list(WEIGHT_DTYPES)}")

    layers = []
    for index, module in enumerate(model):
        if list(module.children()):
            _refuse(index, module, "nested container; flatten it into the one Sequential")
        entry = _layer(index, module)
        if entry is None:
            continue
        if entry["op"] == "embedding":
            if layers:
                _refuse(index, module, "an embedding must be the first layer")
            if input_dtype not in (torch.int32, torch.int64):
                _refuse(index, module, f"token ids must be INT32 or INT64, not {input_dtype}")
        elif not layers and input_dtype != compute_dtype:
            _refuse(index, module, f"input dtype {input_dtype} differs from the model's "
                    f"{compute_dtype}; the model computes in its weights' dtype")
        layers.append(entry)

    batch = [1] if max_batch_size > 0 else []
    with torch.no_grad():
        probe = model(torch.zeros(batch + list(input_dims), dtype=input_dtype))
    output_dims = list(probe.shape[len(batch):])
    output_dtype = probe.dtype
    if output_dtype not in DATA_TYPES:
        raise ExportError(f"output dtype {output_dtype} is not supported")

    config = {
        "name": name,
        "max_batch_size": max_batch_size,
        "input": [{"name": INPUT_NAME, "data_type": DATA_TYPES[input_dtype],
                   "dims": list(input_dims)}],
        "output": [{"name": OUTPUT_NAME, "data_type": DATA_TYPES[output_dtype],
                    "dims": output_dims}],
    }
    if dynamic_batching is not None and max_batch_size > 0:
        config["dynamic_batching"] = dict(dynamic_batching)
    config["layers"] = layers

    folder = Path(repo) / name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    # Only the tensors the layers name: buffers (none today) would be dead weight.
    named = {k for entry in layers for k in (entry.get("weight"), entry.get("bias")) if k}
    tensors = {k: v.detach().contiguous().clone() for k, v in state.items() if k in named}
    safetensors.torch.save_file(tensors, str(folder / str(version) / "model.safetensors"))
    (folder / str(version) / "model.safetensors").chmod(0o644)  # save_file makes it 0600
    (folder / "config.json").write_text(_config_text(config))
    return folder


def _config_text(config: dict) -> str:
    """config.json with one line per key, and per element of a list of objects."""
    lines = []
    for key, value in config.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n".join(f"    {json.dumps(v)}" for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


# --- A NumPy forward from what was written: the check of the files, independent of torch. ---

def _load_numpy(path: Path) -> dict[str, np.ndarray]:
    """The safetensors file as float64 (floats) or int64 arrays."""
    out = {}
    for k, t in safetensors.torch.load_file(str(path)).items():
        out[k] = t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()
    return out


def numpy_forward(folder: Path, x: np.ndarray, version: int = 1) -> np.ndarray:
    """The model at `folder` run on `x` in float64, from config.json and the safetensors alone."""
    config = json.loads((Path(folder) / "config.json").read_text())
    w = _load_numpy(Path(folder) / str(version) / "model.safetensors")
    y = x
    for layer in config["layers"]:
        op = layer["op"]
        if op == "linear":
            y = y @ w[layer["weight"]].T + (w[layer["bias"]] if "bias" in layer else 0.0)
        elif op == "relu":
            y = np.maximum(y, 0.0)
        elif op == "gelu":
            if layer.get("approximate", "none") == "tanh":
                y = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3)))
            else:
                erf = np.vectorize(math.erf)
                y = 0.5 * y * (1 + erf(y / math.sqrt(2)))
        elif op == "tanh":
            y = np.tanh(y)
        elif op == "sigmoid":
            y = 1 / (1 + np.exp(-y))
        elif op == "softmax":
            e = np.exp(y - y.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
        elif op == "layer_norm":
            mean = y.mean(axis=-1, keepdims=True)
            var = ((y - mean) ** 2).mean(axis=-1, keepdims=True)
            y = (y - mean) / np.sqrt(var + layer["eps"]) * w[layer["weight"]] + w[layer["bias"]]
        elif op == "embedding":
            y = w[layer["weight"]][y]
        else:
            raise ValueError(f"unknown op {op!r}")
    return y


def example_model(seed: int = 0) -> nn.Sequential:
    """The shipped example: 16 FP32 features -> 4, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="the model repository to write 'mlp' into")
    args = parser.parse_args()

    model = example_model().eval()
    folder = export(model, args.out_dir, "mlp", [16], torch.float32, max_batch_size=8)

    # Check: the files, read back and run in NumPy, agree with torch.
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(x).numpy()
    got = numpy_forward(folder, x.numpy().astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print(f"wrote {folder} (checked against torch, max |diff| {np.abs(got - want).max():.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
