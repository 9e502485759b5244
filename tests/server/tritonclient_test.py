#!/usr/bin/env python3
"""Drives cotensor_server with NVIDIA's own client, `tritonclient.http`, over the Open Inference
Protocol (KServe v2) and its Triton extensions (binary tensor data, model configuration,
statistics), and
compares every result with PyTorch running the same model.

    .venv/bin/python3 tests/server/tritonclient_test.py build/examples/cotensor_server

Builds a temporary model repository with examples/server/export_model.py: an MLP (linear, relu,
gelu none/tanh, layer_norm, softmax, tanh, sigmoid) in float32 (versions 1 and 2), bfloat16,
float16 and float64; an embedding model (INT64 ids [6] -> Embedding(50,8) -> Linear(8,3), no
batching); an identity model (no layers) per datatype; and two broken folders the server must
refuse by name while serving the rest. Tolerances against PyTorch in the model's own dtype:
float32/float64 rtol 1e-5 atol 1e-6; float16 rtol=atol 5e-3; bfloat16 rtol=atol 3e-2 (measured
spread of PyTorch's own half results against float64 arithmetic: 6e-4 and 4e-3); identity
models bit-exact. Exits 0 on success, 1 on a failure, 77 (skipped) when a package is missing.
"""
import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import serverproc  # noqa: E402

sys.path.insert(0, str(serverproc.EXAMPLES_SERVER))

try:
    import ml_dtypes
    import numpy as np
    import torch
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype
    from torch import nn

    import export_model
except ImportError as e:  # no virtual environment: skipped, not passed
    print(f"SKIPPED: {e}")
    sys.exit(77)

FLOAT_TOLERANCE = {  # (rtol, atol) against PyTorch computing in the same dtype
    torch.float32: (1e-5, 1e-6),
    torch.float64: (1e-5, 1e-6),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
V2_TYPE = {dt: t[len("TYPE_"):] for dt, t in export_model.DATA_TYPES.items()}
MAX_BATCH = 8
IDENTITY_DIMS = [2, 3]
EMBED_IDS = 6

# model name -> dict(model=, dtype=input dtype, dims=, max_batch_size=, versions=)
MODELS = {}


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


# --- the repository ---------------------------------------------------------------------

def mlp(seed, dtype):
    torch.manual_seed(seed)
    m = nn.Sequential(
        nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Softmax(dim=-1),
        nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 16), nn.GELU(approximate="tanh"), nn.ReLU(),
        nn.Linear(16, 16), nn.Sigmoid(), nn.Linear(16, 8))
    with torch.no_grad():  # spread the values so that every layer matters to the output
        m[2].weight.uniform_(0.5, 2.0)
        m[2].bias.uniform_(-0.5, 0.5)
        m[4].weight.mul_(30)
        m[9].weight.mul_(3)
    return m.to(dtype).eval()


def add(repo, name, model, dtype, dims, max_batch_size=MAX_BATCH, version=1):
    export_model.export(model, repo, name, dims, dtype, max_batch_size=max_batch_size,
                        version=version)
    entry = MODELS.setdefault(name, dict(dtype=dtype, dims=dims, max_batch_size=max_batch_size,
                                         versions={}))
    entry["versions"][version] = model


def build_repository(repo):
    add(repo, "mlp_fp32", mlp(1, torch.float32), torch.float32, [16], version=1)
    add(repo, "mlp_fp32", mlp(2, torch.float32), torch.float32, [16], version=2)
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16"),
                       (torch.float64, "fp64")):
        add(repo, f"mlp_{tag}", mlp(1, dtype), dtype, [16])
    torch.manual_seed(3)
    embed = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 3)).eval()
    add(repo, "embed", embed, torch.int64, [EMBED_IDS], max_batch_size=0)
    for dtype, v2 in V2_TYPE.items():
        add(repo, f"identity_{v2.lower()}", nn.Sequential(), dtype, IDENTITY_DIMS)

    # Broken folders: the server refuses each by name, and serves the others.
    torch.manual_seed(4)
    export_model.export(nn.Sequential(nn.Linear(16, 4)), repo, "broken_tensor", [16],
                        torch.float32)
    config_path = repo / "broken_tensor" / "config.json"
    config = json.loads(config_path.read_text())
    config["layers"][0]["weight"] = "0.no_such_weight"
    config_path.write_text(json.dumps(config))
    export_model.export(nn.Sequential(nn.Linear(16, 4)), repo, "broken_json", [16],
                        torch.float32)
    (repo / "broken_json" / "config.json").write_text('{"name": "broken_json", "max_batch')


# --- values and references --------------------------------------------------------------

def to_torch(x):
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def np_dtype(dtype):
    return ml_dtypes.bfloat16 if dtype == torch.bfloat16 else to_numpy(
        torch.zeros(1, dtype=dtype)).dtype


def random_input(name, rows, rng, specials=False):
    """A batch of `rows` for model `name` (rows ignored without batching)."""
    m = MODELS[name]
    shape = ([rows] if m["max_batch_size"] > 0 else []) + m["dims"]
    dtype = m["dtype"]
    if name == "embed":
        return rng.integers(0, 50, size=shape, dtype=np.int64)
    if dtype == torch.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype == torch.int32:
        x = rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
        x.flat[0] = 2**31 - 1
        return x
    if dtype == torch.int64:
        x = rng.integers(-(2**63), 2**63 - 1, size=shape, dtype=np.int64)
        x.flat[0] = 2**53 + 1  # not a double: the server must not parse JSON ints as doubles
        return x
    x = rng.standard_normal(size=shape) * (3.0 if name.startswith("identity") else 1.0)
    x = x.astype(np_dtype(dtype))
    if specials and x.size >= 4:  # binary both ways only: JSON has no inf
        x.flat[0], x.flat[1], x.flat[2] = np.inf, -np.inf, -0.0
        x.flat[3] = ml_dtypes.finfo(x.dtype).smallest_subnormal
    return x


def reference(name, x, version=None):
    m = MODELS[name]
    model = m["versions"][version or max(m["versions"])]
    with torch.no_grad():
        return to_numpy(model(to_torch(x)))


def compare(name, got, want, what):
    check(got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}")
    check(got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}")
    if name.startswith("identity"):
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        if not np.array_equal(got.view(bits), want.view(bits)):
            raise Failure(f"{what}: not bit-exact:\n got {got!r}\nwant {want!r}")
        return
    rtol, atol = FLOAT_TOLERANCE[MODELS[name]["versions"][1].state_dict()["0.weight"].dtype]
    try:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=atol)
    except AssertionError as e:
        raise Failure(f"{what}: {e}")


def make_inputs(name, x, binary):
    inp = httpclient.InferInput("INPUT0", list(x.shape), V2_TYPE[MODELS[name]["dtype"]])
    inp.set_data_from_numpy(x, binary_data=binary)
    return [inp]


# --- the checks -------------------------------------------------------------------------

def check_refusals(server):
    # The server writes these before its listening line, but stderr is read by another thread.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum("not loaded" in l for l in server.stderr_lines()) < 2:
        time.sleep(0.05)
    for name in ("broken_tensor", "broken_json"):
        prefix = f"cotensor_server: model '{name}' not loaded: "
        lines = [l for l in server.stderr_lines() if l.startswith(prefix)]
        check(lines, f"no stderr line starting {prefix!r}; stderr: {server.stderr_lines()}")
        print(f"  refused: {lines[0]}")
    reason = [l for l in server.stderr_lines() if "'broken_tensor' not loaded" in l][0]
    check("0.no_such_weight" in reason, f"the refusal does not name the missing tensor: {reason}")


def check_server(client):
    check(client.is_server_live(), "is_server_live() is False")
    check(client.is_server_ready(), "is_server_ready() is False")
    meta = client.get_server_metadata()
    check(isinstance(meta.get("extensions"), list), f"server metadata has no extensions list: {meta}")
    for key in ("name", "version"):
        check(isinstance(meta.get(key), str), f"server metadata has no string {key!r}: {meta}")
    print(f"  server metadata: {meta}")


def check_metadata(client):
    for name, m in MODELS.items():
        check(client.is_model_ready(name), f"is_model_ready({name!r}) is False")
        meta = client.get_model_metadata(name)
        batch = [-1] if m["max_batch_size"] > 0 else []
        probe = reference(name, np.zeros(([1] if batch else []) + m["dims"],
                                         dtype=np_dtype(m["dtype"])))
        out_dims = list(probe.shape[len(batch):])
        out_dtype = np_to_triton_dtype(probe.dtype)
        check(meta.get("name") == name, f"{name} metadata name: {meta}")
        versions = sorted(str(v) for v in m["versions"])
        check(sorted(meta.get("versions", [])) == versions,
              f"{name} metadata versions {meta.get('versions')}, want {versions}")
        want_in = [{"name": "INPUT0", "datatype": V2_TYPE[m["dtype"]], "shape": batch + m["dims"]}]
        want_out = [{"name": "OUTPUT0", "datatype": out_dtype, "shape": batch + out_dims}]
        got_in = [{k: t.get(k) for k in ("name", "datatype", "shape")} for t in meta["inputs"]]
        got_out = [{k: t.get(k) for k in ("name", "datatype", "shape")} for t in meta["outputs"]]
        check(got_in == want_in, f"{name} metadata inputs {got_in}, want {want_in}")
        check(got_out == want_out, f"{name} metadata outputs {got_out}, want {want_out}")

        config = client.get_model_config(name)
        check(config.get("max_batch_size") == m["max_batch_size"],
              f"{name} config max_batch_size: {config}")
        check([t.get("name") for t in config.get("input", [])] == ["INPUT0"],
              f"{name} config input: {config}")
        check([t.get("name") for t in config.get("output", [])] == ["OUTPUT0"],
              f"{name} config output: {config}")
        check(config["input"][0].get("data_type") == "TYPE_" + V2_TYPE[m["dtype"]],
              f"{name} config input data_type: {config}")
        check(config["input"][0].get("dims") == m["dims"], f"{name} config dims: {config}")
        if m["max_batch_size"] > 0:
            check("dynamic_batching" in config, f"{name} config has no dynamic_batching")

    meta = client.get_model_metadata("mlp_fp32", model_version="1")
    check(meta.get("name") == "mlp_fp32" and meta["inputs"][0]["shape"] == [-1, 16],
          f"metadata of /versions/1: {meta}")
    check(client.is_model_ready("mlp_fp32", model_version="1"), "mlp_fp32 version 1 not ready")
    check(client.is_model_ready("mlp_fp32", model_version="2"), "mlp_fp32 version 2 not ready")
    check(not client.is_model_ready("mlp_fp32", model_version="3"), "mlp_fp32 version 3 ready")
    check(not client.is_model_ready("broken_tensor"), "broken_tensor is ready")
    check(not client.is_model_ready("no_such_model"), "no_such_model is ready")
    config = client.get_model_config("mlp_fp32", model_version="1")
    check(config.get("max_batch_size") == MAX_BATCH, f"config of /versions/1: {config}")
    print(f"  metadata and config of {len(MODELS)} models")


def check_infer(client, rng):
    count = 0
    for name, m in MODELS.items():
        dtype = m["dtype"]
        in_modes = (True,) if dtype == torch.bfloat16 else (True, False)
        out_modes = (True,) if dtype == torch.bfloat16 else (True, False)
        for rows in (1, 3, MAX_BATCH):
            for binary_in in in_modes:
                for binary_out in out_modes + (None,):  # None: no `outputs` in the request
                    specials = (binary_in and binary_out is not False
                                and name.startswith("identity"))
                    x = random_input(name, rows, rng, specials=specials)
                    request_id = f"{name}-{rows}-{binary_in}-{binary_out}-{count}"
                    outputs = None if binary_out is None else [
                        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)]
                    what = (f"{name} rows={rows} binary_data in={binary_in} "
                            f"out={binary_out}")
                    try:
                        result = client.infer(name, make_inputs(name, x, binary_in),
                                              outputs=outputs, request_id=request_id)
                    except InferenceServerException as e:
                        raise Failure(f"{what}: {e}")
                    response = result.get_response()
                    check(response.get("id") == request_id,
                          f"{what}: id {response.get('id')!r}, want {request_id!r}")
                    check(response.get("model_name") == name,
                          f"{what}: model_name {response.get('model_name')!r}")
                    out = result.get_output("OUTPUT0")
                    check(out is not None, f"{what}: no OUTPUT0 in {response}")
                    is_binary = "binary_data_size" in (out.get("parameters") or {})
                    want_binary = binary_out is not False
                    check(is_binary == want_binary,
                          f"{what}: output came back {'binary' if is_binary else 'JSON'}: {out}")
                    if not want_binary:
                        check("data" in out, f"{what}: JSON output without data: {out}")
                    compare(name, result.as_numpy("OUTPUT0"), reference(name, x), what)
                    count += 1
            if m["max_batch_size"] == 0:
                break
    print(f"  {count} inferences against PyTorch (binary and JSON, in and out)")

    # Versions: the latest is the default; /versions/1 is the first.
    x = random_input("mlp_fp32", 2, rng)
    for version, want_v in (("", 2), ("1", 1), ("2", 2)):
        result = client.infer("mlp_fp32", make_inputs("mlp_fp32", x, True), model_version=version)
        compare("mlp_fp32", result.as_numpy("OUTPUT0"), reference("mlp_fp32", x, want_v),
                f"mlp_fp32 version {version or 'default'}")
    print("  versions: default = 2, /versions/1 and /versions/2")

    # An error keeps the (kept-alive) connection usable.
    bad = httpclient.InferInput("NOT_INPUT0", [1, 16], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 16), np.float32))
    try:
        client.infer("mlp_fp32", [bad])
        raise Failure("an unknown input name was accepted")
    except InferenceServerException as e:
        check(e.status() == "400", f"unknown input name: status {e.status()}, want 400 ({e})")
    x = random_input("mlp_fp32", 1, rng)
    result = client.infer("mlp_fp32", make_inputs("mlp_fp32", x, True))
    compare("mlp_fp32", result.as_numpy("OUTPUT0"), reference("mlp_fp32", x), "after an error")
    print("  an unknown input name: 400, and the next request is served")


def check_async(url, rng, n=64):
    client = httpclient.InferenceServerClient(url, concurrency=n, network_timeout=60.0,
                                              connection_timeout=60.0)
    try:
        jobs = []
        for i in range(n):
            name = ("mlp_fp32", "mlp_fp64", "mlp_fp16", "identity_int64")[i % 4]
            x = random_input(name, 1 + i % 4, rng)
            request = client.async_infer(name, make_inputs(name, x, i % 2 == 0),
                                         request_id=str(i))
            jobs.append((name, x, request))
        start = time.monotonic()
        for i, (name, x, request) in enumerate(jobs):
            try:
                result = request.get_result(timeout=60)
            except InferenceServerException as e:
                raise Failure(f"async request {i} ({name}): {e}")
            check(result.get_response().get("id") == str(i), f"async request {i}: id")
            compare(name, result.as_numpy("OUTPUT0"), reference(name, x), f"async request {i}")
        print(f"  {n} async_infer requests in flight, all correct "
              f"({time.monotonic() - start:.2f} s to collect)")
    finally:
        client.close()


def check_statistics(client, n_async):
    """After check_async: its requests are counted by the statistics extension, per model."""
    meta = client.get_server_metadata()
    check("statistics" in meta.get("extensions", []), f"statistics not advertised: {meta}")
    stats = client.get_inference_statistics("identity_int64")
    models = stats.get("model_stats", [])
    check(len(models) == 1 and models[0].get("name") == "identity_int64",
          f"get_inference_statistics(identity_int64): {stats}")
    success = models[0]["inference_stats"]["success"]
    # Every fourth async request went to identity_int64 (and check_infer sent it some before).
    check(int(success["count"]) >= n_async // 4 and int(success["ns"]) > 0,
          f"identity_int64 success stats {success}, want at least {n_async // 4} requests")
    check(int(models[0]["inference_count"]) >= int(success["count"]),
          f"inference_count {models[0]['inference_count']} below the requests {success['count']}")
    everything = client.get_inference_statistics()
    names = {m["name"] for m in everything.get("model_stats", [])}
    check({"mlp_fp32", "mlp_fp64", "mlp_fp16", "identity_int64"} <= names,
          f"get_inference_statistics() lacks models: {sorted(names)}")
    print(f"  statistics: identity_int64 {success['count']} requests, {len(names)} model versions")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("server", help="the cotensor_server binary")
    parser.add_argument("--verbose", action="store_true", help="echo the server's output")
    args = parser.parse_args()
    serverproc.check_binary(args.server)
    rng = np.random.default_rng(7)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cotensor_models_") as tmp:
        repo = Path(tmp)
        build_repository(repo)
        server = serverproc.ServerProcess(args.server, repo, echo=args.verbose)
        try:
            server.start()
            print(f"server listening on {server.url}")
            check_refusals(server)
            client = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
            try:
                check_server(client)
                check_metadata(client)
                check_infer(client, rng)
            finally:
                client.close()
            check_async(server.url, rng)
            client = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
            try:
                check_statistics(client, 64)
            finally:
                client.close()
            rc = server.terminate()
            check(rc == 0, f"the server exited with {rc} after SIGTERM, want 0; stderr tail:\n"
                  + "\n".join(server.stderr_lines()[-20:]))
            print("  SIGTERM: exit status 0")
        except (Failure, serverproc.ServerError, InferenceServerException) as e:
            server.kill()
            print(f"FAIL: {e}", file=sys.stderr)
            if not isinstance(e, Failure):
                traceback.print_exc()
            tail = server.stderr_lines()[-20:]
            if tail:
                print("server stderr (last lines):\n  " + "\n  ".join(tail), file=sys.stderr)
            return 1
        except BaseException:
            server.kill()
            raise
    print(f"PASS ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
