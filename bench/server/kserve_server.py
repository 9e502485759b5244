#!/usr/bin/env python3
"""The PyTorch peer of cotensor_server for side-by-side benchmarks: serves one model of a
cotensor_server model repository through KServe's Python `ModelServer`, speaking the Open Inference
Protocol (KServe v2 REST).

    .venv/bin/python3 bench/server/kserve_server.py --model-repository examples/server/models \
        --model mlp [--port 8080] [--workers 1] [--address 127.0.0.1]

Reads DIR/<model>/config.json and the highest DIR/<model>/<version>/model.safetensors (the layout
examples/server/export_model.py writes), rebuilds the `nn.Sequential` from `layers` (Linear, ReLU,
GELU, Tanh, Sigmoid, Softmax(dim=-1), LayerNorm, Embedding) and runs it in eval mode under
`torch.inference_mode()` with `torch.set_num_threads(os.cpu_count())` (divided among workers when
--workers > 1). No batching: every request runs the model by itself. The output has the name and
datatype of config.json's output.

Routes: KServe's v2 REST routes (/v2/health/ready, /v2/models/{name}, .../infer, ...), plus
`GET /v2/models/{name}/config` (Triton's model configuration: config.json less `layers`), which
perf_analyzer-style clients read and KServe does not have; and an infer body without the binary
extension's Inference-Header-Content-Length is taken as JSON whatever its Content-Type (KServe
alone refuses JSON sent without `Content-Type: application/json`, as tritonclient.http sends it).
gRPC is off. Logging is quiet: no access
log, no per-request latency log, warnings only.

--port 0 picks a free port first (KServe cannot report an ephemeral port it bound itself). Prints
`kserve_server listening on 127.0.0.1:PORT` once its own /v2/health/ready answers 200. SIGTERM or
SIGINT stops it (exit status 0).
"""
from __future__ import annotations

import argparse
import json
import logging
import logging.config
import os
import socket
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

# kserve.model_server parses sys.argv with parse_known_args when imported, and `--model` would be
# taken as its `--model_name` (argparse prefix matching). Keep our arguments from it. Worker
# processes (spawned) inherit the cleaned sys.argv.
_ARGV = sys.argv[1:]
sys.argv = sys.argv[:1]

import numpy as np  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import kserve  # noqa: E402
import kserve.logging as kserve_logging  # noqa: E402
from kserve import InferOutput, InferRequest, InferResponse  # noqa: E402
from kserve.errors import InvalidInput, ModelNotFound  # noqa: E402
from kserve.protocol.rest.server import RESTServer  # noqa: E402
from kserve.utils.utils import generate_uuid  # noqa: E402


def _quiet_logging() -> None:
    """KServe's logging configuration at WARNING, without the uvicorn access log. Runs at import,
    so also in spawned workers (whose kserve.logging.configure_logging() then leaves it be)."""
    config = json.loads(json.dumps(kserve_logging.KSERVE_LOG_CONFIG))
    for name, entry in config["loggers"].items():
        entry["level"] = "WARNING"
    config["loggers"]["uvicorn.access"] = {"handlers": [], "level": "CRITICAL",
                                           "propagate": False}
    logging.config.dictConfig(config)
    logging.getLogger("uvicorn.access").disabled = True


_quiet_logging()
# FastAPI deprecates the ORJSONResponse KServe uses; a warning on the first request otherwise.
warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")

# --- The model: config.json + safetensors -> nn.Sequential ---

WEIGHTS_FILE = "model.safetensors"


def _v2_datatype(triton_type: str) -> str:
    return triton_type[len("TYPE_"):] if triton_type.startswith("TYPE_") else triton_type


def latest_version(folder: Path) -> int:
    versions = [int(p.name) for p in folder.iterdir()
                if p.is_dir() and p.name.isdigit() and (p / WEIGHTS_FILE).is_file()]
    if not versions:
        raise FileNotFoundError(f"no <version>/{WEIGHTS_FILE} under {folder}")
    return max(versions)


def build_sequential(config: dict, weights: dict[str, torch.Tensor]) -> nn.Sequential:
    """The nn.Sequential that config.json's `layers` describe, holding `weights`."""

    def param(key: str) -> nn.Parameter:
        if key not in weights:
            raise KeyError(f"tensor {key!r} is not in {WEIGHTS_FILE}")
        return nn.Parameter(weights[key], requires_grad=False)

    modules: list[nn.Module] = []
    for index, layer in enumerate(config.get("layers", [])):
        op = layer["op"]
        if op == "linear":
            w = weights[layer["weight"]]
            m = nn.Linear(w.shape[1], w.shape[0], bias="bias" in layer, dtype=w.dtype)
            m.weight = param(layer["weight"])
            if "bias" in layer:
                m.bias = param(layer["bias"])
        elif op == "relu":
            m = nn.ReLU()
        elif op == "gelu":
            m = nn.GELU(approximate=layer.get("approximate", "none"))
        elif op == "tanh":
            m = nn.Tanh()
        elif op == "sigmoid":
            m = nn.Sigmoid()
        elif op == "softmax":
            m = nn.Softmax(dim=-1)
        elif op == "layer_norm":
            w = weights[layer["weight"]]
            m = nn.LayerNorm(w.shape[0], eps=float(layer.get("eps", 1e-5)), dtype=w.dtype)
            m.weight = param(layer["weight"])
            m.bias = param(layer["bias"])
        elif op == "embedding":
            w = weights[layer["weight"]]
            m = nn.Embedding(w.shape[0], w.shape[1], dtype=w.dtype)
            m.weight = param(layer["weight"])
        else:
            raise ValueError(f"layer {index}: unknown op {op!r}")
        modules.append(m)
    return nn.Sequential(*modules).eval()


class TorchSequentialModel(kserve.Model):
    """One cotensor_server repository model, run in PyTorch."""

    def __init__(self, repo: Path, name: str):
        super().__init__(name)
        self.folder = Path(repo) / name
        self.config: dict = {}
        self.triton_config: dict = {}
        self.net: nn.Sequential | None = None

    def load(self) -> bool:
        self.config = json.loads((self.folder / "config.json").read_text())
        if self.config.get("name", self.name) != self.name:
            raise ValueError(f"{self.folder}/config.json names {self.config['name']!r}")
        self.version = latest_version(self.folder)
        weights = safetensors.torch.load_file(
            str(self.folder / str(self.version) / WEIGHTS_FILE))
        self.net = build_sequential(self.config, weights)
        self.triton_config = {k: v for k, v in self.config.items() if k != "layers"}
        self.triton_config.setdefault("name", self.name)
        (inp,), (out,) = self.config["input"], self.config["output"]
        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        self.input_name, self.output_name = inp["name"], out["name"]
        self.input_datatype = _v2_datatype(inp["data_type"])
        self.output_datatype = _v2_datatype(out["data_type"])
        self.input_dims, self.output_dims = list(inp["dims"]), list(out["dims"])
        self.embedding_first = bool(self.config.get("layers")) and \
            self.config["layers"][0]["op"] == "embedding"
        self.ready = True
        return self.ready

    def _shape(self, dims: list[int]) -> list[int]:
        return ([-1] if self.max_batch_size > 0 else []) + dims

    def get_input_types(self) -> list[dict]:
        return [{"name": self.input_name, "datatype": self.input_datatype,
                 "shape": self._shape(self.input_dims)}]

    def get_output_types(self) -> list[dict]:
        return [{"name": self.output_name, "datatype": self.output_datatype,
                 "shape": self._shape(self.output_dims)}]

    def predict(self, payload: InferRequest, headers=None, response_headers=None):
        if not isinstance(payload, InferRequest):
            raise InvalidInput("expected an Open Inference Protocol (v2) request")
        if len(payload.inputs) != 1:
            raise InvalidInput(f"expected 1 input, got {len(payload.inputs)}")
        tensor = payload.get_input_by_name(self.input_name)
        if tensor is None:
            raise InvalidInput(f"unexpected input {payload.inputs[0].name!r}; "
                               f"expected {self.input_name!r}")
        if tensor.datatype != self.input_datatype:
            raise InvalidInput(f"input {self.input_name!r} is {tensor.datatype}, "
                               f"expected {self.input_datatype}")
        shape = list(tensor.shape)
        if self.max_batch_size > 0:
            if len(shape) != len(self.input_dims) + 1 or shape[1:] != self.input_dims \
                    or not 1 <= shape[0] <= self.max_batch_size:
                raise InvalidInput(f"input shape {shape} is not [1..{self.max_batch_size}] + "
                                   f"{self.input_dims}")
        elif shape != self.input_dims:
            raise InvalidInput(f"input shape {shape} is not {self.input_dims}")
        try:
            x = torch.from_numpy(np.ascontiguousarray(tensor.as_numpy()))
        except ValueError as e:  # data of the wrong length for the shape
            raise InvalidInput(f"input {self.input_name!r}: {e}") from e
        if self.embedding_first:
            x = x.to(torch.int64)
        with torch.inference_mode():
            y = self.net(x)
        out = y.numpy()
        output = InferOutput(name=self.output_name, shape=list(out.shape),
                             datatype=self.output_datatype, data=out)
        return InferResponse(response_id=payload.id or generate_uuid(), model_name=self.name,
                             model_version=str(self.version), infer_outputs=[output],
                             use_binary_outputs=payload.use_binary_outputs,
                             requested_outputs=payload.request_outputs)


# --- KServe hooks: the /config route, the listen address, torch threads per worker ---

_ADDRESS = os.environ.get("KSERVE_SERVER_ADDRESS", "127.0.0.1")
_orig_init = RESTServer.__init__
_orig_register_endpoints = RESTServer._register_endpoints


def _init(self, *args, **kwargs):
    _orig_init(self, *args, **kwargs)
    self.config.host = _ADDRESS  # KServe hardcodes 0.0.0.0


class _JsonByDefault:
    """KServe parses an infer body as JSON only under `Content-Type: application/json`; any other
    body must carry the binary tensor extension's Inference-Header-Content-Length, or is refused
    (400). tritonclient.http sends JSON requests without a Content-Type, curl -d sends a form type.
    Like Triton and cotensor_server, take an infer body without that header as JSON."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" \
                and scope["path"].endswith("/infer"):
            headers = scope["headers"]
            if not any(k == b"inference-header-content-length" for k, _ in headers):
                scope = dict(scope)
                scope["headers"] = [(k, v) for k, v in headers if k != b"content-type"] + \
                    [(b"content-type", b"application/json")]
        await self.app(scope, receive, send)


def _register_endpoints(self, app):
    """Runs in the process that serves (each worker when --workers > 1): adds the model
    configuration route, and sizes torch's thread pool for the workers sharing the cores."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, self.config.workers)))
    registry = self.dataplane.model_registry

    async def model_config(model_name: str, model_version: str | None = None):
        model = registry.get_model(model_name)
        if model is None or not getattr(model, "triton_config", None):
            raise ModelNotFound(model_name)
        return model.triton_config

    app.add_middleware(_JsonByDefault)
    app.add_api_route("/v2/models/{model_name}/config", model_config, methods=["GET"])
    app.add_api_route("/v2/models/{model_name}/versions/{model_version}/config", model_config,
                      methods=["GET"], include_in_schema=False)
    _orig_register_endpoints(self, app)


RESTServer.__init__ = _init
RESTServer._register_endpoints = _register_endpoints


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _announce_when_ready(port: int) -> None:
    url = f"http://127.0.0.1:{port}/v2/health/ready"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    print(f"kserve_server listening on 127.0.0.1:{port}", flush=True)
                    return
        except OSError:
            pass
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, default=8080, help="0: pick a free port")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--address", default="127.0.0.1", help="the address to listen on")
    args = parser.parse_args(_ARGV)

    global _ADDRESS
    _ADDRESS = args.address
    os.environ["KSERVE_SERVER_ADDRESS"] = args.address  # for spawned workers
    port = args.port or _free_port(args.address)
    torch.set_num_threads(os.cpu_count() or 1)

    model = TorchSequentialModel(args.model_repository, args.model)
    model.load()
    server = kserve.ModelServer(http_port=port, workers=args.workers, enable_grpc=False,
                                enable_latency_logging=False, access_log_format=None,
                                enable_docs_url=False, grace_period=5)
    threading.Thread(target=_announce_when_ready, args=(port,), daemon=True).start()
    server.start([model])
    return 0


if __name__ == "__main__":
    sys.exit(main())
